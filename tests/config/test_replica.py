"""Reads that may lag, from a real streaming replica (`DATABASE_REPLICA_URL`, tenants/replica.py).

A physical standby of this session's embedded PostgreSQL (pg_basebackup, streaming) serves a
web process's list reads. Pausing the standby's replay makes it visibly behind: what the
lists show then proves where they read; row-level security binds the replica too; a caller
who has just written reads the primary.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from django.db import connection

from agents.runtime.models import Run
from config import embedded
from tenants.scope import tenant_scope
from tests import factories, processes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Replica:
    def __init__(self) -> None:
        info = embedded._pg_info()
        primary = urlsplit(processes.test_database_url())
        if info is None or primary.port != info.port:
            raise RuntimeError("the replica test makes a standby of the embedded PostgreSQL")
        self.dir = Path(tempfile.mkdtemp(prefix="agentstate-replica-"))
        self.port = processes.free_port()
        as_pg: dict = {}
        if os.getuid() == 0:  # PostgreSQL's files belong to its own user (config/embedded.py)
            user = pwd.getpwnam(embedded.PG_SYSTEM_USER)
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            as_pg = {"user": user.pw_uid, "group": user.pw_gid}
        self.dir.chmod(0o700)
        env = {**os.environ, "PGPASSWORD": info.super_password}
        bin_dir = embedded._pg_bin()
        subprocess.run(
            [str(bin_dir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(info.port), "-U",
             "postgres", "-D", str(self.dir), "-R", "-X", "stream", "-c", "fast"],
            check=True, capture_output=True, env=env, **as_pg,
        )  # fmt: skip
        self.log = self.dir.parent / f"{self.dir.name}.log"
        self.log.touch()
        if as_pg:
            os.chown(self.log, as_pg["user"], as_pg["group"])
        self._pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(self.dir)]
        self._as_pg = as_pg
        subprocess.run(
            [*self._pg_ctl, "-l", str(self.log), "-o", f"-p {self.port}", "-w", "start"],
            check=True, capture_output=True, start_new_session=True, **as_pg,
        )  # fmt: skip
        self.url = urlunsplit(primary._replace(netloc=primary.netloc.rsplit(":", 1)[0]
                                               + f":{self.port}"))  # fmt: skip
        self.super_url = (
            f"postgres://postgres:{info.super_password}@127.0.0.1:{self.port}/{primary.path[1:]}"
        )

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        with psycopg.connect(self.super_url, autocommit=True) as conn:
            return conn.execute(sql, params or []).fetchall()

    def has_run(self, run_id) -> bool:
        return bool(self.query("SELECT 1 FROM agents_run WHERE id = %s", [run_id]))

    def pause(self) -> None:
        self.query("SELECT pg_wal_replay_pause()")

    def resume(self) -> None:
        self.query("SELECT pg_wal_replay_resume()")

    def stop(self) -> None:
        subprocess.run([*self._pg_ctl, "-m", "immediate", "-w", "stop"], capture_output=True,
                       **self._as_pg)  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)
        self.log.unlink(missing_ok=True)


@pytest.fixture
def replica():
    made = Replica()
    yield made
    made.stop()


def make_run(tenant) -> str:
    with tenant_scope(tenant.pk):
        run = Run.objects.create(
            tenant=tenant, agent="refund_desk", agent_version=1, current_step="model",
            status="succeeded",
        )  # fmt: skip
    return str(run.pk)


def wait_for(check, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)


def test_list_reads_come_from_the_replica_within_the_tenant_until_the_caller_writes(
    replica, tenant_a, tenant_b
):
    web, url = processes.start_asgi(
        "replica-web", DATABASE_REPLICA_URL=replica.url, REPLICA_READ_YOUR_WRITES_SECONDS="30"
    )
    try:
        keys = {
            "a": factories.make_api_key(tenant_a, ["read", "write"]).raw,
            "a_reader": factories.make_api_key(tenant_a, ["read"]).raw,
            "b": factories.make_api_key(tenant_b, ["read"]).raw,
        }

        def listed(who: str) -> set[str]:
            answer = httpx.get(
                url + "/api/v1/runs?limit=50",
                headers={"Authorization": f"Bearer {keys[who]}"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text[:300]
            return {row["id"] for row in answer.json()["results"]}

        before = make_run(tenant_a)
        wait_for(lambda: replica.has_run(before), "the run to reach the replica")
        assert listed("a") == {before}
        assert listed("b") == set(), "row-level security binds the replica too"

        replica.pause()  # the replica stops applying the primary's changes
        behind = make_run(tenant_a)
        assert listed("a") == {before}, "the list was read from the replica, which is behind"
        assert listed("a_reader") == {before}

        started = httpx.post(
            url + "/api/v1/runs",
            headers={"Authorization": f"Bearer {keys['a']}"},
            json={"agent": "refund_desk", "input": {"customer": "c-1", "message": "hello"}},
            timeout=30,
        )
        assert started.status_code == 201, started.text[:300]
        mine = started.json()["id"]
        assert listed("a") == {before, behind, mine}, (
            "after its own write, a caller reads the primary"
        )
        assert listed("a_reader") == {before}, "another caller still reads the replica"

        replica.resume()
        wait_for(lambda: replica.has_run(mine), "the replica to catch up")
        assert listed("a_reader") == {before, behind, mine}
        assert listed("b") == set()
    finally:
        web.stop()
        connection.close()


def test_a_replica_that_cannot_be_reached_leaves_the_lists_on_the_primary(tenant_a):
    web, url = processes.start_asgi(
        "replica-gone-web",
        DATABASE_REPLICA_URL=f"postgres://nobody:x@127.0.0.1:{processes.free_port()}/nothing",
    )
    try:
        key = factories.make_api_key(tenant_a, ["read"]).raw
        run_id = make_run(tenant_a)
        answer = httpx.get(
            url + "/api/v1/runs?limit=50", headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        assert answer.status_code == 200, answer.text[:300]
        assert {row["id"] for row in answer.json()["results"]} == {run_id}
    finally:
        web.stop()
