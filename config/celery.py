"""The Celery app: Redis broker, at-least-once delivery."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agentstate")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes the database connection around every task unless this is set
# (it ignores CONN_MAX_AGE); reconnecting cost ~10 ms per task (bench/README.md). Broken or
# expired connections are still dropped by close_old_connections() in the tasks.
app.conf.update(CELERY_DB_REUSE_MAX=1000)
app.autodiscover_tasks()
