"""Time from launching the stack (installs done) to the first 200 on the login page.

Launches what `make run` launches (`config.embedded exec -- config.run`: embedded PostgreSQL
and Redis, migrate, demo seed, gunicorn + Celery worker + beat under config/supervise.py), polls
/login/, then stops it with SIGINT as Ctrl-C would and times the clean stop too.

    .venv/bin/python bench/boot.py [--runs N]

cold: a new, empty data directory (initdb, all migrations, demo data);
warm: the same data directory again (what a developer sees every day).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

BASE_DIR = Path(__file__).resolve().parent.parent
TARGET_S = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def boot_once(var_dir: Path) -> tuple[float, float]:
    port = free_port()
    env = {
        **os.environ,
        "AGENTSTATE_VAR_DIR": str(var_dir),
        "WEB_PORT": str(port),
        "DEBUG": "1",
        "AGENTSTATE_DEMO": "1",
    }
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "config.embedded", "exec", "--", sys.executable, "-m", "config.run"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/login/"
    while True:
        try:
            with urlopen(url, timeout=1) as response:
                if response.status == 200:
                    break
        except (URLError, ConnectionError, TimeoutError):
            pass
        if proc.poll() is not None:
            raise RuntimeError("the stack exited before serving the login page")
        if time.perf_counter() - started > 120:
            raise RuntimeError("no 200 on /login/ within 120 s")
        time.sleep(0.05)
    boot = time.perf_counter() - started
    stop_started = time.perf_counter()
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    proc.wait(60)
    stop = time.perf_counter() - stop_started
    leftovers = json.loads(
        subprocess.run(
            [sys.executable, "-m", "config.embedded", "status"],
            cwd=BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
        ).stdout
    )
    if any(leftovers.values()):
        raise RuntimeError(f"servers still running after Ctrl-C: {leftovers}")
    return boot, stop


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3, help="warm boots to time")
    args = parser.parse_args()
    var_dir = Path(tempfile.mkdtemp(prefix="agentstate-boot-"))
    try:
        cold_boot, cold_stop = boot_once(var_dir)
        warm = [boot_once(var_dir) for _ in range(args.runs)]
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    warm_boot = statistics.median(b for b, _ in warm)
    warm_stop = statistics.median(s for _, s in warm)
    print(f"{'launch':<8}{'first 200 (s)':>15}{'clean stop (s)':>16}{'target':>10}")
    print(f"{'cold':<8}{cold_boot:>15.2f}{cold_stop:>16.2f}{TARGET_S:>9.0f}s")
    warm_row = f"{'warm':<8}{warm_boot:>15.2f}{warm_stop:>16.2f}{TARGET_S:>9.0f}s"
    print(f"{warm_row}   (median of {args.runs})")
    result = {
        "bench": "boot",
        "cold_first_200_s": round(cold_boot, 3),
        "warm_first_200_s_median": round(warm_boot, 3),
        "warm_runs_s": [round(b, 3) for b, _ in warm],
        "clean_stop_s_median": round(warm_stop, 3),
        "target_s": TARGET_S,
        "met": cold_boot < TARGET_S and warm_boot < TARGET_S,
    }
    print(json.dumps(result))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
