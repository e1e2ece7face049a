"""Celery tasks of the admin console: take ids or nothing, call a function, nothing else."""

from __future__ import annotations

from celery import shared_task

from agents.console.stuck import detect_stuck


@shared_task(name="agents.detect_stuck_runs")
def detect_stuck_runs() -> dict:
    """Beat: count and log stuck runs (the console lists them; /metrics reports them)."""
    return detect_stuck()
