"""Durability, tested by killing things: real Celery workers, real PostgreSQL and Redis.

Each test runs the demo refund desk, a tool-calling agent ($40, below the approval threshold:
model (LLM) → tools (billing_history) → model → tools (issue_refund, the payment provider) →
model (the reply)) and asserts afterwards that the run succeeded, its checkpoints have no gap
and no duplicate, each step succeeded exactly once, one reply was written, and the payment
provider made exactly one refund.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from agents.demo.models import DemoRefund
from agents.runtime import selectors
from agents.runtime.models import AgentSession, Checkpoint, Message, Run, StepAttempt
from agents.runtime.queue import enqueue_run
from agents.runtime.services import run_start
from config import embedded
from tenants.scope import tenant_scope
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEPS = ["model", "tools", "model", "tools", "model"]
REFUND_STEP_SEQ = 4  # the second tools step calls issue_refund


def start_refund(principal, *, amount: str = "40") -> Run:
    with tenant_scope(principal.tenant.pk):
        session = AgentSession.objects.create(
            tenant=principal.tenant, agent="refund_desk", user=principal.user
        )
        return run_start(
            principal=principal,
            agent="refund_desk",
            session=session,
            input={"customer": "carol", "message": f"Please refund ${amount} for order A-1002"},
        )


def load(run: Run) -> Run:
    with tenant_scope(run.tenant_id):
        return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)


def wait_for_status(run: Run, statuses: set[str], timeout: float = 60) -> Run:
    return wait_until(
        lambda: (r := load(run)).status in statuses and r,
        timeout=timeout,
        what=f"run {run.pk} to reach {statuses}",
    )


def assert_exactly_once(run: Run) -> None:
    run = load(run)
    assert run.status == "succeeded", run.error
    with tenant_scope(run.tenant_id):
        seqs = list(
            Checkpoint.objects.for_tenant(run.tenant_id)
            .filter(run=run)
            .order_by("seq")
            .values_list("seq", "step")
        )
        succeeded = [
            a.seq for a in selectors.run_timeline(run)["attempts"] if a.outcome == "succeeded"
        ]
        # Tool calls are transcript messages too (assistant, empty content): count replies.
        replies = (
            Message.objects.for_tenant(run.tenant_id)
            .filter(session_id=run.session_id, role="assistant")
            .exclude(content="")
            .count()
        )
    assert seqs == list(enumerate(STEPS, start=1)), "checkpoints must have no gap, no duplicate"
    assert sorted(succeeded) == list(range(1, len(STEPS) + 1)), "each step succeeded exactly once"
    assert replies == 1, "the reply was sent once"
    refunds = list(DemoRefund.objects.filter(idempotency_key__startswith=str(run.pk)))
    assert len(refunds) == 1, "exactly one refund at the payment provider"
    assert refunds[0].amount_cents == 4000
    assert f"(refund re_{refunds[0].pk})" in run.output["answer"]


def test_a_run_on_a_real_worker_refunds_once_and_running_it_again_changes_nothing(
    cluster, customer
):
    cluster.worker("w1")
    run = start_refund(customer)
    wait_for_status(run, {"succeeded", "failed"})
    assert_exactly_once(run)
    before = load(run).version
    enqueue_run(tenant_id=run.tenant_id, run_id=run.pk)  # the same run id, twice more
    enqueue_run(tenant_id=run.tenant_id, run_id=run.pk)
    time.sleep(1.5)
    assert load(run).version == before
    assert_exactly_once(run)
    assert DemoRefund.objects.get().requests == 1


def test_a_worker_killed_during_the_llm_call_is_replaced_and_nothing_repeats(cluster, customer):
    victim = cluster.worker("slow", LLM_SCRIPTED_DELAY_SECONDS="30")
    cluster.beat()
    run = start_refund(customer)
    wait_until(
        lambda: load(run).current_step == "model" and load(run).status == "running",
        timeout=30,
        what="the first model step (LLM call) to start",
    )
    time.sleep(0.5)
    victim.kill9()
    cluster.worker("rescuer")
    wait_for_status(run, {"succeeded", "failed"}, timeout=60)
    assert_exactly_once(run)
    with tenant_scope(run.tenant_id):
        lost = StepAttempt.objects.for_tenant(run.tenant_id).get(run=run, outcome="lost")
    assert (lost.seq, lost.step) == (1, "model") and lost.worker.endswith(str(victim.pid))


def test_a_worker_killed_after_the_refund_returned_but_before_its_outcome_was_recorded(
    cluster, customer, failpoints
):
    failpoints("tool.after_call.issue_refund")
    cluster.beat()
    victim = cluster.worker("victim")
    run = start_refund(customer)
    wait_until(lambda: not victim.alive(), timeout=30, what="the failpoint to kill the worker")
    cluster.worker("rescuer")
    wait_for_status(run, {"succeeded", "failed"}, timeout=60)
    assert_exactly_once(run)
    # The intent had no outcome, so the call went out again with the same key; the
    # provider recognised the key and refunded once.
    assert DemoRefund.objects.get().requests == 2


def test_a_worker_killed_after_the_refund_step_but_before_its_checkpoint_committed(
    cluster, customer, failpoints
):
    cluster.beat()
    # Failpoints name steps, and both tools steps are "tools": arm it once the first one (the
    # billing lookup) is checkpointed, while the model (slowed down) decides the refund.
    victim = cluster.worker("victim", LLM_SCRIPTED_DELAY_SECONDS="2")
    run = start_refund(customer)
    wait_until(lambda: load(run).step_seq >= 2, timeout=30, what="the billing lookup")
    assert load(run).step_seq == 2, "the failpoint must be armed before the refund step"
    failpoints("step.before_persist.tools")
    wait_until(lambda: not victim.alive(), timeout=30, what="the failpoint to kill the worker")
    assert load(run).step_seq == REFUND_STEP_SEQ - 1  # the refund's checkpoint was never written
    cluster.worker("rescuer")
    wait_for_status(run, {"succeeded", "failed"}, timeout=60)
    assert_exactly_once(run)
    # The outcome was in the ledger: the replayed step got it without calling the provider.
    assert DemoRefund.objects.get().requests == 1


def test_a_worker_killed_right_after_claiming_the_lease_is_recovered_after_expiry(
    cluster, customer, failpoints
):
    failpoints("run.claimed")
    cluster.beat()
    victim = cluster.worker("victim")
    run = start_refund(customer)
    wait_until(lambda: not victim.alive(), timeout=30, what="the failpoint to kill the worker")
    held = load(run)
    assert held.status == "running" and held.lease_owner.endswith(str(victim.pid))
    cluster.worker("rescuer")
    wait_for_status(run, {"succeeded", "failed"}, timeout=60)
    assert_exactly_once(run)


def test_two_workers_racing_for_the_same_runs_execute_each_step_once(cluster, customer):
    cluster.worker("racer-1")
    cluster.worker("racer-2")
    runs = [start_refund(customer) for _ in range(8)]
    for run in runs:  # every run is on the queue three times: one claim wins each slice
        enqueue_run(tenant_id=run.tenant_id, run_id=run.pk)
        enqueue_run(tenant_id=run.tenant_id, run_id=run.pk)
    for run in runs:
        wait_for_status(run, {"succeeded", "failed"}, timeout=90)
    for run in runs:
        assert_exactly_once(run)
    assert DemoRefund.objects.count() == 8
    assert set(DemoRefund.objects.values_list("requests", flat=True)) == {1}


def test_postgresql_stopped_and_restarted_mid_run_the_run_resumes_when_it_returns(
    cluster, customer
):
    cluster.worker("w1", LLM_SCRIPTED_DELAY_SECONDS="3")
    cluster.beat()
    run = start_refund(customer)
    wait_until(
        lambda: load(run).current_step == "model" and load(run).status == "running",
        timeout=30,
        what="the first model step to start",
    )
    connection.close()
    assert embedded.stop_postgres()
    try:
        time.sleep(4)  # the LLM call ends while the database is down: the commit fails
    finally:
        embedded.ensure_postgres()
    wait_for_status(run, {"succeeded", "failed"}, timeout=90)
    assert_exactly_once(run)
