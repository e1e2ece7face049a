"""Whole-thread operations on the LangGraph threads of agents/runtime/external.py, for
`AgentStateSaver.copy_thread`, `delete_for_runs` and `prune`: copy a thread, forget the
checkpoints of LangGraph runs, keep only each namespace's latest checkpoint.

Everything runs in the caller's transaction and tenant scope (row-level security applies).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.runtime.external import check_writer, driver_of, external_steps
from agents.runtime.models import Checkpoint, ExternalBlob, ExternalCheckpoint, ExternalWrite
from tenants.models import Scope
from tenants.principal import Principal


@transaction.atomic
def external_thread_copy(*, principal: Principal, source: str, target: str) -> int:
    """Copy every checkpoint (all namespaces, oldest first), channel value and pending write
    of thread `source` to thread `target`; the number of checkpoints copied."""
    found = list(
        ExternalCheckpoint.objects.for_tenant(principal.tenant)
        .filter(thread_id=source)
        .select_related("shown_as")
        .order_by("checkpoint_ns", "checkpoint_id")
    )
    blobs = ExternalBlob.objects.for_tenant(principal.tenant).filter(thread_id=source)
    writes = ExternalWrite.objects.for_tenant(principal.tenant).filter(thread_id=source)
    values: dict[str, list[dict[str, Any]]] = {}
    for b in blobs:
        values.setdefault(b.checkpoint_ns, []).append(
            {"channel": b.channel, "version": b.version, "type": b.type, "blob": bytes(b.blob)}
        )
    ops: list[dict[str, Any]] = []
    for row in found:
        ops.append(
            {
                "op": "put",
                "thread_id": target,
                "checkpoint_ns": row.checkpoint_ns,
                "checkpoint_id": row.checkpoint_id,
                "parent_checkpoint_id": row.parent_checkpoint_id,
                "type": row.type,
                "blob": bytes(row.blob),
                "metadata": row.metadata,
                "channel_versions": row.channel_versions,
                # Every value of the namespace rides with its first checkpoint.
                "blobs": values.pop(row.checkpoint_ns, []),
                "preview": row.shown_as.state,
                "step": row.shown_as.step,
            }
        )
    tasks: dict[tuple, list[dict[str, Any]]] = {}
    for w in writes:
        key = (w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path)
        tasks.setdefault(key, []).append(
            {"idx": w.idx, "channel": w.channel, "type": w.type, "blob": bytes(w.blob)}
        )
    for (ns, checkpoint_id, task_id, task_path), task_writes in tasks.items():
        ops.append(
            {
                "op": "writes",
                "thread_id": target,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "writes": task_writes,
            }
        )
    external_steps(principal=principal, ops=ops)
    return len(found)


@transaction.atomic
def external_runs_delete(*, principal: Principal, run_ids: list[str]) -> int:
    """Forget the checkpoints LangGraph runs `run_ids` saved (metadata `run_id`), with their
    pending writes and readable Checkpoints, in every thread of the tenant."""
    if not run_ids:
        return 0
    found = _driven_by(
        principal,
        ExternalCheckpoint.objects.for_tenant(principal.tenant).filter(
            metadata__run_id__in=[str(r) for r in run_ids]
        ),
    )
    return _forget(principal, list(found.values_list("pk", flat=True)))


@transaction.atomic
def external_threads_prune(
    *, principal: Principal, thread_ids: list[str], strategy: str = "keep_latest"
) -> int:
    """`keep_latest`: keep each (thread, namespace)'s latest checkpoint with its writes and
    the values it names, forget the rest; `delete`: forget the threads' checkpoints."""
    rows = _driven_by(
        principal,
        ExternalCheckpoint.objects.for_tenant(principal.tenant).filter(
            thread_id__in=[str(t) for t in thread_ids]
        ),
    )
    if strategy == "delete":
        doomed = list(rows.values_list("pk", flat=True))
        ExternalBlob.objects.for_tenant(principal.tenant).filter(
            thread_id__in=set(rows.values_list("thread_id", flat=True))
        ).delete()
        return _forget(principal, doomed)
    latest: dict[tuple[str, str], ExternalCheckpoint] = {}
    doomed = []
    for row in rows.order_by("thread_id", "checkpoint_ns", "-checkpoint_id"):
        place = (row.thread_id, row.checkpoint_ns)
        if place in latest:
            doomed.append(row.pk)
        else:
            latest[place] = row
    forgotten = _forget(principal, doomed)
    for (thread_id, ns), row in latest.items():
        named = {(str(c), str(v)) for c, v in (row.channel_versions or {}).items()}
        for blob in ExternalBlob.objects.for_tenant(principal.tenant).filter(
            thread_id=thread_id, checkpoint_ns=ns
        ):
            if (blob.channel, blob.version) not in named:
                blob.delete()
    return forgotten


def _driven_by(principal: Principal, rows: Any) -> Any:
    """The checkpoints of threads this principal drives (an admin: every thread); members
    keep no thread. Another key's threads are left as they are, as if not there."""
    check_writer(principal)
    if principal.can(Scope.ADMIN):
        return rows
    return rows.filter(run__session__driver__in=["", driver_of(principal)])


def _forget(principal: Principal, checkpoint_pks: list[int]) -> int:
    """Delete these external checkpoints, their pending writes and readable Checkpoints."""
    if not checkpoint_pks:
        return 0
    rows = ExternalCheckpoint.objects.for_tenant(principal.tenant).filter(pk__in=checkpoint_pks)
    gone = list(rows.values_list("thread_id", "checkpoint_ns", "checkpoint_id", "shown_as_id"))
    for thread_id, ns, checkpoint_id, _ in gone:
        ExternalWrite.objects.for_tenant(principal.tenant).filter(
            thread_id=thread_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id
        ).delete()
    rows.delete()
    Checkpoint.objects.for_tenant(principal.tenant).filter(pk__in=[g[3] for g in gone]).delete()
    return len(gone)
