"""`make run`: migrate, load the demo, then run web + worker + beat under our supervisor
(config/supervise.py), which restarts any of them that dies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def main() -> int:
    python = sys.executable
    manage = [python, str(BASE_DIR / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], check=True, cwd=BASE_DIR)
    subprocess.run([*manage, "seed_demo"], check=True, cwd=BASE_DIR)
    host, port = os.environ.get("HOST", "127.0.0.1"), os.environ.get("WEB_PORT", "8000")
    print(f"\nAgentState console: http://{host}:{port}/   (Ctrl-C stops everything)\n", flush=True)
    # exec: the supervisor receives Ctrl-C directly and stops web, worker and beat; a process
    # that dies (a worker killed with SIGKILL) is started again, and the console stays up.
    os.chdir(BASE_DIR)
    os.execv(python, [python, "-m", "config.supervise", str(BASE_DIR / "Procfile")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
