from __future__ import annotations

import pytest
from django.test import Client

from tenants.models import Role
from tests import factories, processes
from tests.processes import TEST_RATE_LIMIT

ROLES = [Role.ADMIN, Role.MANAGER, Role.MEMBER, Role.VIEWER]


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


@pytest.fixture(scope="session")
def console_url(django_db_setup, django_db_blocker):
    """uvicorn serving the console (and the demo payment provider) on the test database."""
    proc, url = processes.start_asgi("console")
    yield url
    proc.stop()
