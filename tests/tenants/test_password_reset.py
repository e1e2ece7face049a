"""Password reset by email: the same answer for every address, a link that works once, and a
limit per (address, client) pair like the login lockout's."""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tenants.auth import passwords
from tenants.tasks import send_password_reset
from tests import factories

NEW_PASSWORD = "another long passphrase 42"


@pytest.fixture
def alice(tenant_a):
    membership = factories.make_member(tenant_a, "member", user=factories.make_user("alice"))
    get_user_model().objects.filter(pk=membership.user_id).update(email="alice@example.com")
    return membership.user


@pytest.fixture
def queued(monkeypatch):
    """The addresses the request page queued the email task for."""
    sent: list[str] = []
    monkeypatch.setattr(send_password_reset, "delay", lambda *, email: sent.append(email))
    return sent


def browser() -> Client:
    # An address of its own: the limits are counted in Redis, which outlives a test.
    return Client(REMOTE_ADDR=f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.7")


def ask(client: Client, email: str, capture):
    with capture(execute=True):
        return client.post("/password/reset/", {"email": email})


def test_the_login_page_links_to_password_reset(db):
    html = Client().get("/login/").content.decode()
    assert 'href="/password/reset/"' in html
    page = Client().get("/password/reset/")
    assert page.status_code == 200 and 'id="id_email"' in page.content.decode()


def test_the_answer_is_the_same_for_a_known_and_an_unknown_address(
    alice, queued, django_capture_on_commit_callbacks
):
    known = ask(browser(), "alice@example.com", django_capture_on_commit_callbacks)
    unknown = ask(browser(), "nobody@example.com", django_capture_on_commit_callbacks)
    assert known.status_code == unknown.status_code == 302
    assert known["Location"] == unknown["Location"] == "/password/reset/sent/"
    # The lookup is the task's: both requests queue it, so both take the same time.
    assert queued == ["alice@example.com", "nobody@example.com"]
    page = Client().get("/password/reset/sent/").content.decode()
    assert "If an account has this address" in page


def test_the_email_goes_only_to_the_account_and_its_link_sets_a_new_password_once(
    alice, mailoutbox, settings
):
    settings.AGENTSTATE_CONSOLE_URL = "https://agents.example.com"
    send_password_reset(email="ALICE@example.com")
    [message] = mailoutbox
    assert message.to == ["alice@example.com"]
    assert message.subject == "Reset your AgentState password"
    assert "alice" in message.body and "works once" in message.body
    link = re.search(r"https://agents\.example\.com(/password/reset/\S+/)", message.body).group(1)
    client = Client()
    form = client.get(link, follow=True)
    assert "Choose a new password" in form.content.decode()
    set_url = form.redirect_chain[-1][0]
    assert "set-password" in set_url  # the token left the address bar
    response = client.post(set_url, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/password/reset/done/"
    alice.refresh_from_db()
    assert alice.check_password(NEW_PASSWORD)
    again = Client().get(link, follow=True).content.decode()
    assert "This link cannot be used" in again


def test_no_email_for_an_unknown_address_or_an_account_without_a_password(
    alice, mailoutbox, tenant_a
):
    sso_only = get_user_model().objects.create_user(
        username="sso", password=None, email="sso@example.com"
    )
    assert not sso_only.has_usable_password()
    send_password_reset(email="nobody@example.com")
    send_password_reset(email="sso@example.com")
    send_password_reset(email="not an address")
    assert mailoutbox == []


def test_a_weak_new_password_is_an_inline_error(alice, mailoutbox):
    send_password_reset(email="alice@example.com")
    link = re.search(r"(/password/reset/\S+/)", mailoutbox[0].body).group(1)
    client = Client()
    set_url = client.get(link, follow=True).redirect_chain[-1][0]
    response = client.post(set_url, {"new_password1": "123", "new_password2": "123"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="password2-error"' in html and "This password is too short" in html
    alice.refresh_from_db()
    assert alice.check_password(factories.PASSWORD)


@pytest.mark.parametrize("email", ["", "not-an-address", "a" * 300 + "@example.com"])
def test_a_bad_address_is_an_inline_error_and_queues_nothing(db, queued, email):
    response = browser().post("/password/reset/", {"email": email})
    assert response.status_code == 400
    assert 'id="email-error"' in response.content.decode()
    assert queued == []


def test_requests_for_one_address_from_one_client_are_limited_with_429(
    alice, queued, settings, django_capture_on_commit_callbacks
):
    settings.PASSWORD_RESET_RATE_LIMIT = "2/hour"
    client = browser()
    for _ in range(2):
        assert (
            ask(client, "alice@example.com", django_capture_on_commit_callbacks).status_code == 302
        )
    limited = ask(client, "alice@example.com", django_capture_on_commit_callbacks)
    assert limited.status_code == 429
    assert "Too many password reset requests" in limited.content.decode()
    assert 0 < int(limited["Retry-After"]) <= 3600
    assert queued == ["alice@example.com"] * 2
    # Another client asking for the same address is not locked out by this one.
    assert (
        ask(browser(), "alice@example.com", django_capture_on_commit_callbacks).status_code == 302
    )


def test_the_limit_answers_the_same_for_known_and_unknown_addresses(
    alice, queued, settings, django_capture_on_commit_callbacks
):
    settings.PASSWORD_RESET_RATE_LIMIT = "1/hour"
    answers = []
    for email in ("alice@example.com", "nobody@example.com"):
        client = browser()
        ask(client, email, django_capture_on_commit_callbacks)
        answers.append(ask(client, email, django_capture_on_commit_callbacks))
    assert [a.status_code for a in answers] == [429, 429]
    known, unknown = (re.sub(r'"X-CSRFToken": "[^"]*"', "", a.content.decode()) for a in answers)
    assert known == unknown


def test_one_client_asking_for_many_addresses_is_limited_too(
    db, queued, settings, django_capture_on_commit_callbacks
):
    settings.PASSWORD_RESET_ADDRESS_RATE_LIMIT = "3/hour"
    client = browser()
    statuses = [
        ask(client, f"person{i}@example.com", django_capture_on_commit_callbacks).status_code
        for i in range(4)
    ]
    assert statuses == [302, 302, 302, 429]


def test_a_mistyped_reset_rate_stops_startup_naming_the_setting(settings):
    from django.core.exceptions import ImproperlyConfigured

    from tenants import throttling

    settings.PASSWORD_RESET_RATE_LIMIT = "often"
    with pytest.raises(ImproperlyConfigured, match="PASSWORD_RESET_RATE_LIMIT"):
        throttling.check_settings()


def test_the_reset_link_uses_the_console_address_not_the_request_host(alice, mailoutbox, settings):
    settings.AGENTSTATE_CONSOLE_URL = "https://agents.example.com/"
    passwords.password_reset_send(email="alice@example.com")
    assert "https://agents.example.com/password/reset/" in mailoutbox[0].body
