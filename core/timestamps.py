"""`{{ value|timestamp }}`: a `<time>` element, the way every page shows a moment.

The pages wrote `<time datetime="{{ x|date:'c' }}">{{ x|date:"Y-m-d H:i:s" }}</time>` dozens
of times; Django's `date` filter parses its format on every call, which on a list of 50 runs
was a tenth of the page's time. Registered as a template builtin (config/settings.py).
"""

from __future__ import annotations

import datetime as dt

from django import template
from django.template.defaultfilters import date as django_date
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

# Django's date formats the pages use, as strftime formats (same output, a fraction the cost).
_STRFTIME = {"Y-m-d H:i:s": "%Y-%m-%d %H:%M:%S", "Y-m-d H:i": "%Y-%m-%d %H:%M", "H:i:s": "%H:%M:%S"}


@register.filter(expects_localtime=True)
def timestamp(value: dt.datetime | None, fmt: str = "Y-m-d H:i:s") -> SafeString | str:
    """`<time datetime="ISO 8601">formatted</time>`, in the current time zone; "" for None."""
    if not isinstance(value, dt.datetime):
        return ""
    strftime = _STRFTIME.get(fmt)
    text = value.strftime(strftime) if strftime else django_date(value, fmt)
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), text)


def relative(seconds: float) -> str:
    """12 s, 3 min, 2 h, 4 d: how long, to the largest whole unit."""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h"
    return f"{seconds // 86400:.0f} d"


@register.filter(expects_localtime=True)
def ago(value: dt.datetime | None) -> SafeString | str:
    """`<time datetime="ISO 8601" title="Y-m-d H:i:s">3 min ago</time>` (or "in 3 min" for a
    moment to come): relative to now, with the moment itself; "" for None."""
    if not isinstance(value, dt.datetime):
        return ""
    seconds = (timezone.now() - value).total_seconds()
    text = f"{relative(seconds)} ago" if seconds >= 0 else f"in {relative(seconds)}"
    if 0 <= seconds < 5:
        text = "just now"
    exact = value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), exact, text)
