"""`make run`'s supervisor: a process that dies is started again, with a line saying so, and
stopping the supervisor stops every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from config.supervise import read_procfile

BASE_DIR = Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def pids_of(log: Path, name: str) -> list[int]:
    return [
        int(line.rsplit(" ", 1)[1])
        for line in log.read_text().splitlines()
        if f" {name} " in line and "started with pid" in line
    ]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_procfile_is_read_line_by_line():
    children = read_procfile(BASE_DIR / "Procfile")
    assert [c.name for c in children] == ["web", "worker", "beat"]


def test_a_killed_process_is_restarted_and_stopping_the_supervisor_stops_them_all(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "sleeper: exec sleep 600\n"
        f"talker: exec {sys.executable} -u -c "
        "\"import time; print('hello', flush=True); time.sleep(600)\"\n"
    )
    log = tmp_path / "out.log"
    with log.open("w") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "config.supervise", str(procfile)],
            cwd=BASE_DIR,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "hello" in log.read_text())
        [first] = wait_for(lambda: pids_of(log, "sleeper"))

        os.kill(first, signal.SIGKILL)  # as a crashed worker would die

        pids = wait_for(lambda: len(pids_of(log, "sleeper")) == 2 and pids_of(log, "sleeper"))
        assert "sleeper | killed by signal 9" in log.read_text()
        assert supervisor.poll() is None  # the others go on
        [talker] = pids_of(log, "talker")
        assert alive(talker) and alive(pids[1])
    finally:
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(20)
    assert not alive(pids[1]) and not alive(talker)
