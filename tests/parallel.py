"""Servers of its own for each pytest-xdist worker (`make test` runs the suite on `-n` workers).

A pytest plugin (`-p tests.parallel` in pyproject's addopts): it runs before pytest-django loads
the settings. A worker (gw0, gw1, ...) of a session on the embedded servers gets embedded
PostgreSQL and Redis of its own under <var dir>/workers/<worker>, started here and stopped when
it ends: its Celery broker queues, channel layer groups, rate-limit and liveness keys, test
database and the outage tests that stop and restart the servers touch no other worker's. Given
servers by URL instead (DATABASE_URL not the embedded one), a worker keeps them: pytest-django
names its test database after it, and it takes a Redis database number of its own (Redis
pub/sub is not per database, so the live groups are shared, told apart by their run ids).
Either way the logs of its child processes go to a folder of its own.

A worker's own PostgreSQL is thrown away with its tests, so it runs with `fsync = off`
(`ALTER SYSTEM`, kept across the restarts the outage tests make): a killed or crashed
PostgreSQL loses nothing with it, as every WAL record it wrote is still in the operating
system's cache; only a crash of the machine itself would, and no test crashes the machine.
Commits still wait for their WAL to be written (`synchronous_commit` stays on, so a server
killed mid-step loses no commit it answered), and full-page writes stay on. The `solo`
pass, the chaos test among it, runs on the embedded server with PostgreSQL's defaults.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

_started: dict[str, bool] = {}
# Where the first worker writes the test groups it collected, for the controller's scheduler.
GROUPS_FILE = "AGENTSTATE_TEST_GROUPS"


def _worker() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")


def _own_redis_db(url: str, worker: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url  # a unix socket URL says its database in the query string: kept
    return urlunsplit(parts._replace(path=f"/{int(worker.removeprefix('gw')) + 1}"))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # No test process warms the embedding model: importing config.asgi (a test's websocket
    # does) would load torch and export the model in the background in every worker, ~10 s
    # of CPU each, for the few tests that search by meaning (they load it when they do).
    os.environ.setdefault("MEMORY_WARM_QUERY_MODEL", "0")
    os.environ.setdefault("WEB_PRELOAD_MCP", "0")  # and none imports the MCP SDK unless used
    worker = _worker()
    if worker is None:
        return
    from config import embedded

    base = Path(__file__).resolve().parents[1]
    logs = Path(os.environ.get("AGENTSTATE_TEST_LOG_DIR") or base / "var" / "test-logs")
    os.environ["AGENTSTATE_TEST_LOG_DIR"] = str(logs / worker)
    on_embedded = os.environ.get("DATABASE_URL") == embedded.running_postgres_url() and (
        os.environ.get("REDIS_URL") == embedded.running_redis_url()
    )
    if not on_embedded or not os.environ.get("DATABASE_URL"):
        if os.environ.get("REDIS_URL"):
            os.environ["REDIS_URL"] = _own_redis_db(os.environ["REDIS_URL"], worker)
        return
    shared_models = embedded.var_dir() / "models"
    own = embedded.var_dir() / "workers" / worker
    os.environ["AGENTSTATE_VAR_DIR"] = str(own)
    # The embedding model's exported query graph (memory/search/onnx_encoder.py) is the same
    # for every worker: exported once (torch, ~20 s of CPU), opened by every process after.
    shared_models.mkdir(parents=True, exist_ok=True)
    own.mkdir(parents=True, exist_ok=True)
    if not (own / "models").is_symlink():
        shutil.rmtree(own / "models", ignore_errors=True)
        (own / "models").symlink_to(shared_models, target_is_directory=True)
    _started.update(embedded._status())
    os.environ["DATABASE_URL"] = embedded.ensure_postgres()
    os.environ["REDIS_URL"] = embedded.ensure_redis()
    info = embedded._pg_info()
    assert info is not None  # ensure_postgres() wrote it
    _no_fsync(info.super_url)


def _no_fsync(super_url: str) -> None:
    """This worker's server writes without flushing to disk (see the module docstring): the
    suite is CPU-bound on two cores; without the flushes make test-fast took ~5 % less here."""
    with psycopg.connect(super_url, autocommit=True) as conn:
        if conn.execute("SHOW fsync").fetchone()[0] != "off":
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("SELECT pg_reload_conf()")


def pytest_configure(config: pytest.Config) -> None:
    if _worker() is None and config.getvalue("dist") == "loadgroup":
        fd, path = tempfile.mkstemp(prefix="agentstate-test-groups-", suffix=".json")
        os.close(fd)
        os.environ[GROUPS_FILE] = path  # the workers, started after this, inherit it


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The browser tests (`e2e`) are one group, run by one worker one after another (one
    Chromium, one console server) while the others take the rest; the largest group goes out
    first. Handed out one at a time instead, three browsers ran at once and the pass was no
    shorter here (the machine's two cores are busy either way). The tests that load the
    embedding model are a group too (`uses_model`, tests/memory/conftest.py)."""
    if not _worker():
        return
    browser = [item for item in items if item.get_closest_marker("e2e")]
    for item in browser:
        item.add_marker(pytest.mark.xdist_group("browser"))
    chosen = set(browser)
    items[:] = browser + [item for item in items if item not in chosen]
    path = os.environ.get(GROUPS_FILE)
    if _worker() == "gw0" and path:
        groups = {}
        for item in items:
            names = sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group")})
            if names:
                groups[item.nodeid] = "+".join(names)
        tmp = f"{path}.tmp"
        Path(tmp).write_text(json.dumps(groups))
        os.replace(tmp, path)


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 - xdist's type
    """`--dist loadgroup`: xdist's, with the groups the first worker collected (xdist 3.8
    marks a group in the test's id, which pytest 9 no longer lets it change). Every worker
    reports its collection before the first test is handed out, so the file is written."""
    path = os.environ.get(GROUPS_FILE)
    if _worker() is not None or not path:
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LoadGroups(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                text = Path(path).read_text()
                self.groups = json.loads(text) if text else {}
            return self.groups.get(nodeid, nodeid)

    return LoadGroups(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _worker() is None and os.environ.get(GROUPS_FILE):
        Path(os.environ.pop(GROUPS_FILE)).unlink(missing_ok=True)
    if not _started:
        return
    import logging

    from config import embedded

    # Stop only what this worker started, as `python -m config.embedded exec` does. The
    # session is over: its liveness thread's complaint that Redis went away is noise.
    logging.getLogger("agents.runtime.liveness").disabled = True
    if not _started["redis"]:
        embedded.stop_redis()
    if not _started["postgres"]:
        embedded.stop_postgres()
