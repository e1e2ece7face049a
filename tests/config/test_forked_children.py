"""The Celery workers the tests start are forked from a pre-imported Python (tests/zygote.py),
and are still what the durability tests claim to kill: processes of their own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import processes, zygote

pytestmark = [pytest.mark.slow]


def _parent(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError(f"no PPid for {pid}")


def test_a_forked_worker_is_a_process_group_of_its_own_that_kill_9_ends():
    """(Its environment is the one the test gave it: the durability tests' workers reach
    this test process's own database by it.)"""
    assert zygote.forkable([sys.executable, "-m", "celery", "worker"])
    worker = processes.start_worker("forked-own")  # it said "ready." in its own log
    try:
        pid = worker.pid
        assert _parent(pid) != os.getpid()  # the zygote's child, not this process's
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid
        assert worker.alive()
    finally:
        worker.kill9()  # kill -9 of its group, then waits for it through its pidfd
    assert not worker.alive()


def test_after_a_worker_is_killed_the_next_one_still_starts():
    first = processes.start_worker("forked-first")
    first.kill9()
    second = processes.start_worker("forked-second")
    try:
        assert second.alive() and second.pid != first.pid
    finally:
        second.stop()
    assert not second.alive()
