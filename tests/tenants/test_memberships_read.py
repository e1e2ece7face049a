"""The per-request membership read gives exactly what the ORM query it replaces gives."""

from __future__ import annotations

from django.forms.models import model_to_dict

from tenants import scope
from tenants.models import Membership, Role, Tenant
from tenants.selectors import memberships_for_user
from tests import factories


def test_memberships_for_user_match_the_orm_query_field_for_field(db):
    user = factories.make_user()
    zeta = factories.make_tenant("zeta-co")
    alpha = factories.make_tenant("alpha-co")
    factories.make_tenant("not-mine")
    factories.make_member(zeta, Role.MANAGER, user=user)
    factories.make_member(alpha, Role.ADMIN, user=user)
    with scope.system_scope("test"):
        Tenant.objects.filter(pk=alpha.pk).update(api_rate_limits={"write": "5/min"})
    with scope.transaction_scope():
        scope.activate(tenant_id=None, user_id=user.pk)
        fast = memberships_for_user(user)
        orm = list(
            Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__name")
        )
    assert [m.tenant.slug for m in fast] == ["alpha-co", "zeta-co"]
    for got, want in zip(fast, orm, strict=True):
        assert model_to_dict(got) == model_to_dict(want)
        assert got.created_at == want.created_at and got.tenant.pk == want.tenant.pk
        assert model_to_dict(got.tenant) == model_to_dict(want.tenant)
        assert got.tenant.created_at == want.tenant.created_at
    assert fast[0].tenant.api_rate_limits == {"write": "5/min"}
    assert not fast[0]._state.adding and fast[0]._state.db == "default"


def test_own_memberships_sets_the_user_alone_and_reads_in_one_round_trip(db):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tenants.selectors import own_memberships

    user = factories.make_user()
    mine = factories.make_tenant("mine-co")
    factories.make_member(mine, Role.MEMBER, user=user)
    factories.make_member(factories.make_tenant("theirs-co"), Role.ADMIN)
    with scope.transaction_scope():
        scope.activate(tenant_id=mine.pk, user_id=999, system="left-over")
        with CaptureQueriesContext(connection) as statements:
            found = own_memberships(user)
        assert scope.current_settings() == ("", str(user.pk), "")
    assert [m.tenant.slug for m in found] == ["mine-co"]
    assert len(statements.captured_queries) == 1


def test_own_memberships_outside_a_transaction_is_refused(transactional_db):
    import pytest

    from tenants.selectors import own_memberships

    with pytest.raises(RuntimeError, match="inside transaction.atomic"):
        own_memberships(factories.make_user())
