"""{% console_confirm_trigger run "release" %}: an action of the console's run page that asks
first (agents/console/confirmations.py, core/confirm.py)."""

from __future__ import annotations

from django import template
from django.template.loader import render_to_string
from django.utils.safestring import SafeString

from agents.console import confirmations
from agents.runtime.models import Run
from core.confirm import TEMPLATE

register = template.Library()


@register.simple_tag
def console_confirm_trigger(run: Run, action: str) -> SafeString:
    context = {"t": confirmations.trigger(run, action)}
    return SafeString(render_to_string(f"{TEMPLATE}#confirm-trigger", context))
