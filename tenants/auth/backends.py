"""Signing in with a username and password: Django's ModelBackend, whose per-request user read
is one statement written once.

Every signed-in request loads its user (`django.contrib.auth.get_user` -> `get_user`). The
ModelBackend builds an ORM query for it each time (`User._default_manager.get(pk=...)`):
0.33 ms of a web process's CPU, against 0.13 ms for the same statement written once.
Authenticating, permissions and everything else are the ModelBackend's own.
"""

from __future__ import annotations

import functools

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import ValidationError
from django.db import connections, router
from django.db.models import Field

from tenants.selectors import model_from_row

PATH = "tenants.auth.backends.UserBackend"
# What sessions made before this backend name (tenants/auth/sessions.py reads them as PATH).
LEGACY_PATH = "django.contrib.auth.backends.ModelBackend"


@functools.cache
def _user_sql() -> tuple[str, list[Field]]:
    model = get_user_model()
    fields = list(model._meta.concrete_fields)
    columns = ", ".join(f"u.{f.column}" for f in fields)
    table = model._meta.db_table
    return f"SELECT {columns} FROM {table} u WHERE u.{model._meta.pk.column} = %s", fields


class UserBackend(ModelBackend):
    def get_user(self, user_id):
        """The active user with this id, as ModelBackend.get_user gives it; None otherwise."""
        model = get_user_model()
        try:
            user_id = model._meta.pk.to_python(user_id)
        except (ValidationError, TypeError, ValueError):  # a bad id is no user
            return None
        sql, fields = _user_sql()
        with connections[router.db_for_read(model)].cursor() as cursor:
            cursor.execute(sql, [user_id])
            row = cursor.fetchone()
        if row is None:
            return None
        user = model_from_row(model, fields, row)
        return user if self.user_can_authenticate(user) else None
