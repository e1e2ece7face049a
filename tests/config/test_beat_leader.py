"""Beat without a single point of failure: several beat processes, one sends the schedule
(it holds a lease in PostgreSQL), and a standby takes over within seconds of its death."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from core import leader
from core.models import LeaderLease
from tests import processes

pytestmark = pytest.mark.django_db(transaction=True)


def test_one_holder_at_a_time_and_a_standby_takes_an_expired_lease():
    assert leader.hold("job", "a", 60)
    assert not leader.hold("job", "b", 60)  # a holds it
    assert leader.hold("job", "a", 60)  # renewed
    LeaderLease.objects.filter(name="job").update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert leader.hold("job", "b", 60)  # a let it run out: b takes it
    assert not leader.hold("job", "a", 60)  # and a is a standby now
    leader.release("job", "b")
    assert leader.hold("job", "a", 60)  # released: taken at once
    assert leader.hold("other", "b", 60)  # leases are by name


def test_a_holder_that_cannot_reach_the_database_is_not_the_holder(monkeypatch):
    class Down:
        closed = False

        def cursor(self):
            raise ConnectionError("no database")

        def close(self):
            self.closed = True

    down = Down()
    monkeypatch.setattr(leader, "connection", down)
    assert not leader.hold("job", "a", 60)
    assert down.closed  # made anew at the next try


def sent(proc: processes.Proc) -> int:
    """How many due tasks this beat has sent."""
    return len(re.findall(r"Sending due task", proc.log()))


@pytest.mark.slow
def test_of_two_beats_one_sends_and_the_other_takes_over_when_it_is_killed():
    first = processes.start_beat("beat-a", AGENTSTATE_BEAT_LEASE_SECONDS="2")
    try:
        processes.wait_until(lambda: sent(first) >= 3, timeout=30, what="beat a to send")
        second = processes.start_beat("beat-b", AGENTSTATE_BEAT_LEASE_SECONDS="2")
        try:
            processes.wait_until(
                lambda: "standby" in second.log(), timeout=30, what="beat b to stand by"
            )
            before = sent(first)
            processes.wait_until(
                lambda: sent(first) >= before + 3, timeout=30, what="beat a to go on sending"
            )
            assert sent(second) == 0  # one beat sends, the other waits
            first.kill9()
            processes.wait_until(lambda: sent(second) >= 2, timeout=10, what="beat b to take over")
            [lease] = LeaderLease.objects.filter(name="celery-beat")
            assert lease.holder.split(":")[1] == str(second.pid)
        finally:
            second.stop()
    finally:
        first.stop()
