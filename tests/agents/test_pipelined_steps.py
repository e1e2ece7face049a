"""A step that goes on to the next is persisted while the next step's Python runs: nothing
the next step does reaches outside the process before its predecessor has committed, and a
step whose predecessor did not go on is discarded (agents/runtime/engine/runner.py)."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.db import connection

from agents.runtime.engine import runner, store, wire
from agents.runtime.models import Checkpoint, StepAttempt, ToolCall
from tenants.scope import tenant_scope
from tests.agents import agents_for_tests as t

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _every_step_runs_ahead(request, monkeypatch):
    """However long a step takes on this machine, the next runs ahead of its commit (except
    where a test is about that limit)."""
    if "took_a_while" not in request.node.name:
        monkeypatch.setattr(runner, "RUN_AHEAD_MAX_MS", 60_000.0)


def rows(model, tenant, **filters):
    with tenant_scope(tenant.pk):
        return list(model.objects.for_tenant(tenant).filter(**filters).order_by("pk"))


def test_a_tool_the_next_step_calls_runs_only_once_its_predecessor_is_committed(
    start, step, reload
):
    run = start("ahead")
    result = step(run)
    assert result.status == "succeeded", (result, reload(run).error)
    # Another session saw step one's checkpoint when step two's tool ran.
    assert reload(run).output == {"seen": 1}
    assert t.calls["ahead.peek"] == 1 and sum(t.side_effects.values()) == 1


def test_a_query_the_next_step_makes_waits_for_its_predecessor_and_sees_it(start, step, reload):
    run = start("ahead", how="orm")
    result = step(run)  # no "another command is already in progress"
    assert result.status == "succeeded", reload(run).error["message"]
    assert reload(run).output == {"seen": 1}


def test_a_step_ahead_of_a_cancelled_predecessor_is_discarded_before_it_reaches_out(
    start, step, reload, tenant_a
):
    run = start("ahead", how="cancel")
    result = step(run)
    assert (result.status, result.steps) == ("cancelled", 1)
    assert t.calls["ahead.second"] == 1  # step two ran ahead ...
    assert t.calls["ahead.peek"] == 0 and t.side_effects == {}  # ... and called no tool
    assert t.calls["ahead.second_done"] == 0
    assert rows(ToolCall, tenant_a, run=run) == []
    assert [c.step for c in rows(Checkpoint, tenant_a, run=run)] == ["first"]


def test_a_step_that_catches_every_exception_still_stops_when_its_predecessor_did_not_go_on(
    start, step, reload
):
    run = start("ahead", how="swallow")
    assert step(run).status == "succeeded"  # goes on normally ...
    assert t.calls["ahead.swallowed"] == 0 and sum(t.side_effects.values()) == 1
    t.calls.clear()
    t.side_effects.clear()
    # ... but when step one is superseded, `except Exception` cannot keep step two going.
    run = start("ahead", how="swallow")
    from agents.runtime.engine.runner import _Driver

    claim = store.claim(
        tenant_id=str(run.tenant_id), run_id=run.pk, worker="stale", lease_seconds=60
    )
    with tenant_scope(run.tenant_id):  # another worker took the run over meanwhile
        type(run).objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(
            version=claim.version + 1, lease_owner="fresh"
        )
    result = _Driver(claim, worker="stale", lease=60).run(slice_seconds=60)
    assert (result.reason, result.steps) == ("fenced", 0)
    assert t.calls["ahead.second"] == 1  # step two ran ahead, and reached no tool
    assert t.calls["ahead.swallowed"] == 0 and t.side_effects == {}
    assert t.calls["ahead.second_done"] == 0


def test_a_persist_that_fails_while_the_next_step_runs_fails_the_run_at_the_right_step(
    start, step, reload, tenant_a
):
    run = start("ahead", how="unstorable")
    result = step(run)
    assert (result.status, result.reason) == ("failed", "persist_failed")
    run = reload(run)
    assert run.error["code"] == "persist_failed" and run.lease_owner == ""
    [failed] = rows(StepAttempt, tenant_a, run=run, outcome="failed")
    assert (failed.step, failed.seq) == ("first", 1)
    assert "UntranslatableCharacter" in failed.traceback or "\\u0000" in failed.traceback
    assert rows(Checkpoint, tenant_a, run=run) == []
    assert t.calls["ahead.peek"] == 0 and t.side_effects == {}


def test_the_persist_is_prepared_again_when_the_session_forgot_it(start, step, reload):
    run = start("ahead", how="deallocate")
    assert step(run).status == "succeeded"
    assert reload(run).step_seq == 3
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%agents_persist_step%"],
        )
        assert cursor.fetchone()[0] == 1


def test_a_persist_parameter_is_refused_rather_than_cut_or_guessed():
    statement = wire.Statement("SELECT %(a)s, %(b)s, %(a)s")
    assert statement.text == b"SELECT $1, $2, $1"
    at = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
    assert statement.values({"a": "x", "b": at}) == [b"x", b"2026-12-07T12:00:00+00:00"]
    assert statement.values({"a": 1.5, "b": None}) == [b"1.5", None]
    with pytest.raises(psycopg.DataError, match="NUL"):
        statement.values({"a": "cut\x00here", "b": 1})
    with pytest.raises(psycopg.DataError, match="naive"):
        statement.values({"a": 1, "b": dt.datetime(2026, 12, 7)})
    with pytest.raises(psycopg.ProgrammingError):
        statement.values({"a": object(), "b": 1})


def test_a_session_that_has_the_persist_prepared_already_is_not_refused(start, step, reload):
    first = start("three_steps")
    assert step(first).status == "succeeded"  # the session has the statement now
    wire._by_connection.clear()  # ... and this process forgot it did (as after a fork)
    second = start("three_steps")
    result = step(second)
    assert (result.status, result.reason) == ("succeeded", "")
    assert reload(second).step_seq == 3


def test_after_a_step_that_took_a_while_the_next_waits_for_its_commit_and_its_event(
    start, step, reload
):
    from agents.runtime import progress

    progress.subscribe(t.events.append)
    t.events.clear()
    try:
        run = start("ahead", how="slow")
        assert step(run).status == "succeeded"
    finally:
        progress.unsubscribe(t.events.append)
    # Step one slept past RUN_AHEAD_MAX_MS: step two began once it had committed (another
    # session saw it) and its step.finished event had gone out, not a step later.
    assert reload(run).output == {"seen": 1}
    assert t.calls["ahead.finished_at_second"] == 1
