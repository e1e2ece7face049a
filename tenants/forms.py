from django import forms

from tenants.models import Role, Scope


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Who or what will use this key.")
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[Scope.READ],
    )
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        label="Expires in (days)",
        help_text="Blank: the key never expires.",
    )


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class TenantSwitchForm(forms.Form):
    tenant = forms.UUIDField()
