"""The console's actions: each one works, is audited, and is fenced on the run's version."""

from __future__ import annotations

import pytest

from agents.console import bulk
from agents.runtime import repairs as actions
from agents.runtime import services
from agents.runtime.errors import ActionNotAllowed, InvalidState, RunChanged
from agents.runtime.models import Checkpoint, Run, StepAttempt, ToolCall
from approvals.models import ApprovalRequest
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests.agents import agents_for_tests
from tests.agents.console_helpers import BROKEN, ago, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fixed_shop():
    BROKEN["charge"] = False
    yield
    BROKEN["charge"] = False


@pytest.fixture
def act(admin, django_capture_on_commit_callbacks):
    """Call an action as the admin, in the admin's tenant, with the run's current version
    (the on-commit enqueue runs, into the `enqueued` list)."""

    def call(fn, run: Run, version: int | None = None, **kwargs):
        with django_capture_on_commit_callbacks(execute=True), tenant_scope(admin.tenant.pk):
            fresh = Run.objects.for_tenant(admin.tenant).get(pk=run.pk)
            return fn(principal=admin, run=fresh, version=version or fresh.version, **kwargs)

    return call


def audit_actions(run: Run) -> list[str]:
    with tenant_scope(run.tenant_id):
        return list(
            AuditEvent.objects.for_tenant(run.tenant_id)
            .filter(target_id=str(run.pk))
            .order_by("id")
            .values_list("action", flat=True)
        )


def finished_shop_run(start, step, reload) -> Run:
    run = start("console_shop", item="desk")
    step(run)
    run = reload(run)
    assert run.status == "succeeded", run.error
    return run


def effects() -> int:
    return sum(agents_for_tests.side_effects.values())


def test_retrying_a_run_whose_retries_ran_out_runs_the_failed_step_again(
    start, step, reload, act, enqueued
):
    BROKEN["charge"] = True
    run = start("console_shop")
    step(run)
    step(run)  # the second attempt exhausts the budget of 2
    run = reload(run)
    assert run.status == "failed" and run.error["code"] == "retries_exhausted"
    BROKEN["charge"] = False
    retried = act(actions.run_retry, run)
    assert (retried.status, retried.attempts, retried.error) == ("queued", 0, None)
    assert enqueued[-1]["run_id"] == run.pk
    step(run)
    assert reload(run).status == "succeeded"
    assert "run.console.retried" in audit_actions(run)


def test_resuming_a_run_whose_worker_died_continues_from_the_last_checkpoint(
    tenant_a, step, reload, act, enqueued
):
    run = make_run(tenant_a, status="running", lease_owner="dead:1", lease_expires_at=ago(5))
    resumed = act(actions.run_resume, run)
    assert (resumed.status, resumed.lease_owner) == ("queued", "")
    with tenant_scope(tenant_a.pk):
        lost = StepAttempt.objects.for_tenant(tenant_a).get(run=run)
    assert (lost.outcome, lost.seq, lost.worker) == ("lost", 2, "dead:1")
    step(run)
    done = reload(run)
    assert done.status == "succeeded" and done.output == {"item": "lamp", "qty": 1}
    assert "run.console.resumed" in audit_actions(run)


def test_resuming_a_run_a_live_worker_holds_is_refused(tenant_a, act):
    run = make_run(tenant_a, status="running", lease_owner="w:1", lease_expires_at=ago(-60))
    with pytest.raises(ActionNotAllowed, match="force-release"):
        act(actions.run_resume, run)


def test_cancelling_a_waiting_run_cancels_it_and_its_pending_request(tenant_a, act, reload):
    run = make_run(tenant_a, status="waiting_approval", current_step="done")
    with tenant_scope(tenant_a.pk):
        request = ApprovalRequest.objects.create(
            tenant=tenant_a, run=run, checkpoint_seq=1, step="ask", action="refund"
        )
    cancelled = act(services.run_cancel, run)
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    with tenant_scope(tenant_a.pk):
        assert ApprovalRequest.objects.get(pk=request.pk).status == "cancelled"
    assert "run.console.cancelled" in audit_actions(run)


def test_cancelling_a_run_a_live_worker_holds_asks_it_to_stop_without_fencing_it(tenant_a, act):
    run = make_run(tenant_a, status="running", lease_owner="w:1", lease_expires_at=ago(-60))
    asked = act(services.run_cancel, run)
    assert (asked.status, asked.cancel_requested, asked.version) == ("running", True, run.version)


def test_force_releasing_a_lease_queues_the_run_and_fences_the_old_worker(
    tenant_a, step, reload, act, enqueued
):
    run = make_run(tenant_a, status="running", lease_owner="w:1", lease_expires_at=ago(-60))
    released = act(actions.run_release_lease, run)
    assert (released.status, released.lease_owner) == ("queued", "")
    assert released.version == run.version + 1  # the old worker's writes now match nothing
    assert enqueued[-1]["run_id"] == run.pk
    step(run, worker="w:2")
    assert reload(run).status == "succeeded"
    assert "run.console.lease_released" in audit_actions(run)


def test_marking_a_run_resolved_records_who_and_why(tenant_a, act, admin):
    run = make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    resolved = act(actions.run_resolve, run, note="Refunded by hand")
    assert resolved.resolved_at is not None
    assert (resolved.resolved_by, resolved.resolution_note) == (admin.user, "Refunded by hand")
    assert "run.console.resolved" in audit_actions(run)


def test_editing_the_state_replaces_the_latest_checkpoints_state_and_audits_both(
    tenant_a, act, step, reload
):
    run = make_run(tenant_a, status="failed", current_step="done")
    edited = act(actions.run_edit_state, run, state='{"item": "chair", "qty": 3}')
    assert edited.version == run.version + 1
    with tenant_scope(tenant_a.pk):
        cp = Checkpoint.objects.for_tenant(tenant_a).get(run=run, seq=1)
        event = AuditEvent.objects.for_tenant(tenant_a).get(action="run.console.state_edited")
    assert cp.state == {"item": "chair", "qty": 3}
    assert event.before["state"] == {"item": "lamp", "qty": 1}
    assert event.after["state"] == {"item": "chair", "qty": 3}
    act(actions.run_retry, run)
    step(run)
    assert reload(run).output == {"item": "chair", "qty": 3}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ('{"item": "chair", "qty": 0}', "qty: 0 is less than the minimum of 1"),
        ('{"item": "chair"}', "'qty' is a required property"),
        ("[1, 2]", "must be a JSON object"),
        ('{"item": ', "Line 1, column 10: A value was expected here"),
    ],
)
def test_state_that_fails_the_agents_schema_is_refused_and_nothing_is_saved(
    tenant_a, act, reload, raw, problem
):
    run = make_run(tenant_a, status="failed")
    with pytest.raises(InvalidState) as refused:
        act(actions.run_edit_state, run, state=raw)
    assert any(problem in p for p in refused.value.problems), refused.value.problems
    assert refused.value.status == 400
    assert reload(run).version == run.version
    with tenant_scope(tenant_a.pk):
        assert Checkpoint.objects.for_tenant(tenant_a).get(run=run).state["qty"] == 1


def test_replaying_as_a_new_run_does_not_repeat_recorded_side_effects(
    start, step, reload, act, enqueued
):
    run = finished_shop_run(start, step, reload)
    assert effects() == 1
    new = act(actions.run_replay, run, seq=1, as_new_run=True)
    assert new.pk != run.pk and (new.status, new.step_seq, new.current_step) == (
        "queued",
        1,
        "charge",
    )
    step(new)
    replayed = reload(new)
    assert replayed.status == "succeeded", replayed.error
    assert effects() == 1  # the ledger answered the charge
    with tenant_scope(run.tenant_id):
        assert [c.seq for c in Checkpoint.objects.filter(run=new).order_by("seq")] == [1, 2, 3]
    assert "run.console.replayed" in audit_actions(run)
    assert "run.started" in audit_actions(new)
    assert reload(run).status == "succeeded"  # the original is untouched


def test_replaying_as_a_new_run_repeats_side_effects_only_when_asked(
    start, step, reload, act, enqueued
):
    run = finished_shop_run(start, step, reload)
    new = act(actions.run_replay, run, seq=1, as_new_run=True, repeat_side_effects=True)
    step(new)
    assert reload(new).status == "succeeded"
    assert effects() == 2


def test_rewinding_a_run_replays_it_from_the_checkpoint_without_repeating_side_effects(
    start, step, reload, act, enqueued
):
    run = finished_shop_run(start, step, reload)
    rewound = act(actions.run_replay, run, seq=1, as_new_run=False)
    assert (rewound.status, rewound.step_seq, rewound.output) == ("queued", 1, None)
    with tenant_scope(run.tenant_id):
        assert list(Checkpoint.objects.filter(run=run).values_list("seq", flat=True)) == [1]
    step(run)
    again = reload(run)
    assert again.status == "succeeded"
    assert effects() == 1
    with tenant_scope(run.tenant_id):
        seqs = list(
            Checkpoint.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)
        )
    assert seqs == [1, 2, 3]
    assert "run.console.rewound" in audit_actions(run)


def test_a_rewind_keeps_the_history_of_the_steps_it_undid(start, step, reload, act, enqueued):
    from agents.runtime import selectors
    from agents.runtime.models import RunEventLog

    run = finished_shop_run(start, step, reload)
    with tenant_scope(run.tenant_id):
        before = list(RunEventLog.objects.filter(run=run).values_list("seq", "kind", "data"))
    act(actions.run_replay, run, seq=1, as_new_run=False)
    step(run)
    with tenant_scope(run.tenant_id):
        after = list(
            RunEventLog.objects.filter(run=run).order_by("seq").values_list("seq", "kind", "data")
        )
        attempts = selectors.run_timeline(reload(run))["attempts"]
    assert all(event in after for event in before)  # every event shown before stays, unchanged
    seqs = [seq for seq, _, _ in after]
    assert seqs == sorted(set(seqs)) and seqs == list(range(1, len(seqs) + 1))  # no gap
    finished = [(d["step_seq"], d["step"]) for _, kind, d in after if kind == "step.finished"]
    assert finished == [(1, "pick"), (2, "charge"), (3, "done"), (2, "charge"), (3, "done")]
    assert [(a.seq, a.outcome) for a in attempts] == [
        (1, "succeeded"),
        (2, "succeeded"),
        (2, "succeeded"),
        (3, "succeeded"),
        (3, "succeeded"),
    ]


def test_rewinding_with_side_effects_chosen_makes_the_recorded_calls_again(
    start, step, reload, act, enqueued
):
    run = finished_shop_run(start, step, reload)
    act(actions.run_replay, run, seq=1, as_new_run=False, repeat_side_effects=True)
    step(run)
    assert reload(run).status == "succeeded"
    assert effects() == 2
    with tenant_scope(run.tenant_id):
        assert ToolCall.objects.filter(run=run).count() == 1


def test_rewinding_past_steps_that_packed_context_replaces_their_records(
    start, step, reload, act, enqueued
):
    # Issue 17: the packed-context records of undone steps stayed, and the re-run step's own
    # record collided with them (IntegrityError at every persist, the run stuck "running").
    from agents.runtime.models import PackedContext
    from tests.agents import tool_agents_for_tests  # noqa: F401  (registers tool_desk)

    run = start("tool_desk", message="refund A-1002")
    for _ in range(10):
        if step(run).status == "succeeded":
            break
    with tenant_scope(run.tenant_id):
        packed_before = sorted(PackedContext.objects.filter(run=run).values_list("seq", flat=True))
    act(actions.run_replay, run, seq=1, as_new_run=False)
    with tenant_scope(run.tenant_id):
        assert list(PackedContext.objects.filter(run=run).values_list("seq", flat=True)) == [1]
    for _ in range(10):
        if step(run).status == "succeeded":
            break
    assert reload(run).status == "succeeded"
    with tenant_scope(run.tenant_id):
        packed_after = sorted(PackedContext.objects.filter(run=run).values_list("seq", flat=True))
    assert packed_after == packed_before == [1, 3, 5]


def test_replaying_from_a_checkpoint_the_run_does_not_have_is_refused(tenant_a, act):
    run = make_run(tenant_a, status="failed")
    with pytest.raises(Exception, match="no checkpoint 7"):
        act(actions.run_replay, run, seq=7, as_new_run=True)


STALE = [
    (actions.run_retry, {}),
    (actions.run_resume, {}),
    (services.run_cancel, {}),
    (actions.run_release_lease, {}),
    (actions.run_resolve, {"note": "x"}),
    (actions.run_edit_state, {"state": '{"item": "a", "qty": 1}'}),
    (actions.run_replay, {"seq": 1, "as_new_run": True}),
    (actions.run_replay, {"seq": 1, "as_new_run": False}),
]


@pytest.mark.parametrize(("fn", "kwargs"), STALE, ids=lambda v: getattr(v, "__name__", ""))
def test_an_action_on_a_version_that_changed_meanwhile_is_refused_and_changes_nothing(
    tenant_a, act, reload, fn, kwargs
):
    run = make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    with pytest.raises(RunChanged) as refused:
        act(fn, run, version=run.version + 5, **kwargs)
    assert refused.value.status == 409
    after = reload(run)
    assert (after.status, after.version, after.resolved_at) == ("failed", run.version, None)
    assert audit_actions(run) == []


def test_two_admins_resuming_the_same_run_produce_one_resume_and_one_conflict(
    tenant_a, act, reload, enqueued
):
    run = make_run(tenant_a, status="running", lease_owner="dead:1", lease_expires_at=ago(5))
    act(actions.run_resume, run, version=run.version)
    with pytest.raises(RunChanged):
        act(actions.run_resume, run, version=run.version)
    assert audit_actions(run).count("run.console.resumed") == 1


def test_a_bulk_action_applies_to_each_run_and_refuses_only_the_stale_ones(tenant_a, admin):
    fresh = make_run(tenant_a, status="failed")
    stale = make_run(tenant_a, status="failed")
    with tenant_scope(tenant_a.pk):
        items = [(fresh, fresh.version), (stale, stale.version + 1)]
        outcomes = bulk.runs_bulk(principal=admin, action="resolve", items=items)
        assert [o.ok for o in outcomes] == [True, False]
        rows = {r.pk: r for r in Run.objects.for_tenant(tenant_a)}
    assert rows[fresh.pk].resolved_at is not None
    assert rows[stale.pk].resolved_at is None
