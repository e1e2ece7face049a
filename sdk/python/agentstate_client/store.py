"""`AgentStateStore`: a LangGraph `BaseStore` whose items are facts AgentState remembers about
a person, so what a LangGraph agent stores is on that person's privacy page.

Namespace `("memories", <username>[, <category>])`, key = the fact's key, value = any JSON
object, answered exactly as it was put. `{"text": ..., "category": ...}` (category optional)
is a fact that is its text, as written on the privacy page; any other object is kept whole
and its text derived from it for search and the page. Writes go through the API's services:
category policies, TTLs, the secret filter (anywhere inside the value) and the audit apply,
and a person's deletion is final. `ttl` (minutes) makes a fact expire; reads refresh it
(`refresh_ttl`, `TTLConfig`), never past the category's TTL.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from agentstate_client.client import AgentStateError, Client

ROOT = "memories"
DEFAULT_CATEGORY = "note"
VALUE_FIELDS = {"text", "category"}


class AgentStateStore(BaseStore):
    supports_ttl = True

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        client: Client | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        """`ttl`: LangGraph's TTLConfig; `default_ttl` (minutes) applies to puts that give
        none, `refresh_on_read` (default True) to reads that do not say. Sweeping is the
        server's (its retention sweep), so `sweep_interval_minutes` is ignored."""
        self._owns_client = client is None
        self._client = client or Client(base_url, api_key)
        self.ttl_config = ttl
        self._subjects: dict[str, int] = {}

    # --- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP connections (of a client the store made; a given one is yours)."""
        if self._owns_client:
            self._client.close()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def __enter__(self) -> AgentStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AgentStateStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- BaseStore ------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run each operation in order, as the API calls it needs."""
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # --- one operation --------------------------------------------------------------------------

    def _one(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op.namespace, op.key, refresh=op.refresh_ttl)
        if isinstance(op, PutOp):
            if op.value is None:
                self._delete(op.namespace, op.key)
            else:
                self._put(op.namespace, op.key, op.value, op.ttl)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"unknown store operation {op!r}")

    def _get(self, namespace: tuple[str, ...], key: str, *, refresh: bool) -> Item | None:
        username, category = _parse(namespace)
        fact = self._fact_by_key(username, key, category, refresh=refresh)
        return None if fact is None else _item(namespace, fact)

    def _put(
        self, namespace: tuple[str, ...], key: str, value: dict[str, Any], ttl: float | None
    ) -> None:
        username, category = _parse(namespace)
        if not isinstance(value, dict):
            raise TypeError(f"A store value is a dict, not {type(value).__name__}.")
        if _is_text_fact(value):  # a fact that is its text, as it always was
            body: dict[str, Any] = {
                "text": value["text"],
                "category": value.get("category") or category or DEFAULT_CATEGORY,
            }
        else:  # any other JSON object: kept whole, in the namespace's category
            body = {"value": value, "category": category or DEFAULT_CATEGORY}
        body["key"] = key
        if ttl is not None:
            body["ttl_minutes"] = ttl
        self._client.post(f"memory/subjects/{self._subject(username)}/facts", body)

    def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        username, category = _parse(namespace)
        fact = self._fact_by_key(username, key, category, refresh=False)
        if fact is not None:
            self._client.delete(f"memory/facts/{fact['id']}")

    def _search(self, op: SearchOp) -> list[SearchItem]:
        username, category = _parse(op.namespace_prefix)
        facts = self._facts(username)
        if category:
            facts = [f for f in facts if f["category"] == category]
        if op.query:
            ranked = self._client.get(
                f"memory/subjects/{self._subject(username)}/search",
                q=op.query,
                limit=min(100, op.limit + op.offset),
            )["results"]
            by_id = {f["id"]: f for f in facts}
            hits = [(by_id[r["id"]], r["score"]) for r in ranked if r["id"] in by_id]
        else:
            hits = [(f, None) for f in facts]
        if op.filter:
            hits = [(f, s) for f, s in hits if _matches(_value(f), op.filter)]
        page = hits[op.offset : op.offset + op.limit]
        if op.refresh_ttl and any(f.get("ttl_minutes") is not None for f, _ in page):
            self._client.get(
                f"memory/subjects/{self._subject(username)}/facts",
                ids=[f["id"] for f, _ in page if f.get("ttl_minutes") is not None],
                refresh_ttl="true",
            )
        return [_search_item(username, fact, score) for fact, score in page]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        params: dict[str, Any] = {"limit": op.limit, "offset": op.offset}
        for condition in op.match_conditions or ():
            params.setdefault(condition.match_type, []).extend(condition.path)
        if op.max_depth is not None:
            params["max_depth"] = op.max_depth
        found = self._client.get("memory/namespaces", **params)["namespaces"]
        return [tuple(ns) for ns in found]

    # --- reads ----------------------------------------------------------------------------------

    def _subject(self, username: str) -> int:
        if username not in self._subjects:
            found = self._client.get("memory/subjects", username=username)
            self._subjects[username] = int(found["id"])
        return self._subjects[username]

    def _facts(self, username: str) -> list[dict[str, Any]]:
        return self._client.get(f"memory/subjects/{self._subject(username)}/facts")["results"]

    def _fact_by_key(
        self, username: str, key: str, category: str | None, *, refresh: bool
    ) -> dict | None:
        params: dict[str, Any] = {"key": key}
        if refresh:
            params["refresh_ttl"] = "true"
        found = self._client.get(f"memory/subjects/{self._subject(username)}/facts", **params)
        for fact in found["results"]:
            if fact["key"] == key and (category is None or fact["category"] == category):
                return fact
        return None


def _parse(namespace: tuple[str, ...]) -> tuple[str, str | None]:
    """(username, category or None) of `("memories", username[, category])`."""
    parts = tuple(namespace)
    fits = len(parts) in (2, 3) and parts[0] == ROOT
    if not fits or not all(isinstance(p, str) and p for p in parts):
        raise InvalidNamespaceError(
            f"AgentStateStore namespaces are ('{ROOT}', <username>[, <category>]), not {parts!r}."
        )
    return parts[1], (parts[2] if len(parts) == 3 else None)


def _is_text_fact(value: dict[str, Any]) -> bool:
    """`{"text": str}` or `{"text": str, "category": str}`: stored as a plain text fact."""
    return (
        isinstance(value.get("text"), str)
        and set(value) <= VALUE_FIELDS
        and isinstance(value.get("category", ""), str)
    )


def _value(fact: dict[str, Any]) -> dict[str, Any]:
    if fact.get("value") is not None:
        return fact["value"]
    return {"text": fact["text"], "category": fact["category"]}


def _when(fact: dict[str, Any], field: str) -> dt.datetime:
    return dt.datetime.fromisoformat(fact[field])


def _item(namespace: tuple[str, ...], fact: dict[str, Any]) -> Item:
    return Item(
        value=_value(fact),
        key=fact["key"],
        namespace=tuple(namespace),
        created_at=_when(fact, "created_at"),
        updated_at=_when(fact, "valid_from"),
    )


def _search_item(username: str, fact: dict[str, Any], score: float | None) -> SearchItem:
    return SearchItem(
        namespace=(ROOT, username, fact["category"]),
        key=fact["key"] or fact["id"],
        value=_value(fact),
        created_at=_when(fact, "created_at"),
        updated_at=_when(fact, "valid_from"),
        score=score,
    )


_OPERATORS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _matches(value: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """LangGraph's search filter: equality per key, nested objects, and $eq/$ne/$gt/$gte/
    $lt/$lte (a comparison of values of different types is no match)."""
    return all(_compare(value.get(k), v) for k, v in wanted.items())


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict) and wanted and all(k in _OPERATORS for k in wanted):
        try:
            return all(_OPERATORS[op](actual, operand) for op, operand in wanted.items())
        except TypeError:
            return False
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            _compare(actual.get(k), v) for k, v in wanted.items()
        )
    return actual == wanted


__all__ = ["AgentStateError", "AgentStateStore"]
