from __future__ import annotations

import pytest

from agents.runtime.engine.runner import drive
from agents.runtime.models import Run
from agents.runtime.services import run_start
from tenants.scope import tenant_scope
from tests import factories
from tests.agents import agents_for_tests


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
