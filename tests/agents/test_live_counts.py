"""The counts the live lists show: read once per event per process for every socket of a
tenant (not once per socket), exact after each stored event; the stuck counts at most
AGENTSTATE_LIVE_STUCK_COUNTS_SECONDS behind; a member's own counts never shared."""

from __future__ import annotations

import re
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.console import live
from agents.live import render
from agents.runtime.models import Run, RunStatus
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.console_helpers import ago, make_run

pytestmark = pytest.mark.django_db


def stored_event(run: Run, seq: int, kind: str = "step.finished") -> dict:
    return {"tenant_id": str(run.tenant_id), "run_id": str(run.pk), "kind": kind, "seq": seq}


def count_reads(queries) -> int:
    return sum('"agents_runcount"' in q["sql"] for q in queries)


def shown(summary: str, label: str) -> int:
    found = re.search(rf"{label}</span> <strong class=\"count\">(\d+)</strong>", summary)
    assert found, summary
    return int(found.group(1))


def set_status(run: Run, status: str) -> None:
    with tenant_scope(run.tenant_id):
        Run.objects.filter(pk=run.pk).update(status=status)


def test_every_admin_socket_of_a_tenant_shares_one_read_of_the_counts_per_event(members):
    admins = [factories.principal_for(members["admin"])]
    admins.append(factories.principal_for(factories.make_member(members["admin"].tenant, "admin")))
    run = make_run(members["admin"].tenant, status=RunStatus.QUEUED)
    event = stored_event(run, 1)
    with CaptureQueriesContext(connection) as queries:
        summaries = [live.console_feed(p, event, "")[-1] for p in admins * 3]
    assert count_reads(queries) == 1
    assert {shown(s, "Queued") for s in summaries} == {1}

    set_status(run, RunStatus.RUNNING)  # the next event: read again, and exact
    with CaptureQueriesContext(connection) as queries:
        summaries = [live.console_feed(p, stored_event(run, 2), "")[-1] for p in admins]
    assert count_reads(queries) == 1
    assert {(shown(s, "Queued"), shown(s, "Running")) for s in summaries} == {(0, 1)}


def test_the_runs_list_of_managers_shares_the_counts_but_a_member_counts_her_own(members):
    tenant = members["admin"].tenant
    manager = factories.principal_for(members["manager"])
    member = factories.principal_for(members["member"])
    mine = make_run(tenant, status=RunStatus.QUEUED, created_by=members["member"].user)
    make_run(tenant, status=RunStatus.FAILED)  # someone else's
    views = [render.RunsView(principal=p, filter="") for p in (manager, manager, member)]
    with CaptureQueriesContext(connection) as queries:
        updates = [render.runs_update(v, stored_event(mine, 1)) for v in views]
    assert count_reads(queries) == 1  # the two managers' sockets; the member's reads her own
    manager_counts, member_counts = updates[0][-1], updates[2][-1]
    assert "Failed" in manager_counts and re.search(r"Failed\D+1\b", manager_counts)
    assert not re.search(r"Failed\D+1\b", member_counts)


def test_a_live_event_without_a_number_reads_the_counts_afresh(members):
    admin = factories.principal_for(members["admin"])
    run = make_run(members["admin"].tenant, status=RunStatus.QUEUED)
    live_only = {"tenant_id": str(run.tenant_id), "run_id": str(run.pk), "kind": "step.progress"}
    live.console_feed(admin, live_only, "")
    set_status(run, RunStatus.RUNNING)
    assert shown(live.console_feed(admin, live_only, "")[-1], "Running") == 1


def test_the_live_stuck_counts_lag_at_most_the_setting_and_a_subscribe_reads_them_afresh(
    members, settings
):
    settings.AGENTSTATE_LIVE_STUCK_COUNTS_SECONDS = 1.5
    admin = factories.principal_for(members["admin"])
    tenant = members["admin"].tenant
    run = make_run(tenant, status=RunStatus.QUEUED)
    live.console_feed(admin, None, "")  # the page subscribes: counted afresh, none stuck
    make_run(tenant, status=RunStatus.RUNNING, lease_expires_at=ago(60))  # stuck from now
    first = live.console_feed(admin, stored_event(run, 1), "")[-1]
    assert shown(first, "Lease expired, not yet taken back") == 0  # behind, within the bound
    time.sleep(1.6)
    later = live.console_feed(admin, stored_event(run, 2), "")[-1]
    assert shown(later, "Lease expired, not yet taken back") == 1
    assert shown(live.console_feed(admin, None, "")[-1], "Lease expired, not yet taken back") == 1
