"""Recovery in seconds, tested with real worker processes: a worker that dies holding a run is
noticed by its missing liveness key and the run is claimed again within seconds, long before
its lease expires; a worker that only froze is fenced off when it wakes and writes nothing.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import os
import random
import signal
import statistics
import time
from pathlib import Path

import pytest

from agents.demo.models import DemoRefund
from agents.runtime.models import Run, RunEvent, StepAttempt
from tenants.scope import tenant_scope
from tests.agents.test_durability import assert_exactly_once, load, start_refund, wait_for_status
from tests.agents.test_outages import postgres_down
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LONG_LEASE = "60"  # long enough that only liveness can explain a quick recovery


def test_a_worker_killed_mid_step_is_replaced_within_seconds_not_when_its_lease_expires(
    cluster, customer
):
    victim = cluster.worker(
        "victim", LLM_SCRIPTED_DELAY_SECONDS="30", AGENTSTATE_LEASE_SECONDS=LONG_LEASE
    )
    cluster.beat()
    run = start_refund(customer)
    wait_until(
        lambda: (r := load(run)).status == "running" and r.lease_owner.endswith(f":{victim.pid}"),
        timeout=30,
        what="the victim to start the first model step",
    )
    # The rescuer starts once the victim holds the run (started together, on a loaded
    # machine the rescuer sometimes took the run first), and well inside its 30 s model call.
    cluster.worker("rescuer", AGENTSTATE_LEASE_SECONDS=LONG_LEASE)
    time.sleep(0.5)
    killed_at = time.time()
    victim.kill9()
    rescued = wait_until(
        lambda: _recovered_after(run, victim.pid), timeout=30, what="the run to be claimed again"
    )
    assert rescued - killed_at < 8, f"claimed again {rescued - killed_at:.1f}s after the kill"
    wait_for_status(run, {"succeeded", "failed"}, timeout=60)
    assert_exactly_once(run)
    with tenant_scope(run.tenant_id):
        lost = StepAttempt.objects.get(run=run, outcome="lost")
    assert lost.worker.endswith(f":{victim.pid}")
    # Lost at the last moment it was seen alive (it beats every second): before the kill.
    seen = lost.ended_at.timestamp()
    assert killed_at - 1.5 <= seen <= killed_at and lost.duration_ms >= 0


def test_a_frozen_worker_that_wakes_after_its_run_was_taken_over_writes_nothing(cluster, customer):
    # Frozen in the refund step's model call (the third step): it has already written two
    # checkpoints, so a write after waking would show as a duplicate or a gap.
    frozen = cluster.worker(
        "frozen", LLM_SCRIPTED_DELAY_SECONDS="2", AGENTSTATE_LEASE_SECONDS=LONG_LEASE
    )
    cluster.beat()
    run = start_refund(customer)
    wait_until(
        lambda: (r := load(run)).step_seq == 2 and r.status == "running",
        timeout=30,
        what="the frozen worker to start the third step",
    )
    frozen.pause()
    try:
        cluster.worker("rescuer", AGENTSTATE_LEASE_SECONDS=LONG_LEASE)
        wait_for_status(run, {"succeeded", "failed"}, timeout=60)
    finally:
        frozen.resume()
    # Its model call returns at once (the delay passed while it was stopped) and it tries
    # to write the third checkpoint with the version it claimed.
    wait_until(
        lambda: "fenced" in frozen.log() or "superseded" in frozen.log().lower(),
        timeout=20,
        what="the woken worker to find itself fenced off",
    )
    time.sleep(1)
    assert_exactly_once(run)
    with tenant_scope(run.tenant_id):
        by_frozen = list(
            StepAttempt.objects.filter(run=run, worker__endswith=f":{frozen.pid}").values_list(
                "outcome", flat=True
            )
        )
    assert by_frozen.count("lost") == 1
    assert "succeeded" not in by_frozen[by_frozen.index("lost") :]


@pytest.mark.solo
def test_under_pool_kills_a_postgresql_crash_and_a_backlog_every_run_succeeds_once_and_is_claimed_again_in_seconds(  # noqa: E501
    cluster, customer
):
    """The chaos mix: forty refunds queued at once on four single-slot prefork workers (a
    backlog), steps of 1.5 s, a busy worker's whole process group killed every 2-4 s and
    replaced, and PostgreSQL crashed once for 3 s. Kill -> claimed again is measured from the
    kill to the recovered step.started, less the time the database was down meanwhile
    (nothing can be taken back then); its p95 must be at most 5 s."""
    rng = random.Random(28)
    extra = {"LLM_SCRIPTED_DELAY_SECONDS": "1.5", "AGENTSTATE_LEASE_SECONDS": LONG_LEASE}

    def start(i: int):
        return cluster.worker(f"w{i}", pool="prefork", concurrency=1, **extra)

    workers = [start(i) for i in range(4)]
    cluster.beat(AGENTSTATE_RECOVERY_INTERVAL_SECONDS="1")  # the default
    runs = [start_refund(customer) for _ in range(40)]
    kills: list[tuple[float, set[int]]] = []  # when, and the pool processes killed
    outage: tuple[float, float] | None = None
    # A replacement starts in the background: waiting seconds for it to be ready (longer on a
    # loaded machine) left the runs to finish with too few kills landed among them.
    starting = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    pending: list[concurrent.futures.Future] = []
    spawned, next_kill = 4, time.monotonic() + rng.uniform(2, 4)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        workers += [f.result() for f in pending if f.done()]
        pending = [f for f in pending if not f.done()]
        # One query a round, not one per run and worker.
        with tenant_scope(customer.tenant.pk):
            now = list(
                Run.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", "lease_owner")
            )
        left = sum(status not in {"succeeded", "failed", "cancelled"} for status, _ in now)
        if not left:
            break
        if outage is None and left <= 28:
            began = time.time()
            with postgres_down(3):
                pass
            outage = (began, time.time())
            continue
        alive = [w for w in workers if w.alive()]
        # A kill only while another worker lives to take the run over (with none, the time
        # measured would be a replacement's boot) and while runs are left to share the kills
        # (with one left, every kill would land on it until it ran out of tries).
        if time.monotonic() >= next_kill and len(alive) >= 2 and left >= 6:
            owners = {int(o.rpartition(":")[2]) for status, o in now if status == "running" and o}
            busy = [w for w in alive if _pool(w.pid) & owners]
            if busy:
                victim = rng.choice(busy)
                kills.append((time.time(), _pool(victim.pid)))
                victim.kill9()  # the parent and its pool process, as when a host dies
                workers.remove(victim)
                pending.append(starting.submit(start, spawned))
                spawned += 1
                next_kill = time.monotonic() + rng.uniform(2, 4)
        time.sleep(0.2)
    for run in runs:
        wait_for_status(run, {"succeeded", "failed"}, timeout=90)
    starting.shutdown(wait=True)  # every worker started is stopped with the cluster
    for run in runs:
        assert_exactly_once(run)
    assert DemoRefund.objects.count() == len(runs)
    assert outage is not None, "the runs finished before PostgreSQL was crashed"
    latencies, raw = [], []
    for killed_at, pids in kills:
        for run in runs:
            for pid in pids:
                with tenant_scope(run.tenant_id):
                    lost = StepAttempt.objects.filter(
                        run=run, outcome="lost", worker__endswith=f":{pid}"
                    ).exists()
                if lost:
                    again = _recovered_after(run, pid)
                    assert again is not None, f"run {run.pk} lost by {pid} was never claimed again"
                    down = max(0.0, min(again, outage[1]) - max(killed_at, outage[0]))
                    raw.append(again - killed_at)
                    latencies.append(again - killed_at - down)
                    if latencies[-1] > 5:
                        print(f"slow: {_story(run, pid, killed_at, outage)}")
    assert len(latencies) >= 8, f"too few kills landed mid-step: {len(kills)} kills"
    p95 = statistics.quantiles(latencies, n=20, method="inclusive")[-1]
    shown = ", ".join(f"{x:.1f}" for x in sorted(latencies))
    print(
        f"\n{len(kills)} kills, {len(latencies)} runs lost, PostgreSQL down"
        f" {outage[1] - outage[0]:.1f} s: kill -> claimed again p95 {p95:.1f} s ({shown});"
        f" with the outage counted: max {max(raw):.1f} s"
    )
    assert p95 <= 5, f"kill -> claimed again p95 {p95:.1f}s over {len(latencies)} ({shown})"


def _story(run, pid: int, killed_at: float, outage: tuple[float, float]) -> str:
    """What happened to a run after its worker was killed, in seconds from the kill."""
    with tenant_scope(run.tenant_id):
        events = RunEvent.objects.filter(run=run, created_at__gte=_at(killed_at - 1))
        shown = [
            f"{e.created_at.timestamp() - killed_at:+.1f} {e.kind}"
            f"{' ' + e.data.get('worker', '') if isinstance(e.data, dict) else ''}"
            for e in events.order_by("seq")[:12]
        ]
    down = f"database down {outage[0] - killed_at:+.1f}..{outage[1] - killed_at:+.1f}"
    return f"run {run.pk} of pool process {pid}: {down}; " + ", ".join(shown)


def _at(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def _pool(pid: int) -> set[int]:
    """A prefork worker's pool processes (they hold the runs: leases name their pids)."""
    try:
        return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _recovered_after(run, pid: int) -> float | None:
    with tenant_scope(run.tenant_id):
        events = list(
            RunEvent.objects.filter(run=run).order_by("seq").values("kind", "data", "created_at")
        )
    lost = False
    for event in events:
        if event["kind"] == "run.lost" and event["data"]["worker"].endswith(f":{pid}"):
            lost = True
        elif lost and event["kind"] == "step.started" and event["data"].get("recovered"):
            return event["created_at"].timestamp()
    return None


def test_a_pool_process_killed_mid_step_is_taken_back_by_its_celery_parent_without_beat(
    cluster, customer
):
    # No beat, so no sweep: only the worker's parent, which sees its pool process die, can
    # recover the run before its lease (60 s) expires. Billiard reports the death after its
    # lost-worker grace (it waits for a result the process may have sent), seconds later.
    worker = cluster.worker(
        "prefork",
        pool="prefork",
        concurrency=2,
        LLM_SCRIPTED_DELAY_SECONDS="30",
        AGENTSTATE_LEASE_SECONDS=LONG_LEASE,
    )
    run = start_refund(customer)
    owner = wait_until(
        lambda: (r := load(run)).status == "running" and r.lease_owner,
        timeout=30,
        what="a pool process to start the first model step",
    )
    child = int(owner.rpartition(":")[2])
    assert child != worker.pid, "the run is held by a pool process, not the parent"
    time.sleep(0.3)
    killed_at = time.time()
    os.kill(child, signal.SIGKILL)
    rescued = wait_until(
        lambda: _recovered_after(run, child), timeout=20, what="the run to be claimed again"
    )
    assert rescued - killed_at < 15, f"claimed again {rescued - killed_at:.1f}s after the kill"
    assert load(run).lease_owner != owner
