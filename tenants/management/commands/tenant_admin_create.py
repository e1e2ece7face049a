"""Set up a tenant and its first admin without a browser (deploy scripts). Idempotent, audited.

Creates the tenant, the user and the admin membership, each only if missing; a second run
changes nothing and says so. It never prints a password, and never changes an existing
user's password, email or role.
"""

from __future__ import annotations

import os

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_email, validate_slug
from django.db import IntegrityError, transaction

from tenants import services
from tenants.audit import audit_record
from tenants.models import Membership, Role, Tenant
from tenants.scope import system_scope, tenant_scope

ACTOR = "manage.py tenant_admin_create"
SLUG_MAX: int = Tenant._meta.get_field("slug").max_length or 63
NAME_MAX: int = Tenant._meta.get_field("name").max_length or 200


class Command(BaseCommand):
    help = (
        "Create a tenant (if missing), a user (if missing) and make them the tenant's admin."
        " Idempotent and audited. Without --password-from-env the user gets no usable"
        " password (set one with `manage.py changepassword`)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True, metavar="SLUG", help="e.g. acme")
        parser.add_argument(
            "--tenant-name", metavar="NAME", help="for a new tenant (default: from the slug)"
        )
        parser.add_argument("--username", required=True)
        parser.add_argument("--email", required=True)
        parser.add_argument(
            "--password-from-env",
            metavar="VAR",
            help="read a new user's password from this environment variable (never printed)",
        )

    def handle(
        self,
        *args,
        tenant: str,
        tenant_name: str | None,
        username: str,
        email: str,
        password_from_env: str | None,
        **options,
    ) -> None:
        slug = _checked_slug(tenant)
        name = _checked_name(tenant_name, slug)
        User = get_user_model()
        username = _checked_username(User, username)
        email = _checked_email(User, email)
        password = _password_from(password_from_env)

        with system_scope("tenant_admin_create_read"):
            existing_tenant = Tenant.objects.filter(slug=slug).first()
        user = User.objects.filter(username=username).first()
        if existing_tenant is not None and user is not None:
            with tenant_scope(existing_tenant.pk):
                membership = (
                    Membership.objects.for_tenant(existing_tenant).filter(user=user).first()
                )
            if membership is not None and membership.role != Role.ADMIN:
                raise CommandError(
                    f"{username} is already in {slug} as {membership.role}; this command does not"
                    " change roles (an admin can, on the console's Members page)."
                )
        if user is None and password is not None:
            try:
                password_validation.validate_password(
                    password, User(username=username, email=email)
                )
            except ValidationError as exc:
                # The validators' messages describe the password's flaws, never the password.
                raise CommandError(f"{password_from_env}: {' '.join(exc.messages)}") from None

        notes: list[str] = []
        try:
            with transaction.atomic():
                the_tenant = existing_tenant or services.tenant_create(
                    slug=slug, name=name, actor_label=ACTOR
                )
                if existing_tenant is None:
                    notes.append(f"Created tenant {slug} ({name}).")
                elif tenant_name and existing_tenant.name != tenant_name:
                    notes.append(f"Tenant {slug} exists as {existing_tenant.name!r}; name kept.")
                if user is None:
                    # No password: an unusable one, so nobody can sign in until it is set.
                    user = services.user_create(username=username, password=password, email=email)
                    created_user = True
                else:
                    created_user = False
                with tenant_scope(the_tenant.pk):
                    if created_user:
                        audit_record(
                            tenant=the_tenant,
                            actor=ACTOR,
                            action="user.created",
                            target=user,
                            after={"username": username, "password_set": password is not None},
                        )
                    membership_existed = (
                        Membership.objects.for_tenant(the_tenant).filter(user=user).exists()
                    )
                    services.membership_add(
                        tenant=the_tenant, user=user, role=Role.ADMIN, actor_label=ACTOR
                    )
        except IntegrityError as exc:
            # Another run created the same tenant or user meanwhile: this one wrote nothing.
            raise CommandError(
                f"{slug} or {username} changed while this ran; run it again."
            ) from exc

        if created_user:
            notes.append(f"Created user {username}.")
            if password is None:
                notes.append(
                    f"{username} has no password yet: set one with"
                    f" `manage.py changepassword {username}`."
                )
        elif password is not None:
            notes.append(
                f"User {username} exists; its password was not changed"
                f" (use `manage.py changepassword {username}`)."
            )
        if not membership_existed:
            notes.append(f"Made {username} an admin of {slug}.")
        changed = existing_tenant is None or created_user or not membership_existed
        if not changed:
            notes.append(
                f"Nothing changed: tenant {slug} and user {username} exist,"
                f" and {username} is already an admin of {slug}."
            )
        for note in notes:
            self.stdout.write(note)


def _checked_slug(slug: str) -> str:
    try:
        validate_slug(slug)
    except ValidationError:
        raise CommandError(
            f"{slug!r} is not a valid tenant slug: use letters, digits, - and _."
        ) from None
    if len(slug) > SLUG_MAX:
        raise CommandError(f"A tenant slug is at most {SLUG_MAX} characters.")
    return slug


def _checked_name(name: str | None, slug: str) -> str:
    name = (name or "").strip() or slug.replace("-", " ").replace("_", " ").title()
    if len(name) > NAME_MAX:
        raise CommandError(f"A tenant name is at most {NAME_MAX} characters.")
    return name


def _checked_username(User, username: str) -> str:
    field = User._meta.get_field(User.USERNAME_FIELD)
    try:
        field.run_validators(username)
        if not username or len(username) > field.max_length:
            raise ValidationError(f"at most {field.max_length} characters")
    except ValidationError as exc:
        raise CommandError(
            f"{username!r} is not a valid username: {' '.join(exc.messages)}"
        ) from None
    return username


def _checked_email(User, email: str) -> str:
    try:
        validate_email(email)
    except ValidationError:
        raise CommandError(f"{email!r} is not a valid email address.") from None
    return User.objects.normalize_email(email)


def _password_from(variable: str | None) -> str | None:
    if variable is None:
        return None
    password = os.environ.get(variable, "")
    if not password:
        raise CommandError(f"The environment variable {variable} is not set, or empty.")
    return password
