"""Celery tasks act for exactly one tenant."""

from __future__ import annotations

import pytest

from config.celery import app
from tenants.models import Membership
from tenants.scope import current_settings
from tenants.tasks import TenantTask
from tests import factories


@app.task(base=TenantTask, name="tests.count_memberships")
def count_memberships(*, tenant_id: str) -> dict:
    return {"setting": current_settings()[0], "rows": Membership.objects.count()}


def test_a_tenant_task_sees_only_its_tenants_rows(tenant_a, tenant_b):
    factories.make_member(tenant_a)
    factories.make_member(tenant_b)
    factories.make_member(tenant_b)
    result = count_memberships.apply(kwargs={"tenant_id": str(tenant_b.pk)}).get()
    assert result == {"setting": str(tenant_b.pk), "rows": 2}
    assert current_settings()[0] == ""


def test_a_tenant_task_without_a_tenant_is_refused(db):
    with pytest.raises(ValueError, match="needs tenant_id"):
        count_memberships.apply(kwargs={"tenant_id": ""}).get()
