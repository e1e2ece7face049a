"""The top bar links to the Django admin only for platform staff (`is_staff`): the admin
refuses everyone else, tenant admins included."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants.models import Role
from tests import factories

pytestmark = pytest.mark.django_db
WHO = ["admin", "manager", "member", "viewer", "outsider"]
LINK = 'href="/django-admin/">Django admin</a>'


@pytest.mark.parametrize("who", WHO)
def test_a_member_who_is_not_staff_sees_no_django_admin_link(client_for, who):
    client = client_for(who)
    page = client.get("/").content.decode()
    assert "<nav" in page and LINK not in page
    # The link would only have led to a refusal: the Django admin sends them to its login.
    refused = client.get("/django-admin/")
    assert refused.status_code == 302 and "/django-admin/login/" in refused["Location"]


def test_platform_staff_see_the_django_admin_link_and_it_opens(tenant_a):
    user = factories.make_user("staffer")
    user.is_staff = user.is_superuser = True
    user.save()
    factories.make_member(tenant_a, Role.VIEWER, user=user)
    client = Client()
    client.force_login(user)
    assert LINK in client.get("/").content.decode()
    assert client.get("/django-admin/").status_code == 200


def test_platform_staff_without_a_membership_see_the_link_too(db):
    user = factories.make_user("operator")
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    assert LINK in client.get("/", follow=True).content.decode()
