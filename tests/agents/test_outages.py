"""Outages, tested by stopping the real servers: PostgreSQL killed (`pg_ctl -m immediate`, every
connection dropped, WAL replayed at restart) and Redis (the Celery broker, the live pub/sub
and the rate limits) stopped, while real workers are in the middle of steps.

Every run still succeeds with each step and each side effect exactly once (the checks of
tests/agents/test_durability.py), none ends `failed`; the API answers 503 in its error format
or does the work durably; websockets come back and catch up; beat keeps scheduling.

These tests stop the embedded servers of this test session, so they skip unless DATABASE_URL
and REDIS_URL are the embedded servers under AGENTSTATE_VAR_DIR. Sharing a machine, give them
servers (and logs) of their own:

    AGENTSTATE_VAR_DIR=$PWD/var/outage AGENTSTATE_TEST_LOG_DIR=$PWD/var/outage/test-logs \
        make test PYTEST_ARGS=tests/agents/test_outages.py
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from agents.demo.models import DemoRefund
from agents.runtime.models import Run
from config import embedded
from config.celery import app as celery_app
from tests import factories, processes
from tests.agents.test_durability import assert_exactly_once, load, start_refund, wait_for_status
from tests.processes import CHILD_SECRET_KEY, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FINISHED = {"succeeded", "failed", "cancelled"}
REFUND = "Please refund $40 for order A-1002"
# Queued (AGENTSTATE_RECOVERY_IN_BEAT=0) on a worker, or run inside beat (config/beat.py).
SWEEP_DONE = re.compile(r"Task agents\.recover_runs\[[^\]]+\] succeeded|recover_runs done in beat")


# --- the servers ----------------------------------------------------------------------------------


def _port(url: str | None) -> int | None:
    return urlsplit(url).port if url else None


@pytest.fixture(autouse=True)
def _own_servers():
    """Stop nothing but this session's embedded servers (the ones the children were given)."""
    pg, redis_url = embedded.running_postgres_url(), embedded.running_redis_url()
    if _port(pg) != _port(settings.DATABASE_URL) or _port(redis_url) != _port(settings.REDIS_URL):
        pytest.skip("DATABASE_URL / REDIS_URL are not the embedded servers of AGENTSTATE_VAR_DIR")


@contextlib.contextmanager
def postgres_down(seconds: float) -> Iterator[None]:
    """PostgreSQL killed like a crash (every backend dropped), started again after `seconds`
    (or once the block is done, if later)."""
    connection.close()
    assert embedded.stop_postgres(mode="immediate")
    started = time.monotonic()
    try:
        yield
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
    finally:
        embedded.ensure_postgres()


@contextlib.contextmanager
def redis_down() -> Iterator[None]:
    assert embedded.stop_redis()
    try:
        yield
    finally:
        embedded.ensure_redis()
        # This process's pooled broker connection still holds the socket Redis closed (and
        # Redis answers "loading" for a moment): use it until it answers, so that the tests
        # after this one find it working.
        wait_until(_broker_answers, timeout=15, what="the broker to answer this process")


def _broker_answers() -> bool:
    try:
        celery_app.control.ping(timeout=0.05)
    except Exception:  # noqa: BLE001 - a connection from before the restart; dropped by this
        return False
    return True


def arm_sleep(failpoints, name: str, seconds: float) -> Path:
    """Hold the first worker that reaches `name` there for `seconds` (it removes the file)."""
    path = failpoints.dir / name
    draft = path.with_suffix(".draft")
    draft.write_text(f"sleep:{seconds}")
    draft.rename(path)  # at once: an empty file would kill the worker instead
    return path


def sweeps_done(procs) -> int:
    """Recovery sweeps these processes ran."""
    return sum(len(SWEEP_DONE.findall(proc.log())) for proc in procs)


def in_model_step(runs: list[Run], at_least: int) -> bool:
    current = [load(run) for run in runs]
    return sum(r.status == "running" and r.current_step == "model" for r in current) >= at_least


def _call(url: str, *, method: str = "GET", body: dict | None = None, **headers: str):
    data = json.dumps(body).encode() if body is not None else None
    request = Request(url, data=data, method=method, headers={**headers})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urlopen(request, timeout=30) as response:
            return response.status, _lower(response.headers), response.read()
    except HTTPError as error:
        return error.code, _lower(error.headers), error.read()


def _lower(headers) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


# --- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker):
    """A web server that gives up on the database after a second (503, not a long wait)."""
    proc, url = processes.start_asgi("outage-web", DB_POOL_TIMEOUT_SECONDS="1")
    yield url
    proc.stop()


def hold_at(failpoints, point: str) -> None:
    """Have a worker wait at `point` of a step; return once one does."""
    if point == "before_persist":
        # The refund step's: held after the provider answered, then before the checkpoint
        # (the outcome is in the ledger, the step is not).
        armed = arm_sleep(failpoints, "tool.after_call.issue_refund", 0.5)
        wait_until(lambda: not armed.exists(), timeout=30, what="the refund")
        armed = arm_sleep(failpoints, "step.before_persist.tools", 2)
    else:  # the provider refunded; the outcome is not recorded yet
        armed = arm_sleep(failpoints, "tool.after_call.issue_refund", 2)
    wait_until(lambda: not armed.exists(), timeout=30, what=f"a worker to hold at {point}")


def assert_503(web: str, key) -> None:
    """The API in its error format, and pages plain, both with Retry-After."""
    status, headers, body = _call(web + "/api/v1/runs", Authorization=f"Bearer {key.raw}")
    assert status == 503 and headers["retry-after"], body
    assert json.loads(body)["code"] == "unavailable"
    status, headers, body = _call(web + "/runs/", Cookie="sessionid=x")
    assert status == 503 and headers["retry-after"] and b"Briefly unavailable" in body


@pytest.mark.parametrize("point", ["llm_call", "before_persist", "tool_call"])
def test_postgresql_killed_mid_step_every_run_in_flight_succeeds_with_each_side_effect_once(
    point, cluster, customer, failpoints, web
):
    workers = [
        cluster.worker(
            f"{name}-{point}", LLM_SCRIPTED_DELAY_SECONDS="1.5" if point == "llm_call" else "0.3"
        )
        for name in ("pg-1", "pg-2")
    ]
    cluster.beat()
    key = factories.make_api_key(customer.tenant, ["read"])
    runs = [start_refund(customer) for _ in range(3)]
    if point == "llm_call":
        wait_until(lambda: in_model_step(runs, 2), timeout=30, what="two LLM calls in flight")
        time.sleep(0.3)
    else:
        hold_at(failpoints, point)
    with postgres_down(seconds=2):
        assert_503(web, key)
    for run in runs:
        wait_for_status(run, FINISHED, timeout=90)
    for run in runs:
        assert_exactly_once(run)
    requests = sorted(DemoRefund.objects.values_list("requests", flat=True))
    assert len(requests) == 3
    if point == "tool_call":  # sent again with its key after the restart, refunded once
        assert 2 in requests
    assert any("a service is unavailable" in w.log() for w in workers), "the outage hit a step"
    # The web process answers again once its pool has connected anew: the pool retries a
    # failed connection with a growing pause, which several restarts in one module (this web
    # server serves all three) can make longer than the runs took to finish.
    wait_until(
        lambda: _call(web + "/api/v1/runs", Authorization=f"Bearer {key.raw}")[0] == 200,
        timeout=30,
        what="the API to answer again after the restart",
    )


def test_a_worker_holding_a_run_through_a_postgresql_restart_resumes_it_on_the_same_message_in_seconds(  # noqa: E501
    cluster, customer, web
):
    """The task waits for the database with its message in hand instead of sending it back
    with a countdown: a worker with a backlog resends nothing during the outage, and the run
    it held is stepping again within seconds of the restart."""
    worker = cluster.worker("pg-hold", LLM_SCRIPTED_DELAY_SECONDS="1.5")
    cluster.beat()
    runs = [start_refund(customer) for _ in range(6)]
    wait_until(lambda: in_model_step(runs, 1), timeout=30, what="an LLM call in flight")
    held = next(r for r in (load(run) for run in runs) if r.status == "running")
    with postgres_down(seconds=3):
        pass
    back = time.time()
    wait_until(
        lambda: load(held).updated_at.timestamp() > back, timeout=30, what="the held run to move"
    )
    moved = load(held).updated_at.timestamp() - back
    for run in runs:
        wait_for_status(run, FINISHED, timeout=90)
    for run in runs:
        assert_exactly_once(run)
    assert "a service is unavailable" in worker.log(), "the outage hit the step"
    assert "Retry in" not in worker.log(), "a message was sent back to the queue"
    assert moved < 4, f"the held run moved {moved:.1f} s after the database was back"
    key = factories.make_api_key(customer.tenant, ["read"])
    wait_until(  # as the tests above: the module's web server reconnects before the next test
        lambda: _call(web + "/api/v1/runs", Authorization=f"Bearer {key.raw}")[0] == 200,
        timeout=30,
        what="the API to answer again after the restart",
    )


# --- Redis ----------------------------------------------------------------------------------------


def test_redis_stopped_mid_run_the_runs_finish_once_and_a_run_started_meanwhile_is_not_lost(
    cluster, customer, web
):
    for name in ("redis-1", "redis-2"):
        cluster.worker(name, LLM_SCRIPTED_DELAY_SECONDS="1")
    beat = cluster.beat()
    wait_until(lambda: sweeps_done([beat]), timeout=30, what="beat to sweep")
    auth = {
        "Authorization": f"Bearer {factories.make_api_key(customer.tenant, ['read', 'write']).raw}"
    }
    runs = [start_refund(customer) for _ in range(2)]
    wait_until(lambda: in_model_step(runs, 2), timeout=30, what="two LLM calls in flight")
    with redis_down():
        # Starting a run commits it, then cannot send its queue message: the run is durable
        # and the recovery sweep sends it once Redis is back, so the answer is the run, not
        # a 503 that would have the client start it twice.
        status, _, body = _call(
            web + "/api/v1/runs",
            method="POST",
            body={"agent": "refund_desk", "input": {"customer": "carol", "message": REFUND}},
            **auth,
        )
        assert status == 201, body
        started = Run(pk=json.loads(body)["id"], tenant_id=customer.tenant.pk)
        assert load(started).status == "queued"
        status, _, body = _call(web + "/api/v1/runs", **auth)  # reads need no Redis
        assert status == 200, body
        time.sleep(2)  # the runs in flight go on meanwhile
    for run in runs:
        wait_for_status(run, FINISHED, timeout=60)
        assert_exactly_once(run)
    assert wait_for_status(started, FINISHED, timeout=60).status == "succeeded"
    refunds = DemoRefund.objects.filter(idempotency_key__startswith=str(started.pk))
    assert [r.requests for r in refunds] == [1]
    assert DemoRefund.objects.count() == 3
    # Beat lived through it and schedules again: the run started during the outage was sent
    # by nothing but the recovery sweep, and sweeps keep running.
    assert beat.alive()
    done = sweeps_done([beat])
    wait_until(lambda: sweeps_done([beat]) > done + 2, timeout=20, what="sweeps after")


# --- websockets -----------------------------------------------------------------------------------


def _ws_url(console_url: str) -> str:
    return console_url.replace("http://", "ws://") + "/ws/live/"


def _cookie(user, test_settings) -> str:
    """A logged-in browser's session, signed with the key the web server has."""
    test_settings.SECRET_KEY = CHILD_SECRET_KEY
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def _subscribe(ws, run: Run, after: int = 0) -> None:
    ws.send(json.dumps({"type": "subscribe", "kind": "run", "run": str(run.pk), "after": after}))


def _shown(messages: list[str]) -> int:
    """The number of the last event the page shows (the run-seq marker of each update)."""
    return max((int(n) for m in messages for n in re.findall(r'data-seq="(\d+)"', m)), default=0)


def _receive_until(ws, seq: int, timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while _shown(seen) < seq:
        seen.append(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
    return seen


def test_a_live_socket_open_through_a_redis_outage_is_caught_up_and_new_ones_try_again_later(
    cluster, customer, console_url, settings
):
    # One slice for the whole run: it finishes while Redis is away (a next slice would wait
    # for the queue).
    cluster.worker("ws-1", LLM_SCRIPTED_DELAY_SECONDS="1", AGENTSTATE_SLICE_SECONDS="60")
    url = _ws_url(console_url)
    headers = {"Cookie": _cookie(customer.user, settings), "Origin": console_url}
    run = start_refund(customer)
    with ws_connect(url, additional_headers=headers, open_timeout=10) as ws:
        _subscribe(ws, run)
        shown = _shown([ws.recv(timeout=10)])
        assert load(run).status in ("queued", "running")
        with redis_down():
            # A page opened meanwhile is told to come back later (1013, on which htmx's ws
            # extension reconnects with backoff), not answered with a failed handshake.
            with ws_connect(url, additional_headers=headers, open_timeout=10) as late:
                with pytest.raises(ConnectionClosed) as closed:
                    late.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
            # The run finishes while Redis is away: none of its live messages is sent (the
            # worker drops what it could not send within a second or two).
            final = wait_for_status(run, FINISHED, timeout=30)
            assert final.status == "succeeded"
            assert shown < final.event_seq
            time.sleep(2.5)
        # The open socket catches up from the database once the layer answers again.
        caught_up = _receive_until(ws, final.event_seq, timeout=15)
        assert 'Status: <span class="badge status-succeeded">' in "".join(caught_up)
    # A page that reconnects with the last event it shows gets the rest.
    with ws_connect(url, additional_headers=headers, open_timeout=10) as again:
        _subscribe(again, run, after=shown)
        assert _shown([again.recv(timeout=10)]) == final.event_seq
    assert urlopen(console_url + "/login/", timeout=5).status == 200  # the web lived through it
