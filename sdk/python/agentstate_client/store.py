"""`AgentStateStore`: a LangGraph `BaseStore` whose items are facts AgentState remembers about
a person, so what a LangGraph agent stores is on that person's privacy page.

Namespace `("memories", <username>[, <category>])`, key = the fact's key, value =
`{"text": ..., "category": ...}`. Writes go through the API's services: category policies,
TTLs, the secret filter and the audit apply, and a person's deletion is final.
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
)

from agentstate_client.client import AgentStateError, Client

ROOT = "memories"
DEFAULT_CATEGORY = "note"
VALUE_FIELDS = {"text", "category"}


class AgentStateStore(BaseStore):
    def __init__(self, base_url: str, api_key: str, *, client: Client | None = None) -> None:
        self._client = client or Client(base_url, api_key)
        self._subjects: dict[str, int] = {}

    def close(self) -> None:
        """Close the connections."""
        self._client.close()

    async def aclose(self) -> None:
        await self._client.aclose()

    def __enter__(self) -> AgentStateStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> AgentStateStore:
        return self

    async def __aexit__(self, *exc: Any) -> None:
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
            return self._get(op.namespace, op.key)
        if isinstance(op, PutOp):
            if op.value is None:
                self._delete(op.namespace, op.key)
            else:
                self._put(op.namespace, op.key, op.value)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            raise NotImplementedError(
                "AgentStateStore cannot list namespaces: people are not enumerable by API key."
            )
        raise TypeError(f"unknown store operation {op!r}")

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        username, category = _parse(namespace)
        fact = self._fact_by_key(username, key, category)
        return None if fact is None else _item(namespace, fact)

    def _put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        username, category = _parse(namespace)
        unknown = set(value) - VALUE_FIELDS
        if not isinstance(value.get("text"), str) or unknown:
            raise ValueError(
                'An AgentState memory is {"text": str, "category": str}; '
                f"got fields {sorted(value)}."
            )
        body = {
            "text": value["text"],
            "category": value.get("category") or category or DEFAULT_CATEGORY,
            "key": key,
        }
        self._client.post(f"memory/subjects/{self._subject(username)}/facts", body)

    def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        username, category = _parse(namespace)
        fact = self._fact_by_key(username, key, category)
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
        return [_search_item(username, fact, score) for fact, score in page]

    # --- reads ----------------------------------------------------------------------------------

    def _subject(self, username: str) -> int:
        if username not in self._subjects:
            found = self._client.get("memory/subjects", username=username)
            self._subjects[username] = int(found["id"])
        return self._subjects[username]

    def _facts(self, username: str) -> list[dict[str, Any]]:
        return self._client.get(f"memory/subjects/{self._subject(username)}/facts")["results"]

    def _fact_by_key(self, username: str, key: str, category: str | None) -> dict | None:
        for fact in self._facts(username):
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


def _value(fact: dict[str, Any]) -> dict[str, Any]:
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
        namespace=(ROOT, username),
        key=fact["key"] or fact["id"],
        value=_value(fact),
        created_at=_when(fact, "created_at"),
        updated_at=_when(fact, "valid_from"),
        score=score,
    )


def _matches(value: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(value.get(k) == v for k, v in wanted.items())


__all__ = ["AgentStateError", "AgentStateStore"]
