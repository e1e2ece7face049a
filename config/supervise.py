"""`make run`'s process supervisor: runs every line of a Procfile, prefixes their output with
the process name, and restarts a process that dies (a worker killed with SIGKILL, a crashed
web server) instead of stopping everything, as honcho does. Ctrl-C or SIGTERM stops them all.

    python -m config.supervise [Procfile]
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
# A process that keeps dying is restarted less and less often, up to this many seconds apart.
MAX_BACKOFF_SECONDS = 30.0
# A process that ran this long before dying starts again at once.
HEALTHY_SECONDS = 10.0


@dataclass
class Child:
    name: str
    command: str
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    backoff: float = 0.0
    restart_at: float | None = None
    buffer: bytes = field(default=b"")


def read_procfile(path: Path) -> list[Child]:
    children = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        name, _, command = line.partition(":")
        children.append(Child(name.strip(), command.strip()))
    return children


class Supervisor:
    def __init__(self, children: list[Child], *, out=None) -> None:
        self.children = children
        self.out = out or sys.stdout
        self.stopping = False
        self.selector = selectors.DefaultSelector()
        self.width = max(len(c.name) for c in children)

    def say(self, name: str, text: str) -> None:
        self.out.write(f"{time.strftime('%H:%M:%S')} {name:<{self.width}} | {text}\n")
        self.out.flush()

    def start(self, child: Child) -> None:
        child.proc = subprocess.Popen(
            # exec: the shell expands the line's variables and becomes the process, so the pid
            # we watch (and a kill) is the process itself.
            [
                "/bin/sh",
                "-c",
                child.command if child.command.startswith("exec ") else f"exec {child.command}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole
        )
        child.started_at = time.monotonic()
        child.restart_at = None
        assert child.proc.stdout is not None
        os.set_blocking(child.proc.stdout.fileno(), False)
        self.selector.register(child.proc.stdout, selectors.EVENT_READ, child)
        self.say(child.name, f"started with pid {child.proc.pid}")

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: setattr(self, "stopping", True))
        for child in self.children:
            self.start(child)
        while not self.stopping:
            self._pump(timeout=0.2)
            self._reap()
        self.stop()
        return 0

    def _pump(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            child: Child = key.data
            try:
                data = key.fileobj.read()  # type: ignore[union-attr]
            except OSError:
                data = b""
            if data is None:  # nothing more for now (a non-blocking pipe)
                continue
            if not data:  # end of output: the process is gone
                self.selector.unregister(key.fileobj)
                continue
            child.buffer += data
            *lines, child.buffer = child.buffer.split(b"\n")
            for line in lines:
                self.say(child.name, line.decode(errors="replace"))

    def _reap(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.proc is not None and child.proc.poll() is not None:
                code = child.proc.returncode
                ran = now - child.started_at
                child.backoff = (
                    0.0
                    if ran >= HEALTHY_SECONDS
                    else min(MAX_BACKOFF_SECONDS, child.backoff * 2 or 1)
                )
                how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
                self.say(
                    child.name, f"{how} after {ran:.0f} s; restarting in {child.backoff:.0f} s"
                )
                child.proc = None  # its output is drained to the end by _pump
                child.restart_at = now + child.backoff
            if child.proc is None and child.restart_at is not None and now >= child.restart_at:
                self.start(child)

    def stop(self) -> None:
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                self.say(child.name, "stopping")
                os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait(5)


def main(argv: list[str]) -> int:
    procfile = Path(argv[0]) if argv else BASE_DIR / "Procfile"
    return Supervisor(read_procfile(procfile)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
