"""Operations endpoints, structured logs and the Django admin."""

from __future__ import annotations

import json
import logging

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client

from agents.runtime import metrics
from core.log_context import ContextFilter, JsonFormatter, bind
from tests import processes
from tests.agents.console_helpers import ago, make_run


@pytest.mark.django_db
def test_healthz_answers_without_touching_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


@pytest.mark.django_db
def test_readyz_is_503_and_says_why_when_no_worker_answers(client, settings):
    settings.AGENTSTATE_READY_PING_TIMEOUT_SECONDS = 0.2
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] and checks["redis"]["ok"] and checks["broker"]["ok"]
    assert checks["workers"] == {**checks["workers"], "ok": False}
    assert "no Celery worker answered" in checks["workers"]["detail"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_readyz_is_200_when_the_database_redis_broker_and_a_worker_answer(settings):
    settings.AGENTSTATE_READY_PING_TIMEOUT_SECONDS = 2
    worker = processes.start_worker("ops-ready-worker")
    try:
        response = Client().get("/readyz")
    finally:
        worker.stop()
    assert response.status_code == 200, response.json()
    assert "ops-ready-worker" in response.json()["checks"]["workers"]["detail"]


def test_the_ops_endpoints_refuse_writes(client):
    assert client.post("/healthz").status_code == 405


def test_readyz_names_the_failed_check_but_never_shows_the_exception_text(caplog):
    from config import ops

    def broken() -> str:
        raise ConnectionError("cannot reach redis://admin:hunter2@10.1.2.3:6379")

    result = ops._check("redis", broken)
    assert result["ok"] is False
    assert "hunter2" not in result["detail"] and "10.1.2.3" not in result["detail"]
    assert "hunter2" in caplog.text  # the operator finds it in the log


@pytest.mark.django_db
def test_metrics_report_runs_stuck_runs_approvals_queue_and_engine_counters(
    client, tenant_a, settings
):
    settings.AGENTSTATE_METRICS_ALLOWED_IPS = ["127.0.0.1"]
    make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(5))
    make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    metrics.flush()  # what earlier tests' steps counted in this process
    metrics.redis_client().delete(metrics.DURATION_KEY, metrics.STEPS_KEY, metrics.SWEEPS_KEY)
    metrics.on_event({"kind": "step.finished", "duration_ms": 42.0})
    metrics.on_event({"kind": "step.failed", "outcome": "retrying"})
    metrics.flush()
    metrics.record_sweep("run_recovery", {"lost_leases": 2, "timers_woken": 0})
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    for line in [
        'agentstate_runs{status="running"} 1.0',
        'agentstate_runs{status="failed"} 1.0',
        'agentstate_stuck_runs{reason="lease_expired"} 1.0',
        'agentstate_stuck_runs{reason="retries_exhausted"} 1.0',
        "agentstate_approvals_pending 0.0",
        'agentstate_queue_depth{queue="celery"}',
        'agentstate_step_duration_seconds_bucket{le="0.05"} 1.0',
        'agentstate_step_duration_seconds_bucket{le="0.025"} 0.0',
        "agentstate_step_duration_seconds_count 1.0",
        "agentstate_step_retries_total 1.0",
        'agentstate_step_attempts_total{outcome="retrying"} 1.0',
        'agentstate_sweep_runs_total{sweep="run_recovery",what="lost_leases"} 2.0',
    ]:
        assert line in text, line


@pytest.mark.django_db
def test_metrics_report_recovery_latency_lost_attempts_by_host_and_leases_broken_early(
    client, settings
):
    import datetime as dt

    from django.utils import timezone

    settings.AGENTSTATE_METRICS_ALLOWED_IPS = ["127.0.0.1"]
    metrics.redis_client().delete(metrics.RECOVERY_KEY, metrics.LOST_KEY, metrics.SWEEPS_KEY)
    metrics.record_lost(worker="node-a:123", early=True)
    metrics.record_lost(worker="node-a:456", early=False)
    metrics.record_lost(worker="node-b:7", early=True)
    lost_at = timezone.now() - dt.timedelta(seconds=3.2)
    metrics.on_event({"kind": "step.started", "recovered": True, "lost_at": lost_at})
    text = client.get("/metrics").content.decode()
    for line in [
        'agentstate_recovery_seconds_bucket{le="2.5"} 0.0',
        'agentstate_recovery_seconds_bucket{le="5"} 1.0',
        "agentstate_recovery_seconds_count 1.0",
        'agentstate_lost_attempts_total{host="node-a"} 2.0',
        'agentstate_lost_attempts_total{host="node-b"} 1.0',
        "agentstate_leases_broken_early_total 2.0",
    ]:
        assert line in text, line
    assert 'what="leases_broken_early"' not in text, "counted once, under its own name"


def test_metrics_are_closed_unless_a_token_or_an_address_is_configured(client, settings):
    settings.AGENTSTATE_METRICS_ALLOWED_IPS = []
    settings.AGENTSTATE_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403


@pytest.mark.django_db
def test_metrics_can_be_limited_to_the_scrapers_addresses(client, settings):
    settings.AGENTSTATE_METRICS_ALLOWED_IPS = ["10.0.0.9"]
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.9").status_code == 200


@pytest.mark.django_db
def test_metrics_answer_a_scraper_with_the_token_and_refuse_a_wrong_one(client, settings):
    settings.AGENTSTATE_METRICS_ALLOWED_IPS = []
    settings.AGENTSTATE_METRICS_TOKEN = "s3cret-token"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 403
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert response.status_code == 200 and b"agentstate_runs" in response.content


def test_json_logs_carry_the_tenant_and_run_ids():
    record = logging.LogRecord("agents", logging.WARNING, __file__, 1, "run %s stuck", ("r",), None)
    with bind(tenant_id="t-1", run_id="r-1"):
        ContextFilter().filter(record)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "run r stuck" and line["level"] == "WARNING"
    assert (line["tenant_id"], line["run_id"], line["logger"]) == ("t-1", "r-1", "agents")
    assert "timestamp" in line


@pytest.mark.django_db
def test_a_request_logs_with_its_tenant_and_the_run_of_its_url(client_for, tenant_a, caplog):
    run = make_run(tenant_a, status="failed")
    with caplog.at_level(logging.INFO, logger="agents.console.actions"):
        client_for("admin").post(f"/console/runs/{run.pk}/resolve/", {"version": run.version})
    [record] = [r for r in caplog.records if r.name == "agents.console.actions"]
    assert record.tenant_id == str(tenant_a.pk) and record.run_id == str(run.pk)


def test_every_model_of_our_apps_is_in_the_django_admin():
    ours = ("tenants", "agents", "approvals")
    missing = [
        m._meta.label
        for label in ours
        for m in apps.get_app_config(label).get_models()
        # Views (unmanaged) repeat rows of listed tables; the event log has a composite key,
        # which the admin cannot show.
        if m not in admin.site._registry and m._meta.managed
    ]
    assert missing == []


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["run", "checkpoint", "stepattempt", "toolcall", "runevent"])
def test_engine_tables_are_read_only_in_the_django_admin(members, model):
    user = members["admin"].user
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    assert client.get(f"/django-admin/agents/{model}/").status_code == 200
    assert client.get(f"/django-admin/agents/{model}/add/").status_code == 403


@pytest.mark.django_db
def test_the_django_admin_shows_only_the_current_tenants_runs(members, tenant_b):
    mine = make_run(members["admin"].tenant, status="failed")
    theirs = make_run(tenant_b, status="failed")
    user = members["admin"].user
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    page = client.get("/django-admin/agents/run/").content.decode()
    assert str(mine.pk) in page and str(theirs.pk) not in page


@pytest.mark.django_db
def test_the_django_admin_shows_accounts_to_staff_but_never_edits_them(members):
    user = members["admin"].user
    user.is_staff = user.is_superuser = True
    user.save()
    target = members["member"].user
    client = Client()
    client.force_login(user)
    assert client.get("/django-admin/auth/user/").status_code == 200
    page = client.get(f"/django-admin/auth/user/{target.pk}/change/")
    assert page.status_code == 200 and b"pbkdf2" not in page.content
    response = client.post(
        f"/django-admin/auth/user/{target.pk}/change/",
        {"username": target.username, "is_superuser": "on", "is_staff": "on"},
    )
    assert response.status_code == 403
    assert client.get("/django-admin/auth/user/add/").status_code == 403
    target.refresh_from_db()
    assert not target.is_superuser and not target.is_staff


@pytest.mark.django_db
def test_the_django_admin_refuses_a_tenant_admin_who_is_not_platform_staff(members):
    client = Client()
    client.force_login(members["admin"].user)
    response = client.get("/django-admin/")
    assert response.status_code == 302 and "/django-admin/login/" in response["Location"]
