"""Which categories a tenant knows, and the rules of each (TTL, cap, agent writes)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.utils import timezone

from core import sql
from memory.models import Category, MemorySettings

DEFAULT_MAX_FACTS = 200


@dataclass(frozen=True)
class Rules:
    category: str
    label: str
    ttl_days: int | None  # the category's own TTL, else the tenant's memory retention
    max_facts_per_subject: int
    agents_may_write: bool

    def expires_at(self, now: dt.datetime) -> dt.datetime | None:
        return now + dt.timedelta(days=self.ttl_days) if self.ttl_days else None


_RULES_SQL = sql.load("memory", "category_rules")


def categories(tenant_id: Any) -> dict[str, Rules]:
    """Every category of the tenant (built-in ones and those it added) with its rules."""
    with connection.cursor() as cursor:  # one round trip: the tenant's default and policies
        cursor.execute(_RULES_SQL, [str(tenant_id)])
        rows = cursor.fetchall()
    default_ttl = rows[0][0] if rows else None
    rules = {
        value: Rules(value, str(label), default_ttl, DEFAULT_MAX_FACTS, True)
        for value, label in Category.choices
    }
    for _, category, label, ttl_days, max_facts, agents_may_write in rows:
        if category is None:
            continue
        builtin = rules.get(category)
        rules[category] = Rules(
            category=category,
            label=label or (builtin.label if builtin else category),
            ttl_days=ttl_days if ttl_days is not None else default_ttl,
            max_facts_per_subject=max_facts,
            agents_may_write=agents_may_write,
        )
    return rules


def support_access(tenant_id: Any) -> bool:
    """Whether managers and admins may look at members' memories (off unless granted)."""
    row = MemorySettings.objects.for_tenant(tenant_id).first()
    return bool(row and row.support_access)


def now() -> dt.datetime:
    return timezone.now()
