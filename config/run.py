"""`make run`: migrate, load the demo, then run web + worker + beat under honcho."""

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
    honcho = Path(python).parent / "honcho"
    # exec: honcho receives Ctrl-C directly and stops web, worker and beat.
    os.execv(str(honcho), [str(honcho), "start", "-f", str(BASE_DIR / "Procfile")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
