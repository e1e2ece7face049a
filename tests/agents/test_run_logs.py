"""A run's logs (`ctx.append` / `ctx.log`): each step's part is stored once, in its own
checkpoint, and every later step sees the whole log in order: in the same drive or resumed by
another worker, after a retried step (whose part is dropped), after a rewind (the log ends at
the checkpoint) and in a replay as a new run (the log is copied)."""

from __future__ import annotations

import pytest

from agents.runtime import Agent, finish, goto, register
from agents.runtime import repairs as actions
from agents.runtime.errors import TransientStepError
from agents.runtime.models import Checkpoint, Run
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)

seen: list[list[int]] = []
failures: list[int] = []


def _count(ctx):
    n = int(ctx.state.get("n", 0)) + 1
    seen.append(list(ctx.log("numbers")))
    ctx.append("numbers", n)
    if failures and failures[0] == n:
        failures.pop(0)
        raise TransientStepError("once, after appending")  # the retried step's part is not kept
    if n >= 5:
        return finish({"numbers": ctx.log("numbers")})
    return goto("count", n=n)


register(
    Agent(name="log_counter", version=1, first="count", steps={"count": _count}),
    replace=True,
)


@pytest.fixture(autouse=True)
def _clear():
    seen.clear()
    failures.clear()


def checkpoints(run: Run) -> list[Checkpoint]:
    with tenant_scope(run.tenant_id):
        return list(Checkpoint.objects.filter(run=run).order_by("seq"))


@pytest.mark.parametrize("slice_seconds", [3600, 0], ids=["one drive", "a drive per step"])
def test_every_step_sees_the_whole_log_whether_it_ran_on_or_resumed(
    start, step, reload, slice_seconds
):
    run = start("log_counter")
    for _ in range(10):
        step(run, worker=f"w{len(seen)}", slice_seconds=slice_seconds)
        if reload(run).is_finished:
            break

    run = reload(run)
    assert run.status == "succeeded" and run.output == {"numbers": [1, 2, 3, 4, 5]}
    assert seen == [[], [1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]
    # Stored once: each checkpoint holds its own step's part, and the state holds no copy.
    assert [cp.appended for cp in checkpoints(run)] == [{"numbers": [n]} for n in range(1, 6)]
    assert all("numbers" not in cp.state for cp in checkpoints(run))


def test_a_failed_attempts_appends_are_dropped_and_its_retry_appends_once(start, step, reload):
    failures.append(3)
    run = start("log_counter")
    for _ in range(20):
        step(run, slice_seconds=3600)
        run = reload(run)
        if run.is_finished:
            break
        with tenant_scope(run.tenant_id):
            Run.objects.filter(pk=run.pk).update(not_before=None)  # no backoff wait

    assert run.status == "succeeded" and run.output == {"numbers": [1, 2, 3, 4, 5]}
    assert seen == [[], [1], [1, 2], [1, 2], [1, 2, 3], [1, 2, 3, 4]]


def test_a_rewound_runs_log_ends_at_the_checkpoint_and_a_replay_copies_it(
    start, step, reload, admin, django_capture_on_commit_callbacks
):
    run = start("log_counter")
    step(run, slice_seconds=3600)
    run = reload(run)
    assert run.output == {"numbers": [1, 2, 3, 4, 5]}

    def replay(as_new_run: bool) -> Run:
        with django_capture_on_commit_callbacks(execute=True), tenant_scope(admin.tenant.pk):
            fresh = Run.objects.for_tenant(admin.tenant).get(pk=run.pk)
            return actions.run_replay(
                principal=admin, run=fresh, version=fresh.version, seq=2, as_new_run=as_new_run
            )

    copy = replay(as_new_run=True)
    step(copy, slice_seconds=3600)
    assert reload(copy).output == {"numbers": [1, 2, 3, 4, 5]}
    assert seen[-3:] == [[1, 2], [1, 2, 3], [1, 2, 3, 4]]

    rewound = replay(as_new_run=False)
    assert rewound.pk == run.pk and [cp.seq for cp in checkpoints(run)] == [1, 2]
    step(run, slice_seconds=3600)
    assert reload(run).output == {"numbers": [1, 2, 3, 4, 5]}
    assert seen[-3:] == [[1, 2], [1, 2, 3], [1, 2, 3, 4]]


def _meddle(ctx):
    mine = ctx.log("items")
    seen.append([dict(item) for item in mine])
    if mine:
        mine[0]["changed"] = True  # a step changing what it read changes nothing kept
    n = len(mine) + 1
    ctx.append("items", {"n": n})
    return goto("meddle") if n < 3 else finish(ctx.log("items"))


register(
    Agent(name="log_meddler", version=1, first="meddle", steps={"meddle": _meddle}),
    replace=True,
)


def test_a_step_that_changes_what_it_read_from_a_log_changes_nothing_kept(start, step, reload):
    run = start("log_meddler")
    step(run, slice_seconds=3600)  # every step in one drive: the log kept in the worker
    assert reload(run).output == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert seen == [[], [{"n": 1}], [{"n": 1}, {"n": 2}]]
