"""Forms of the memory pages: they validate input; the services decide."""

from __future__ import annotations

from django import forms

from memory.facts.services import MAX_TEXT


class FactEditForm(forms.Form):
    text = forms.CharField(max_length=MAX_TEXT, strip=True)


class DeleteAllForm(forms.Form):
    confirm = forms.BooleanField(
        required=True, error_messages={"required": "Tick the box to confirm."}
    )


class PolicyForm(forms.Form):
    category = forms.RegexField(
        regex=r"^[a-z][a-z0-9_]{0,39}$",
        max_length=40,
        error_messages={"invalid": "Lowercase letters, digits and _ only."},
    )
    label = forms.CharField(max_length=100, required=False)
    ttl_days = forms.IntegerField(
        label="Keep for (days)",
        min_value=1,
        max_value=36500,
        required=False,
        help_text="Empty: the tenant's memory retention.",
    )
    max_facts_per_subject = forms.IntegerField(
        label="At most per person", min_value=1, max_value=10000, initial=200
    )
    agents_may_write = forms.BooleanField(required=False)


class SupportAccessForm(forms.Form):
    support_access = forms.BooleanField(required=False)


class MemoryFilterForm(forms.Form):
    """The privacy page's search box and category filter (GET)."""

    q = forms.CharField(
        max_length=200,
        required=False,
        strip=True,
        error_messages={"max_length": "Search for at most %(limit_value)d characters."},
    )
    category = forms.RegexField(
        regex=r"^[a-z][a-z0-9_]{0,39}$",
        max_length=40,
        required=False,
        error_messages={
            "invalid": "There is no such category.",
            "max_length": "There is no such category.",
        },
    )


class AssistantTokenForm(forms.Form):
    """A person's own MCP token, on the privacy page (memory/privacy/assistant.py)."""

    name = forms.CharField(
        label="Name",
        max_length=100,
        strip=True,
        initial="My assistant",
        help_text="So you can tell your tokens apart, e.g. the assistant or computer using it.",
        error_messages={
            "required": "Give the token a name.",
            "max_length": "A name is at most %(limit_value)d characters.",
        },
    )
    access = forms.ChoiceField(
        label="What the assistant may do",
        choices=[
            ("read", "Read my memories"),
            ("write", "Read, add, correct and delete my memories"),
        ],
        initial="read",
        widget=forms.RadioSelect,
        error_messages={"required": "Choose what the assistant may do."},
    )
    expires = forms.ChoiceField(
        label="Expires",
        choices=[("30", "in 30 days"), ("90", "in 90 days"), ("365", "in a year"), ("", "never")],
        initial="90",
        required=False,
        error_messages={"invalid_choice": "Choose when the token expires."},
    )

    def expires_in_days(self) -> int | None:
        value = self.cleaned_data.get("expires")
        return int(value) if value else None
