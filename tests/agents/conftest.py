from __future__ import annotations

import pytest

from agents.runtime.engine.runner import drive
from agents.runtime.models import Run
from agents.runtime.services import run_start
from config.celery import app as celery_app
from tenants.scope import tenant_scope
from tests import factories
from tests.agents import agents_for_tests
from tests.processes import start_beat, start_worker


@pytest.fixture(autouse=True)
def _reset_counters():
    agents_for_tests.calls.clear()
    agents_for_tests.side_effects.clear()


@pytest.fixture
def enqueued(monkeypatch):
    """Runs the engine would have put on the queue (in-process tests drive them by hand)."""
    sent: list[dict] = []
    monkeypatch.setattr("agents.runtime.queue.enqueue_run", lambda **kwargs: sent.append(kwargs))
    return sent


@pytest.fixture
def admin(tenant_a):
    return factories.principal_for(factories.make_member(tenant_a, "admin"))


@pytest.fixture
def start(admin, enqueued):
    def make(agent: str, **run_input) -> Run:
        with tenant_scope(admin.tenant.pk):
            return run_start(principal=admin, agent=agent, input=run_input)

    return make


@pytest.fixture
def step(admin):
    def go(run: Run, worker: str = "w1", **kwargs):
        return drive(tenant_id=str(admin.tenant.pk), run_id=run.pk, worker=worker, **kwargs)

    return go


@pytest.fixture
def reload(admin):
    def get(run: Run) -> Run:
        with tenant_scope(admin.tenant.pk):
            return Run.objects.for_tenant(admin.tenant).get(pk=run.pk)

    return get


# --- real workers (the durability tests) ----------------------------------------------------------

LEASE = "3"


@pytest.fixture
def failpoints(tmp_path):
    """Arm a failpoint by creating a file; the worker removes it when it fires (once)."""
    directory = tmp_path / "failpoints"
    directory.mkdir()

    def arm(name: str) -> None:
        (directory / name).touch()

    arm.dir = directory
    return arm


@pytest.fixture
def cluster(console_url, failpoints):
    """Start workers and beat on demand; everything is stopped after the test."""
    celery_app.control.purge()
    procs = []
    env = {
        "DEMO_PAYMENTS_URL": console_url + "/demo/payments/refunds",
        "AGENTSTATE_LEASE_SECONDS": LEASE,
        "AGENTSTATE_FAILPOINT_DIR": str(failpoints.dir),
        "AGENTSTATE_RECOVERY_INTERVAL_SECONDS": "0.5",
        "AGENTSTATE_REQUEUE_AFTER_SECONDS": "2",
    }

    class Cluster:
        def worker(self, name: str, **extra: str):
            proc = start_worker(name, **{**env, **extra})
            procs.append(proc)
            return proc

        def beat(self, **extra: str):
            proc = start_beat(**{**env, **extra})
            procs.append(proc)
            return proc

    yield Cluster()
    for proc in procs:
        proc.stop()


@pytest.fixture
def customer(tenant_a):
    member = factories.make_member(tenant_a, "member", user=factories.make_user("carol"))
    return factories.principal_for(member)
