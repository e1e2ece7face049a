"""Rewinding a run (the console's "Replay from checkpoint N", rewinding this run) removes or
replaces what the undone steps recorded, keeps what is history or was done in the world, and
lets the run finish again. One test per kind of row a step writes, each rewound to every
checkpoint of an agent that writes them all (tests/agents/agents_for_tests.py, `every_row`),
then the demo refund desk rewound to each of its checkpoints. The table these tests hold is in
docs/engine.md, "What a rewind keeps and removes"."""

from __future__ import annotations

import datetime as dt
import io
import time
import urllib.error
import urllib.request
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from django.test import RequestFactory
from django.utils import timezone

from agents.conversations.packing.build import load_thread
from agents.conversations.threads import thread_state
from agents.demo import payments as demo_payments
from agents.runtime import repairs as actions
from agents.runtime import selectors, services
from agents.runtime.errors import ActionNotAllowed, RunChanged
from agents.runtime.models import (
    AgentSession,
    Checkpoint,
    Message,
    PackedContext,
    Run,
    RunEventLog,
    ToolCall,
)
from agents.runtime.services import conversation_start
from approvals.models import ApprovalPolicy, ApprovalRequest
from approvals.services import approval_decide
from core.tokens import tokenizer_for
from memory.models import MemoryFact
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests import factories
from tests.agents import agents_for_tests
from tests.demo_refunds import demo_refunds

pytestmark = pytest.mark.django_db

# every_row's checkpoints: 1 remember, 2 labour, 3 ask_manager (waits for a manager), 4 settle
# (ends the run, so there is nothing to rewind to after it).
STEPS = {1: "remember", 2: "labour", 3: "ask_manager", 4: "settle"}
POINTS = [0, 1, 2, 3]
DONE = ("succeeded", "failed", "cancelled")


@pytest.fixture(autouse=True)
def _no_embedding_model(settings):
    # Memory facts are written either way; embedding them is a worker's job, not this test's.
    settings.MEMORY_EMBEDDING_PROVIDER = "none"


@pytest.fixture
def converse(admin, enqueued):
    def start(agent: str, message: str, **run_input: Any) -> Run:
        with tenant_scope(admin.tenant.pk):
            return conversation_start(
                principal=admin, agent=agent, message=message, input=run_input
            )

    return start


@pytest.fixture
def manager(tenant_a):
    return factories.principal_for(factories.make_member(tenant_a, "manager"))


@pytest.fixture
def decide(manager):
    def go(run: Run, *, approve: bool = True) -> ApprovalRequest:
        with tenant_scope(run.tenant_id):
            request = ApprovalRequest.objects.for_tenant(run.tenant_id).get(
                run=run, status="pending"
            )
            return approval_decide(principal=manager, request=request, approve=approve)

    return go


@pytest.fixture
def drive(step, reload, decide, django_capture_on_commit_callbacks):
    """Run the run one step per drive, each step committed as on a worker (its on-commit
    work, such as the session cache's append, runs before the next step), approving what
    waits for a manager, until it ends (or reaches one of `until`)."""

    def go(run: Run, *, approve: bool | None = True, until: tuple[str, ...] = DONE) -> Run:
        for _ in range(60):
            with django_capture_on_commit_callbacks(execute=True):
                claimed = step(run, slice_seconds=0).claimed
            run = reload(run)
            if run.status in until:
                return run
            if run.status == "waiting_approval" and approve is not None:
                with django_capture_on_commit_callbacks(execute=True):
                    decide(run, approve=approve)
            elif not claimed:
                time.sleep(0.005)  # a retry's backoff
        raise AssertionError(f"the run is still {run.status}")

    return go


@pytest.fixture
def rewind(admin, django_capture_on_commit_callbacks):
    """Rewind through the console's own action, as the admin, on the version they saw."""

    def go(run: Run, seq: int, *, repeat: bool = False, version: int | None = None) -> Run:
        with django_capture_on_commit_callbacks(execute=True), tenant_scope(admin.tenant.pk):
            fresh = Run.objects.for_tenant(admin.tenant).get(pk=run.pk)
            return actions.run_replay(
                principal=admin,
                run=fresh,
                version=version or fresh.version,
                seq=seq,
                as_new_run=False,
                repeat_side_effects=repeat,
            )

    return go


@pytest.fixture
def finished(converse, drive):
    """An every_row run that went through all its steps (a manager approved the refund)."""
    run = drive(converse("every_row", "please sort out my refund"))
    assert run.status == "succeeded", run.error
    return run


def recorded(run: Run) -> dict[str, list]:
    """Every kind of row the run's steps wrote, in a stable order."""
    tenant = run.tenant_id
    with tenant_scope(tenant):
        checkpoints = list(Checkpoint.objects.for_tenant(tenant).filter(run=run).order_by("seq"))
        user_id = AgentSession.objects.get(pk=run.session_id).user_id
        return {
            "checkpoints": [(c.id, c.seq, c.step) for c in checkpoints],
            "packed": list(
                PackedContext.objects.for_tenant(tenant)
                .filter(run=run)
                .order_by("seq", "index")
                .values_list("id", "seq", "index")
            ),
            "ledger": list(
                ToolCall.objects.for_tenant(tenant)
                .filter(run=run)
                .order_by("seq", "call_index")
                .values_list("id", "seq", "call_index", "idempotency_key", "status", "sends")
            ),
            "messages": list(
                Message.objects.for_tenant(tenant)
                .filter(session_id=run.session_id)
                .order_by("seq")
                .values_list("id", "seq", "role", "content")
            ),
            "events": list(
                RunEventLog.objects.for_tenant(tenant)
                .filter(run=run)
                .order_by("seq")
                .values_list("seq", "kind", "data")
            ),
            "attempts": [
                (a.seq, a.attempt, a.step, a.outcome)
                for a in selectors.step_attempts(run, checkpoints)
            ],
            "approvals": list(
                ApprovalRequest.objects.for_tenant(tenant)
                .filter(run=run)
                .order_by("requested_at")
                .values_list("id", "checkpoint_seq", "status")
            ),
            "memory": list(
                MemoryFact.objects.for_tenant(tenant)
                .filter(subject_id=user_id)
                .order_by("key", "created_at")
                .values_list("id", "key", "text", "valid_until")
            ),
        }


def effects() -> Counter:
    return Counter(agents_for_tests.side_effects)


def ids(rows: list[tuple]) -> set:
    return {row[0] for row in rows}


# --- the run itself -------------------------------------------------------------------------------


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_puts_the_run_back_where_the_checkpoint_left_it_and_it_finishes_again(
    finished, rewind, drive, seq
):
    output = finished.output
    rewound = rewind(finished, seq)

    assert (rewound.step_seq, rewound.current_step) == (seq, STEPS[seq + 1])
    assert (rewound.output, rewound.error, rewound.attempts, rewound.finished_at) == (
        None,
        None,
        0,
        None,
    )
    assert rewound.version > finished.version
    # Checkpoint 3 left the run waiting for a manager; any earlier one left it to go on.
    assert rewound.status == ("waiting_approval" if seq == 3 else "queued")
    with tenant_scope(finished.tenant_id):
        rewound_audit = (
            AuditEvent.objects.for_tenant(finished.tenant_id)
            .filter(target_id=str(finished.pk), action="run.console.rewound")
            .get()
        )
    assert rewound_audit.after["from_checkpoint"] == seq

    again = drive(rewound)
    assert again.status == "succeeded", again.error
    assert again.output == output  # the receipt the ledger recorded, not a new one


# --- checkpoints ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_removes_the_later_checkpoints_and_the_rerun_writes_each_once_again(
    finished, rewind, drive, seq
):
    before = recorded(finished)["checkpoints"]

    rewind(finished, seq)
    assert recorded(finished)["checkpoints"] == before[:seq]  # the same rows, untouched

    drive(finished)
    after = recorded(finished)["checkpoints"]
    assert [(s, step) for _, s, step in after] == list(STEPS.items())
    assert after[:seq] == before[:seq]
    assert not ids(after[seq:]) & ids(before)  # the undone ones were written anew


# --- packed contexts ------------------------------------------------------------------------------


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_removes_the_packed_contexts_of_the_undone_steps_and_the_rerun_packs_anew(
    finished, rewind, drive, seq
):
    before = recorded(finished)["packed"]
    assert [(s, i) for _, s, i in before] == [(1, 0), (2, 0), (2, 1), (4, 0)]
    kept = [row for row in before if row[1] <= seq]

    rewind(finished, seq)
    assert recorded(finished)["packed"] == kept

    drive(finished)  # each re-run step packs at the same (seq, index): no unique violation
    after = recorded(finished)["packed"]
    assert [(s, i) for _, s, i in after] == [(s, i) for _, s, i in before]
    assert [row for row in after if row[1] <= seq] == kept
    assert not ids(row for row in after if row[1] > seq) & ids(before)


# --- the tool-call ledger -------------------------------------------------------------------------


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_keeps_the_ledger_so_the_rerun_is_answered_and_repeats_no_side_effect(
    finished, rewind, drive, seq
):
    before = recorded(finished)["ledger"]
    assert [(s, i, status, sends) for _, s, i, _, status, sends in before] == [
        (1, 0, "succeeded", 1),
        (2, 0, "succeeded", 1),
        (2, 1, "succeeded", 1),
        (4, 0, "succeeded", 1),
    ]
    made = effects()
    assert set(made.values()) == {1}

    rewind(finished, seq)
    assert recorded(finished)["ledger"] == before

    drive(finished)
    assert recorded(finished)["ledger"] == before  # answered, not sent again
    assert effects() == made


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_with_side_effects_repeated_forgets_only_the_ledger_entries_after_the_point(
    finished, rewind, drive, seq
):
    before = recorded(finished)["ledger"]
    kept = [row for row in before if row[1] <= seq]

    rewind(finished, seq, repeat=True)
    assert recorded(finished)["ledger"] == kept

    drive(finished)
    after = recorded(finished)["ledger"]
    assert [row[1:4] for row in after] == [row[1:4] for row in before]  # same positions, keys
    assert [row for row in after if row[1] <= seq] == kept
    assert not ids(row for row in after if row[1] > seq) & ids(before)
    again = {key: 2 if s > seq else 1 for _, s, _, key, _, _ in before}
    assert effects() == Counter(again)  # made once more, only after the point


# --- transcript messages and the session cache ----------------------------------------------------


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_keeps_the_transcript_and_the_rerun_appends_what_it_says_after_it(
    finished, rewind, drive, seq
):
    before = recorded(finished)["messages"]
    said = {"remember": 1, "labour": 2, "settle": 4}
    assert [(s, role) for _, s, role, _ in before] == [
        (1, "user"),
        (2, "assistant"),
        (3, "assistant"),
        (4, "assistant"),
    ]
    assert before[2][3] == "labour: heard please sort out my refund"

    rewind(finished, seq)
    assert recorded(finished)["messages"] == before  # what the person was shown stays

    drive(finished)
    after = recorded(finished)["messages"]
    assert after[: len(before)] == before
    undone = [content for _, _, _, content in before[1:] if said[content.split(":")[0]] > seq]
    # The re-run steps say the same again (labour still hears the request: its inbox starts
    # at the checkpoint's messages_upto), numbered after everything already in the thread.
    assert [(s, content) for _, s, _, content in after[len(before) :]] == [
        (len(before) + i + 1, content) for i, content in enumerate(undone)
    ]
    with tenant_scope(finished.tenant_id):
        last_seq = AgentSession.objects.get(pk=finished.session_id).last_seq
    assert last_seq == len(after)


@pytest.mark.parametrize("seq", POINTS)
def test_after_a_rewind_the_session_cache_serves_exactly_what_postgresql_holds(
    finished, rewind, drive, seq
):
    tokenizer = tokenizer_for("gpt-4")

    def cached() -> tuple[list[tuple], bool]:
        thread, hit = load_thread(
            tenant_id=finished.tenant_id, session_id=finished.session_id, tokenizer=tokenizer
        )
        assert thread is not None
        return [(m["pos"], m["seq"], m["role"], m["content"]) for m in thread.messages], hit

    def stored() -> list[tuple]:
        with tenant_scope(finished.tenant_id):
            thread = thread_state(tenant_id=finished.tenant_id, session_id=finished.session_id)
        assert thread is not None
        return [(m["pos"], m["seq"], m["role"], m["content"]) for m in thread.messages]

    messages, hit = cached()
    assert hit and messages == stored()  # the steps' packs filled it, their appends kept it

    rewind(finished, seq)
    messages, hit = cached()
    assert hit and messages == stored()

    drive(finished)
    messages, hit = cached()
    assert hit and messages == stored()
    assert len({pos for pos, _, _, _ in messages}) == len(messages)


# --- approval requests ----------------------------------------------------------------------------


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_keeps_decided_requests_as_history_and_a_manager_decides_again(
    finished, rewind, drive, seq
):
    [(first, at, status)] = recorded(finished)["approvals"]
    assert (at, status) == (3, "approved")

    rewound = rewind(finished, seq)
    requests = recorded(finished)["approvals"]
    assert requests[0] == (first, 3, "approved")
    if seq == 3:
        # Rewound to the pause itself: the run waits for a new decision on the same request.
        [(_, first_at, _), (second, second_at, pending)] = requests
        assert (second_at, pending) == (3, "pending")
        assert rewound.waiting_for == str(second)
        with tenant_scope(finished.tenant_id):
            old, new = (ApprovalRequest.objects.get(pk=pk) for pk in (first, second))
        assert (new.action, new.arguments, new.amount, new.reason, new.step) == (
            old.action,
            old.arguments,
            old.amount,
            old.reason,
            old.step,
        )
    else:
        assert requests == [(first, 3, "approved")]

    drive(finished)
    after = recorded(finished)["approvals"]
    assert [(at, status) for _, at, status in after] == [(3, "approved"), (3, "approved")]
    assert after[0][0] == first


def test_rewinding_a_run_that_waits_for_a_manager_cancels_the_request_it_waited_on(
    converse, rewind, drive
):
    run = drive(converse("every_row", "please sort out my refund"), until=("waiting_approval",))
    [(waited_on, _, _)] = recorded(run)["approvals"]

    rewound = rewind(run, 2)
    assert (rewound.status, rewound.waiting_for) == ("queued", "")
    assert recorded(run)["approvals"] == [(waited_on, 3, "cancelled")]

    again = drive(rewound, until=("waiting_approval",))
    [cancelled, pending] = recorded(run)["approvals"]
    assert cancelled == (waited_on, 3, "cancelled") and pending[1:] == (3, "pending")
    assert again.waiting_for == str(pending[0])
    assert drive(again).status == "succeeded"
    assert len(effects()) == 4 and set(effects().values()) == {1}


def test_rewinding_a_waiting_run_to_the_checkpoint_it_waits_at_opens_a_new_request(
    converse, rewind, drive
):
    run = drive(converse("every_row", "please sort out my refund"), until=("waiting_approval",))
    [(waited_on, _, _)] = recorded(run)["approvals"]

    rewound = rewind(run, 3)
    [cancelled, (pending, at, status)] = recorded(run)["approvals"]
    assert cancelled == (waited_on, 3, "cancelled") and (at, status) == (3, "pending")
    assert (rewound.status, rewound.waiting_for) == ("waiting_approval", str(pending))
    assert drive(rewound).status == "succeeded"


def test_a_rewind_to_a_pause_a_manager_rejected_asks_again_instead_of_going_on_without_one(
    converse, rewind, drive
):
    run = drive(converse("every_row", "please sort out my refund"), approve=False)
    assert run.output == {"receipt": None}
    assert not [key for key in effects() if key.endswith(":4:0")]

    rewound = rewind(run, 3)
    assert rewound.status == "waiting_approval"  # settle does not run without a decision
    again = drive(rewound, approve=True)
    assert again.status == "succeeded" and again.output["receipt"]["done"] == "refund"
    assert [(at, status) for _, at, status in recorded(run)["approvals"]] == [
        (3, "rejected"),
        (3, "approved"),
    ]
    assert set(effects().values()) == {1}


def test_a_rewind_to_a_pause_that_a_policy_approves_goes_on_at_once(
    converse, rewind, drive, enqueued, tenant_a
):
    with tenant_scope(tenant_a.pk):
        ApprovalPolicy.objects.create(
            tenant=tenant_a, action="count_effect", amount_threshold=Decimal("1000")
        )
    run = drive(converse("every_row", "please sort out my refund"))
    made = effects()

    rewound = rewind(run, 3)
    assert rewound.status == "queued" and rewound.wake_payload["decision"]["approved"]
    assert enqueued[-1]["run_id"] == run.pk
    assert drive(rewound).status == "succeeded"
    assert [status for _, _, status in recorded(run)["approvals"]] == ["approved", "approved"]
    assert effects() == made


# --- waits that write no row: an external event, a timer ------------------------------------------


@pytest.fixture
def send_event(admin, django_capture_on_commit_callbacks):
    def go(run: Run, name: str, payload: Any) -> Run:
        with django_capture_on_commit_callbacks(execute=True), tenant_scope(admin.tenant.pk):
            fresh = Run.objects.for_tenant(admin.tenant).get(pk=run.pk)
            return services.run_send_event(principal=admin, run=fresh, name=name, payload=payload)

    return go


def test_a_run_waiting_for_an_event_rewound_to_where_it_waits_keeps_waiting_for_it(
    start, drive, rewind, send_event
):
    run = drive(start("pauses", kind="event"), until=("waiting_event",))

    rewound = rewind(run, 1)
    assert (rewound.status, rewound.waiting_for) == ("waiting_event", "shipped")

    send_event(rewound, "shipped", {"box": 1})
    done = drive(rewound)
    assert done.output["event"] == {"name": "shipped", "payload": {"box": 1}}


def test_a_rewind_to_an_event_the_next_step_already_received_is_refused_and_changes_nothing(
    start, drive, rewind, send_event, reload
):
    run = drive(start("pauses", kind="event"), until=("waiting_event",))
    send_event(run, "shipped", {"box": 1})
    run = drive(run)
    assert run.status == "succeeded"

    with pytest.raises(ActionNotAllowed, match="external event"):
        rewind(run, 1)
    assert (reload(run).status, reload(run).version) == ("succeeded", run.version)

    # From before the step that waited, it waits for the event again.
    rewound = drive(rewind(run, 0), until=("waiting_event",))
    assert (rewound.status, rewound.waiting_for, rewound.step_seq) == (
        "waiting_event",
        "shipped",
        1,
    )


def test_a_sleeping_run_rewound_to_where_it_sleeps_sleeps_until_the_same_time(start, drive, rewind):
    wake = timezone.now() + dt.timedelta(hours=1)
    run = drive(start("pauses", kind="timer", until=wake.isoformat()), until=("waiting_timer",))

    rewound = rewind(run, 1)
    assert (rewound.status, rewound.not_before) == ("waiting_timer", wake)


def test_a_rewind_to_a_timer_that_went_off_goes_on_at_once(start, drive, rewind, admin):
    wake = timezone.now() - dt.timedelta(minutes=1)
    run = drive(start("pauses", kind="timer", until=wake.isoformat()), until=("waiting_timer",))
    with tenant_scope(admin.tenant.pk):
        actions.run_resume(principal=admin, run=run, version=run.version)  # the timer fires
    assert drive(run).status == "succeeded"

    rewound = rewind(run, 1)
    assert rewound.status == "queued"
    assert drive(rewound).status == "succeeded"


# --- memory facts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_keeps_the_memory_facts_and_the_rerun_refreshes_them_without_duplicates(
    finished, rewind, drive, seq
):
    before = recorded(finished)["memory"]
    assert [(key, text, until) for _, key, text, until in before] == [
        ("contact.channel", "Prefers to be contacted by email", None),
        ("profile.name", "Is called Ada", None),
    ]

    rewind(finished, seq)
    assert recorded(finished)["memory"] == before  # the person's data, not the run's

    drive(finished)
    assert recorded(finished)["memory"] == before  # the same facts again: refreshed in place


# --- events and attempts --------------------------------------------------------------------------


def _numbered_without_gap(events: list[tuple]) -> bool:
    return [seq for seq, _, _ in events] == list(range(1, len(events) + 1))


@pytest.mark.parametrize("seq", POINTS)
def test_rewinding_keeps_every_event_and_attempt_as_history_and_numbers_new_ones_after_them(
    finished, rewind, drive, seq
):
    before = recorded(finished)
    assert before["attempts"] == [
        (1, 1, "remember", "succeeded"),
        (2, 1, "labour", "retrying"),
        (2, 2, "labour", "succeeded"),
        (3, 1, "ask_manager", "succeeded"),
        (4, 1, "settle", "succeeded"),
    ]
    assert _numbered_without_gap(before["events"])

    rewind(finished, seq)
    rewound = recorded(finished)
    assert rewound["events"][: len(before["events"])] == before["events"]
    assert _numbered_without_gap(rewound["events"])
    assert rewound["attempts"] == before["attempts"]

    drive(finished)
    after = recorded(finished)
    assert after["events"][: len(rewound["events"])] == rewound["events"]
    assert _numbered_without_gap(after["events"])
    finished_steps = [d["step_seq"] for _, kind, d in after["events"] if kind == "step.finished"]
    assert finished_steps == [1, 2, 3, 4] + list(range(seq + 1, 5))
    redone = [(s, 1, STEPS[s], "succeeded") for s in range(seq + 1, 5)]
    assert sorted(after["attempts"]) == sorted(before["attempts"] + redone)


# --- twice, fenced, one transaction ---------------------------------------------------------------


def test_rewinding_again_after_a_rerun_lets_the_run_finish_once_more(finished, rewind, drive):
    made = effects()
    for seq in (1, 3, 0, 2):
        rewind(finished, seq)
        again = drive(finished)
        assert again.status == "succeeded", again.error
    rows = recorded(finished)
    assert [(s, step) for _, s, step in rows["checkpoints"]] == list(STEPS.items())
    assert _numbered_without_gap(rows["events"])
    assert effects() == made


def test_a_rewind_on_a_version_that_moved_meanwhile_is_refused_and_changes_nothing(
    finished, rewind, reload
):
    before = recorded(finished)
    with pytest.raises(RunChanged):
        rewind(finished, 1, version=finished.version - 1)
    assert recorded(finished) == before
    assert reload(finished).version == finished.version


def test_a_rewind_that_fails_halfway_changes_nothing(finished, rewind, reload, monkeypatch):
    before = recorded(finished)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the audit log is full")

    monkeypatch.setattr("agents.runtime.replay.audit", broken)
    with pytest.raises(RuntimeError):
        rewind(finished, 2)
    assert recorded(finished) == before
    run = reload(finished)
    assert (run.status, run.step_seq, run.version) == ("succeeded", 4, finished.version)


# --- the demo refund desk, rewound to each of its checkpoints -------------------------------------


def _payment_provider(request: urllib.request.Request, timeout: float | None = None) -> io.BytesIO:
    """urlopen for the demo's refund tool: the demo payment provider's own view, in-process
    (it deduplicates on Idempotency-Key and counts what it was asked)."""
    headers = {k: v for k, v in request.header_items() if k.lower() != "content-type"}
    answer = demo_payments.refunds(
        RequestFactory().post(
            "/demo/payments/refunds",
            data=request.data,
            content_type="application/json",
            headers=headers,
        )
    )
    if answer.status_code >= 400:
        raise urllib.error.HTTPError(request.full_url, answer.status_code, "refused", {}, None)
    return io.BytesIO(answer.content)


SMALL = "Please refund $40 for order A-1002, charged twice. Contact me by email."
LARGE = "Please refund $400 for order A-1001, charged twice. Contact me by email."
DEMO_STEPS = {
    SMALL: ["model", "tools", "model", "tools", "model"],
    # Above the threshold the tools step that would refund waits for a manager first.
    LARGE: ["model", "tools", "model", "tools", "tools", "model"],
}
DEMO_POINTS = [(SMALL, seq) for seq in range(5)] + [(LARGE, seq) for seq in range(6)]


@pytest.mark.parametrize(
    ("message", "seq"),
    DEMO_POINTS,
    ids=[f"{'large' if m == LARGE else 'small'}-{seq}" for m, seq in DEMO_POINTS],
)
def test_rewinding_the_demo_refund_desk_to_a_checkpoint_finishes_it_again_with_one_refund(
    converse, rewind, drive, monkeypatch, settings, message, seq
):
    settings.DEMO_PAYMENTS_URL = "http://payments.invalid/demo/payments/refunds"
    monkeypatch.setattr(urllib.request, "urlopen", _payment_provider)
    run = drive(converse("refund_desk", message, customer="ada"))
    assert run.status == "succeeded", run.error
    before = recorded(run)
    assert [step for _, _, step in before["checkpoints"]] == DEMO_STEPS[message]
    [refund] = demo_refunds()
    assert refund["requests"] == 1

    rewind(run, seq)
    again = drive(run)

    assert again.status == "succeeded", again.error
    assert again.output == run.output  # the same answer, with the same refund id
    assert demo_refunds() == [refund]  # the provider was not asked again
    after = recorded(run)
    assert after["ledger"] == before["ledger"]
    assert [row[1:] for row in after["checkpoints"]] == [row[1:] for row in before["checkpoints"]]
    assert [row[1:] for row in after["packed"]] == [row[1:] for row in before["packed"]]
    assert after["memory"] == before["memory"]
    assert _numbered_without_gap(after["events"])
    assert after["events"][: len(before["events"])] == before["events"]
    statuses = [status for _, _, status in after["approvals"]]
    assert "pending" not in statuses
    # Above the threshold, a rewind to the pause or before it asks the manager again.
    assert statuses.count("approved") == (0 if message == SMALL else 2 if seq <= 4 else 1)
