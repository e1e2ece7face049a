"""Forms of the console's run pages: start a run, filter the list, decide an approval, chat."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django import forms

from agents.runtime.definitions import all_agents
from agents.runtime.models import RunStatus
from core import paging
from core.charts import PERIODS
from core.filters import Choice, FilterForm, Text, quoted
from tenants.principal import Principal

DEFAULT_MESSAGE = "Please refund $400 for order A-1001, I was charged twice"
MESSAGE_MAX = 2000


def _agent_choices(*, startable_only: bool = False) -> list[tuple[str, str]]:
    return [(a.name, a.name) for a in all_agents() if a.startable or not startable_only]


class StartRunForm(forms.Form):
    agent = forms.ChoiceField(choices=())
    customer = forms.CharField(max_length=100, initial="ada@example.com")
    message = forms.CharField(
        max_length=MESSAGE_MAX, initial=DEFAULT_MESSAGE, widget=forms.Textarea
    )

    def __init__(self, *args: Any, principal: Principal | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read at each request: agents register when their module is imported.
        self.fields["agent"].choices = _agent_choices(startable_only=True)
        self.fields["agent"].error_messages["invalid_choice"] = "There is no agent with that name."
        if principal is not None and principal.sees_only_own:
            # An end user asks for themselves: whatever a member posts as the customer, the
            # run's customer is the signed-in person (a disabled field keeps its initial).
            customer = self.fields["customer"]
            customer.initial = customer_for(principal)
            customer.disabled = True

    def run_input(self) -> dict[str, str]:
        return {
            "customer": self.cleaned_data["customer"],
            "message": self.cleaned_data["message"],
        }


def period_field() -> Choice:
    """The period of the runs pages' charts (chosen by links, not a control of the form)."""
    return Choice(
        noun="a period",
        label="Period of the charts",
        choices=[("", "The default"), *((p.key, p.label) for p in PERIODS.values())],
        widget=forms.HiddenInput,
    )


class RunFilterForm(FilterForm):
    """The runs list's filters (core/filters.py: a bad one is said, and not applied)."""

    status = Choice(noun="a status", label="Status")
    agent = Choice(noun="an agent", label="Agent")
    before = Text(max_length=100, label="Position", widget=forms.HiddenInput)
    # The charts' period (their own request reads it; the page says when it is bad).
    period = period_field()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["status"].choices = [("", "Any status"), *RunStatus.choices]
        self.fields["agent"].choices = [("", "Any agent"), *_agent_choices()]

    def clean_before(self) -> tuple[dt.datetime, uuid.UUID] | None:
        raw = self.cleaned_data["before"]
        return parse_cursor(raw) if raw else None


DEFAULT_PERIOD = "24h"


class ChartsFilterForm(FilterForm):
    """The period of the charts, which the runs page and the console load after themselves."""

    period = period_field()

    def chosen_period(self) -> str:
        """The period to draw: the one asked for, or the default."""
        return self.applied()["period"] or DEFAULT_PERIOD


NOT_A_POSITION = "%s is not a position in the list: it starts from the newest."


def parse_cursor(raw: str) -> paging.Position:
    """The position of the last run shown (core.paging); a form error if it is not one."""
    try:
        return paging.position_decode(raw)
    except ValueError:
        raise forms.ValidationError(NOT_A_POSITION % quoted(raw)) from None


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    comment = forms.CharField(required=False, max_length=MESSAGE_MAX, widget=forms.Textarea)

    @property
    def approve(self) -> bool:
        return self.cleaned_data["decision"] == "approve"


# --- the chat (agents/web/chat.py) ----------------------------------------------------------------


def customer_for(principal: Principal) -> str:
    """Who a signed-in person's runs are for: their username (the demo's billing key)."""
    return principal.user.get_username() if principal.user is not None else ""


def agent_label(name: str) -> str:
    """An agent's name in plain words: refund_desk -> Refund desk."""
    return name.replace("_", " ").replace("-", " ").strip().capitalize()


class ChatMessageForm(forms.Form):
    """One message of a conversation; the customer is always the signed-in person."""

    message = forms.CharField(
        max_length=MESSAGE_MAX,
        widget=forms.Textarea,
        error_messages={
            "required": "Write a message first.",
            "max_length": "A message has at most %(limit_value)d characters "
            "(this one has %(show_value)d).",
        },
    )


class ChatStartForm(ChatMessageForm):
    """A new conversation: which of the tenant's agents, and the first message."""

    agent = forms.ChoiceField(choices=())

    field_order = ["agent", "message"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [
            (a.name, agent_label(a.name)) for a in all_agents() if a.startable
        ]
        self.fields["agent"].error_messages.update(
            {
                "required": "Choose an agent to talk to.",
                "invalid_choice": "There is no agent with that name.",
            }
        )

    def starters(self) -> list[tuple[str, str, str]]:
        """(agent, its label, a first message) for each message an agent offers to start
        with (its `starters`, as a demo's agent declares them), for a person to click."""
        return [
            (a.name, agent_label(a.name), str(text))
            for a in all_agents()
            if a.startable
            for text in getattr(a, "starters", ())[:3]
        ]
