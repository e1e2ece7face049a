"""Two writers giving one person's key its first value at the same moment: the second
supersedes the first instead of failing on the unique slot."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from memory.facts import remember
from tenants.scope import tenant_scope
from tests.memory.conftest import facts_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_writers_giving_a_key_its_first_value_at_once_end_with_one_live_fact(members):
    ada = members["member"]
    outcome: dict = {}

    def second_writer() -> None:
        try:
            with tenant_scope(ada.tenant_id):
                outcome["fact"] = remember.fact_remember(
                    tenant_id=ada.tenant_id,
                    subject_id=ada.user_id,
                    category="preference",
                    key="contact.channel",
                    text="Prefers SMS",
                )
        except Exception as exc:  # noqa: BLE001 - the test reports it
            outcome["error"] = exc
        finally:
            connection.close()

    with tenant_scope(ada.tenant_id), transaction.atomic():
        first = remember.fact_remember(
            tenant_id=ada.tenant_id,
            subject_id=ada.user_id,
            category="preference",
            key="contact.channel",
            text="Prefers email",
        )
        other = threading.Thread(target=second_writer)
        other.start()
        time.sleep(0.5)  # the second writer inserts and waits on the first's uncommitted slot
    other.join(10)
    assert "error" not in outcome, outcome.get("error")
    live = facts_of(ada, live_only=True)
    assert [(f.key, f.text) for f in live] == [("contact.channel", "Prefers SMS")]
    history = [f for f in facts_of(ada) if f.valid_until is not None]
    assert [(f.pk, f.superseded_by_id) for f in history] == [(first.pk, outcome["fact"].pk)]
