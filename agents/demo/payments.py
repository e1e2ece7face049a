"""A stand-in payment provider for the demo: deduplicates on Idempotency-Key like Stripe,
and counts the refunds it really made.

Mounted only with the demo on (config/urls.py), and it answers only the demo agent: the
agent's tool sends a shared secret that the web process and every worker derive from
SECRET_KEY, so nobody has to configure it. Its rows have no tenant, so it lists nothing:
tests count refunds in its table.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from core import json_input, sql

UPSERT_SQL = sql.load("agents.demo", "record_refund")


MAX_AMOUNT_CENTS = 2**31 - 1


def shared_secret() -> str:
    """What the demo agent sends as `Authorization: Bearer <secret>`."""
    if settings.DEMO_PAYMENTS_SECRET:
        return settings.DEMO_PAYMENTS_SECRET
    # A purpose-bound HMAC: the secret reveals nothing about SECRET_KEY itself.
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, b"agentstate.demo-payments", hashlib.sha256).hexdigest()


def auth_header() -> dict[str, str]:
    return {"Authorization": f"Bearer {shared_secret()}"}


def _authorized(request: HttpRequest) -> bool:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return False
    return hmac.compare_digest(token.encode(), shared_secret().encode())


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status)


# No cookie is accepted here, only the bearer secret, so there is nothing for CSRF to protect.
@csrf_exempt
def refunds(request: HttpRequest) -> JsonResponse:
    if not _authorized(request):
        response = _error(401, "unauthenticated", "Send the demo's shared secret.")
        response["WWW-Authenticate"] = 'Bearer realm="demo-payments"'
        return response
    if request.method != "POST":
        response = _error(405, "method_not_allowed", "Only POST: refunds are not listed.")
        response["Allow"] = "POST"
        return response
    key = request.headers.get("Idempotency-Key", "")
    try:  # the one validator, whatever the Content-Type says (NUL, depth, surrogates)
        body = json_input.loads(request.body)
        customer, amount = str(body["customer"]), int(body["amount_cents"])
    except (ValueError, KeyError, TypeError):
        return _error(400, "invalid", "customer and amount_cents")
    if not key or len(key) > 255 or not 0 < amount <= MAX_AMOUNT_CENTS or len(customer) > 100:
        return _error(400, "invalid", "Idempotency-Key required")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(UPSERT_SQL, [key, customer, amount])
        refund_id, amount_cents, requests = cursor.fetchone()
    return JsonResponse(
        {"refund_id": f"re_{refund_id}", "amount_cents": amount_cents, "replayed": requests > 1}
    )
