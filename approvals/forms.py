"""Forms of the approvals pages: inbox filters, decisions, policies and approver groups."""

from __future__ import annotations

from typing import Any

from django import forms

from agents.runtime.definitions import all_agents
from agents.runtime.tools import all_tools
from approvals.arguments import EditableField, coerce
from approvals.models import ANY_ACTION, ApprovalPolicy, ApproverGroup, ApproverRole, OnExpiry
from approvals.selectors import STATUS_FILTERS, Cursor
from core import json_input
from core.errors import BadInput
from core.filters import Choice, FilterForm, Text, quoted
from tenants.models import Role

COMMENT_MAX = 2000


def action_choices() -> list[tuple[str, str]]:
    """Actions a request can be about: the registered tools, side-effecting ones first."""
    all_agents()  # tools register when their agents' modules are imported
    tools = sorted(all_tools(), key=lambda t: (not t.side_effects, t.name))
    return [(t.name, t.name) for t in tools]


class InboxFilterForm(FilterForm):
    """The inbox's filters (core/filters.py: a bad one is said, and not applied)."""

    status = Choice(noun="a status", label="Status", choices=STATUS_FILTERS)
    action = Text(max_length=100, label="Action", widget=forms.Select)
    mine = forms.BooleanField(required=False, label="Only requests I may decide")
    after = Text(max_length=400, label="Position", widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Any text names an action (a tool no longer registered still has its requests);
        # the control offers the registered ones, and the one asked for.
        choices = [("", "Any action"), *action_choices()]
        asked = str(self.data.get("action") or "")
        if asked and len(asked) <= 100 and asked not in dict(choices):
            choices.append((asked, asked))
        self.fields["action"].widget.choices = choices

    def clean_status(self) -> str:
        return self.cleaned_data["status"] or "pending"

    def clean_after(self) -> Cursor | None:
        raw = self.cleaned_data["after"]
        if not raw:
            return None
        try:
            return Cursor.decode(raw)
        except ValueError:
            raise forms.ValidationError(
                f"{quoted(raw)} is not a position in the list: it starts from the first page."
            ) from None


class DecisionForm(forms.Form):
    """Approve or reject, with a comment; a rejection must say why (the agent passes it on)."""

    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    comment = forms.CharField(required=False, max_length=COMMENT_MAX, widget=forms.Textarea)
    edit = forms.BooleanField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("decision") == "reject" and not (data.get("comment") or "").strip():
            self.add_error("comment", "Say why you reject: the agent passes it on.")
        if data.get("decision") == "reject" and data.get("edit"):
            self.add_error("decision", "Only an approval edits the arguments.")
        return data

    @property
    def approve(self) -> bool:
        return self.cleaned_data["decision"] == "approve"


def edited_arguments(
    fields: list[EditableField] | None, data: Any
) -> tuple[dict[str, Any] | None, dict[str, list[Any]]]:
    """The arguments of the 'edit and approve' form: per-field inputs, or one JSON text (a
    syntax error in it is a core.json_input.SyntaxProblem: its words, and where it is)."""
    if fields is not None:
        submitted = {f.name: data.get(f"arg-{f.name}", "") for f in fields}
        return coerce(fields, submitted), {}
    text = data.get("arguments_json", "")
    try:
        value = json_input.loads(text)
    except BadInput as exc:
        if exc.syntax is not None:  # "Line 2, column 5: …", shown with a marker under the spot
            return None, {"non_field_errors": [exc.syntax]}
        problems = [f"{name}: {' '.join(found)}" for name, found in (exc.fields or {}).items()]
        return None, {"non_field_errors": problems or [exc.message]}
    if not isinstance(value, dict):
        return None, {"non_field_errors": ["The arguments must be a JSON object."]}
    return value, {}


class PolicyForm(forms.ModelForm):
    class Meta:
        model = ApprovalPolicy
        fields = [
            "action",
            "amount_threshold",
            "approver_role",
            "approver_group",
            "four_eyes",
            "expires_after_minutes",
            "on_expiry",
        ]
        labels = {
            "action": "Action",
            "amount_threshold": "Ask only above this amount",
            "approver_role": "Who may approve",
            "approver_group": "Only members of this group",
            "four_eyes": "Four eyes: whoever started the run may not approve it",
            "expires_after_minutes": "Deadline (minutes after the request)",
            "on_expiry": "At the deadline",
        }
        help_texts = {
            "amount_threshold": "Empty: every request waits for a person. Otherwise requests "
            "at or below this amount are approved by the policy at once.",
            "expires_after_minutes": "Empty: no deadline. 1440 is a day.",
        }

    def __init__(self, *args: Any, tenant: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        choices = [*action_choices(), (ANY_ACTION, "Any other action (the default)")]
        current = self.instance.action if self.instance.pk else None
        if current and current not in dict(choices):
            choices.append((current, current))  # a tool that is no longer registered
        self.fields["action"] = forms.ChoiceField(choices=choices, label="Action")
        group = self.fields["approver_group"]
        group.queryset = ApproverGroup.objects.for_tenant(tenant)  # type: ignore[attr-defined]
        group.required = False
        group.empty_label = "Anyone with the role"  # type: ignore[attr-defined]
        self.fields["approver_role"].choices = ApproverRole.choices  # type: ignore[attr-defined]
        self.fields["on_expiry"].choices = OnExpiry.choices  # type: ignore[attr-defined]
        self.fields["expires_after_minutes"].widget.attrs["min"] = 1

    def clean_amount_threshold(self) -> Any:
        value = self.cleaned_data["amount_threshold"]
        if value is not None and value < 0:
            raise forms.ValidationError("An amount cannot be negative.")
        return value

    def clean_expires_after_minutes(self) -> Any:
        value = self.cleaned_data["expires_after_minutes"]
        if value is not None and value < 1:
            raise forms.ValidationError("At least one minute, or empty for no deadline.")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        action = data.get("action")
        if action:
            taken = ApprovalPolicy.objects.for_tenant(self.tenant).filter(action=action)
            if self.instance.pk:
                taken = taken.exclude(pk=self.instance.pk)
            if taken.exists():
                self.add_error("action", "This action already has a policy; edit that one.")
        on_expiry = data.get("on_expiry")
        if on_expiry != OnExpiry.WAIT and not data.get("expires_after_minutes"):
            self.add_error("expires_after_minutes", "Set a deadline, or choose Keep waiting.")
        admins_only = data.get("approver_role") == ApproverRole.ADMIN
        if on_expiry == OnExpiry.ESCALATE and admins_only and not data.get("approver_group"):
            self.add_error("on_expiry", "Only admins decide already: there is no one above.")
        return data

    def rules(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {name: data[name] for name in self.Meta.fields if name != "action"}

    def validate_unique(self) -> None:
        # The tenant is not a form field; clean() checks (tenant, action) itself.
        pass


class GroupForm(forms.Form):
    name = forms.CharField(max_length=100, label="New group")

    def __init__(self, *args: Any, tenant: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.tenant = tenant

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the group a name.")
        if ApproverGroup.objects.for_tenant(self.tenant).filter(name=name).exists():
            raise forms.ValidationError("A group with this name exists.")
        return name


class GroupMembersForm(forms.Form):
    """Who is in a group: chosen among the tenant's managers and admins."""

    users = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Members"
    )

    def __init__(self, *args: Any, memberships: list[Any], **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.people = {
            str(m.user_id): m.user for m in memberships if m.role in (Role.ADMIN, Role.MANAGER)
        }
        self.fields["users"].choices = [  # type: ignore[attr-defined]
            (pk, f"{user.get_username()}") for pk, user in self.people.items()
        ]

    def chosen(self) -> list[Any]:
        return [self.people[pk] for pk in self.cleaned_data["users"]]
