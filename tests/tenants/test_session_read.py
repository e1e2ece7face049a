"""The session store reads a session as Django's database store does, in one statement."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore as DjangoStore
from django.contrib.sessions.models import Session
from django.utils import timezone

from tenants.auth.sessions import SessionStore


def test_the_console_uses_the_one_statement_session_store():
    assert settings.SESSION_ENGINE == "tenants.auth.sessions"


def test_a_saved_session_reads_back_the_same_as_through_djangos_store(db):
    saved = SessionStore()
    saved["_auth_user_id"] = "7"
    saved["note"] = {"nested": [1, 2]}
    saved.create()
    ours, django = SessionStore(saved.session_key), DjangoStore(saved.session_key)
    assert (
        dict(ours.items())
        == dict(django.items())
        == {
            "_auth_user_id": "7",
            "note": {"nested": [1, 2]},
        }
    )
    assert ours.session_key == saved.session_key
    row = Session.objects.get(pk=saved.session_key)
    read = ours._get_session_from_db()
    assert (read.session_data, read.expire_date) == (row.session_data, row.expire_date)


def test_an_expired_session_reads_empty_and_forgets_its_key(db):
    saved = SessionStore()
    saved["_auth_user_id"] = "7"
    saved.create()
    Session.objects.filter(pk=saved.session_key).update(
        expire_date=timezone.now() - dt.timedelta(seconds=1)
    )
    ours = SessionStore(saved.session_key)
    assert dict(ours.items()) == {}
    assert ours.session_key is None


def test_an_unknown_or_malformed_key_reads_empty(db):
    for key in ("nosuchsessionkey0000000000000000", "short", "x" * 40, "' OR 1=1 --aaaaaaaa"):
        store = SessionStore(key)
        assert dict(store.items()) == {}
        assert store.session_key is None


def test_a_session_changed_and_saved_reads_back_changed(db):
    saved = SessionStore()
    saved["n"] = 1
    saved.create()
    again = SessionStore(saved.session_key)
    again["n"] = 2
    again.save()
    assert SessionStore(saved.session_key)["n"] == 2
