"""The Celery app: Redis broker, at-least-once delivery."""

import os

from celery import Celery
from celery.signals import worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Celery's Django fixup runs every system check when a worker or beat starts, which loads the
# whole URLconf (the MCP server, the API schema views: 1.8 s of CPU, half of a start). The
# checks are Django's own (no project checks are registered) and run where they belong: at
# `manage.py migrate`/`check` on deploy and in the web process. A replacement worker is ready
# sooner. CELERY_SKIP_CHECKS= (empty) runs them again.
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")

app = Celery("agentstate")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes the database connection around every task unless this is set
# (it ignores CONN_MAX_AGE); reconnecting cost ~10 ms per task (bench/README.md). Broken or
# expired connections are still dropped by close_old_connections() in the tasks.
app.conf.update(CELERY_DB_REUSE_MAX=1000)
app.autodiscover_tasks()


@worker_init.connect
def _refuse_a_channel_layer_we_cannot_publish_to(**_: object) -> None:
    """Workers publish live progress: a channel layer they cannot publish to stops the worker
    at startup instead of logging a configuration error at every step."""
    from django.core.exceptions import ImproperlyConfigured

    try:
        # config.celery loads with the settings, before the app registry is ready.
        from agents.live.broadcast import target

        target()
    except ImproperlyConfigured as exc:  # Celery logs and ignores exceptions from handlers
        raise SystemExit(f"ImproperlyConfigured: {exc}") from exc


@worker_process_init.connect
def _warm_the_embedding_model(**_: object) -> None:
    """Each process that runs tasks (a prefork child, or the solo pool's one) loads the local
    embedding model in the background as it starts (MEMORY_WARM_QUERY_MODEL), as web processes
    do: otherwise a restarted worker's first step that recalls memories waits for it."""
    # Sent once the app registry is ready; imported here like the handler above.
    from memory.search import query_vectors

    query_vectors.prepare_worker_process()
