"""Drive a run: claim it, then run steps and persist each one until it waits, ends or its
time slice is used up.

claim → load (+ migrate) → run step → persist (one transaction) → publish + continue.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import time
import traceback
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from agents.runtime import progress
from agents.runtime.definitions import Agent, Transition, get_agent
from agents.runtime.engine import store, unexpected
from agents.runtime.engine.failpoints import failpoint
from agents.runtime.engine.heartbeat import Lease
from agents.runtime.engine.outcomes import STOPS, check, enqueue_on_commit, publish_stored
from agents.runtime.engine.step_context import StepContext
from agents.runtime.engine.step_writes import write_extras
from agents.runtime.errors import INFRASTRUCTURE_ERRORS, AppError, StepError
from agents.runtime.models import RunStatus
from agents.runtime.queue import urgent_runs, urgent_waiting

logger = logging.getLogger(__name__)


@dataclass
class DriveResult:
    claimed: bool
    steps: int = 0
    status: str | None = None
    reason: str = ""


class _Fenced(Exception):
    """Another worker took the run over; this one must write nothing more."""


def drive(
    *,
    tenant_id: str,
    run_id: Any,
    worker: str,
    slice_seconds: float | None = None,
    lease_seconds: float | None = None,
) -> DriveResult:
    """Run the run's steps while it stays runnable, up to a time slice."""
    lease = lease_seconds or settings.AGENTSTATE_LEASE_SECONDS
    try:
        claim = store.claim(tenant_id=tenant_id, run_id=run_id, worker=worker, lease_seconds=lease)
    except INFRASTRUCTURE_ERRORS:
        raise  # the task retries once the service answers
    except Exception as exc:  # noqa: BLE001 - recorded on the run, never silently looping
        status = unexpected.claim_failed(tenant_id=tenant_id, run_id=run_id, worker=worker, exc=exc)
        return DriveResult(claimed=False, status=status, reason="claim_failed")
    if claim is None:
        return DriveResult(claimed=False, reason="not runnable, or leased by a live worker")
    failpoint("run.claimed")
    if claim.lost_at:  # a run taken back from a dead worker: one fewer waits at URGENT
        urgent_runs(-1)
    publish_stored(
        claim,
        "step.started",
        seq=claim.event_seq,
        step=claim.step,
        step_seq=claim.step_seq + 1,
        attempt=claim.attempts,
        status=RunStatus.RUNNING,
        worker=worker,
        **({"recovered": True, "lost_at": claim.lost_at} if claim.lost_at else {}),
    )
    driver = _Driver(claim, worker=worker, lease=lease)
    held = Lease(tenant_id=tenant_id, run_id=claim.run_id, worker=worker, lease=lease)
    driver.lease_held = held.hold(claim.version)
    try:
        return driver.run(
            slice_seconds if slice_seconds is not None else settings.AGENTSTATE_SLICE_SECONDS
        )
    except INFRASTRUCTURE_ERRORS:
        raise  # the task retries once the service answers
    except Exception as exc:  # noqa: BLE001 - the engine's own error between steps
        return driver.engine_error(exc)
    finally:
        held.release()


class _Driver:
    def __init__(self, claim: store.Claim, *, worker: str, lease: float) -> None:
        self.claim = claim
        self.worker = worker
        self.lease = lease
        self.version = claim.version
        self.step = claim.step
        self.seq = claim.step_seq  # seq of the latest checkpoint
        self.attempt = claim.attempts
        self.wake = claim.wake_payload
        self.upto = claim.messages_upto
        # The state as its latest checkpoint stores it (JSON): each step gets its own copy
        # decoded from it, so a step sees the same state whether the run went on in this
        # process or resumed from the checkpoint elsewhere.
        self.state_json = ""
        self.event_seq = claim.event_seq  # the run's latest stored event (live events follow it)
        self.steps = 0
        self.lease_held: Lease | None = None  # renewed by the process's lease keeper
        # This thread's connection, looked up once: through Django's proxy it costs every
        # step a context-local lookup (asgiref), and a drive never changes threads.
        self.db = connections[DEFAULT_DB_ALIAS]
        # The run's logs (ctx.log) up to its latest checkpoint: read when a step first asks,
        # then kept up to date as this drive persists steps.
        self._logs: dict[str, list[Any]] | None = None

    def logs(self) -> dict[str, list[Any]]:
        if self._logs is None:
            self._logs = store.run_logs(
                tenant_id=self.claim.tenant_id, run_id=self.claim.run_id, upto_seq=self.seq
            )
        return self._logs

    @cached_property
    def agent(self) -> Agent:
        """The run's agent definition, looked up once per drive (raises if it is gone)."""
        return get_agent(self.claim.agent)

    def _set_version(self, version: int) -> None:
        self.version = version
        if self.lease_held is not None:
            self.lease_held.version(version)

    # --- the loop ---------------------------------------------------------------------------------

    def run(self, slice_seconds: float) -> DriveResult:
        if self.claim.cancel_requested:  # cancelled while queued, retrying or orphaned
            row = store.execute_fenced(
                store.CANCEL_SQL,
                {
                    "tenant": self.claim.tenant_id,
                    "run": str(self.claim.run_id),
                    "version": self.version,
                    "worker": self.worker,
                },
            )
            if row is not None:
                publish_stored(self.claim, "run.status", seq=row.event_seq, status=row.status)
            return DriveResult(claimed=True, status=row[0] if row else None, reason="cancelled")
        try:
            agent = self.agent
            self.state_json = store.dumps(self._load_state(agent)) or "{}"
        except (AppError, ValueError) as exc:
            return self._fail_permanently(exc, code=getattr(exc, "code", "state_migration_failed"))
        deadline = time.monotonic() + slice_seconds
        while True:
            policy = agent.retry_for(self.step)
            if self.attempt > policy.max_attempts and self._budget_spent(policy.max_attempts):
                return self._fail_permanently(
                    StepError(f"retry budget of {policy.max_attempts} attempts exhausted"),
                    code="retries_exhausted",
                )
            started_at, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
            ctx = StepContext(
                self.claim,
                step=self.step,
                seq=self.seq + 1,
                attempt=self.attempt,
                state=json.loads(self.state_json),
                wake_payload=self.wake,
                messages_upto=self.upto,
                event_seq=self.event_seq,
                logs=self.logs,
            )
            try:
                transition = agent.get_step(self.step)(ctx)
                check(agent, transition)
            except INFRASTRUCTURE_ERRORS:
                # A lost database or Redis connection is not the step's fault: the attempt is
                # abandoned (nothing recorded, the lease kept) and the task retries it with
                # backoff once the service answers; the ledger replays what the step did.
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is recorded, none escapes
                return self._handle_error(agent, exc, started_at, t0)
            failpoint("step.before_persist", self.step)
            # A slice ends at its deadline, or sooner when a run taken back from a dead worker
            # waits at URGENT (agents/runtime/queue.py): it goes first, not after the slices.
            keep_going = (
                transition.kind == "goto" and time.monotonic() < deadline and not urgent_waiting()
            )
            try:
                status = self._persist(ctx, transition, keep_going, started_at, t0)
            except _Fenced:
                logger.warning("run %s: superseded by another worker", self.claim.run_id)
                return DriveResult(claimed=True, steps=self.steps, reason="fenced")
            except INFRASTRUCTURE_ERRORS:
                raise  # the task retries once the service answers (see the step above)
            except Exception as exc:  # noqa: BLE001 - recorded where people look, not swallowed
                # The step's writes were rolled back with its checkpoint. Persisting again
                # would fail the same way (a constraint, a bug): the run fails with the reason
                # and the traceback, instead of holding its lease until the sweep calls it lost.
                logger.exception("run %s: persisting step %s failed", self.claim.run_id, self.step)
                return self._fail_permanently(
                    exc, code="persist_failed", started_at=started_at, t0=t0
                )
            self.steps += 1
            if status != RunStatus.RUNNING:
                if status == RunStatus.QUEUED:
                    enqueue_on_commit(self.claim.tenant_id, self.claim.run_id)
                if transition.kind == "timer" and transition.wake_at is not None:
                    enqueue_on_commit(
                        self.claim.tenant_id, self.claim.run_id, eta=transition.wake_at
                    )
                return DriveResult(claimed=True, steps=self.steps, status=status)
            self.step, self.seq, self.attempt, self.wake = (
                transition.next_step,
                self.seq + 1,
                1,
                None,
            )

    def _budget_spent(self, max_attempts: int) -> bool:
        """Whether the step used up its retry budget. Only attempts that failed count: one
        abandoned because a service went away (a lost connection, a killed worker) is not the
        step's fault, and has a separate, generous allowance of its own."""
        allowance = max_attempts + settings.AGENTSTATE_INFRASTRUCTURE_RETRIES
        return (
            self.attempt > allowance
            or store.failed_attempts(
                tenant_id=self.claim.tenant_id, run_id=self.claim.run_id, seq=self.seq + 1
            )
            >= max_attempts
        )

    def _load_state(self, agent: Agent) -> dict:
        have, want = self.claim.state_version, agent.state_version
        if have > want:
            raise ValueError(f"state version {have} is newer than the agent's {want}")
        return agent.migrate_state(self.claim.state, have) if have < want else self.claim.state

    # --- persisting -------------------------------------------------------------------------------

    def _persist(
        self, ctx: StepContext, t: Transition, keep_going: bool, started_at: dt.datetime, t0: float
    ) -> str:
        if t.kind == "goto" and keep_going:
            status, owner, attempts = RunStatus.RUNNING, self.worker, 1
        else:
            status, owner, attempts = STOPS[t.kind], "", 0
        approval_id = uuid.uuid4() if t.kind == "approval" else None
        state_json = store.dumps({**ctx.state, **t.update}) or "{}"  # a dict is never None
        appended_json = store.dumps(ctx._appended) if ctx._appended else None
        read_upto = max((m["seq"] for m in ctx.__dict__.get("transcript", ())), default=0)
        self.upto = max(self.upto, read_upto)
        params = {
            "tenant": self.claim.tenant_id,
            "run": self.claim.run_key,
            "version": self.version,
            "worker": self.worker,
            "status": status,
            "next_step": t.next_step,
            "seq": self.seq + 1,
            "attempts": attempts,
            "owner": owner,
            "lease": self.lease,
            "output": store.dumps(t.output),
            "error": store.dumps({"code": "agent_failed", "message": t.error})
            if t.kind == "fail"
            else None,
            "not_before": t.wake_at,
            "waiting_for": str(approval_id) if approval_id else t.event,
            "schema_version": self.agent.state_version,
            "step": self.step,
            "state": state_json,
            "messages_upto": self.upto,
            "attempt": self.attempt,
            "started_at": started_at,
            "duration_ms": (time.perf_counter() - t0) * 1000,
            "appended": appended_json,
        }
        if not ctx._outbox and not ctx._writes and approval_id is None:
            row = store.persist(params, self.db)  # one round trip, one commit
            if row is None:
                raise _Fenced
            self._finished(row, t, params, committed=True)
        else:
            with transaction.atomic(), progress.tracking() as recorded:
                row = store.persist(params, self.db)
                if row is None:
                    raise _Fenced
                self._finished(row, t, params)  # sent on commit, before the extras' events
                write_extras(
                    self.claim, seq=self.seq, step=self.step, ctx=ctx, t=t, approval_id=approval_id
                )
            self.event_seq = max(self.event_seq, recorded.get(self.claim.run_key, 0))
        self.state_json = state_json
        if appended_json is not None and self._logs is not None:
            # as a later drive would read it back: JSON, decoded
            for key, items in json.loads(appended_json).items():
                self._logs.setdefault(key, []).extend(items)
        self._set_version(row.version)
        return row.status

    def _finished(
        self, row: store.Written, t: Transition, params: dict[str, Any], committed: bool = False
    ) -> None:
        self.event_seq = row.event_seq
        publish_stored(
            self.claim,
            "step.finished",
            committed=committed,
            seq=row.event_seq,
            step=self.step,
            step_seq=self.seq + 1,
            attempt=self.attempt,
            status=row.status,
            next_step=t.next_step,
            duration_ms=round(params["duration_ms"], 1),
        )

    # --- failures ---------------------------------------------------------------------------------

    def _handle_error(
        self, agent: Agent, exc: Exception, started_at: dt.datetime, t0: float
    ) -> DriveResult:
        policy = agent.retry_for(self.step)
        transient = isinstance(exc, StepError) and exc.transient
        if transient and self.attempt < policy.max_attempts:
            ceiling = min(policy.max_delay, policy.base_delay * 2 ** (self.attempt - 1))
            delay = max(random.uniform(0, ceiling), getattr(exc, "retry_after", None) or 0)
            return self._retry_later(exc, delay, started_at, t0)
        code = getattr(exc, "code", "step_raised")
        if transient:
            code = "retries_exhausted"
        return self._fail_permanently(exc, code=code, started_at=started_at, t0=t0)

    def engine_error(self, exc: Exception) -> DriveResult:
        """An error of the engine's own between steps: recorded, retried, then failed."""
        logger.exception("run %s: the engine failed around step %s", self.claim.run_id, self.step)
        if self.attempt >= unexpected.ENGINE_ERROR_LIMIT:
            return self._fail_permanently(exc, code="engine_error")
        delay = unexpected.BACKOFF_SECONDS * 2 ** (self.attempt - 1)
        return self._retry_later(exc, delay, timezone.now(), time.perf_counter(), "engine_error")

    def _retry_later(
        self,
        exc: Exception,
        delay: float,
        started_at: dt.datetime,
        t0: float,
        code: str | None = None,
    ) -> DriveResult:
        status = self._write_failure(
            exc,
            status=RunStatus.QUEUED,
            outcome="retrying",
            not_before=timezone.now() + dt.timedelta(seconds=delay),
            started_at=started_at,
            t0=t0,
            code=code,
        )
        if status is not None:
            enqueue_on_commit(self.claim.tenant_id, self.claim.run_id, countdown=delay)
        return DriveResult(claimed=True, steps=self.steps, status=status, reason=code or "retrying")

    def _fail_permanently(
        self,
        exc: Exception,
        *,
        code: str,
        started_at: dt.datetime | None = None,
        t0: float | None = None,
    ) -> DriveResult:
        status = self._write_failure(
            exc,
            status=RunStatus.FAILED,
            outcome="failed",
            not_before=None,
            started_at=started_at or timezone.now(),
            t0=t0 or time.perf_counter(),
            code=code,
        )
        return DriveResult(claimed=True, steps=self.steps, status=status, reason=code)

    def _write_failure(
        self,
        exc: Exception,
        *,
        status: str,
        outcome: str,
        not_before: dt.datetime | None,
        started_at: dt.datetime,
        t0: float,
        code: str | None = None,
    ) -> str | None:
        code = code or getattr(exc, "code", "step_raised")
        error = {
            "code": code,
            "message": str(exc)[:2000],
            "class": type(exc).__name__,
            "step": self.step,
            "attempt": self.attempt,
        }
        params = {
            "tenant": self.claim.tenant_id,
            "run": str(self.claim.run_id),
            "version": self.version,
            "worker": self.worker,
            "status": status,
            "not_before": not_before,
            "error": store.dumps(error),
            "seq": self.seq + 1,
            "attempt": self.attempt,
            "step": self.step,
            "started_at": started_at,
            "outcome": outcome,
            "error_class": f"{type(exc).__module__}.{type(exc).__name__}",
            "error_code": code,
            "message": str(exc)[:2000],
            "traceback": traceback.format_exc()[-20000:] if exc.__traceback__ else "",
            "duration_ms": (time.perf_counter() - t0) * 1000,
        }
        row = store.execute_fenced(store.FAILURE_SQL, params)
        if row is None:
            return None
        self._set_version(row.version)
        self.event_seq = row.event_seq
        publish_stored(
            self.claim,
            "step.failed",
            seq=row.event_seq,
            step=self.step,
            step_seq=self.seq + 1,
            attempt=self.attempt,
            status=row.status,
            outcome=outcome,
            error={"code": code, "message": error["message"]},
        )
        return row.status
