"""Drive a run: claim it, then run steps and persist each one until it waits, ends or its
time slice is used up.

claim → load (+ migrate) → run step → persist (one transaction) → publish + continue; a
step that goes on to the next is persisted while the next one's Python runs (_call_step).
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
from agents.runtime.engine import store, unexpected, wire
from agents.runtime.engine.failpoints import failpoint
from agents.runtime.engine.heartbeat import Lease
from agents.runtime.engine.outcomes import STOPS, check, enqueue_on_commit, publish_stored
from agents.runtime.engine.step_context import StepContext, StepDiscarded
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


# A step runs ahead of its predecessor's commit only after a step that took less than this:
# the predecessor's answer, and so its live event, waits for the step's own Python, and a
# step that computes (or sleeps) for long gains nothing from the overlap worth that wait.
# One that reaches outside the process (a model, a tool) reads the answer at once anyway.
RUN_AHEAD_MAX_MS = 2.0


class _Fenced(Exception):
    """Another worker took the run over; this one must write nothing more."""


@dataclass
class _InFlight:
    """A step's persist sent and not yet answered, and what its answer needs."""

    sent: wire.Sent
    transition: Transition
    params: dict[str, Any]
    started_at: dt.datetime
    t0: float
    step: str  # the step's name, checkpoint number before it, and attempt (the driver has
    seq: int  # moved on to the next step meanwhile)
    attempt: int


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
        self.prepared = settings.AGENTSTATE_PREPARED_STATEMENTS  # read once, not every step
        # The run's logs (ctx.log) up to its latest checkpoint: read when a step first asks,
        # then kept up to date as this drive persists steps.
        self._logs: dict[str, list[Any]] | None = None
        self.in_flight: _InFlight | None = None  # the pipelined step's persist (see _call_step)
        self.stopped: DriveResult | None = None  # how a discarded step's predecessor ended
        self.settled: tuple[store.Written, _InFlight] | None = None  # its event yet to send

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
        try:
            return self._steps(agent, deadline)
        finally:
            if self.in_flight is not None:  # leaving on an error with a persist unanswered
                self._drain()

    def _steps(self, agent: Agent, deadline: float) -> DriveResult:
        while True:
            policy = agent.retry_for(self.step)
            if self.attempt > policy.max_attempts:
                if (stop := self._settle()) is not None:
                    return stop
                if self._budget_spent(policy.max_attempts):
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
                transition = self._call_step(agent, ctx)
                check(agent, transition)
            except StepDiscarded:
                assert self.stopped is not None  # set by _settle_or_discard
                return self.stopped  # the step before it ended the drive
            except INFRASTRUCTURE_ERRORS:
                # A lost database or Redis connection is not the step's fault: the attempt is
                # abandoned (nothing recorded, the lease kept) and the task retries it with
                # backoff once the service answers; the ledger replays what the step did.
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is recorded, none escapes
                if (stop := self._settle()) is not None:
                    return stop
                return self._handle_error(agent, exc, started_at, t0)
            # A slice ends at its deadline, or sooner when a run taken back from a dead worker
            # waits at URGENT (agents/runtime/queue.py): it goes first, not after the slices.
            keep_going = (
                transition.kind == "goto" and time.monotonic() < deadline and not urgent_waiting()
            )
            params = self._params(ctx, transition, keep_going, started_at, t0)
            if (stop := self._settle(announce=False)) is not None:  # the step before, committed
                return stop
            failpoint("step.before_persist", self.step)
            try:
                try:
                    status = self._persist(ctx, transition, params, started_at, t0)
                finally:  # the step before's event, once this step is on its way
                    self._announce_settled()
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
            if status != RunStatus.RUNNING:
                return self._stopped(status, transition)

    def _stopped(self, status: str, t: Transition) -> DriveResult:
        """The drive ends with the run in `status` (its last step committed)."""
        if status == RunStatus.QUEUED:
            enqueue_on_commit(self.claim.tenant_id, self.claim.run_id)
        if t.kind == "timer" and t.wake_at is not None:
            enqueue_on_commit(self.claim.tenant_id, self.claim.run_id, eta=t.wake_at)
        return DriveResult(claimed=True, steps=self.steps, status=status)

    # --- the pipelined step -----------------------------------------------------------------------
    # A step that goes on to the next one in this drive, with nothing but its checkpoint to
    # write, and that took less than RUN_AHEAD_MAX_MS, is sent without waiting for the
    # server's answer: the next step's Python runs while the server commits (on another CPU),
    # and the answer is read before that step persists, or sooner, the moment it touches
    # anything outside the process: its context's tools, model, memory, pack, conversation or
    # logs (StepContext._outside), and any query or transaction on this connection (an execute
    # wrapper; set_autocommit, where Django's atomic() begins). So nothing a step does through
    # its context or Django leaves the process before the step before it is durable. A step
    # that drives psycopg's connection by hand (`connection.connection`) finds it busy. A step
    # whose predecessor turns out fenced, failed or stopped is discarded (StepDiscarded, a
    # BaseException: a step's `except Exception` cannot keep it going), and runs again,
    # elsewhere or later, like any step that never committed: a step's own Python may run
    # more than once, as ever.

    def _call_step(self, agent: Agent, ctx: StepContext) -> Transition:
        fn = agent.get_step(self.step)
        if self.in_flight is None:
            return fn(ctx)
        ctx._gate = self._gate
        db, begin = self.db, self.db.set_autocommit

        def set_autocommit(*args: Any, **kwargs: Any) -> None:  # transaction.atomic() begins
            self._settle_or_discard()
            begin(*args, **kwargs)

        db.set_autocommit = set_autocommit  # type: ignore[method-assign]
        try:
            with db.execute_wrapper(self._gate_queries):
                return fn(ctx)
        finally:
            del db.set_autocommit  # the class's own again

    def _gate(self, ctx: StepContext) -> None:
        """Read the answer to the step before `ctx`'s; discard this step if it ended the drive."""
        self._settle_or_discard()
        ctx._event_seq = self.event_seq  # live events of the step follow its predecessor's

    def _gate_queries(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self._settle_or_discard()
        return execute(sql, params, many, context)

    def _settle_or_discard(self) -> None:
        if (stop := self._settle()) is not None:
            self.stopped = stop
            raise StepDiscarded

    def _settle(self, announce: bool = True) -> DriveResult | None:
        """Read the answer to the persist in flight, if any: None while the run goes on, or
        how the drive ends (superseded, the persist failed, the run stopped). `announce`
        False: the step's event waits for `_announce_settled` (sent after the next step's
        persist, which then leaves sooner), unless the drive ends here."""
        flight, self.in_flight = self.in_flight, None
        if flight is None:
            return None
        try:
            row = store.persist_receive(flight.sent)
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - as a failed persist in _steps
            self.step, self.seq, self.attempt = flight.step, flight.seq, flight.attempt
            logger.exception("run %s: persisting step %s failed", self.claim.run_id, self.step)
            return self._fail_permanently(
                exc, code="persist_failed", started_at=flight.started_at, t0=flight.t0
            )
        if row is None:
            logger.warning("run %s: superseded by another worker", self.claim.run_id)
            return DriveResult(claimed=True, steps=self.steps, reason="fenced")
        self._written(row, flight.params)
        self.settled = (row, flight)
        if announce or row.status != RunStatus.RUNNING:
            self._announce_settled()
        if row.status != RunStatus.RUNNING:  # cancelled meanwhile
            return self._stopped(row.status, flight.transition)
        return None

    def _announce_settled(self) -> None:
        if self.settled is not None:
            (row, flight), self.settled = self.settled, None
            self._announce(row, flight.transition, flight.params, committed=True)

    def _drain(self) -> None:
        """Read the answer to a persist left in flight by an error, so the connection is free
        for what handles the error; a connection that cannot answer is closed."""
        try:
            self._settle()
        except Exception:  # noqa: BLE001 - the error on its way out is the one that counts
            logger.warning("run %s: the last persist's answer was lost", self.claim.run_id)
            self.in_flight = None
            self.db.close()

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

    def _params(
        self, ctx: StepContext, t: Transition, keep_going: bool, started_at: dt.datetime, t0: float
    ) -> dict[str, Any]:
        """The persist's parameters (its fencing version is set when it is sent)."""
        if t.kind == "goto" and keep_going:
            status, owner, attempts = RunStatus.RUNNING, self.worker, 1
        else:
            status, owner, attempts = STOPS[t.kind], "", 0
        read_upto = max((m["seq"] for m in ctx.__dict__.get("transcript", ())), default=0)
        self.upto = max(self.upto, read_upto)
        params = {
            "tenant": self.claim.tenant_id,
            "run": self.claim.run_key,
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
            "waiting_for": t.event,
            "schema_version": self.agent.state_version,
            "step": self.step,
            "state": store.dumps({**ctx.state, **t.update}) or "{}",  # a dict is never None
            "messages_upto": self.upto,
            "attempt": self.attempt,
            "started_at": started_at,
            "duration_ms": (time.perf_counter() - t0) * 1000,
            "appended": store.dumps(ctx._appended) if ctx._appended else None,
            # The fencing version: the one the step before it will have once committed
            # (each persist adds one), checked again when it is sent.
            "version": self.version + (self.in_flight is not None),
        }
        if status == RunStatus.RUNNING and not ctx._outbox and not ctx._writes:
            params["_values"] = store.persist_values(params)  # while the server is busy
        return params

    def _persist(
        self,
        ctx: StepContext,
        t: Transition,
        params: dict[str, Any],
        started_at: dt.datetime,
        t0: float,
    ) -> str:
        """Persist the step and move on to the next: its status, or RUNNING with the persist
        in flight (the pipelined step, above)."""
        values = params.pop("_values", None)  # encoded ahead (_params)
        if params["version"] != self.version:  # ... for a version it did not get
            params["version"], values = self.version, None
        approval_id = uuid.uuid4() if t.kind == "approval" else None
        if approval_id is not None:
            params["waiting_for"] = str(approval_id)
        if not ctx._outbox and not ctx._writes and approval_id is None:
            if (
                params["status"] == RunStatus.RUNNING
                and params["duration_ms"] < RUN_AHEAD_MAX_MS
                and store.pipelined(self.db, self.prepared)
            ):
                sent = store.persist_send(params, self.db, values)
                self.in_flight = _InFlight(
                    sent, t, params, started_at, t0, self.step, self.seq, self.attempt
                )
                self._advance(t, params)
                return RunStatus.RUNNING
            row = store.persist(params, self.db, values)  # one round trip, one commit
            if row is None:
                raise _Fenced
            self._written(row, params)
            self._announce(row, t, params, committed=True)
        else:
            with transaction.atomic(), progress.tracking() as recorded:
                row = store.persist(params, self.db)
                if row is None:
                    raise _Fenced
                self._announce(row, t, params)  # sent on commit, before the extras' events
                write_extras(
                    self.claim, seq=self.seq, step=self.step, ctx=ctx, t=t, approval_id=approval_id
                )
            self._written(row, params)
            self.event_seq = max(self.event_seq, recorded.get(self.claim.run_key, 0))
        if row.status == RunStatus.RUNNING:
            self._advance(t, params)
        return row.status

    def _advance(self, t: Transition, params: dict[str, Any]) -> None:
        """On to the next step, whose state is the one this step persists."""
        self.state_json = params["state"]
        self.step, self.seq, self.attempt, self.wake = t.next_step, self.seq + 1, 1, None

    def _written(self, row: store.Written, params: dict[str, Any]) -> None:
        """The step of `params` is persisted: count it, and keep its version and logs."""
        self.steps += 1
        self._set_version(row.version)
        appended = params["appended"]
        if appended is not None and self._logs is not None:
            # as a later drive would read it back: JSON, decoded
            for key, items in json.loads(appended).items():
                self._logs.setdefault(key, []).extend(items)

    def _announce(
        self, row: store.Written, t: Transition, params: dict[str, Any], committed: bool = False
    ) -> None:
        """Send the step's `step.finished` event (once its transaction commits)."""
        self.event_seq = row.event_seq
        publish_stored(
            self.claim,
            "step.finished",
            committed=committed,
            seq=row.event_seq,
            step=params["step"],
            step_seq=params["seq"],
            attempt=params["attempt"],
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
