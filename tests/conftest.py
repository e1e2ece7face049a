from __future__ import annotations

import contextlib
import time

import psycopg
import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from whitenoise.middleware import WhiteNoiseMiddleware

from agents.console import live, stuck
from agents.runtime import queue
from agents.runtime import selectors as runtime_selectors
from approvals import selectors as approval_selectors
from core.redis_client import client as redis_client
from tenants.models import Role
from tests import factories, flush, processes
from tests.processes import TEST_RATE_LIMIT

ROLES = [Role.ADMIN, Role.MANAGER, Role.MEMBER, Role.VIEWER]
LOG_TAIL = 4000
_first_child = pytest.StashKey[int]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    item.stash[_first_child] = len(processes.started)
    try:
        return (yield)
    finally:
        del processes.started[item.stash[_first_child] :]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """A failed test's report ends with the last lines of each child process it started (a
    worker, a server): in CI they are not on disk afterwards."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        for proc in processes.started[item.stash.get(_first_child, 0) :]:
            with contextlib.suppress(OSError):
                tail = proc.log()[-LOG_TAIL:]
                report.sections.append((f"Log of child process {proc.name} (its end)", tail))
    return report


@pytest.fixture
def tenant_a(db):
    return factories.make_tenant("acme-test")


@pytest.fixture
def tenant_b(db):
    return factories.make_tenant("globex-test")


@pytest.fixture
def members(tenant_a):
    """One membership of tenant A per role."""
    return {role: factories.make_member(tenant_a, role) for role in ROLES}


@pytest.fixture
def outsider(tenant_b):
    """An admin of tenant B: the strongest role, in the wrong tenant."""
    return factories.make_member(tenant_b, Role.ADMIN)


@pytest.fixture
def client_for(members, outsider):
    """A logged-in browser client for a role name, or 'outsider', or 'anonymous'."""

    def make(who: str) -> Client:
        client = Client()
        if who == "anonymous":
            return client
        membership = outsider if who == "outsider" else members[who]
        client.force_login(membership.user)
        return client

    return make


@pytest.fixture(autouse=True)
def _fast_password_hashing(request, settings):
    # PBKDF2 is slow on purpose; tests create many users and need no protection here.
    # Browser tests log in through a separate server process, which keeps the real hasher.
    if request.node.get_closest_marker("e2e"):
        return
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _generous_rate_limits(settings):
    # Tests start many runs with one key at once; tests/tenants/test_rate_limits.py sets
    # small limits of its own. Still counted in Redis, so the throttle runs everywhere.
    settings.API_RATE_LIMIT_READ = settings.API_RATE_LIMIT_WRITE = TEST_RATE_LIMIT


@pytest.fixture(scope="session", autouse=True)
def _static_files_listed_once():
    """Django's test Client builds the middleware anew for each client, and WhiteNoise lists
    and stats every static file each time (~30 ms, about a tenth of the quick suite's CPU).
    The files do not change during a session: they are listed once per static configuration
    and each new middleware gets the same entries (what it serves is unchanged)."""
    original = WhiteNoiseMiddleware.add_files_from_finders
    listed: dict[tuple, dict] = {}

    def add_files_from_finders(self) -> None:
        key = (
            self.static_prefix,
            self.max_age,
            self.allow_all_origins,
            self.charset,
            tuple(map(str, django_settings.STATICFILES_DIRS)),
            tuple(django_settings.STATICFILES_FINDERS),
            tuple(django_settings.INSTALLED_APPS),
        )
        if key not in listed:
            before = dict(self.files)
            original(self)
            listed[key] = {url: f for url, f in self.files.items() if before.get(url) is not f}
        self.files.update(listed[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders
    yield
    WhiteNoiseMiddleware.add_files_from_finders = original


@pytest.fixture(scope="session")
def console_url(django_db_setup, django_db_blocker):
    """uvicorn serving the console (and the demo payment provider) on the test database."""
    proc, url = processes.start_asgi("console")
    yield url
    proc.stop()


@pytest.fixture(autouse=True)
def _no_urgent_leftovers():
    """A run an earlier test sent at URGENT (nobody consumes it here) would end every slice
    of this one after its first step (agents/runtime/queue.py)."""
    queue.urgent_waiting.cache_clear()
    # Nor may an earlier test's stuck sweep leave its stored counts in force here, or the
    # counts its live feeds kept in this process.
    live._stuck_by_tenant.clear()
    approval_selectors._backlog.clear()
    runtime_selectors._counts_after_event.clear()
    with contextlib.suppress(redis.RedisError):  # a test that stops Redis brings it back
        redis_client().delete(queue.URGENT_RUNS_KEY, stuck.COUNTED_KEY)


@pytest.fixture(scope="session", autouse=True)
def _flush_retries_a_deadlock():
    """A transactional test's tables are emptied when it ends: by deleting their rows on the
    embedded server (tests/flush.py), else by `flush` (TRUNCATE). A server process of the test
    (a late live update, a poll of a page still open) may take a lock in the meantime, even
    after `_quiet_database_before_flush` saw none, and PostgreSQL settles the cycle by failing
    one side: it is tried again, as nothing was emptied."""
    from django.core.management.base import CommandError
    from django.core.management.commands import flush as flush_command

    original = flush_command.Command.handle

    def handle(self, **options):
        for attempt in range(5):
            try:
                if flush.delete_all_rows(options.get("database") or "default"):
                    return None
                return original(self, **options)
            except (CommandError, psycopg.errors.DeadlockDetected) as exc:
                cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
                if attempt == 4 or "deadlock detected" not in str(cause):
                    raise
                time.sleep(0.2 * (attempt + 1))
        return None

    flush_command.Command.handle = handle
    yield
    flush_command.Command.handle = original


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test database, with the connection that empties it closed before the
    database is dropped."""
    yield
    flush.close()


@pytest.fixture(autouse=True)
def _quiet_database_before_flush(request, django_db_blocker):
    """A transactional test's tables are emptied (TRUNCATE) when it ends; a server process
    still answering its last request or pushing a live update holds locks TRUNCATE needs,
    and PostgreSQL may settle that as a deadlock, failing the flush. Wait for them first (set
    up after pytest-django's database fixture, so torn down before its flush)."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction"):
        return
    with django_db_blocker.unblock():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                    " AND (state = 'active' OR state LIKE 'idle in transaction%%')"
                )
                if cursor.fetchone()[0] == 0:
                    return
            time.sleep(0.05)
