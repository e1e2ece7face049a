"""Run counts by status kept by the database (agents/runtime/run_counts.py): exact after every
kind of write, under concurrent transitions, through compaction, and per tenant."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.runtime import run_counts, selectors
from agents.runtime.models import Run, RunCount, RunStatus
from tenants.scope import system_scope, tenant_scope
from tests import factories

STATUSES = [value for value, _ in RunStatus.choices]


def truth(tenant) -> dict[str, int]:
    """What a scan of the tenant's runs says."""
    with tenant_scope(tenant.pk):
        return dict(Counter(Run.objects.for_tenant(tenant).values_list("status", flat=True)))


def kept(tenant) -> dict[str, int]:
    with tenant_scope(tenant.pk):
        return run_counts.by_status(tenant.pk)


def new_run(tenant, status: str = RunStatus.QUEUED) -> Run:
    return Run.objects.create(
        tenant=tenant, agent="refund_desk", agent_version=1, current_step="lookup", status=status
    )


@pytest.mark.django_db
def test_the_counts_follow_every_insert_status_change_and_delete():
    tenant = factories.make_tenant()
    with tenant_scope(tenant.pk):
        runs = [new_run(tenant) for _ in range(5)]
        Run.objects.bulk_create(
            [
                Run(tenant=tenant, agent="a", agent_version=1, current_step="s", status=s)
                for s in ("failed", "failed", "succeeded", "waiting_timer")
            ]
        )
        assert kept(tenant) == truth(tenant) == {
            "queued": 5, "failed": 2, "succeeded": 1, "waiting_timer": 1,
        }  # fmt: skip
        runs[0].status = RunStatus.RUNNING
        runs[0].save(update_fields=["status"])
        runs[1].status = RunStatus.QUEUED  # saved, but not a change
        runs[1].save()
        Run.objects.filter(pk__in=[runs[2].pk, runs[3].pk]).update(status=RunStatus.SUCCEEDED)
        Run.objects.filter(pk=runs[4].pk).update(current_step="other")  # not the status
        runs[1].delete()
        Run.objects.filter(status=RunStatus.FAILED).delete()
        assert kept(tenant) == truth(tenant) == {
            "queued": 1, "running": 1, "succeeded": 3, "waiting_timer": 1,
        }  # fmt: skip


@pytest.mark.django_db
def test_compaction_folds_a_tenants_rows_into_one_per_status_and_keeps_every_sum():
    busy, quiet = factories.make_tenant(), factories.make_tenant()
    with tenant_scope(busy.pk):
        runs = [new_run(busy) for _ in range(40)]
        for run in runs:  # two rows per change: well over the threshold
            Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
            Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
        Run.objects.filter(pk=runs[0].pk).delete()
    with tenant_scope(quiet.pk):
        new_run(quiet)
    before_busy, before_quiet = kept(busy), kept(quiet)
    with tenant_scope(busy.pk):
        assert RunCount.objects.for_tenant(busy).count() > run_counts.COMPACT_ABOVE

    folded = run_counts.compact()

    assert folded > 0
    assert kept(busy) == before_busy == truth(busy) == {"succeeded": 39}
    assert kept(quiet) == before_quiet == {"queued": 1}
    with tenant_scope(busy.pk):
        # queued and running summed to zero: no row left for them
        assert list(RunCount.objects.for_tenant(busy).values_list("status", "n")) == [
            ("succeeded", 39)
        ]
    with tenant_scope(quiet.pk):
        assert RunCount.objects.for_tenant(quiet).count() == 1  # few rows: left alone
    assert run_counts.compact() == 0  # nothing crowded any more


@pytest.mark.django_db
def test_compaction_drops_the_rows_of_a_tenant_that_is_gone():
    tenant = factories.make_tenant()
    with tenant_scope(tenant.pk):
        RunCount.objects.create(tenant=tenant, status="queued", n=3)
    gone = factories.make_tenant()
    with system_scope("test_inspection"):
        RunCount.objects.create(tenant_id=gone.pk, status="failed", n=-2)
        from tenants.models import Tenant

        Tenant.objects.filter(pk=gone.pk).delete()
    run_counts.compact()
    with system_scope("test_inspection"):
        assert not RunCount.objects.filter(tenant_id=gone.pk).exists()
        assert RunCount.objects.filter(tenant_id=tenant.pk).count() == 1


@pytest.mark.django_db
def test_a_tenant_reads_only_its_own_counts():
    mine, theirs = factories.make_tenant(), factories.make_tenant()
    with tenant_scope(theirs.pk):
        new_run(theirs, RunStatus.FAILED)
    with tenant_scope(mine.pk):
        new_run(mine)
        # Asked for the other tenant's counts inside this tenant's scope: the database
        # shows none of their rows.
        assert run_counts.by_status(theirs.pk) == {}
        assert run_counts.by_status(mine.pk) == {"queued": 1}


@pytest.mark.django_db
def test_the_tenant_wide_counts_never_scan_the_runs():
    tenant = factories.make_tenant()
    with tenant_scope(tenant.pk):
        new_run(tenant)
        with CaptureQueriesContext(connection) as queries:
            counts = selectors.tenant_status_counts(tenant.pk)
    assert {c["value"]: c["count"] for c in counts}["queued"] == 1
    assert [c["value"] for c in counts] == STATUSES  # every status, zeros included
    assert len(queries) == 1 and '"agents_run"' not in queries[0]["sql"]


@pytest.mark.django_db(transaction=True)
def test_the_counts_stay_exact_while_many_transactions_change_statuses_at_once():
    tenant = factories.make_tenant()
    with tenant_scope(tenant.pk):
        ids = [new_run(tenant).pk for _ in range(60)]
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(40):
                with tenant_scope(tenant.pk):
                    # several runs in one transaction, locked in one order (as the engine
                    # does), so the runs themselves cannot deadlock
                    picked = sorted(rng.sample(ids, 3))
                    for run_id in picked:
                        Run.objects.filter(pk=run_id).update(status=rng.choice(STATUSES))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    def compact_meanwhile() -> None:
        try:
            for _ in range(20):
                run_counts.compact()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(4)]
    threads.append(threading.Thread(target=compact_meanwhile))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert kept(tenant) == truth(tenant)
    assert sum(kept(tenant).values()) == 60
