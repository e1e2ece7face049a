"""A database, pool or broker outage answers 503 with `Retry-After`, never a traceback.

`TenantMiddleware` owns the request's transaction, so it is where an outage is caught: when
the transaction cannot begin or commit, and (through `process_exception`) when a view hits
one. The answer is rolled back like any refusal, and rendered without touching the database.

A 503 means nothing was written, so a client may send the request again. When the request
has committed and only a hook after the commit fails (the queue message of a run it started,
with Redis away), the work is durable and the sweeps send what the queue missed, so the
client gets the view's own answer, not a 503 that would have it start the run twice.
"""

from __future__ import annotations

import logging
import time

import kombu.exceptions
import psycopg
import redis.exceptions
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader

logger = logging.getLogger(__name__)

# OperationalError covers a refused or dropped connection, a pool timeout (psycopg_pool's
# PoolTimeout is one), a restart in progress and a cancelled statement: all pass with time.
OUTAGES: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    kombu.exceptions.OperationalError,
)
RETRY_AFTER_SECONDS = 5
MESSAGE = "The service is briefly unavailable (its database or queue did not answer). Try again."
_last_logged = 0.0


def is_outage(exc: BaseException) -> bool:
    if isinstance(exc, DatabaseError) and not isinstance(exc, OperationalError | InterfaceError):
        return False  # an IntegrityError or DataError is a bug or bad input, not an outage
    return isinstance(exc, OUTAGES)


def log_after_commit(request: HttpRequest, exc: BaseException) -> None:
    """The request's writes committed, then a commit hook (a queue message) hit an outage."""
    logger.warning(
        "%s %s committed; a hook after the commit failed (%s: %s): the sweeps send what was "
        "not sent",
        request.method,
        request.path_info,
        type(exc).__name__,
        exc,
    )


def unavailable_response(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """503 in the API's error format for /api/, a plain page for browsers."""
    global _last_logged
    now = time.monotonic()
    if now - _last_logged > 10:  # an outage fails every request: say so, not a thousand times
        _last_logged = now
        logger.warning("answering 503: %s: %s", type(exc).__name__, exc)
    if request.path_info.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {"code": "unavailable", "message": MESSAGE}, status=503
        )
    else:
        response = HttpResponse(loader.render_to_string("503.html"), status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response
