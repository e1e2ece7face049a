"""The tool-call ledger: a side effect happens once, whatever crashes or replays.

The key is (run, step seq, call index). The intent is committed before the call and the key
is sent to the service; the outcome is committed after. A replay returns a recorded
outcome without calling; an intent without outcome is sent again with the same key, and
the service's own deduplication makes that safe. Both only for the same call: a replay
that asks for another tool or other arguments at a recorded position fails the step with
`ledger_mismatch` (permanent), and nothing is sent.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from agents.runtime.engine.failpoints import failpoint
from agents.runtime.errors import LedgerMismatch, ToolFailed
from agents.runtime.tools import Tool
from core import sql

_SET_TENANT = sql.load("agents.runtime", "set_tenant")
INTENT_SQL = _SET_TENANT + sql.load("agents.runtime", "record_tool_intent")
# What the position holds when the INSERT … ON CONFLICT found another call there.
RECORDED_SQL = _SET_TENANT + sql.load("agents.runtime", "read_tool_call")
OUTCOME_SQL = _SET_TENANT + sql.load("agents.runtime", "record_tool_outcome")


def idempotency_key(run_id: Any, seq: int, index: int) -> str:
    return f"{run_id}:{seq}:{index}"


def call(*, tenant_id: str, run_id: Any, seq: int, index: int, tool: Tool, arguments: dict) -> Any:
    """Call a side-effecting tool at most once in effect; replay the recorded outcome."""
    key = idempotency_key(run_id, seq, index)
    params: dict[str, Any] = {
        "tenant": tenant_id,
        "run": str(run_id),
        "seq": seq,
        "index": index,
        "tool": tool.name,
        "key": key,
        "arguments": json.dumps(arguments, default=str),
    }
    with connection.cursor() as cursor:
        cursor.execute(INTENT_SQL, params)
        cursor.nextset()
        row = cursor.fetchone()
        if row is None:  # the position holds another call
            cursor.execute(RECORDED_SQL, params)
            cursor.nextset()
            raise _mismatch(seq, index, tool.name, arguments, *cursor.fetchone())
    status, recorded = row
    if status == "succeeded":
        return _loads(recorded)
    if status == "failed":
        raise ToolFailed(_loads(recorded).get("message", f"{tool.name} failed"))
    try:
        result = tool.fn(**arguments, idempotency_key=key)
    except ToolFailed as exc:
        _record(params, "failed", {"message": str(exc)})
        raise
    failpoint("tool.after_call", tool.name)
    _record(params, "succeeded", result)
    return result


def _mismatch(
    seq: int, index: int, tool: str, arguments: dict, was_tool: str, was_arguments: Any
) -> LedgerMismatch:
    def show(name: str, args: Any) -> str:
        return f"{name}({json.dumps(_loads(args), sort_keys=True, default=str)[:300]})"

    return LedgerMismatch(
        f"The ledger holds {show(was_tool, was_arguments)} as call {index} of step {seq}, "
        f"but the replayed step asked for {show(tool, arguments)}. Nothing was sent: the "
        "step does not repeat what it did (it may depend on a model's answer), so an admin "
        "decides (replay from an earlier checkpoint, repeating the call, or resolve)."
    )


def _record(params: dict, status: str, result: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            OUTCOME_SQL, {**params, "status": status, "result": json.dumps(result, default=str)}
        )


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value
