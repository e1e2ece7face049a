"""The LangGraph door's common step is answered on the event loop (no thread hop): what it
saves is what the threads' path saves, it counts the tenant's step bucket, and a connection
that breaks under it costs the graph nothing (the threads' path answers that step)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading

import psycopg
import pytest
from django.db import connection, connections

from agents.runtime import external_fast
from agents.runtime.models import Checkpoint, ExternalCheckpoint, ExternalWrite, Run
from agents.web import langgraph_steps
from tenants.scope import tenant_scope
from tests import factories
from tests.windows import clear_of_a_window_edge

pytestmark = [pytest.mark.django_db(transaction=True)]


def step_ops(thread: str, i: int) -> list[dict]:
    put = {
        "op": "put", "thread_id": thread, "checkpoint_id": str(i), "type": "json",
        "blob": base64.b64encode(b"{}").decode(), "next": ["n"] if i < 4 else [],
        "step": f"n{i}",
    }  # fmt: skip
    if i == 0:
        return [put]
    write = {
        "op": "writes", "thread_id": thread, "checkpoint_id": str(i - 1), "task_id": f"t{i}",
        "writes": [{"idx": 0, "channel": "i", "type": "json",
                    "blob": base64.b64encode(b"1").decode()}],
    }  # fmt: skip
    return [write, put]


async def post(key: str, ops: list[dict]) -> tuple[int, dict]:
    """One request through the door's ASGI application, as uvicorn hands it over."""
    body = json.dumps({"ops": ops}).encode()
    scope = {
        "type": "http", "method": "POST", "path": langgraph_steps.PATH,
        "headers": [(b"authorization", f"Bearer {key}".encode()),
                    (b"content-length", str(len(body)).encode())],
    }  # fmt: skip
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await langgraph_steps.application(scope, receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"])


@pytest.fixture(autouse=True)
def _door_connections_closed():
    """The door runs in this process here: the connections of each test's loop and of the
    door's threads are closed when it ends (the test database is dropped after)."""
    yield
    langgraph_steps.loop_connections.close_all()
    if langgraph_steps._threads:
        pool = langgraph_steps._threads.pop()
        threads = pool._max_workers
        together = threading.Barrier(threads, timeout=5)

        def close_this_threads() -> None:
            connections.close_all()
            with contextlib.suppress(threading.BrokenBarrierError):
                together.wait()  # so each thread closes its own, once

        for done in [pool.submit(close_this_threads) for _ in range(threads)]:
            done.result()
        pool.shutdown()


@pytest.fixture(autouse=True)
def _keys_reused_for_the_whole_test(monkeypatch):
    """Which path saves a step depends on the key read at the first step being reused (for 10 s
    in production): on a loaded CI machine a test's steps took longer than that, and a step
    after it read the key again on the threads' path."""
    monkeypatch.setattr(langgraph_steps._RecentKeys, "KEY_REUSE_SECONDS", 300.0)


def terminate(pid: int) -> None:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        # gone once its pid has left pg_stat_activity
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            pass


@pytest.fixture
def counted(monkeypatch):
    """Which path saved each step: "loop" (astep) or "threads" (step). A step past the edge of
    the step bucket's minute finds no units counted ahead for the new one and goes to the
    threads (a CI run's fifth step did): the test starts clear of it."""
    clear_of_a_window_edge()
    paths: list[str] = []
    astep, step = external_fast.astep, external_fast.step

    async def on_loop(conn, **kw):
        paths.append("loop")
        return await astep(conn, **kw)

    def on_thread(**kw):
        paths.append("threads")
        return step(**kw)

    monkeypatch.setattr(external_fast, "astep", on_loop)
    monkeypatch.setattr(external_fast, "step", on_thread)
    return paths


def test_a_known_keys_steps_are_saved_on_the_event_loop_as_the_threads_save_them(tenant_a, counted):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw

    async def graph() -> list[tuple[int, dict]]:
        return [await post(key, step_ops("loop", i)) for i in range(5)]

    answers = asyncio.run(graph())

    assert [status for status, _ in answers] == [200] * 5
    # The first step reads the key (the threads' path makes the run); the rest run on the loop.
    assert counted == ["loop"] * 4
    with tenant_scope(tenant_a.pk):
        run = Run.objects.get(session__title="loop")
        assert (run.status, run.step_seq, run.event_seq) == ("succeeded", 5, 7)
        assert [a["saved"][0]["run_id"] for _, a in answers] == [str(run.pk)] * 5
        assert Checkpoint.objects.filter(run=run).count() == 5
        assert ExternalCheckpoint.objects.filter(thread_id="loop").count() == 5
        assert ExternalWrite.objects.filter(thread_id="loop").count() == 4


def test_a_loop_connection_lost_between_two_steps_costs_the_graph_nothing(tenant_a, counted):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw

    async def graph() -> list[int]:
        statuses = [(await post(key, step_ops("lost", i)))[0] for i in range(2)]
        # The loop's connection dies (a restart, a failover) while the graph thinks.
        held = langgraph_steps.loop_connections._free[0][0]
        await asyncio.to_thread(terminate, held.info.backend_pid)
        statuses += [(await post(key, step_ops("lost", i)))[0] for i in range(2, 5)]
        return statuses

    assert asyncio.run(graph()) == [200] * 5
    # Step 2 found its connection gone: the threads answered it; then a new one on the loop.
    assert counted == ["loop", "loop", "threads", "loop", "loop"]
    with tenant_scope(tenant_a.pk):
        run = Run.objects.get(session__title="lost")
        assert (run.status, run.step_seq) == ("succeeded", 5)


def test_steps_on_the_loop_count_in_the_tenants_step_bucket_and_its_limit_holds(
    tenant_a, settings, counted
):
    clear_of_a_window_edge(3600, margin=60)
    settings.API_RATE_LIMIT_LANGGRAPH = "300/hour"  # counted ahead in blocks of three
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw

    async def steps() -> list[int]:
        return [(await post(key, step_ops(f"t{i}", 0)))[0] for i in range(320)]

    statuses = asyncio.run(steps())

    assert statuses.count(200) == 300 and statuses[300:] == [429] * 20
    assert "loop" in counted and "threads" in counted  # a block taken on the loop, then refilled


def test_the_loops_connections_are_bounded_by_the_doors_thread_setting(tenant_a, settings):
    settings.LANGGRAPH_STEP_THREADS = 1

    async def take_two() -> tuple[object, object]:
        first = await langgraph_steps.loop_connections.take()
        second = await langgraph_steps.loop_connections.take()
        assert isinstance(first, psycopg.AsyncConnection)
        await langgraph_steps.loop_connections.drop(first)
        return first, second

    _, second = asyncio.run(take_two())
    assert second is None  # the request then takes the threads' path
