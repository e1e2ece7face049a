"""Forms of the admin console: the runs filter, and the inputs of each action."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django import forms
from django.core.validators import RegexValidator

from agents.console.stuck import REASONS
from agents.presenters.forms import parse_cursor, period_field
from agents.runtime.definitions import all_agents
from agents.runtime.models import RunStatus
from core.filters import Choice, FilterForm, Text

AGES = {
    "lt1h": ("Created in the last hour", None),
    "gt1h": ("Older than an hour", dt.timedelta(hours=1)),
    "gt1d": ("Older than a day", dt.timedelta(days=1)),
    "gt7d": ("Older than a week", dt.timedelta(days=7)),
}


class ConsoleFilterForm(FilterForm):
    """The console list's filters (core/filters.py: a bad one is said, and not applied)."""

    status = Choice(noun="a status", label="Status")
    agent = Choice(noun="an agent", label="Agent")
    stuck = Choice(noun="a reason a run is stuck", label="Stuck")
    age = Choice(noun="an age", label="Age")
    user = Text(
        max_length=150, label="End user", widget=forms.TextInput({"placeholder": "username"})
    )
    before = Text(max_length=100, label="Position", widget=forms.HiddenInput)
    period = period_field()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["status"].choices = [("", "Any status"), *RunStatus.choices]
        self.fields["agent"].choices = [("", "Any agent")] + [
            (a.name, a.name) for a in all_agents()
        ]
        self.fields["stuck"].choices = [
            ("", "Stuck or not"),
            ("any", "Stuck, any reason"),
            *[(code, r.label) for code, r in REASONS.items()],
        ]
        self.fields["age"].choices = [("", "Any age")] + [(k, v[0]) for k, v in AGES.items()]

    def clean_user(self) -> str:
        return self.cleaned_data["user"].strip()

    def clean_before(self) -> tuple[dt.datetime, uuid.UUID] | None:
        raw = self.cleaned_data["before"]
        return parse_cursor(raw) if raw else None

    def kept(self) -> dict[str, str]:
        """The filters applied (not the position) as query parameters."""
        data = self.applied()
        return {k: data[k] for k in ("status", "agent", "stuck", "age", "user") if data[k]}


# The recovered history's time windows: how far back a lost worker is listed.
WINDOWS = {
    "hour": ("In the last hour", dt.timedelta(hours=1)),
    "day": ("In the last day", dt.timedelta(days=1)),
}
WORKER_NAME = RegexValidator(
    r"^[\w.@:-]*$",
    "“%(value)s” is not a worker: give one like host:1234, or its host (letters, digits, "
    "dots, dashes, underscores, @ and colons).",
)


class RecoveredFilterForm(FilterForm):
    """The recovered history's filters: a time window, and a lost worker (id or host)."""

    since = Choice(
        noun="a time window",
        label="When lost",
        choices=[(k, v[0]) for k, v in WINDOWS.items()],
    )
    worker = Text(
        max_length=200,
        label="Lost worker",
        validators=[WORKER_NAME],
        help_text="A worker is named host:pid; give its host to see every process of that machine.",
        widget=forms.TextInput({"placeholder": "host or host:pid"}),
    )

    def clean_since(self) -> str:
        return self.cleaned_data["since"] or "day"

    def clean_worker(self) -> str:
        return self.cleaned_data["worker"].strip()

    def kept(self) -> dict[str, str]:
        """The filters applied as query parameters (the live feed's subscription)."""
        return {k: v for k, v in self.applied().items() if v}


class VersionForm(forms.Form):
    """Every action names the version of the run the admin was looking at, and the number of
    the last event their page showed (so an automatic recovery since then can be told from
    a real conflict)."""

    version = forms.IntegerField(min_value=1)
    seen = forms.IntegerField(min_value=0, required=False)


class ResolveForm(VersionForm):
    note = forms.CharField(required=False, max_length=2000, widget=forms.Textarea)


class StateForm(VersionForm):
    state = forms.CharField(
        max_length=1_000_000,
        widget=forms.Textarea,
        strip=False,
        error_messages={
            "required": "Write the state as a JSON object ({…}).",
            "max_length": "The state has at most %(limit_value)d characters "
            "(this one has %(show_value)d).",
        },
    )


class ReplayForm(VersionForm):
    seq = forms.IntegerField(min_value=0, label="From checkpoint")
    mode = forms.ChoiceField(
        choices=[("new", "As a new run"), ("rewind", "Rewind this run")], initial="new"
    )
    repeat_side_effects = forms.BooleanField(
        required=False, label="Make recorded side-effecting tool calls again"
    )


class BulkForm(forms.Form):
    action = forms.ChoiceField(
        choices=[
            ("resume", "Resume"),
            ("retry", "Retry failed step"),
            ("cancel", "Cancel"),
            ("resolve", "Mark resolved"),
        ]
    )
    # Each checked row sends "<run id>:<version>:<number of its last event shown>".
    runs = forms.MultipleChoiceField(choices=(), required=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        values = self.data.getlist("runs") if hasattr(self.data, "getlist") else []
        self.fields["runs"].choices = [(v, v) for v in values]

    def clean_runs(self) -> list[tuple[uuid.UUID, int, int | None]]:
        """(run id, version, last event seen) of each checked run ("<id>:<version>[:<seq>]")."""
        items = []
        for raw in self.cleaned_data["runs"][:200]:
            pk, _, rest = raw.partition(":")
            version, _, seen = rest.partition(":")
            try:
                items.append((uuid.UUID(pk), int(version), int(seen) if seen else None))
            except ValueError:
                raise forms.ValidationError("Not a run of this list.") from None
        return items
