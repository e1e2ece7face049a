"""One object per process: made once, and made again in a forked child."""

from __future__ import annotations

import os

from core.per_process import PerProcess


def test_the_object_is_made_once_per_process():
    made = []
    one = PerProcess(lambda: made.append(object()) or made[-1])
    assert one.get() is one.get() is made[0]
    assert one.made() is made[0] and len(made) == 1


def test_a_forked_child_makes_its_own_object_and_the_parent_keeps_its_own():
    one = PerProcess(lambda: [os.getpid()])
    parent = one.get()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it sees, then leave at once
        try:
            before = one.made()
            mine = one.get()
            ok = before is None and mine is not parent and mine == [os.getpid()]
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 2)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"ok"
    assert one.get() is parent
