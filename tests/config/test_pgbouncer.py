"""Behind a transaction-pooling PgBouncer (Debian's `pgbouncer`): many clients share a few
server connections, each only for the length of one transaction, so nothing may live on a
connection between transactions (session settings, advisory locks, prepared statements
before PgBouncer 1.21).

A real PgBouncer in `pool_mode = transaction` sits in front of this session's PostgreSQL with
two server connections (one for the isolation test); a Celery worker and the web process
reach the database only through it, with AGENTSTATE_PREPARED_STATEMENTS=0 (Debian 12 ships
PgBouncer 1.18, which cannot keep prepared statements in this mode).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import connection

from agents.demo.models import DemoRefund
from config import embedded
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.agents.test_durability import assert_exactly_once, start_refund, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


class Bouncer:
    def __init__(self, pool_size: int) -> None:
        if not os.path.exists(PGBOUNCER):
            raise RuntimeError("PgBouncer is missing: apt-get install pgbouncer (.ci/run does)")
        server = urlsplit(processes.test_database_url())
        self.dir = Path(tempfile.mkdtemp(prefix="agentstate-pgbouncer-"))
        self.port = processes.free_port()
        (self.dir / "userlist.txt").write_text(f'"{server.username}" "{server.password}"\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server.hostname} port={server.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = scram-sha-256\nauth_file = {self.dir / 'userlist.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmin_pool_size = 0\n"
            "reserve_pool_size = 0\nmax_client_conn = 500\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\npidfile = {self.dir / 'pgbouncer.pid'}\n"
        )
        argv = [PGBOUNCER, str(self.dir / "pgbouncer.ini")]
        if os.getuid() == 0:  # PgBouncer refuses to run as root, like PostgreSQL
            user = pwd.getpwnam(embedded.PG_SYSTEM_USER)
            os.chmod(self.dir, 0o755)
            for path in [self.dir, *self.dir.iterdir()]:
                os.chown(path, user.pw_uid, user.pw_gid)
            argv[1:1] = ["-u", user.pw_name]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.url = urlunsplit(server._replace(netloc=f"{server.username}:{server.password}"
                                              f"@127.0.0.1:{self.port}"))  # fmt: skip
        deadline = time.monotonic() + 15
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"PgBouncer did not start:\n{self.log()}") from None
                time.sleep(0.1)

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def bouncer():
    made: list[Bouncer] = []

    def start(pool_size: int = 2) -> Bouncer:
        made.append(Bouncer(pool_size))
        return made[-1]

    yield start
    for one in made:
        one.stop()


def test_a_tenant_setting_ends_with_its_transaction_on_a_shared_server_connection(
    bouncer, tenant_a, tenant_b
):
    pooled = bouncer(pool_size=1)  # every client below gets the same server connection
    with tenant_scope(tenant_a.pk):
        factories.make_member(tenant_a, "member")
    with psycopg.connect(pooled.url) as first, psycopg.connect(pooled.url) as second:
        with first.transaction():
            first.execute("SELECT set_config('app.tenant_id', %s, true)", [str(tenant_a.pk)])
            pid = first.execute("SELECT pg_backend_pid()").fetchone()[0]
            assert first.execute("SELECT count(*) FROM tenants_membership").fetchone()[0] == 1
        with second.transaction():
            assert second.execute("SELECT pg_backend_pid()").fetchone()[0] == pid
            # The first client's tenant went with its transaction: no tenant, no rows.
            assert second.execute("SELECT current_setting('app.tenant_id', true)").fetchone()[
                0
            ] in (None, "")
            assert second.execute("SELECT count(*) FROM tenants_membership").fetchone()[0] == 0


def test_through_a_pool_of_two_connections_a_worker_makes_each_refund_once_and_the_api_keeps_tenants_apart(  # noqa: E501
    bouncer, tenant_a, tenant_b
):
    pooled = bouncer(pool_size=2)
    env = {"DATABASE_URL": pooled.url, "AGENTSTATE_PREPARED_STATEMENTS": "0"}
    web, url = processes.start_asgi("pgbouncer-web", **env)
    worker = processes.start_worker(
        "pgbouncer-worker", DEMO_PAYMENTS_URL=url + "/demo/payments/refunds", **env
    )
    try:
        customer = factories.principal_for(
            factories.make_member(tenant_a, "member", user=factories.make_user("carol"))
        )
        runs = [start_refund(customer) for _ in range(3)]
        for run in runs:
            wait_for_status(run, {"succeeded", "failed"}, timeout=90)
            assert_exactly_once(run)
        assert DemoRefund.objects.count() == 3

        keys = {
            tenant.pk: factories.make_api_key(tenant, scopes=["read"]).raw
            for tenant in (tenant_a, tenant_b)
        }
        mine = {str(run.pk) for run in runs}

        def runs_seen(tenant_pk) -> set[str]:
            import httpx

            answer = httpx.get(
                url + "/api/v1/runs?limit=50",
                headers={"Authorization": f"Bearer {keys[tenant_pk]}"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text[:300]
            return {row["id"] for row in answer.json()["results"]}

        asks = [tenant_a.pk, tenant_b.pk] * 20
        with ThreadPoolExecutor(max_workers=8) as pool:
            seen = list(pool.map(runs_seen, asks))
        for tenant_pk, ids in zip(asks, seen, strict=True):
            assert ids == (mine if tenant_pk == tenant_a.pk else set()), tenant_pk
    finally:
        worker.stop()
        web.stop()
    logs = worker.log_path.read_text(errors="replace") + web.log_path.read_text(errors="replace")
    assert "prepared statement" not in logs, "a statement was prepared"
    connection.close()  # the fixtures' flush opens a fresh connection
