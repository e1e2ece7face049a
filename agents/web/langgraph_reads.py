"""`GET /api/v1/langgraph/checkpoints` for one checkpoint, served lean: the saver's
`get_tuple` (a thread's latest checkpoint, or one by id), which a graph calls at the start of
every run. Through Django's middleware and DRF it cost 9-14 ms, more than a graph's five
steps; here, as the steps door (agents/web/langgraph_steps.py), config/asgi.py routes it
before Django and one thread call authenticates the API key, counts the call in the tenant's
`langgraph` bucket and reads the checkpoint (agents.runtime.external.external_checkpoints,
as the Django view does), in one transaction under the key's tenant.

Only that shape comes here: a bearer token and a query of `thread_id` with `limit=1` or a
`checkpoint_id` (and `checkpoint_ns`), each once, in plain text that the serializer would
take unchanged. Anything else (a list, filters, a session cookie, text to trim or refuse)
goes to the Django view, which validates it and answers the same JSON.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

from agents.runtime import external, external_fast
from agents.web.langgraph_api import encoded
from agents.web.langgraph_steps import (
    Refused,
    executor,
    in_thread,
    recent_keys,
    refused,
    send_json,
)
from tenants import throttling
from tenants.api_auth import KeyRefused, api_key_resolve
from tenants.models import Scope
from tenants.principal import Principal
from tenants.rates import LANGGRAPH
from tenants.scope import transaction_scope

PATH = "/api/v1/langgraph/checkpoints"
# name: longest text the Django view's serializer takes (thread_id, checkpoint_id: not blank)
_LONGEST = {"thread_id": 200, "checkpoint_ns": 200, "checkpoint_id": 100}


def lean_query(scope: dict[str, Any]) -> dict[str, str] | None:
    """The query of a one-checkpoint read this door answers, or None for Django's view."""
    if scope["method"] != "GET":
        return None
    authorization = dict(scope.get("headers") or []).get(b"authorization", b"")
    if authorization[:7].lower() != b"bearer ":
        return None
    try:
        text = scope.get("query_string", b"").decode("ascii")
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        return None
    query = dict(pairs)
    if len(query) != len(pairs) or "thread_id" not in query:
        return None
    limit = query.pop("limit", None)
    if limit is not None and limit != "1":
        return None
    if limit is None and "checkpoint_id" not in query:
        return None  # every checkpoint of the thread: a list
    for name, value in query.items():
        longest = _LONGEST.get(name)
        if longest is None or len(value) > longest or value != value.strip() or "\x00" in value:
            return None
        if not value and name != "checkpoint_ns":
            return None
    return query


def answer(
    authorization: str, query: dict[str, str]
) -> tuple[int, dict[str, Any] | str, dict[str, str]]:
    """(status, JSON body or its text, headers), as the Django view answers the request."""
    try:
        token = authorization.partition(" ")[2].strip()
        if not token:
            raise Refused(401, "unauthenticated", "Use `Authorization: Bearer <api key>`.")
        known = recent_keys.get(token)
        counted = False
        acting = None if known is None else Principal.for_api_key(known, known.tenant)
        if acting is not None and acting.can(Scope.READ):
            # A key proved a moment ago: one statement, which checks it again (revoked or
            # expired since: the general path below refuses it).
            throttling.count_call(acting, LANGGRAPH)
            counted = True
            text = external_fast.read(
                tenant_id=known.tenant_id,
                key_hash=known.key_hash,
                thread_id=query["thread_id"],
                checkpoint_ns=query.get("checkpoint_ns"),
                checkpoint_id=query.get("checkpoint_id"),
            )
            if text is not None:
                return 200, text, {}
            recent_keys.forget(token)
        with transaction_scope():
            try:
                key = api_key_resolve(token)
            except KeyRefused as exc:
                recent_keys.forget(token)
                raise Refused(401, "unauthenticated", str(exc)) from None
            principal = Principal.for_api_key(key, key.tenant)
            if not principal.can(Scope.READ):
                raise Refused(403, "permission_denied", "Your role does not allow this.")
            if not counted:
                throttling.count_call(principal, LANGGRAPH)
            recent_keys.keep(token, key)
            found = external.external_checkpoints(
                principal=principal,
                thread_id=query["thread_id"],
                checkpoint_ns=query.get("checkpoint_ns"),
                checkpoint_id=query.get("checkpoint_id"),
                limit=None if "checkpoint_id" in query else 1,
            )
        return 200, {"results": [encoded(c) for c in found]}, {}
    except Exception as exc:  # noqa: BLE001 - refusals and outages answered, bugs re-raised
        return refused(exc)


async def application(
    scope: dict[str, Any], receive: Any, send: Any, query: dict[str, str]
) -> None:
    """Answer the read (its query from `lean_query`) in one thread call."""
    authorization = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
    loop = asyncio.get_running_loop()
    status, body, headers = await loop.run_in_executor(
        executor(), in_thread, partial(answer, authorization, query), f"GET {PATH}"
    )
    await send_json(send, status, body, headers)
