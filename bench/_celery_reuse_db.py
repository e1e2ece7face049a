"""What-if Celery app for the benches: the project's app, but Celery's Django fixup keeps
the worker's database connection between tasks instead of closing it after every task.

Celery closes every Django connection before and after each task unless
CELERY_DB_REUSE_MAX is set (it ignores CONN_MAX_AGE), so each task pays a new PostgreSQL
connection (TCP + SCRAM + backend start). `--celery-app bench._celery_reuse_db` measures the
engine without that cost; the setting itself belongs in config/settings.py.
"""

from config.celery import app

app.conf.update(CELERY_DB_REUSE_MAX=1000)

__all__ = ["app"]
