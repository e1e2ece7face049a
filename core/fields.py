"""Model fields shared by the apps."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models.functions import Least
from django.db.models.lookups import GreaterThanOrEqual


class CountField(models.PositiveIntegerField):
    """A PositiveIntegerField whose rule (>= 0) the table checks once for all its counts.

    A PositiveIntegerField has a CHECK constraint of its own, and PostgreSQL reads every CHECK
    constraint's stored expression again, and prepares it, for each statement that inserts or
    updates the row: the engine writes a run and a checkpoint on every step, with eleven in all.
    A table with CountFields declares one `counts_not_negative` constraint over them instead
    (bench/README.md, session 25, for what it saves). In Python (forms, serializers,
    validation) it is a PositiveIntegerField.
    """

    default_validators = [MinValueValidator(0)]

    def get_internal_type(self) -> str:
        # The column's type, and which CHECK it gets, follow the internal type: an integer
        # column with none (migrations drop a PositiveIntegerField's when one becomes this).
        return "IntegerField"


def counts_not_negative(name: str, *fields: str) -> models.CheckConstraint:
    """One CHECK that every field is >= 0 (or NULL, as a per-column CHECK lets it be):
    `least(a, b, ...) >= 0`, as LEAST skips NULLs. Name the table's CountFields."""
    return models.CheckConstraint(condition=GreaterThanOrEqual(Least(*fields), 0), name=name)
