"""The engine's SQL: claim a run, and persist a step's outcome in one transaction.

Both are single statements sent in one round trip together with the tenant setting. Each
write also records its progress event (agents_runevent, numbered by agents_run.event_seq)
in the same statement, so the event is durable exactly when the write is. In
autocommit mode PostgreSQL runs such a multi-statement message as one implicit
transaction, so a plain step costs one round trip and one commit. Every write is fenced:
it matches only `version = <the version we claimed>` and `lease_owner = <us>`, so a worker
that lost its lease (and was superseded) writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import connection

from agents.models import RunStatus

_SET_TENANT = "SELECT set_config('app.tenant_id', %(tenant)s, true);\n"

CLAIM_SQL = (
    _SET_TENANT
    + """
WITH claimed AS (
    UPDATE agents_run SET
        status = 'running',
        lease_owner = %(worker)s,
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s),
        version = version + 1,
        attempts = attempts + 1,
        event_seq = event_seq + 1,
        started_at = coalesce(started_at, clock_timestamp()),
        updated_at = clock_timestamp()
    WHERE id = %(run)s
      AND (
        (status = 'queued' AND (not_before IS NULL OR not_before <= clock_timestamp()))
        OR (status = 'running' AND lease_expires_at < clock_timestamp())
        -- our own lease: this process resumes after losing its database connection
        OR (status = 'running' AND lease_owner = %(worker)s)
      )
    RETURNING id, tenant_id, agent, agent_version, current_step, step_seq, version, attempts,
              input, wake_payload, session_id, state_schema_version, cancel_requested, event_seq
), ev AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT tenant_id, id, event_seq, 'step.started',
           jsonb_build_object('step', current_step, 'step_seq', step_seq + 1, 'attempt', attempts,
                              'status', 'running'),
           clock_timestamp()
    FROM claimed
)
SELECT c.id, c.agent, c.agent_version, c.current_step, c.step_seq, c.version, c.attempts,
       c.input, c.wake_payload, c.session_id, c.state_schema_version, c.cancel_requested,
       cp.state, cp.schema_version, cp.messages_upto, c.event_seq
FROM claimed c
LEFT JOIN agents_checkpoint cp ON cp.run_id = c.id AND cp.seq = c.step_seq
"""
)


@dataclass
class Claim:
    run_id: Any
    tenant_id: str
    agent: str
    agent_version: int
    step: str
    step_seq: int
    version: int
    attempts: int
    input: dict
    wake_payload: dict | None
    session_id: Any
    state: dict
    state_version: int
    messages_upto: int
    cancel_requested: bool = False
    event_seq: int = 0  # number of the run's latest event (this claim's step.started)


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def claim(*, tenant_id: str, run_id: Any, worker: str, lease_seconds: float) -> Claim | None:
    """Take the run's lease if it is runnable and free (or its lease expired)."""
    params: dict[str, Any] = {
        "tenant": str(tenant_id),
        "run": str(run_id),
        "worker": worker,
        "lease": lease_seconds,
    }
    with connection.cursor() as cursor:
        cursor.execute(CLAIM_SQL, params)
        cursor.nextset()
        row = cursor.fetchone()
    if row is None:
        return None
    (
        rid,
        agent,
        agent_version,
        step,
        seq,
        version,
        attempts,
        run_input,
        wake,
        session_id,
        run_state_version,
        cancel_requested,
        state,
        cp_version,
        upto,
        event_seq,
    ) = row
    return Claim(
        run_id=rid,
        tenant_id=str(tenant_id),
        agent=agent,
        agent_version=agent_version,
        step=step,
        step_seq=seq,
        version=version,
        attempts=attempts,
        input=_loads(run_input) or {},
        wake_payload=_loads(wake),
        session_id=session_id,
        state=_loads(state) or {},
        state_version=cp_version if cp_version is not None else run_state_version,
        messages_upto=upto or 0,
        cancel_requested=cancel_requested,
        event_seq=event_seq,
    )


PERSIST_SQL = """
WITH r AS (
    UPDATE agents_run SET
        status = CASE WHEN cancel_requested AND %(status)s NOT IN ('succeeded', 'failed')
                      THEN 'cancelled' ELSE %(status)s END,
        current_step = %(next_step)s,
        step_seq = %(seq)s,
        version = version + 1,
        attempts = %(attempts)s,
        lease_owner = %(owner)s,
        lease_expires_at = CASE WHEN %(owner)s = '' THEN NULL
                           ELSE clock_timestamp() + make_interval(secs => %(lease)s) END,
        output = %(output)s::jsonb,
        error = %(error)s::jsonb,
        not_before = %(not_before)s,
        waiting_for = %(waiting_for)s,
        wake_payload = NULL,
        state_schema_version = %(schema_version)s,
        event_seq = event_seq + 1,
        finished_at = CASE WHEN %(status)s IN ('succeeded', 'failed') OR cancel_requested
                      THEN clock_timestamp() END,
        updated_at = clock_timestamp()
    WHERE id = %(run)s AND version = %(version)s AND lease_owner = %(worker)s
    RETURNING id, status, version, event_seq
), cp AS (
    INSERT INTO agents_checkpoint
        (tenant_id, run_id, seq, step, next_step, state, schema_version, messages_upto,
         created_at)
    SELECT %(tenant)s, r.id, %(seq)s, %(step)s, %(next_step)s, %(state)s::jsonb,
           %(schema_version)s, %(messages_upto)s, clock_timestamp()
    FROM r
), att AS (
    INSERT INTO agents_stepattempt
        (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
         error_class, error_code, message, traceback, duration_ms)
    SELECT %(tenant)s, r.id, %(seq)s, %(attempt)s, %(step)s, %(worker)s, %(started_at)s,
           clock_timestamp(), 'succeeded', '', '', '', '', %(duration_ms)s
    FROM r
), ev AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT %(tenant)s, r.id, r.event_seq, 'step.finished',
           jsonb_build_object('step', %(step)s::text, 'step_seq', %(seq)s::int,
                              'attempt', %(attempt)s::int, 'status', r.status,
                              'next_step', %(next_step)s::text,
                              'duration_ms', round(%(duration_ms)s::numeric, 1)),
           clock_timestamp()
    FROM r
)
SELECT status, version, event_seq FROM r
"""

FAILURE_SQL = """
WITH r AS (
    UPDATE agents_run SET
        status = %(status)s,
        version = version + 1,
        lease_owner = '',
        lease_expires_at = NULL,
        not_before = %(not_before)s,
        error = %(error)s::jsonb,
        finished_at = CASE WHEN %(status)s = 'failed' THEN clock_timestamp() END,
        updated_at = clock_timestamp(),
        event_seq = event_seq + 1
    WHERE id = %(run)s AND version = %(version)s AND lease_owner = %(worker)s
    RETURNING id, status, version, event_seq
), att AS (
    INSERT INTO agents_stepattempt
        (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
         error_class, error_code, message, traceback, duration_ms)
    SELECT %(tenant)s, r.id, %(seq)s, %(attempt)s, %(step)s, %(worker)s, %(started_at)s,
           clock_timestamp(), %(outcome)s, %(error_class)s, %(error_code)s, %(message)s,
           %(traceback)s, %(duration_ms)s
    FROM r
), ev AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT %(tenant)s, r.id, r.event_seq, 'step.failed',
           jsonb_build_object('step', %(step)s::text, 'step_seq', %(seq)s::int,
                              'attempt', %(attempt)s::int, 'status', r.status,
                              'outcome', %(outcome)s::text,
                              'error', jsonb_build_object('code', %(error_code)s::text,
                                                          'message', %(message)s::text)),
           clock_timestamp()
    FROM r
)
SELECT status, version, event_seq FROM r
"""


CANCEL_SQL = """
WITH r AS (
    UPDATE agents_run SET
        status = 'cancelled', version = version + 1, lease_owner = '', lease_expires_at = NULL,
        finished_at = clock_timestamp(), updated_at = clock_timestamp(),
        event_seq = event_seq + 1
    WHERE id = %(run)s AND version = %(version)s AND lease_owner = %(worker)s
    RETURNING id, tenant_id, status, version, event_seq
), ev AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT tenant_id, id, event_seq, 'run.status', jsonb_build_object('status', status),
           clock_timestamp()
    FROM r
)
SELECT status, version, event_seq FROM r
"""


class Written(NamedTuple):
    status: str
    version: int
    event_seq: int  # the number of the event this write recorded (agents_runevent)


def execute_fenced(sql: str, params: dict) -> Written | None:
    """Run a fenced write; None means another worker superseded us and nothing was written.

    Outside `transaction.atomic()` the statement is its own transaction; inside, it joins it.
    """
    with connection.cursor() as cursor:
        cursor.execute(_SET_TENANT + sql, params)
        cursor.nextset()
        row = cursor.fetchone()
    return Written(row[0], row[1], row[2]) if row else None


def dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str)


TERMINAL = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}
