"""Reads of the approvals app (always with the tenant; members see only their own runs')."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from agents.runtime import run_counts
from agents.runtime.models import Run, RunStatus
from approvals.models import ApprovalRequest, ApprovalStatus, ApproverRole
from approvals.policies import decidable_by, is_admin
from core import sql
from core.paging import cursor_decode, cursor_encode, paginate
from core.recent import Recent
from tenants.models import AuditEvent, Scope
from tenants.principal import Principal

DECIDED = "decided"  # a status filter: every status but pending
STATUS_FILTERS = [
    (ApprovalStatus.PENDING.value, "Pending"),
    (DECIDED, "Any decided"),
    (ApprovalStatus.APPROVED.value, "Approved"),
    (ApprovalStatus.REJECTED.value, "Rejected"),
    (ApprovalStatus.EXPIRED.value, "Expired"),
    (ApprovalStatus.CANCELLED.value, "Cancelled"),
]


# --- what the engine and the run pages read -------------------------------------------------------


def approval_requests_for_run(*, tenant_id: Any, run_id: Any) -> list[ApprovalRequest]:
    """Approval requests of one run, oldest first."""
    return list(
        ApprovalRequest.objects.for_tenant(tenant_id).filter(run_id=run_id).order_by("requested_at")
    )


def approval_request_awaited(
    *, tenant_id: Any, run_id: Any, waiting_for: str
) -> ApprovalRequest | None:
    """The request a run waiting for approval names in `waiting_for`, or None."""
    try:
        request_id = uuid.UUID(waiting_for)
    except ValueError:
        return None
    return (
        ApprovalRequest.objects.for_tenant(tenant_id).filter(run_id=run_id, pk=request_id).first()
    )


# --- the inbox ------------------------------------------------------------------------------------


def approval_requests_visible_to(principal: Principal) -> QuerySet[ApprovalRequest]:
    """The tenant's requests; a member (an end user) sees only those of their own runs."""
    requests = ApprovalRequest.objects.for_tenant(principal.tenant)
    if principal.sees_only_own:
        requests = requests.filter(
            Q(run__session__user=principal.user) | Q(run__created_by=principal.user)
        )
    return requests


def approval_request_for(principal: Principal, request_id: Any) -> ApprovalRequest:
    """One request, or 404 for anyone who may not see it (other tenants, other members)."""
    try:
        return (
            approval_requests_visible_to(principal)
            .select_related("run", "run__session", "run__created_by", "policy")
            .get(pk=request_id)
        )
    except (ApprovalRequest.DoesNotExist, ValueError, TypeError, ValidationError):
        raise Http404 from None


# The inbox's orders, each answered by its index: approval_inbox_pending, approval_history.
PENDING_ORDER = ("due_sort", "requested_at", "id")  # soonest deadline first (none last)
HISTORY_ORDER = ("-requested_at", "-id")  # newest first


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: pending pages go by (due_sort, requested_at, id), others by
    (requested_at, id) newest first."""

    pending: bool
    due_at: dt.datetime | None  # the row's due_sort (never NULL) on pending pages
    requested_at: dt.datetime
    id: uuid.UUID

    def encode(self) -> str:
        """The opaque text of this position, for `?after=`."""
        return cursor_encode("p" if self.pending else "h", self.due_at, self.requested_at, self.id)

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Raise ValueError unless `text` is a cursor this module made."""
        try:
            kind, due, requested, pk = cursor_decode(text)
            cursor = cls(
                pending=kind == "p",
                due_at=dt.datetime.fromisoformat(due) if due else None,
                requested_at=dt.datetime.fromisoformat(requested),
                id=uuid.UUID(pk),
            )
        except (ValueError, TypeError) as exc:
            raise ValueError("not a cursor") from exc
        if kind not in ("p", "h") or any(
            t is not None and t.tzinfo is None for t in (cursor.due_at, cursor.requested_at)
        ):
            raise ValueError("not a cursor")
        return cursor

    @classmethod
    def after(cls, request: ApprovalRequest, *, pending: bool) -> Cursor:
        return cls(pending, request.due_sort if pending else None, request.requested_at, request.pk)


@dataclass
class Page:
    rows: list[ApprovalRequest]
    next: Cursor | None


def inbox_page(
    principal: Principal,
    *,
    status: str = ApprovalStatus.PENDING,
    action: str = "",
    mine: bool = False,
    after: Cursor | None = None,
    limit: int = 25,
) -> Page:
    """One page of the inbox. Pending: soonest deadline first (none last); else newest first.

    Keyset pagination: each page starts where the cursor ended, with one row comparison
    that the index `approval_inbox_pending` (or `approval_history`) answers as a range scan,
    so page 200 costs what page 1 costs.
    """
    pending = status == ApprovalStatus.PENDING
    requests = approval_requests_visible_to(principal).select_related("run")
    if status == DECIDED:
        requests = requests.exclude(status=ApprovalStatus.PENDING)
    elif status:
        requests = requests.filter(status=status)
    if action:
        requests = requests.filter(action=action)
    if mine:
        requests = decidable_by(principal, requests)
    order, position = _keyset(after, pending=pending)
    page = paginate(requests, order=order, after=position, limit=limit)
    last = page.last
    return Page(rows=page.rows, next=None if last is None else Cursor.after(last, pending=pending))


def _keyset(after: Cursor | None, *, pending: bool) -> tuple[tuple[str, ...], tuple | None]:
    """The inbox's sort fields, and the cursor's values of them; a cursor of the other
    kind (from a page of another status) starts at the first page."""
    if pending:
        if after is not None and after.pending and after.due_at is not None:
            return PENDING_ORDER, (after.due_at, after.requested_at, after.id)
        return PENDING_ORDER, None
    if after is not None and not after.pending:
        return HISTORY_ORDER, (after.requested_at, after.id)
    return HISTORY_ORDER, None


# Exactness of the inbox's numbers (its counts and its chart by age): exact while the tenant
# has at most LARGE_BACKLOG runs waiting for approval; above that, read at most once per
# BACKLOG_SECONDS in a process for everyone who sees the whole tenant (per person for what they
# may decide), so they may lag by that much: counting 50,000 pending requests three ways took
# 56 ms of every inbox request. A member's own requests are always counted afresh.
LARGE_BACKLOG = 1000
BACKLOG_SECONDS = 5.0
_backlog: Recent[Any] = Recent(seconds=BACKLOG_SECONDS)


def large_backlog(principal: Principal) -> bool:
    """Whether the inbox's numbers are shared for this principal (LARGE_BACKLOG): one read of
    the tenant's run counts, which a page asks once and passes to each number it shows."""
    if principal.sees_only_own:
        return False
    waiting = run_counts.by_status(principal.tenant.pk).get(RunStatus.WAITING_APPROVAL, 0)
    return waiting > LARGE_BACKLOG


def _shared_while_large(principal: Principal, key: tuple, make: Any, large: bool) -> Any:
    if not large:
        return make()
    return _backlog.get((principal.tenant.pk, *key), make)


def inbox_counts(principal: Principal, *, large: bool | None = None) -> dict[str, int]:
    """Pending requests of the tenant, how many are overdue, how many the principal may decide
    (see LARGE_BACKLOG for how exact; `large`: large_backlog's answer, if the caller has it)."""

    def tenant_counts() -> dict[str, int]:
        pending = approval_requests_visible_to(principal).filter(status=ApprovalStatus.PENDING)
        return pending.aggregate(
            pending=Count("id"), overdue=Count("id", filter=Q(due_at__lte=timezone.now()))
        )

    if large is None:
        large = large_backlog(principal)
    counts = dict(_shared_while_large(principal, ("counts",), tenant_counts, large))
    key = principal.api_key
    who = principal.user.pk if principal.user is not None else f"key:{key.pk if key else ''}"
    counts["mine"] = _shared_while_large(
        principal, ("mine", who), lambda: decidable_count(principal), large
    )
    return counts


# How long pending requests have waited: (key, label, from, to) by their age.
AGE_BUCKETS: list[tuple[str, str, dt.timedelta, dt.timedelta | None]] = [
    ("5m", "Under 5 min", dt.timedelta(0), dt.timedelta(minutes=5)),
    ("30m", "5–30 min", dt.timedelta(minutes=5), dt.timedelta(minutes=30)),
    ("2h", "30 min–2 h", dt.timedelta(minutes=30), dt.timedelta(hours=2)),
    ("8h", "2–8 h", dt.timedelta(hours=2), dt.timedelta(hours=8)),
    ("1d", "8–24 h", dt.timedelta(hours=8), dt.timedelta(days=1)),
    ("3d", "1–3 days", dt.timedelta(days=1), dt.timedelta(days=3)),
    ("old", "Over 3 days", dt.timedelta(days=3), None),
]


def pending_by_age(
    principal: Principal, *, now: dt.datetime, large: bool | None = None
) -> list[tuple[str, str, int, int]]:
    """(key, label, within their deadline, past it) of the pending requests the principal may
    see, by how long they have waited: one statement, which the pending index answers alone
    (it holds requested_at and due_sort) for everyone who sees the whole tenant."""
    if principal.sees_only_own:
        return _pending_by_age(principal, now)
    if large is None:
        large = large_backlog(principal)
    return _shared_while_large(
        principal, ("by_age",), lambda: _tenant_by_age(principal, now), large
    )


_BY_AGE_SQL = sql.load("approvals", "pending_by_age")
# The lower bound of every bucket but the first, in seconds (AGE_BUCKETS).
_AGE_BOUNDS = [low.total_seconds() for _, _, low, _ in AGE_BUCKETS[1:]]


def _tenant_by_age(principal: Principal, now: dt.datetime) -> list[tuple[str, str, int, int]]:
    params = {
        "tenant": principal.tenant.pk,
        "pending": ApprovalStatus.PENDING,
        "now": now,
        "bounds": _AGE_BOUNDS,
    }
    counts = [[0, 0] for _ in AGE_BUCKETS]
    with connection.cursor() as cursor:
        cursor.execute(_BY_AGE_SQL, params)
        for bucket, late, n in cursor.fetchall():
            counts[bucket][1 if late else 0] += n
    return [
        (key, label, ok, late)
        for (key, label, _, _), (ok, late) in zip(AGE_BUCKETS, counts, strict=True)
    ]


def _pending_by_age(principal: Principal, now: dt.datetime) -> list[tuple[str, str, int, int]]:
    pending = approval_requests_visible_to(principal).filter(status=ApprovalStatus.PENDING)
    counts: dict[str, Any] = {}
    for key, _, low, high in AGE_BUCKETS:
        age = Q(requested_at__gt=now - high) if high is not None else Q()
        if low:
            age &= Q(requested_at__lte=now - low)
        counts[f"{key}_ok"] = Count("pk", filter=age & Q(due_sort__gt=now))
        counts[f"{key}_late"] = Count("pk", filter=age & Q(due_sort__lte=now))
    found = pending.aggregate(**counts)
    return [
        (key, label, found[f"{key}_ok"], found[f"{key}_late"]) for key, label, _, _ in AGE_BUCKETS
    ]


# The rules of policies.decidable_by once more, as one statement: the badge is counted on every
# page a manager or admin opens, and building that queryset cost about 1 ms of Python each
# time (the statement itself 0.25 ms). tests/approvals/test_badge_count.py holds the two equal.
_DECIDABLE_COUNT_SQL = sql.load("approvals", "count_decidable")


# The nav badge counts to one past this and then says "99+" (templates/approvals/_badge.html).
BADGE_MOST = 99


def decidable_count(principal: Principal, *, at_most: int | None = None) -> int:
    """Pending requests this principal may decide; with `at_most`, counted no further than
    one past it (the nav badge: `BADGE_MOST`), so a large tenant's backlog is not read whole
    on every page."""
    limit = None if at_most is None else at_most + 1
    if principal.user is None or not principal.can(Scope.APPROVE):
        pending = decidable_by(
            principal,
            ApprovalRequest.objects.for_tenant(principal.tenant).filter(
                status=ApprovalStatus.PENDING
            ),
        )
        return pending.count() if limit is None else len(pending.values_list("pk")[:limit])
    params: dict[str, Any] = {
        "limit": limit,
        "tenant": principal.tenant.pk,
        "pending": ApprovalStatus.PENDING.value,
        "admin": is_admin(principal),
        "manager": ApproverRole.MANAGER.value,
        "user": principal.user.pk,
    }
    with connection.cursor() as cursor:
        cursor.execute(_DECIDABLE_COUNT_SQL, params)
        return int(cursor.fetchone()[0])


def approval_request_audit(request: ApprovalRequest) -> list[Any]:
    """Everything the audit log holds about this request, oldest first."""
    return list(
        AuditEvent.objects.for_tenant(request.tenant_id)
        .filter(target_type=ApprovalRequest._meta.label_lower, target_id=str(request.pk))
        .order_by("id")[:200]
    )


def run_approvals(run: Run) -> list[Any]:
    """Approval requests of one run, oldest first."""
    return approval_requests_for_run(tenant_id=run.tenant_id, run_id=run.pk)


def approval_awaited_by(run: Run) -> Any | None:
    """The approval request a run waiting for approval is waiting on, or None."""
    if run.status != RunStatus.WAITING_APPROVAL:
        return None
    return approval_request_awaited(
        tenant_id=run.tenant_id, run_id=run.pk, waiting_for=run.waiting_for
    )
