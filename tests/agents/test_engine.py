"""The step engine, in process: claim, checkpoint per step, fencing, retries, pauses."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import OperationalError, connection
from django.utils import timezone
from redis.exceptions import ConnectionError

from agents.runtime import queue, selectors
from agents.runtime.engine import store
from agents.runtime.models import (
    Checkpoint,
    Run,
    RunEvent,
    RunEventLog,
    StepAttempt,
    ToolCall,
)
from agents.runtime.queue import queue_keys
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from core.redis_client import client
from tenants.scope import tenant_scope
from tests.agents import agents_for_tests as t
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def rows(model, tenant, **filters):
    with tenant_scope(tenant.pk):
        return list(model.objects.for_tenant(tenant).filter(**filters).order_by("pk"))


def in_thread(work):
    """`work` for a thread of its own, which closes its database connection when done (a
    connection left to the garbage collector can outlive the test database)."""

    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    return run


def steal_during_slow_step(run, step, admin, *, tries):
    """Drive `run` in a thread with a 0.6 s lease; meanwhile try to claim it every 0.25 s.
    Returns the drive's outcome ({"r": result}) and what each claim got."""
    import threading

    outcome = {}
    worker = threading.Thread(
        target=in_thread(lambda: outcome.update(r=step(run, lease_seconds=0.6)))
    )
    worker.start()
    stolen = []
    for _ in range(tries):  # try to steal the lease while the step sleeps
        connection.cursor().execute("SELECT pg_sleep(0.25)")
        stolen.append(
            store.claim(
                tenant_id=str(admin.tenant.pk), run_id=run.pk, worker="thief", lease_seconds=60
            )
        )
    worker.join()
    return outcome, stolen


def attempts(run):
    """Every attempt at the run's steps, as the pages and the API show them."""
    with tenant_scope(run.tenant_id):
        return selectors.run_timeline(run)["attempts"]


def test_a_run_checkpoints_after_every_step_and_succeeds(start, step, reload, tenant_a):
    run = start("three_steps")
    result = step(run)
    assert (result.steps, result.status) == (3, "succeeded")
    run = reload(run)
    assert run.output == {"trail": ["one", "two", "three"]}
    assert run.step_seq == 3 and run.lease_owner == "" and run.finished_at
    checkpoints = rows(Checkpoint, tenant_a, run=run)
    assert [(c.seq, c.step) for c in checkpoints] == [(1, "one"), (2, "two"), (3, "three")]
    assert checkpoints[1].state == {"trail": ["one", "two"]}
    assert [(a.seq, a.attempt, a.outcome) for a in attempts(run)] == [
        (1, 1, "succeeded"),
        (2, 1, "succeeded"),
        (3, 1, "succeeded"),
    ]
    assert all(c.worker == "w1" and c.duration_ms is not None for c in checkpoints)


def test_a_step_writes_two_rows_its_run_update_and_a_checkpoint_that_records_attempt_and_event(
    start, step, reload, tenant_a
):
    run = start("three_steps")
    step(run)
    run = reload(run)
    assert rows(StepAttempt, tenant_a, run=run) == []  # no attempt failed
    assert [e.kind for e in rows(RunEvent, tenant_a, run=run)] == ["run.queued", "step.started"]
    log = rows(RunEventLog, tenant_a, run=run)
    assert [(e.seq, e.kind) for e in log] == [
        (1, "run.queued"),
        (2, "step.started"),
        (3, "step.finished"),
        (4, "step.finished"),
        (5, "step.finished"),
    ]
    assert run.event_seq == 5
    last = log[-1].data
    assert {k: last[k] for k in ("step", "step_seq", "attempt", "status", "next_step")} == {
        "step": "three",
        "step_seq": 3,
        "attempt": 1,
        "status": "succeeded",
        "next_step": "",
    }
    assert log[2].data["status"] == "running" and log[2].data["next_step"] == "two"


def test_a_used_up_time_slice_yields_to_the_queue_and_resumes_from_the_checkpoint(
    start, step, reload, enqueued
):
    run = start("three_steps")
    first = step(run, slice_seconds=0)
    assert (first.steps, first.status) == (1, "queued")
    assert enqueued[-1]["run_id"] == run.pk
    assert step(run, worker="w2", slice_seconds=0).status == "queued"
    assert step(run, worker="w3", slice_seconds=0).status == "succeeded"
    assert dict(t.calls) == {"one": 1, "two": 1, "three": 1}  # no step ran twice
    assert reload(run).output == {"trail": ["one", "two", "three"]}


def test_a_long_slice_yields_between_steps_when_a_run_waits_at_urgent_priority(start, step, reload):
    # A run taken back from a dead worker waits at URGENT: a worker in the middle of a long
    # slice lets it go first instead of holding the queue for the rest of its slice.
    run = start("three_steps")
    queue.urgent_runs(+1)
    queue.urgent_waiting.cache_clear()
    first = step(run, slice_seconds=60)
    assert (first.steps, first.status) == (1, "queued")
    queue.urgent_runs(-1)  # a worker claimed it
    queue.urgent_waiting.cache_clear()
    assert step(run, worker="w2", slice_seconds=60).status == "succeeded"
    assert reload(run).output == {"trail": ["one", "two", "three"]}


def test_other_work_at_top_priority_does_not_cut_a_slice_short(start, step, settings):
    # Sweeps and tasks sent without a priority share the URGENT list: no haste for them.
    urgent = queue_keys(settings.AGENTSTATE_QUEUE_NAME)[0]
    client().lpush(urgent, "{}")
    try:
        assert step(start("three_steps"), slice_seconds=60).status == "succeeded"
    finally:
        client().delete(urgent)


def test_claiming_a_run_taken_back_counts_it_off(start, step, admin):
    run = start("three_steps")
    queue.urgent_runs(+1)
    with tenant_scope(admin.tenant.pk):
        Run.objects.for_tenant(admin.tenant).filter(pk=run.pk).update(lost_at=timezone.now())
    step(run, slice_seconds=60)
    assert int(client().get(queue.URGENT_RUNS_KEY) or 0) == 0


def test_a_run_held_by_a_live_worker_cannot_be_claimed(start, admin):
    run = start("three_steps")
    tenant = str(admin.tenant.pk)
    assert store.claim(tenant_id=tenant, run_id=run.pk, worker="a", lease_seconds=60)
    assert store.claim(tenant_id=tenant, run_id=run.pk, worker="b", lease_seconds=60) is None


def test_the_engine_functions_run_under_row_level_security_for_the_tenant_they_are_given(
    start, admin, tenant_b, reload
):
    run = start("three_steps")
    other = str(tenant_b.pk)
    # Named with another tenant's id, the claim cannot see the run, so it takes nothing.
    assert store.claim(tenant_id=other, run_id=run.pk, worker="a", lease_seconds=60) is None
    mine = store.claim(tenant_id=str(admin.tenant.pk), run_id=run.pk, worker="a", lease_seconds=60)
    params = {
        "tenant": other,
        "run": str(run.pk),
        "version": mine.version,
        "worker": "a",
        "status": "succeeded",
        "next_step": "",
        "seq": 1,
        "attempts": 0,
        "owner": "",
        "output": None,
        "error": None,
        "not_before": None,
        "waiting_for": "",
        "schema_version": 1,
        "step": "one",
        "state": "{}",
        "messages_upto": 0,
        "attempt": 1,
        "started_at": timezone.now(),
        "duration_ms": 1.0,
        "appended": None,
    }
    assert store.persist(params) is None  # the right fence, the wrong tenant: no write
    assert (reload(run).status, reload(run).step_seq) == ("running", 0)
    assert store.persist({**params, "tenant": str(admin.tenant.pk)}).status == "succeeded"


def test_a_stale_worker_that_wakes_after_losing_its_lease_writes_nothing(
    start, step, reload, admin, tenant_a
):
    run = start("three_steps")
    tenant = str(admin.tenant.pk)
    stale = store.claim(tenant_id=tenant, run_id=run.pk, worker="stale", lease_seconds=0.01)
    assert stale is not None
    connection.cursor().execute("SELECT pg_sleep(0.05)")
    assert step(run, worker="fresh").status == "succeeded"
    # The stale worker now tries to persist its step with its old version: fenced.
    from agents.runtime.engine.runner import _Driver, _Fenced

    driver = _Driver(stale, worker="stale", lease=60)
    with pytest.raises(_Fenced):
        from agents.runtime.definitions import goto
        from agents.runtime.engine.step_context import StepContext

        ctx = StepContext(
            stale, step="one", seq=1, attempt=1, state={}, wake_payload=None, messages_upto=0
        )
        t, now = goto("two", bogus=True), timezone.now()
        driver._persist(ctx, t, driver._params(ctx, t, False, now, 0.0), now, 0.0)
    assert [c.seq for c in rows(Checkpoint, tenant_a, run=run)] == [1, 2, 3]
    assert all("bogus" not in c.state for c in rows(Checkpoint, tenant_a, run=run))
    # Its steps, which go on to the next one, are sent ahead of their answer: fenced too.
    result = _Driver(stale, worker="stale", lease=60).run(slice_seconds=60)
    assert (result.reason, result.steps) == ("fenced", 0)
    assert [c.seq for c in rows(Checkpoint, tenant_a, run=run)] == [1, 2, 3]


def test_a_transient_error_is_retried_with_backoff_without_redoing_earlier_steps(
    start, step, reload, enqueued, tenant_a
):
    run = start("flaky", mode="transient", succeed_on=3, retry_after=0.05)
    first = step(run)
    assert first.status == "queued" and first.reason == "retrying"
    assert enqueued[-1]["countdown"] >= 0.05  # Retry-After honoured
    assert step(run).claimed is False  # not before the backoff has passed
    connection.cursor().execute("SELECT pg_sleep(0.08)")
    assert step(run).reason == "retrying"
    connection.cursor().execute("SELECT pg_sleep(0.08)")
    assert step(run).status == "succeeded"
    assert reload(run).output == {"attempt": 3}
    assert t.calls["flaky.start"] == 1 and t.calls["flaky.wobble"] == 3
    outcomes = [(a.step, a.attempt, a.outcome) for a in attempts(run)]
    assert outcomes == [
        ("start", 1, "succeeded"),
        ("wobble", 1, "retrying"),
        ("wobble", 2, "retrying"),
        ("wobble", 3, "succeeded"),
    ]


def test_an_exhausted_retry_budget_fails_the_run_and_keeps_the_error(start, step, reload):
    run = start("flaky", mode="transient", retry_after=0)
    for _ in range(3):
        connection.cursor().execute("SELECT pg_sleep(0.06)")
        result = step(run)
    assert result.status == "failed"
    run = reload(run)
    assert run.error["code"] == "retries_exhausted"
    assert "429" in run.error["message"]


def test_a_permanent_error_fails_at_once(start, step, reload):
    run = start("flaky", mode="permanent")
    assert step(run).status == "failed"
    assert reload(run).error["code"] == "permanent"
    assert t.calls["flaky.wobble"] == 1


def test_a_step_that_raises_is_recorded_with_its_traceback_and_corrupts_no_state(
    start, step, reload, tenant_a
):
    run = start("flaky", mode="bug")
    assert step(run).status == "failed"
    run = reload(run)
    assert run.error["class"] == "KeyError"
    [failed] = rows(StepAttempt, tenant_a, run=run, outcome="failed")
    assert "KeyError" in failed.traceback and "wobble" in failed.traceback
    checkpoints = rows(Checkpoint, tenant_a, run=run)
    assert [c.state for c in checkpoints] == [{"started": True}]  # no 'half' written


@pytest.mark.parametrize(
    ("mode", "error"), [("database_lost", OperationalError), ("redis_lost", ConnectionError)]
)
def test_a_lost_service_mid_step_is_never_the_steps_failure_and_the_run_resumes(
    start, step, reload, tenant_a, mode, error
):
    # More losses than the step's retry budget (3): none of them is charged to it.
    run = start("flaky", mode=mode, times=5)
    raised, result = 0, None
    for _ in range(12):
        try:
            result = step(run)  # a slice of the run, as the task drives it
        except error:  # the task retries it with backoff once the service answers
            raised += 1
            assert reload(run).status == "running" and not reload(run).error
            continue
        if result.status == "succeeded":
            break
    assert raised == 5 and result.status == "succeeded"
    # Its retry budget (3 attempts) is untouched: only failures of the step use it up.
    assert rows(StepAttempt, tenant_a, run=run, outcome="failed") == []
    assert reload(run).output == {"attempt": 6}  # the sixth try, after five lost services


def test_a_step_that_always_loses_its_service_still_ends_after_the_separate_allowance(
    start, step, reload, settings
):
    settings.AGENTSTATE_INFRASTRUCTURE_RETRIES = 2
    run = start("flaky", mode="database_lost", times=99)
    results = []
    for _ in range(12):
        try:
            results.append(step(run).status)
        except OperationalError:
            continue
        if results[-1] == "failed":
            break
    assert results[-1] == "failed"
    assert reload(run).error["code"] == "retries_exhausted"
    assert t.calls["flaky.wobble"] == 3 + 2  # its budget plus the allowance, then no more


def test_an_error_while_persisting_fails_the_run_with_the_reason_instead_of_leaving_it_running(
    start, step, reload, tenant_a
):
    run = start("persist_breaks")
    assert step(run).status == "failed"
    run = reload(run)
    assert run.status == "failed" and run.error["code"] == "persist_failed"
    assert run.lease_owner == ""
    [failed] = rows(StepAttempt, tenant_a, run=run, outcome="failed")
    assert "IntegrityError" in failed.traceback and "x_unique" in failed.traceback
    assert rows(Checkpoint, tenant_a, run=run) == []  # nothing of the step was kept


def test_a_step_that_fails_on_purpose_checkpoints_its_state_and_fails_the_run(start, step, reload):
    run = start("flaky", mode="agent_fail")
    assert step(run).status == "failed"
    run = reload(run)
    assert run.error == {"code": "agent_failed", "message": "customer not found"}


def test_side_effects_happen_once_when_a_step_is_retried_after_its_tools_returned(
    start, step, reload, tenant_a
):
    run = start("effects", crash_after_tools=True)
    assert step(run).reason == "retrying"
    connection.cursor().execute("SELECT pg_sleep(0.6)")
    assert step(run).status == "succeeded"
    assert t.calls["effects.pay"] == 2  # the step ran twice ...
    assert sorted(t.side_effects.values()) == [1, 1]  # ... each effect happened once
    ledger = rows(ToolCall, tenant_a, run=run)
    assert [(c.call_index, c.status, c.sends) for c in ledger] == [
        (0, "succeeded", 1),
        (1, "succeeded", 1),
    ]
    assert ledger[0].idempotency_key == f"{run.pk}:1:0"
    assert reload(run).output["first"] == {"done": "first", "key": f"{run.pk}:1:0"}


def _intent_only(run, tenant: str, *, tool: str, arguments: str) -> None:
    """A worker died between recording the intent of call 0 of step 1 and its outcome."""
    from agents.runtime.engine import ledger

    with connection.cursor() as cursor:
        cursor.execute(
            ledger.INTENT_SQL,
            {
                "tenant": tenant,
                "run": str(run.pk),
                "seq": 1,
                "index": 0,
                "tool": tool,
                "key": f"{run.pk}:1:0",
                "arguments": arguments,
            },
        )


def test_an_intent_without_outcome_is_sent_again_with_the_same_key(start, admin, tenant_a):
    from agents.runtime.engine import ledger
    from agents.runtime.tools import get_tool

    run = start("effects")
    tool = get_tool("count_effect")
    tenant = str(admin.tenant.pk)
    _intent_only(run, tenant, tool=tool.name, arguments='{"name": "x"}')
    result = ledger.call(
        tenant_id=tenant, run_id=run.pk, seq=1, index=0, tool=tool, arguments={"name": "x"}
    )
    assert result["key"] == f"{run.pk}:1:0"
    [entry] = rows(ToolCall, tenant_a, run=run)
    assert (entry.status, entry.sends) == ("succeeded", 2)
    again = ledger.call(
        tenant_id=tenant, run_id=run.pk, seq=1, index=0, tool=tool, arguments={"name": "x"}
    )
    assert again == result and t.side_effects[f"{run.pk}:1:0"] == 1


def test_an_old_checkpoint_is_migrated_forward_when_loaded(start, step, reload, admin):
    run = start("versioned")
    with tenant_scope(admin.tenant.pk):
        Checkpoint.objects.create(
            tenant=admin.tenant,
            run=run,
            seq=1,
            step="old",
            next_step="read",
            state={"nm": "Ada"},
            schema_version=1,
        )
        type(run).objects.for_tenant(admin.tenant).filter(pk=run.pk).update(
            step_seq=1, state_schema_version=1
        )
    assert step(run).status == "succeeded"
    assert reload(run).output == {"state": {"name": "Ada", "migrated": True}}


def test_state_from_a_newer_version_fails_the_run_without_touching_it(start, step, reload, admin):
    run = start("versioned")
    with tenant_scope(admin.tenant.pk):
        Checkpoint.objects.create(
            tenant=admin.tenant, run=run, seq=1, step="future", state={"x": 1}, schema_version=9
        )
        type(run).objects.for_tenant(admin.tenant).filter(pk=run.pk).update(step_seq=1)
    assert step(run).status == "failed"
    assert reload(run).error["code"] == "state_migration_failed"


def test_waiting_for_approval_holds_no_worker_and_the_decision_resumes_the_run(
    start, step, reload, admin, tenant_a, enqueued
):
    run = start("pauses", kind="approval")
    assert step(run).status == "waiting_approval"
    run = reload(run)
    [request] = rows(ApprovalRequest, tenant_a, run=run)
    assert run.waiting_for == str(request.pk) and run.lease_owner == ""
    assert (request.action, request.arguments, request.checkpoint_seq) == (
        "count_effect",
        {"name": "refund"},
        1,
    )
    assert step(run).claimed is False  # waiting: nothing to claim
    with tenant_scope(tenant_a.pk):
        approval_decide(
            principal=admin,
            request=request,
            approve=True,
            comment="ok",
            edited_arguments={"name": "smaller refund"},
        )
    assert enqueued[-1]["run_id"] == request.run_id
    assert step(run).status == "succeeded"
    decision = reload(run).output["decision"]
    assert decision["approved"] is True and decision["arguments"] == {"name": "smaller refund"}


def test_a_timer_pauses_until_its_time_and_the_sweep_wakes_it(start, step, reload, enqueued):
    from agents.runtime.sweeps import recover

    until = timezone.now() + dt.timedelta(seconds=0.2)
    run = start("pauses", kind="timer", until=until.isoformat())
    assert step(run).status == "waiting_timer"
    assert enqueued[-1]["eta"] == until
    assert recover()["timers_woken"] == 0
    connection.cursor().execute("SELECT pg_sleep(0.25)")
    assert recover()["timers_woken"] == 1
    assert step(run).status == "succeeded"


def test_an_event_wakes_a_run_waiting_for_it(start, step, reload, admin, tenant_a):
    from agents.runtime.errors import RunNotWaiting
    from agents.runtime.services import run_send_event

    run = start("pauses", kind="event")
    assert step(run).status == "waiting_event"
    with tenant_scope(tenant_a.pk), pytest.raises(RunNotWaiting):
        run_send_event(principal=admin, run=reload(run), name="delivered", payload={})
    with tenant_scope(tenant_a.pk):
        run_send_event(principal=admin, run=reload(run), name="shipped", payload={"n": 1})
    assert step(run).status == "succeeded"
    assert reload(run).output["event"] == {"name": "shipped", "payload": {"n": 1}}


def test_cancelling_a_waiting_run_is_immediate_and_a_running_one_stops_at_the_boundary(
    start, step, reload, admin, tenant_a
):
    from agents.runtime.services import run_cancel

    waiting = start("pauses", kind="event")
    step(waiting)
    with tenant_scope(tenant_a.pk):
        assert run_cancel(principal=admin, run=reload(waiting)).status == "cancelled"

    running = start("three_steps", cancel_during_step=True)
    result = step(running)  # the step in flight finishes; the run stops at the boundary
    assert (result.steps, result.status) == (1, "cancelled")
    # Step two's Python may have run ahead of step one's commit; it was discarded with
    # everything it did (tests/agents/test_pipelined_steps.py: it reaches nothing outside).
    assert t.calls["two"] <= 1
    assert reload(running).step_seq == 1

    orphan = start("three_steps")
    store.claim(tenant_id=str(tenant_a.pk), run_id=orphan.pk, worker="w9", lease_seconds=60)
    with tenant_scope(tenant_a.pk):
        assert run_cancel(principal=admin, run=reload(orphan)).cancel_requested
    assert step(orphan, worker="w9").status == "cancelled"  # reclaimed: cancelled, no step
    assert t.calls["one"] == 1


def test_a_lost_lease_is_recovered_by_the_sweep_and_noted_as_a_lost_attempt(
    start, step, reload, admin, tenant_a, enqueued
):
    from agents.runtime.sweeps import recover

    run = start("three_steps")
    store.claim(tenant_id=str(tenant_a.pk), run_id=run.pk, worker="dead", lease_seconds=0.01)
    connection.cursor().execute("SELECT pg_sleep(0.05)")
    assert recover()["lost_leases"] == 1
    assert enqueued[-1]["run_id"] == run.pk
    assert reload(run).status == "queued"
    [lost] = rows(StepAttempt, tenant_a, run=run)
    assert (lost.outcome, lost.worker, lost.step) == ("lost", "dead", "one")
    assert step(run, worker="alive").status == "succeeded"


def test_a_long_step_keeps_its_lease_alive_so_no_other_worker_takes_over(
    start, step, reload, admin
):
    run = start("slow", seconds=1.6)
    outcome, stolen = steal_during_slow_step(run, step, admin, tries=6)
    assert stolen == [None] * 6
    assert outcome["r"].status == "succeeded"
    assert reload(run).output == {"slept": 1.6}


def test_the_lease_is_kept_alive_across_many_short_steps_that_outlast_it(
    start, step, reload, admin
):
    import threading

    # Persisting a step does not renew the lease (so the run update stays heap-only); the
    # lease keeper alone keeps it across a drive longer than the lease.
    # 3 s of steps against a 1.5 s lease, renewed every 0.5 s: a busy machine may delay a
    # renewal by a second without the lease running out (at 0.5 s it once did, in CI). One
    # slice longer than the steps, so the run is held throughout.
    run = start("stroll", steps=30, pause=0.1)
    outcome = {}
    worker = threading.Thread(
        target=in_thread(lambda: outcome.update(r=step(run, lease_seconds=1.5, slice_seconds=60)))
    )
    worker.start()
    stolen = []
    while worker.is_alive():
        connection.cursor().execute("SELECT pg_sleep(0.1)")
        stolen.append(
            store.claim(
                tenant_id=str(admin.tenant.pk), run_id=run.pk, worker="thief", lease_seconds=60
            )
        )
    worker.join()
    assert len(stolen) >= 8 and not any(stolen)
    assert (outcome["r"].status, outcome["r"].steps) == ("succeeded", 30)


def test_a_renewal_that_waited_behind_its_own_steps_commit_still_extends_the_lease(
    start, reload, admin
):
    from agents.runtime.engine.heartbeat import RENEW_SQL

    run = start("three_steps")
    tenant = str(admin.tenant.pk)
    claim = store.claim(tenant_id=tenant, run_id=run.pk, worker="w1", lease_seconds=0.5)
    with connection.cursor() as cursor:  # the step committed meanwhile: the version moved on
        cursor.execute(
            "SELECT set_config('app.tenant_id', %s, true);"
            " UPDATE agents_run SET version = version + 1 WHERE id = %s",
            [tenant, run.pk],
        )
    assert reload(run).version == claim.version + 1

    def renew(worker, version, seconds):
        params = {"tenant": tenant, "run": str(run.pk), "worker": worker, "lease": seconds}
        with connection.cursor() as cursor:
            cursor.execute(RENEW_SQL, {**params, "version": version})
        return reload(run).lease_expires_at - timezone.now()

    assert renew("w1", claim.version, 60) > dt.timedelta(seconds=30)
    assert renew("w2", claim.version + 1, 600) < dt.timedelta(seconds=61)  # not another's


def test_writes_registered_by_a_step_commit_with_it_and_not_with_a_failed_attempt(
    start, step, reload
):
    run = start("stroll", steps=5, explode_at=3)
    assert step(run).status == "failed"
    after = reload(run)
    assert after.step_seq == 2  # two steps persisted, the third raised
    assert after.resolution_note == "walked 2"  # the third step's write never happened


def test_a_429_from_a_real_openai_compatible_server_is_retried_after_its_retry_after(
    start, step, reload, settings, enqueued
):
    from tests.fakes.openai_server import FakeOpenAIServer, ok, rate_limited

    with FakeOpenAIServer() as server:
        settings.LLM_PROVIDER = "openai"
        settings.LLM_BASE_URL = server.base_url
        settings.LLM_TIMEOUT_SECONDS = 5
        server.enqueue(rate_limited(retry_after="1"), ok("hi there"))
        run = start("asks_model")
        assert step(run).reason == "retrying"
        assert enqueued[-1]["countdown"] >= 1.0
        assert reload(run).error["code"] == "llm_rate_limited"
        assert step(run).claimed is False  # Retry-After not yet passed
        connection.cursor().execute("SELECT pg_sleep(1.05)")
        assert step(run).status == "succeeded"
        assert reload(run).output == {"reply": "hi there"}
        assert len(server.requests) == 2


def test_the_claim_always_reads_by_index_whatever_the_statistics_say():
    # Planned once per connection, a claim once kept a sequential scan of a young table
    # while it grew (see migration 0007); sequential scans are priced out of it.
    with connection.cursor() as cursor:
        cursor.execute("SELECT proconfig FROM pg_proc WHERE proname = 'agents_claim_run'")
        assert "enable_seqscan=off" in cursor.fetchone()[0]


@pytest.mark.parametrize(
    ("recorded_tool", "recorded_arguments"),
    [("count_effect", '{"name": "y"}'), ("another_tool", '{"name": "x"}')],
    ids=["other arguments", "other tool"],
)
def test_a_replayed_call_that_differs_from_the_recorded_one_is_refused_and_nothing_is_sent(
    start, admin, tenant_a, recorded_tool, recorded_arguments
):
    from agents.runtime.engine import ledger
    from agents.runtime.errors import LedgerMismatch
    from agents.runtime.tools import get_tool

    run = start("effects")
    tenant = str(admin.tenant.pk)
    _intent_only(run, tenant, tool=recorded_tool, arguments=recorded_arguments)
    with pytest.raises(LedgerMismatch, match="call 0 of step 1") as refused:
        ledger.call(
            tenant_id=tenant,
            run_id=run.pk,
            seq=1,
            index=0,
            tool=get_tool("count_effect"),
            arguments={"name": "x"},
        )
    assert refused.value.code == "ledger_mismatch" and not refused.value.transient
    assert t.side_effects.get(f"{run.pk}:1:0") is None  # the key was not sent again
    [entry] = rows(ToolCall, tenant_a, run=run)
    assert (entry.tool, entry.status, entry.sends) == (recorded_tool, "intent", 1)


def test_a_recorded_outcome_is_not_handed_to_a_different_call(start, admin, tenant_a):
    from agents.runtime.engine import ledger
    from agents.runtime.errors import LedgerMismatch
    from agents.runtime.tools import get_tool

    run = start("effects")
    tenant, tool = str(admin.tenant.pk), get_tool("count_effect")
    first = ledger.call(
        tenant_id=tenant, run_id=run.pk, seq=1, index=0, tool=tool, arguments={"name": "x"}
    )
    assert first["key"] == f"{run.pk}:1:0"
    with pytest.raises(LedgerMismatch):
        ledger.call(
            tenant_id=tenant, run_id=run.pk, seq=1, index=0, tool=tool, arguments={"name": "z"}
        )
    assert t.side_effects[f"{run.pk}:1:0"] == 1
    [entry] = rows(ToolCall, tenant_a, run=run)
    assert (entry.arguments, entry.status, entry.sends) == ({"name": "x"}, "succeeded", 1)


def test_a_step_whose_replay_takes_another_path_fails_with_a_clear_error(
    start, step, reload, tenant_a
):
    run = start("effects", crash_after_tools=True, vary_on_retry=True)
    assert step(run).reason == "retrying"
    connection.cursor().execute("SELECT pg_sleep(0.6)")
    assert step(run).status == "failed"
    error = reload(run).error
    assert error["code"] == "ledger_mismatch"
    assert "call 0 of step 1" in error["message"]
    assert sorted(t.side_effects.values()) == [1, 1]  # nothing was sent twice


def test_with_prepared_statements_off_a_run_checkpoints_every_step_the_same_way(
    start, step, reload, tenant_a, settings
):
    settings.AGENTSTATE_PREPARED_STATEMENTS = False  # behind an old transaction-mode pooler
    run = start("three_steps")
    assert (step(run).steps, reload(run).status) == (3, "succeeded")
    assert [c.seq for c in rows(Checkpoint, tenant_a, run=run)] == [1, 2, 3]


def test_the_claim_and_every_persist_are_prepared_once_per_connection_and_reused(
    start, step, reload, tenant_a
):
    run = start("three_steps")
    assert step(run).steps == 3
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%%agents_claim_run%%'"
            " OR statement LIKE '%%agents_persist_step%%'"
        )
        prepared = {("claim" if "claim" in s else "persist"): n for s, n in cursor.fetchall()}
    assert prepared.get("claim", 0) >= 1
    assert prepared.get("persist", 0) >= 3  # one statement, planned once, run every step


def test_after_django_reconnects_the_engine_sends_on_the_new_connection(
    start, step, reload, tenant_a
):
    first = start("three_steps")
    assert step(first).steps == 3
    old = connection.connection
    connection.close()  # e.g. CONN_MAX_AGE passed, or the server dropped the connection
    second = start("three_steps")
    assert (step(second).steps, reload(second).status) == (3, "succeeded")
    assert (
        connection.connection is not old
        and store._thread.cursor.connection is connection.connection
    )


def test_one_lease_keeper_serves_every_drive_and_wakes_early_for_a_shorter_lease(
    start, step, reload, admin
):
    import threading
    import uuid

    from agents.runtime.engine.heartbeat import Lease

    # A long lease held elsewhere in the process: the keeper sleeps for a third of it.
    elsewhere = Lease(tenant_id=str(admin.tenant.pk), run_id=uuid.uuid4(), worker="x", lease=600)
    elsewhere.hold(1)
    try:
        run = start("slow", seconds=1.2)
        outcome, stolen = steal_during_slow_step(run, step, admin, tries=4)
    finally:
        elsewhere.release()
    assert stolen == [None] * 4
    assert outcome["r"].status == "succeeded"
    for _ in range(3):
        assert step(start("three_steps")).steps == 3
    names = [t.name for t in threading.enumerate()]
    assert [n for n in names if n.startswith("lease")] == ["lease-keeper"]  # no thread a drive


def test_a_step_sees_the_state_its_checkpoint_stores_whether_the_run_went_on_or_resumed(
    start, step, reload
):
    went_on, resumed = start("shapes"), start("shapes")
    assert step(went_on).steps == 2  # both steps in one drive, in this process
    assert step(resumed, slice_seconds=0).steps == 1  # back to the queue after the first
    assert step(resumed).steps == 1  # the second step, from the checkpoint
    expected = {"pair": [1, 2], "keys": ["1"], "when": ["str", "2026-11-29 12:00:00"]}
    assert reload(went_on).output == reload(resumed).output == expected


def test_a_run_whose_worker_stopped_beating_is_taken_back_before_its_lease_expires(
    start, step, reload, admin, tenant_a, enqueued, settings
):
    from agents.runtime.sweeps import recover

    settings.AGENTSTATE_LIVENESS_SECONDS = 0.3
    run = start("three_steps")
    # A worker that claimed with a long lease and died before its keeper ever said it lives.
    store.claim(tenant_id=str(tenant_a.pk), run_id=run.pk, worker="gone:1", lease_seconds=600)
    assert recover()["lost_leases"] == 0, "a run claimed this instant is left to its worker"
    connection.cursor().execute("SELECT pg_sleep(0.4)")
    assert recover()["lost_leases"] == 1
    assert enqueued[-1]["run_id"] == run.pk
    taken = reload(run)
    assert (taken.status, taken.lease_owner) == ("queued", "")
    assert taken.lost_at is not None
    [lost] = rows(StepAttempt, tenant_a, run=run)
    assert (lost.outcome, lost.worker, lost.error_code) == ("lost", "gone:1", "worker_lost")
    assert lost.duration_ms >= 300, "the lost attempt says how long it ran"
    assert step(run, worker="alive").status == "succeeded"
    assert reload(run).lost_at is None
    with tenant_scope(tenant_a.pk):
        kinds = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("kind", "data"))
    lost_event = next(data for kind, data in kinds if kind == "run.lost")
    assert (lost_event["worker"], lost_event["why"], lost_event["step"]) == (
        "gone:1",
        "worker_gone",
        "one",
    )
    recovered = [data for kind, data in kinds if kind == "step.started" and data.get("recovered")]
    assert len(recovered) == 1 and recovered[0]["worker"] == "alive"


def test_a_worker_that_keeps_beating_keeps_its_run_however_long_its_step(
    start, reload, tenant_a, settings
):
    from agents.runtime import liveness
    from agents.runtime.sweeps import recover
    from core.redis_client import client

    settings.AGENTSTATE_LIVENESS_SECONDS = 0.3
    run = start("three_steps")
    store.claim(tenant_id=str(tenant_a.pk), run_id=run.pk, worker="busy:1", lease_seconds=600)
    client().set(liveness.key("busy:1"), "1", ex=60)
    try:
        connection.cursor().execute("SELECT pg_sleep(0.4)")
        assert recover()["lost_leases"] == 0
        assert reload(run).lease_owner == "busy:1"
    finally:
        client().delete(liveness.key("busy:1"))


def test_the_lease_keeper_says_the_process_is_alive_while_it_holds_runs(start, step, settings):
    import threading

    from agents.runtime import liveness
    from core.redis_client import client

    run = start("slow", seconds=0.5)
    client().delete(liveness.key("keeper-test:1"))
    worker = threading.Thread(target=in_thread(lambda: step(run, worker="keeper-test:1")))
    worker.start()
    try:
        wait_until(
            lambda: client().get(liveness.key("keeper-test:1")),
            timeout=2,
            what="the keeper to set the liveness key while the step runs",
        )
        ttl = client().pttl(liveness.key("keeper-test:1"))
        assert 0 < ttl <= settings.AGENTSTATE_LIVENESS_SECONDS * 1000
    finally:
        worker.join()


def test_a_claim_that_raises_is_written_on_the_run_retried_with_backoff_then_failed(
    start, step, reload, tenant_a, enqueued
):
    # A trigger that refuses this worker's claim stands for a bug or a broken row.
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'broken row'; END $$;"
            " CREATE TRIGGER test_refuse_claim BEFORE UPDATE ON agents_run FOR EACH ROW"
            " WHEN (NEW.lease_owner = 'doomed') EXECUTE FUNCTION test_refuse_claim()"
        )
    try:
        run = start("three_steps")
        result = step(run, worker="doomed")
        assert (result.claimed, result.status, result.reason) == (False, "queued", "claim_failed")
        held = reload(run)
        assert (held.status, held.lease_owner, held.error["code"]) == ("queued", "", "claim_failed")
        assert "broken row" in held.error["message"]
        assert held.not_before > timezone.now(), "held back, not hammered"
        assert enqueued[-1]["run_id"] == run.pk
        [attempt] = rows(StepAttempt, tenant_a, run=run)
        assert (attempt.outcome, attempt.error_code) == ("retrying", "claim_failed")
        assert "broken row" in attempt.traceback
        for _ in range(4):
            with tenant_scope(tenant_a.pk):
                Run.objects.filter(pk=run.pk).update(not_before=None)
            last = step(run, worker="doomed")
        assert last.status == "failed"
        failed = reload(run)
        assert (failed.status, failed.error["code"]) == ("failed", "claim_failed")
        assert len(rows(StepAttempt, tenant_a, run=run)) == 5
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER test_refuse_claim ON agents_run; DROP FUNCTION test_refuse_claim()"
            )


def test_an_engine_error_between_steps_releases_the_run_and_is_retried_then_failed(
    start, step, reload, tenant_a, enqueued, monkeypatch
):
    from agents.runtime.engine import runner

    def broken(self, agent):
        raise KeyError("checkpoint state lacks 'messages'")

    monkeypatch.setattr(runner._Driver, "_load_state", broken)
    run = start("three_steps")
    result = step(run)
    assert (result.status, result.reason) == ("queued", "engine_error")
    held = reload(run)
    assert (held.status, held.lease_owner, held.error["code"]) == ("queued", "", "engine_error")
    [attempt] = rows(StepAttempt, tenant_a, run=run)
    assert attempt.outcome == "retrying" and "KeyError" in attempt.traceback
    for _ in range(4):
        with tenant_scope(tenant_a.pk):
            Run.objects.filter(pk=run.pk).update(not_before=None)
        result = step(run)
    assert result.status == "failed"
    assert reload(run).error["code"] == "engine_error"
