"""Engine counters for Prometheus, kept in Redis so every worker process on every host adds
to the same numbers and the web process serving /metrics reads them (config/ops.py).

Workers count in memory and send the counts at most once a second (one pipelined round trip
after a step commits), so the per-step cost is a dict update. Counts of the last second of a
killed process are lost; they are metrics, not records.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import Counter
from typing import Any

from django.utils import timezone

from agents.runtime import progress
from core.redis_client import connect as redis_connect

PREFIX = "agentstate:metrics:"
DURATION_KEY = PREFIX + "step_duration"  # per-bucket counts (not cumulative), sum, count
STEPS_KEY = PREFIX + "steps"  # by outcome: succeeded, retrying, failed
SWEEPS_KEY = PREFIX + "sweeps"  # "<sweep>:<what>" -> runs touched
RECOVERY_KEY = PREFIX + "recovery"  # lost → claimed again: per-bucket counts, sum, count
LOST_KEY = PREFIX + "lost"  # lost attempts by the host of the worker that was lost
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
FLUSH_SECONDS = 1.0

_lock = threading.Lock()
_durations: Counter = Counter()
_steps: Counter = Counter()
_duration_sum = 0.0
_last_flush = time.monotonic()
_client: Any = None


def redis_client(timeout: float = 2.0) -> Any:
    """A Redis client for the configured REDIS_URL (shared by this process)."""
    global _client
    if _client is None:
        _client = redis_connect(socket_timeout=timeout, socket_connect_timeout=timeout)
    return _client


def _bucket(seconds: float) -> str:
    for le in BUCKETS:
        if seconds <= le:
            return str(le)
    return "+Inf"


def on_event(event: dict[str, Any]) -> None:
    """Progress subscriber: count finished steps (with their duration) and failed attempts."""
    global _duration_sum
    kind = event.get("kind")
    if kind == "step.finished" and "duration_ms" in event:
        seconds = float(event["duration_ms"]) / 1000
        with _lock:
            _durations[_bucket(seconds)] += 1
            _duration_sum += seconds
            _steps["succeeded"] += 1
    elif kind == "step.failed":
        with _lock:
            _steps[str(event.get("outcome") or "failed")] += 1
    elif kind == "step.started" and event.get("recovered"):
        record_recovery((timezone.now() - event["lost_at"]).total_seconds())
        return
    else:
        return
    if time.monotonic() - _last_flush >= FLUSH_SECONDS:
        flush()


def flush() -> None:
    """Send what this process counted since the last flush."""
    global _duration_sum, _last_flush
    with _lock:
        durations, steps, total = dict(_durations), dict(_steps), _duration_sum
        _durations.clear()
        _steps.clear()
        _duration_sum = 0.0
        _last_flush = time.monotonic()
    if not durations and not steps:
        return
    try:
        pipe = redis_client().pipeline(transaction=False)
        for field, n in durations.items():
            pipe.hincrby(DURATION_KEY, field, n)
        if durations:
            pipe.hincrbyfloat(DURATION_KEY, "sum", total)
            pipe.hincrby(DURATION_KEY, "count", sum(durations.values()))
        for field, n in steps.items():
            pipe.hincrby(STEPS_KEY, field, n)
        pipe.execute()
    except Exception:  # noqa: BLE001 - metrics never break the engine
        import logging

        logging.getLogger(__name__).warning("could not send metrics to Redis", exc_info=True)


def record_sweep(sweep: str, counts: dict[str, int]) -> None:
    """Add what a beat sweep did (sweeps run once per tick, so no buffering)."""
    nonzero = {f"{sweep}:{k}": v for k, v in counts.items() if isinstance(v, int) and v}
    if not nonzero:
        return
    try:
        pipe = redis_client().pipeline(transaction=False)
        for field, n in nonzero.items():
            pipe.hincrby(SWEEPS_KEY, field, n)
        pipe.execute()
    except Exception:  # noqa: BLE001
        import logging

        logging.getLogger(__name__).warning("could not send sweep metrics", exc_info=True)


def record_lost(*, worker: str, early: bool) -> None:
    """A run was taken back from a lost worker (`early`: before its lease expired)."""
    host = worker.rpartition(":")[0] or worker  # "host:pid": pids churn, hosts do not
    _send_counts([(LOST_KEY, host, 1), (SWEEPS_KEY, "leases_broken_early", int(early))])


def record_recovery(seconds: float) -> None:
    """A lost run was claimed again `seconds` after its worker was last seen alive."""
    _send_counts(
        [
            (RECOVERY_KEY, _bucket(seconds), 1),
            (RECOVERY_KEY, "count", 1),
            (RECOVERY_KEY, "sum_ms", round(seconds * 1000)),
        ]
    )


def _send_counts(counts: list[tuple[str, str, int]]) -> None:
    try:
        pipe = redis_client().pipeline(transaction=False)
        for key, field, n in counts:
            if n:
                pipe.hincrby(key, field, n)
        pipe.execute()
    except Exception:  # noqa: BLE001 - metrics never break the engine
        import logging

        logging.getLogger(__name__).warning("could not send recovery metrics", exc_info=True)


STORED = {
    "durations": DURATION_KEY,
    "steps": STEPS_KEY,
    "sweeps": SWEEPS_KEY,
    "recovery": RECOVERY_KEY,
    "lost": LOST_KEY,
}


def read() -> dict[str, dict[str, float]]:
    """The counters as stored: {"durations": {...}, "steps": {...}, "sweeps": {...}, ...}."""
    client = redis_client()
    pipe = client.pipeline(transaction=False)
    for key in STORED.values():
        pipe.hgetall(key)
    raw = pipe.execute()
    return {
        name: {k.decode(): float(v) for k, v in found.items()}
        for name, found in zip(STORED, raw, strict=True)
    }


_installed = False


def install() -> None:
    """Subscribe to progress events (once per process)."""
    global _installed
    if _installed:
        return
    progress.subscribe(on_event)
    atexit.register(flush)
    _installed = True
