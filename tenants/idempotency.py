"""`Idempotency-Key` on our own POST endpoints, with Stripe's semantics.

The first request with a key inserts a `started` record in the request's transaction and runs
the handler inside a savepoint. Its response is stored on the record, and a later request with
the same key and the same fingerprint gets that response replayed (status and body, plus
`Idempotent-Replayed: true`) without running the handler again; a different request with the
same key gets 422. An error response rolls back the savepoint, so what the handler wrote is
gone while the record of the error still commits with the outer transaction. Input that is
refused outright (400, 401, 403, 413) is not remembered: the client fixes it and retries with
the same key. A duplicate that arrives while the first is in flight blocks on the unique
index until the first transaction ends, then replays its result.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder
from rest_framework.views import APIView

from core import errors, sql
from tenants.models import IdempotencyRecord, IdempotencyStatus
from tenants.principal import Principal

KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
# Refused before the endpoint did anything: the same key may be retried with a fixed request.
NOT_REMEMBERED = frozenset({400, 401, 403, 413, 415})

KEY_PARAMETER = OpenApiParameter(
    KEY_HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description="1 to 255 printable characters. A retry with the same key and the same body "
    f"replays the first response (with `{REPLAYED_HEADER}: true`) instead of acting twice; "
    f"keys are kept for IDEMPOTENCY_KEY_TTL_HOURS.",
)

INSERT_SQL = sql.load("core", "claim_idempotency_key")

Handler = Callable[..., Response]


def key_from(request: Request) -> str | None:
    """The request's Idempotency-Key, None without one; a malformed key is a 400."""
    key = request.headers.get(KEY_HEADER)
    if key is None:
        return None
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not all(" " <= c <= "~" for c in key):
        raise errors.IdempotencyKeyInvalid()
    return key


def fingerprint(*, method: str, path: str, body: Any, principal: Principal) -> str:
    """sha256 of who sends which request: method, path, canonical JSON body and principal."""
    if principal.api_key is not None:
        actor = f"key:{principal.api_key.pk}"
    else:
        actor = f"user:{getattr(principal.user, 'pk', '')}"
    canonical = json.dumps(
        [method.upper(), path, actor, body], sort_keys=True, separators=(",", ":"), cls=JSONEncoder
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def claim(*, tenant_id: Any, key: str, fingerprint: str) -> IdempotencyRecord | None:
    """Take the key (None) or return the committed record that already holds it.

    The INSERT waits on the unique index while another transaction holds the same key, so
    the record returned is the other request's final word, never its half-done state.
    """
    now = timezone.now()
    expires_at = now + dt.timedelta(hours=settings.IDEMPOTENCY_KEY_TTL_HOURS)
    records = IdempotencyRecord.objects.for_tenant(tenant_id)
    for _ in range(3):
        with connection.cursor() as cursor:
            cursor.execute(INSERT_SQL, [str(tenant_id), key, fingerprint, now, expires_at])
            if cursor.fetchone() is not None:
                return None
        existing = records.filter(key=key).first()
        if existing is None:
            continue  # expired and swept between our two statements: try again
        if existing.expires_at > now:
            return existing
        # Expired but not swept yet: the key is free again.
        records.filter(pk=existing.pk, expires_at__lte=now).delete()
    raise errors.IdempotencyKeyInFlight()


def replay(record: IdempotencyRecord, fingerprint: str) -> Response:
    """The stored response of `record`, if it answered this very request."""
    if record.fingerprint != fingerprint:
        raise errors.IdempotencyKeyReused()
    if record.status == IdempotencyStatus.STARTED or record.response_status is None:
        raise errors.IdempotencyKeyInFlight()
    return Response(
        record.response_body, status=record.response_status, headers={REPLAYED_HEADER: "true"}
    )


def remember(*, tenant_id: Any, key: str, response: Response) -> None:
    """Store the response on the key's record, or free the key if it is not remembered."""
    records = IdempotencyRecord.objects.for_tenant(tenant_id).filter(
        key=key, status=IdempotencyStatus.STARTED
    )
    if response.status_code in NOT_REMEMBERED or response.status_code >= 500:
        records.delete()
        return
    body = json.loads(json.dumps(response.data, cls=JSONEncoder))
    records.update(
        status=IdempotencyStatus.SUCCEEDED
        if response.status_code < 400
        else IdempotencyStatus.FAILED,
        response_status=response.status_code,
        response_body=body,
    )


def _run_in_savepoint(view: APIView, handler: Handler, request: Request, *args, **kwargs):
    # Errors are turned into responses inside the savepoint, so the exception handler's
    # set_rollback() drops the handler's writes but not the idempotency record outside it.
    with transaction.atomic():
        try:
            response = handler(view, request, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - unexpected ones are re-raised by DRF
            response = view.handle_exception(exc)
        if response.status_code >= 400:
            transaction.set_rollback(True)
    return response


def idempotent(handler: Handler) -> Handler:
    """Decorator for a POST handler of an APIView: honour `Idempotency-Key`."""

    @functools.wraps(handler)
    def wrapped(view: APIView, request: Request, *args: Any, **kwargs: Any) -> Response:
        key = key_from(request)
        if key is None:
            return handler(view, request, *args, **kwargs)
        principal: Principal = request.principal
        request_print = fingerprint(
            method=request.method, path=request.path, body=request.data, principal=principal
        )
        existing = claim(tenant_id=principal.tenant.pk, key=key, fingerprint=request_print)
        if existing is not None:
            return replay(existing, request_print)
        response = _run_in_savepoint(view, handler, request, *args, **kwargs)
        remember(tenant_id=principal.tenant.pk, key=key, response=response)
        return response

    return extend_schema(parameters=[KEY_PARAMETER])(wrapped)
