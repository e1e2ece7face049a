"""A stand-in payment provider for the demo: deduplicates on Idempotency-Key like Stripe,
and counts the refunds it really made."""

from __future__ import annotations

import json

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

UPSERT_SQL = """
INSERT INTO agents_demorefund (idempotency_key, customer, amount_cents, requests, created_at)
VALUES (%s, %s, %s, 1, now())
ON CONFLICT (idempotency_key) DO UPDATE SET requests = agents_demorefund.requests + 1
RETURNING id, amount_cents, requests
"""


@csrf_exempt
@require_http_methods(["GET", "POST"])
def refunds(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT idempotency_key, customer, amount_cents, requests FROM agents_demorefund"
                " ORDER BY id"
            )
            rows = [
                dict(zip(["key", "customer", "amount_cents", "requests"], r, strict=True))
                for r in cursor.fetchall()
            ]
        return JsonResponse({"refunds": rows, "count": len(rows)})
    key = request.headers.get("Idempotency-Key", "")
    try:
        body = json.loads(request.body)
        customer, amount = str(body["customer"]), int(body["amount_cents"])
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"code": "invalid", "message": "customer and amount_cents"}, status=400)
    if not key or len(key) > 255 or amount <= 0:
        return JsonResponse({"code": "invalid", "message": "Idempotency-Key required"}, status=400)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(UPSERT_SQL, [key, customer, amount])
        refund_id, amount_cents, requests = cursor.fetchone()
    return JsonResponse(
        {"refund_id": f"re_{refund_id}", "amount_cents": amount_cents, "replayed": requests > 1}
    )
