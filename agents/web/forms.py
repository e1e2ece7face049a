"""Forms of the console's run pages: start a run, filter the list, decide an approval."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django import forms

from agents.runtime.definitions import all_agents
from agents.runtime.models import RunStatus

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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read at each request: agents register when their module is imported.
        self.fields["agent"].choices = _agent_choices(startable_only=True)
        self.fields["agent"].error_messages["invalid_choice"] = "There is no agent with that name."

    def run_input(self) -> dict[str, str]:
        return {
            "customer": self.cleaned_data["customer"],
            "message": self.cleaned_data["message"],
        }


class RunFilterForm(forms.Form):
    status = forms.ChoiceField(required=False, choices=())
    agent = forms.ChoiceField(required=False, choices=())
    before = forms.CharField(required=False, max_length=100)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["status"].choices = [("", "Any status"), *RunStatus.choices]
        self.fields["agent"].choices = [("", "Any agent"), *_agent_choices()]

    def clean_before(self) -> tuple[dt.datetime, uuid.UUID] | None:
        raw = self.cleaned_data["before"]
        return parse_cursor(raw) if raw else None


def make_cursor(created_at: dt.datetime, pk: uuid.UUID) -> str:
    return f"{created_at.isoformat()}|{pk}"


def parse_cursor(raw: str) -> tuple[dt.datetime, uuid.UUID]:
    """`created_at|id` of the last run shown; raise a form error if it is not one."""
    stamp, _, pk = raw.rpartition("|")
    try:
        created_at = dt.datetime.fromisoformat(stamp)
        cursor = (created_at, uuid.UUID(pk))
    except ValueError:
        raise forms.ValidationError("This is not a position in the list.") from None
    if created_at.tzinfo is None:
        raise forms.ValidationError("This is not a position in the list.")
    return cursor


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    comment = forms.CharField(required=False, max_length=MESSAGE_MAX, widget=forms.Textarea)

    @property
    def approve(self) -> bool:
        return self.cleaned_data["decision"] == "approve"
