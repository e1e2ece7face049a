from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
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


class InviteForm(forms.Form):
    email = forms.EmailField(max_length=254, label="Email address")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class AcceptInvitationForm(forms.Form):
    """A new account for an invitation: a username and a password (the address is invited)."""

    username = forms.CharField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="Letters, digits and @ . + - _ only; you sign in with it.",
    )
    password1 = forms.CharField(
        label="Password",
        strip=False,
        max_length=4096,
        widget=forms.PasswordInput,
        help_text="At least 8 characters, not only digits, not a common password.",
    )
    password2 = forms.CharField(
        label="Password again", strip=False, max_length=4096, widget=forms.PasswordInput
    )

    def __init__(self, *args, email: str = "", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.email = email

    def clean(self) -> dict:
        data = super().clean()
        first, second = data.get("password1"), data.get("password2")
        if first and second and first != second:
            self.add_error("password2", "The two passwords differ.")
        elif first:
            # The validators compare the password with the username and address too.
            user = get_user_model()(username=data.get("username", ""), email=self.email)
            try:
                password_validation.validate_password(first, user)
            except ValidationError as exc:
                self.add_error("password1", exc)
        return data


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


class AuditFilterForm(forms.Form):
    """The audit log's position (the id of the last event shown). Said like a list filter
    (templates/core/_filter_problems.html): a bad one is not applied, the log starts from the
    newest event. (The identity layer is below core.filters, so this is a plain form.)"""

    before = forms.CharField(required=False, label="Position", widget=forms.HiddenInput)

    def clean_before(self) -> int | None:
        raw = self.cleaned_data["before"]
        if not raw:
            return None
        # ASCII digits only: "²" is a digit to isdigit() but not to int(); bigint at most.
        if not (raw.isascii() and raw.isdigit() and len(raw) < 19 and int(raw) > 0):
            shown = raw if len(raw) <= 40 else raw[:39] + "…"
            raise ValidationError(
                f"“{shown}” is not a position in the log: it starts from the newest event."
            )
        return int(raw)
