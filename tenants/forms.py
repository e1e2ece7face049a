from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator

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


# AuthenticationForm sets the username field's max_length after the field is made, so no
# length validator is attached: a 5,000-character username reached authenticate() and the
# lockout table (varchar 255) and failed with a 500. Validated here, it never gets that far.
USERNAME_MAX_LENGTH = 150


class _BoundedUsername:
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        field = self.fields["username"]  # type: ignore[attr-defined]
        field.validators.append(MaxLengthValidator(USERNAME_MAX_LENGTH))


class LoginForm(_BoundedUsername, AuthenticationForm):
    """The console's sign-in form."""


class AdminLoginForm(_BoundedUsername, AdminAuthenticationForm):
    """The Django admin's sign-in form (staff only)."""
