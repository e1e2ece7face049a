"""Reads that may lag, from a replica (when `DATABASE_REPLICA_URL` is set).

A view that lists (runs, approvals, the console's lists) reads inside `replica_reads(request)`:
its ORM reads go to the replica, in a read-only transaction there that carries the request's
tenant (row-level security binds the replica as it binds the primary). It falls back to the
primary when no replica is configured, for anything but GET and HEAD, when the replica
cannot be reached, and for a caller who wrote in the last REPLICA_READ_YOUR_WRITES_SECONDS
(read-your-writes: a person who just started a run sees it in the list). The writes are
noted by `ReadYourWritesMiddleware`, per person or API key, in Redis.

Reads inside the block must be done inside it: render the page or serialize the rows there.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import redis
from django.conf import settings
from django.db import OperationalError, connections
from django.http import HttpRequest, HttpResponse

from core import db_routing
from core.redis_client import client as redis_client
from tenants.principal import Principal
from tenants.scope import tenant_scope

logger = logging.getLogger(__name__)
SAFE = ("GET", "HEAD", "OPTIONS")


def _caller(principal: Principal | None) -> str | None:
    if principal is None:
        return None
    if principal.api_key is not None:
        return f"key:{principal.api_key.pk}"
    return f"user:{principal.user.pk}" if principal.user is not None else None


def _key(caller: str) -> str:
    return f"agentstate:wrote:{caller}"


def wrote_recently(principal: Principal | None) -> bool:
    """Whether this caller wrote within the read-your-writes window (unknown: yes)."""
    caller = _caller(principal)
    if caller is None:
        return True
    try:
        return bool(redis_client().exists(_key(caller)))
    except redis.RedisError:
        return True  # cannot tell: read what is certainly current


@contextlib.contextmanager
def replica_reads(request: HttpRequest) -> Iterator[bool]:
    """Inside: the ORM's reads go to the replica when they may (see the module). Yields
    whether they do."""
    principal: Principal | None = getattr(request, "principal", None)
    if (
        not db_routing.replica_configured()
        or request.method not in ("GET", "HEAD")
        or principal is None
        or wrote_recently(principal)
    ):
        yield False
        return
    user_id = principal.user.pk if principal.user is not None else None
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(
                tenant_scope(principal.tenant.pk, user_id=user_id, using=db_routing.REPLICA)
            )
            on_replica = True
        except OperationalError:
            logger.warning("the replica cannot be reached: reading from the primary")
            connections[db_routing.REPLICA].close()
            on_replica = False
        if on_replica:
            stack.enter_context(db_routing.reads_from(db_routing.REPLICA))
        yield on_replica


class ReadYourWritesMiddleware:
    """Notes a caller's successful write, so their reads stay on the primary for a while."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.method not in SAFE
            and response.status_code < 400
            and db_routing.replica_configured()
        ):
            caller = _caller(getattr(request, "principal", None))
            window = settings.REPLICA_READ_YOUR_WRITES_SECONDS
            if caller is not None and window > 0:
                try:
                    redis_client().set(_key(caller), "1", px=max(1, int(window * 1000)))
                except redis.RedisError:
                    logger.warning("could not note a write for read-your-writes")
        return response


def lag_tolerant(view: Callable[..., Any]) -> Callable[..., Any]:
    """A function view whose reads may come from the replica (`replica_reads`)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        with replica_reads(request):
            return view(request, *args, **kwargs)

    return wrapped
