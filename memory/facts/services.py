"""Writes of the memory app besides remembering (remember.py): supersede, edit, delete
(completely), policies; and the checks every write makes of what it is given.

Every write takes the tenant explicitly; row-level security refuses the rest anyway.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import uuid
from typing import Any

from django.db import transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Least

from agents.runtime.models import AgentSession
from agents.runtime.queue import BROKER_DOWN
from memory import category_rules, errors, tasks
from memory.facts import values
from memory.facts.secrets import secret_kind
from memory.models import MemoryFact, MemoryPolicy, MemorySettings, SourceKind
from memory.search import indexing
from memory.search.embeddings import get_provider
from tenants.audit import audit_record
from tenants.models import Tenant
from tenants.principal import Principal

logger = logging.getLogger(__name__)
MAX_TEXT = 1000
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
REDACTED = "[removed at the user's request]"
MAX_TTL_MINUTES = 100 * 365 * 24 * 60


def normalize(text: str) -> str:
    """The dedupe form of a fact: lowercase, single spaces, no trailing punctuation."""
    return re.sub(r"\s+", " ", text).strip().rstrip(".!;,").strip().lower()


def clean_text(text: Any) -> str:
    """Validated fact text, or the error that explains why not (empty, too long, a secret)."""
    if not isinstance(text, str) or not text.strip():
        raise errors.EmptyText()
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > MAX_TEXT:
        raise errors.TextTooLong(detail={"limit": MAX_TEXT})
    kind = secret_kind(text)
    if kind is not None:
        raise errors.SecretRefused(detail={"kind": kind})
    return text


def clean_content(text: Any, value: Any) -> tuple[str, str, dict[str, Any] | None]:
    """(text, dedupe key, value) of a fact given as text or as a JSON object
    (memory/facts/values.py), or the error that explains why not."""
    if value is None:
        text = clean_text(text)
        return text, normalize(text), None
    if text not in (None, ""):
        raise errors.TextAndValue()
    cleaned = values.clean_value(value)
    return cleaned.text, cleaned.normalized, cleaned.value


def clean_ttl(ttl_minutes: Any) -> float | None:
    """A writer's TTL in minutes (None: only the category's policy limits the fact)."""
    if ttl_minutes is None:
        return None
    if isinstance(ttl_minutes, bool) or not isinstance(ttl_minutes, int | float):
        raise errors.InvalidTtl()
    if not 0 < ttl_minutes <= MAX_TTL_MINUTES:  # NaN fails this too
        raise errors.InvalidTtl()
    return float(ttl_minutes)


def expiry(
    rules: category_rules.Rules, now: dt.datetime, ttl_minutes: float | None, *, since=None
) -> dt.datetime | None:
    """When a fact written (or refreshed) at `now` expires: its own TTL from `now`, but never
    after its category's TTL from `since` (its last write; default `now`)."""
    candidates = [rules.expires_at(since or now)]
    if ttl_minutes is not None:
        candidates.append(now + dt.timedelta(minutes=ttl_minutes))
    present = [c for c in candidates if c is not None]
    return min(present) if present else None


def same_content(fact: MemoryFact, category: str, normalized: str, value: Any) -> bool:
    """Whether a live fact says exactly what a write says (then the write refreshes it)."""
    return (
        fact.category == category
        and fact.normalized == normalized
        and (fact.value is None) == (value is None)
    )


def clean_key(key: Any) -> str:
    if key in (None, ""):
        return ""
    if not isinstance(key, str) or not _KEY.match(key):
        raise errors.InvalidKey()
    return key


def _rules(tenant_id: Any, category: Any) -> category_rules.Rules:
    known = category_rules.categories(tenant_id)
    if not isinstance(category, str) or category not in known:
        raise errors.UnknownCategory(detail={"known": sorted(known)})
    return known[category]


def _live(tenant_id: Any, subject_id: Any):
    return MemoryFact.objects.for_tenant(tenant_id).filter(
        subject_id=subject_id, valid_until__isnull=True
    )


def facts_refresh_ttl(*, tenant_id: Any, facts: list[MemoryFact]) -> int:
    """Facts just read with `refresh_ttl` (LangGraph's store): those with a TTL of their own
    expire that long from now again, never past their category's TTL from their last write.
    One UPDATE for all of them; facts without a TTL are left alone."""
    now = category_rules.now()
    known = category_rules.categories(tenant_id)
    changed = []
    for fact in facts:
        rules = known.get(fact.category)
        if fact.ttl_minutes is None or fact.valid_until is not None or rules is None:
            continue
        fact.expires_at = expiry(rules, now, fact.ttl_minutes, since=fact.updated_at)
        changed.append(fact)
    if changed:
        MemoryFact.objects.for_tenant(tenant_id).bulk_update(changed, ["expires_at"])
    return len(changed)


@transaction.atomic
def fact_supersede(
    *,
    old: MemoryFact,
    text: str | None = None,
    value: dict[str, Any] | None = None,
    ttl_minutes: float | None = None,
    category: str | None = None,
    source_kind: str = SourceKind.USER,
    source_session_id: Any = None,
    source_run_id: Any = None,
    source_message_seq: int | None = None,
    confidence: float = 1.0,
    occurred_at: dt.datetime | None = None,
) -> MemoryFact:
    """Replace a live fact by a new version; the old one stays as history, never retrieved."""
    category = category or old.category
    rules = _rules(old.tenant_id, category)
    text, norm, value = clean_content(text, value)
    ttl_minutes = clean_ttl(ttl_minutes)
    now = category_rules.now()
    closed = (
        MemoryFact.objects.for_tenant(old.tenant_id)
        .filter(pk=old.pk, valid_until__isnull=True)
        .update(valid_until=now)
    )
    if not closed:
        raise errors.FactSuperseded()
    new = MemoryFact.objects.create(
        tenant_id=old.tenant_id,
        subject_id=old.subject_id,
        lineage=old.lineage,
        category=category,
        key=old.key,
        text=text,
        value=value,
        normalized=norm,
        source_kind=source_kind,
        source_session_id=source_session_id,
        source_run_id=source_run_id,
        source_message_seq=source_message_seq,
        confidence=confidence,
        pinned=old.pinned,
        valid_from=now,
        occurred_at=occurred_at or now,
        ttl_minutes=ttl_minutes,
        expires_at=expiry(rules, now, ttl_minutes),
    )
    MemoryFact.objects.for_tenant(old.tenant_id).filter(pk=old.pk).update(superseded_by=new)
    schedule_embedding(old.tenant_id, [new.pk])
    return new


@transaction.atomic
def fact_edit(*, actor: Principal, fact: MemoryFact, text: str) -> MemoryFact:
    """The subject corrects a fact: a new version ("entered by you"), the old one is history."""
    if fact.valid_until is not None:
        raise errors.FactSuperseded()
    text = clean_text(text)
    if normalize(text) == fact.normalized:
        return fact
    # A corrected JSON value becomes the text the person wrote; the writer's TTL stays.
    new = fact_supersede(
        old=fact, text=text, ttl_minutes=fact.ttl_minutes, source_kind=SourceKind.USER
    )
    audit_record(
        tenant=actor.tenant, actor=actor, action="memory.fact_edited", target=new, after=None
    )
    return new


@transaction.atomic
def fact_update(*, actor: Principal, fact: MemoryFact, text: str, via: str = "") -> MemoryFact:
    """An agent or integration replaces a live fact's text (MCP `memory_update`): a new version
    added "by an integration", the old one kept as history; the same rules as its writes
    (secrets refused, "agents may write"). The same text again changes nothing (the fact
    comes back with `unchanged` set). Audited without the text."""
    if fact.valid_until is not None:
        raise errors.FactSuperseded()
    rules = _rules(fact.tenant_id, fact.category)
    text = clean_text(text)
    if not rules.agents_may_write:
        raise errors.CategoryNotWritable(detail={"category": fact.category})
    if normalize(text) == fact.normalized:
        fact.unchanged = True  # type: ignore[attr-defined]
        return fact
    new = fact_supersede(old=fact, text=text, source_kind=SourceKind.API)
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="memory.fact_updated",
        target=new,
        after={"replaces": str(fact.pk), **({"via": via} if via else {})},
    )
    return new


@transaction.atomic
def fact_delete(*, actor: Principal | str, fact: MemoryFact) -> int:
    """Forget one fact completely: every version, its embedding, and summaries quoting it."""
    deleted = _delete_lineages(fact.tenant_id, fact.subject_id, [fact.lineage])
    # The audit names the fact's id, never its text: the log must not keep what was deleted.
    audit_record(
        tenant=getattr(actor, "tenant", None) or _tenant(fact.tenant_id),
        actor=actor,
        action="memory.fact_deleted",
        target_type="memory.memoryfact",
        target_id=str(fact.pk),
        after={"versions_deleted": deleted},
    )
    return deleted


@transaction.atomic
def facts_delete_all(*, actor: Principal | str, tenant_id: Any, subject_id: int) -> int:
    """Forget everything remembered about the subject in this tenant."""
    lineages = list(
        MemoryFact.objects.for_tenant(tenant_id)
        .filter(subject_id=subject_id)
        .values_list("lineage", flat=True)
        .distinct()
    )
    deleted = _delete_lineages(tenant_id, subject_id, lineages)
    audit_record(
        tenant=_tenant(tenant_id),
        actor=actor,
        action="memory.all_deleted",
        target_type="auth.user",
        target_id=str(subject_id),
        after={"facts_deleted": deleted},
    )
    return deleted


def _tenant(tenant_id: Any):
    return Tenant.objects.get(pk=tenant_id)


def _delete_lineages(tenant_id: Any, subject_id: Any, lineages: list[uuid.UUID]) -> int:
    if not lineages:
        return 0
    rows = MemoryFact.objects.for_tenant(tenant_id).filter(
        subject_id=subject_id, lineage__in=lineages
    )
    texts = list(rows.values_list("text", flat=True))
    deleted = rows._raw_delete(rows.db)  # no collector: DO_NOTHING self-references only
    redact_summaries(tenant_id=tenant_id, subject_id=subject_id, texts=texts)
    return deleted


def redact_summaries(*, tenant_id: Any, subject_id: Any, texts: list[str]) -> int:
    """Cut the deleted facts' text out of the subject's conversation summaries."""
    patterns = [re.compile(re.escape(t), re.I) for t in {t for t in texts if t.strip()}]
    if not patterns:
        return 0
    changed = 0
    sessions = AgentSession.objects.for_tenant(tenant_id).filter(user_id=subject_id)
    for session_id, summary in sessions.exclude(summary="").values_list("id", "summary"):
        redacted = summary
        for pattern in patterns:
            redacted = pattern.sub(REDACTED, redacted)
        if redacted != summary:
            sessions.filter(pk=session_id).update(summary=redacted)
            changed += 1
    return changed


def schedule_embedding(tenant_id: Any, fact_ids: list[Any]) -> None:
    """Embed these facts on a worker once the transaction commits (never on the request)."""
    if get_provider() is None or not fact_ids:
        return
    ids = [str(pk) for pk in fact_ids]
    transaction.on_commit(lambda: _send_embedding(str(tenant_id), ids))


def _send_embedding(tenant_id: str, ids: list[str]) -> None:
    if not indexing.task_needed(tenant_id):
        return  # a task is queued and no worker has read since: it will embed these too
    try:
        tasks.embed_facts.delay(tenant_id=tenant_id, fact_ids=ids)
    except BROKER_DOWN as exc:
        # The facts are stored and found by their words; the backfill embeds them later.
        logger.warning(
            "embedding of %d facts not queued: the broker did not answer (%s)", len(ids), exc
        )


# --- tenant settings ------------------------------------------------------------------------------


@transaction.atomic
def policy_set(
    *,
    actor: Principal,
    category: str,
    label: str = "",
    ttl_days: int | None = None,
    max_facts_per_subject: int = category_rules.DEFAULT_MAX_FACTS,
    agents_may_write: bool = True,
) -> MemoryPolicy:
    """Create or change a category's rules; live facts of it get the new expiry."""
    if not isinstance(category, str) or not re.match(r"^[a-z][a-z0-9_]{0,39}$", category):
        raise errors.InvalidPolicy("A category is up to 40 lowercase letters, digits or _.")
    if ttl_days is not None and not 1 <= ttl_days <= 36500:
        raise errors.InvalidPolicy("A TTL is between 1 and 36,500 days.")
    if not 1 <= max_facts_per_subject <= 10000:
        raise errors.InvalidPolicy("The cap is between 1 and 10,000 facts per person.")
    tenant = actor.tenant
    policy, _ = MemoryPolicy.objects.for_tenant(tenant).update_or_create(
        tenant=tenant,
        category=category,
        defaults={
            "label": label[:100],
            "ttl_days": ttl_days,
            "max_facts_per_subject": max_facts_per_subject,
            "agents_may_write": agents_may_write,
        },
    )
    rules = category_rules.categories(tenant.pk)[category]
    _reapply_ttl(tenant.pk, rules)
    audit_record(
        tenant=tenant,
        actor=actor,
        action="memory.policy_set",
        target=policy,
        after={
            "category": category,
            "ttl_days": ttl_days,
            "max_facts_per_subject": max_facts_per_subject,
            "agents_may_write": agents_may_write,
        },
    )
    return policy


def _reapply_ttl(tenant_id: Any, rules: category_rules.Rules) -> None:
    """The category's TTL from each fact's last write; a fact's own TTL (counted again from
    its last write, a refresh by reading forgotten) when that ends sooner."""
    facts = MemoryFact.objects.for_tenant(tenant_id).filter(category=rules.category)
    own = RawSQL("updated_at + ttl_minutes * interval '1 minute'", [], DateTimeField())
    if rules.ttl_days is None:
        facts.update(expires_at=own)  # NULL without a TTL of its own
        return
    ttl = Value(dt.timedelta(days=rules.ttl_days), output_field=DurationField())
    policy = ExpressionWrapper(F("updated_at") + ttl, output_field=DateTimeField())
    facts.update(expires_at=Least(policy, own, output_field=DateTimeField()))


@transaction.atomic
def support_access_set(*, actor: Principal, enabled: bool) -> MemorySettings:
    """Grant or withdraw managers' and admins' access to members' memories (audited)."""
    row, _ = MemorySettings.objects.for_tenant(actor.tenant).get_or_create(tenant=actor.tenant)
    before = row.support_access
    row.support_access = bool(enabled)
    row.updated_by = actor.user
    row.save()
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="memory.support_access_set",
        target=row,
        before={"support_access": before},
        after={"support_access": row.support_access},
    )
    return row
