"""`AgentStateSaver`: a LangGraph checkpointer that keeps threads in AgentState, so a graph
running anywhere resumes from its last checkpoint and its threads show in the console as
sessions with runs, checkpoints and their timeline.

    saver = AgentStateSaver("https://agents.example.com", api_key="ak_...")
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "order-1042"}})

A step costs one request at most: a checkpoint travels with the writes of the tasks before it
(see _batch.py), and each call returns only once the server has committed it, except, with
durability "async" (LangGraph's default), a checkpoint between two steps: LangGraph saves it
in the background while the next step runs, and the saver lets the graph run on while it
sends it, with the steps that queue behind it in one request. The graph's last checkpoint,
its tasks' writes (an interrupt's, an error's) and every read wait for all of them, so a
finished `invoke` has saved everything; a graph that stops at a static interrupt
(`interrupt_before`/`after`) may return up to one request before its last checkpoint is
saved: `saver.flush()` waits for it. The async
methods use an async HTTP client on the running event loop. Close the saver (or use it as a
context manager) to close its connections.

Checkpoints, channel values and pending writes are serialized here with LangGraph's own
serializer (`self.serde`) and stored as opaque bytes; AgentState also keeps a readable preview
of each checkpoint's values for its pages.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any
from urllib.parse import quote

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    INTERRUPT,
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

from agentstate_client import graph
from agentstate_client._batch import AsyncSender, Sender
from agentstate_client.client import Client

PREVIEW_CHARS = 2000
STEPS = "langgraph/steps"
CHECKPOINTS = "langgraph/checkpoints"
# The saver's calls are idempotent by themselves: no Idempotency-Key record per step.
ONCE = {"idempotency_key": False}


class AgentStateSaver(BaseCheckpointSaver[str]):
    """`linger`: how long a task's writes wait for the checkpoint that usually follows, to
    travel with it in one request (seconds; 0 sends every call on its own)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        client: Client | None = None,
        linger: float = 0.01,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._client = client or Client(base_url, api_key)
        self._next = graph.NextNodes()  # names each step by the nodes that ran (graph.py)
        self._sender = Sender(lambda ops: self._client.post(STEPS, {"ops": ops}, **ONCE), linger)
        self._asender = AsyncSender(
            lambda ops: self._client.apost(STEPS, {"ops": ops}, **ONCE), linger
        )

    # --- lifecycle ------------------------------------------------------------------------------

    def flush(self) -> None:
        """Wait until every checkpoint saved so far is committed (raising a failure)."""
        self._sender.flush()

    async def aflush(self) -> None:
        await self._asender.drain()

    def close(self) -> None:
        """Send what is queued, then close the connections."""
        self._sender.close()
        self._client.close()

    async def aclose(self) -> None:
        await self._asender.drain()
        self._sender.close()
        await self._client.aclose()

    def __enter__(self) -> AgentStateSaver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> AgentStateSaver:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # --- reads ----------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the thread's latest in its namespace."""
        query = _get_query(config)
        self._sender.flush()
        found = self._client.get(CHECKPOINTS, **query)["results"]
        return (
            self._tuple(found[0], config if "checkpoint_id" in query else None) if found else None
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, by thread, namespace, metadata and position."""
        query = _list_query(config, filter, before, limit)
        self._sender.flush()
        for found in self._client.get(CHECKPOINTS, **query)["results"]:
            yield self._tuple(found, None)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        query = _get_query(config)
        await self._asender.drain()
        found = (await self._client.aget(CHECKPOINTS, **query))["results"]
        return (
            self._tuple(found[0], config if "checkpoint_id" in query else None) if found else None
        )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        query = _list_query(config, filter, before, limit)
        await self._asender.drain()
        for found in (await self._client.aget(CHECKPOINTS, **query))["results"]:
            yield self._tuple(found, None)

    # --- writes: durable on the server when the call returns --------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint and the channel values it introduced (with any writes queued
        before it, in one request)."""
        op, size = self._put_op(config, checkpoint, metadata, new_versions)
        self._sender.call(op, size, early=_early(config, op))
        return _config(op["thread_id"], op["checkpoint_ns"], checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Save a task's pending writes for the checkpoint the config names."""
        op, size = self._writes_op(config, writes, task_id, task_path)
        self._sender.call(op, size)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        op, size = self._put_op(config, checkpoint, metadata, new_versions)
        await self._asender.call(op, size, early=_early(config, op))
        return _config(op["thread_id"], op["checkpoint_ns"], checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        op, size = self._writes_op(config, writes, task_id, task_path)
        await self._asender.call(op, size)

    # --- threads --------------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Forget every checkpoint, value and write of the thread."""
        self._sender.flush()
        self._client.delete(_thread_path(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._asender.drain()
        await self._client.adelete(_thread_path(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (all namespaces), value and pending write to another thread."""
        body = {"source": str(source_thread_id), "target": str(target_thread_id)}
        self._sender.flush()
        self._client.post("langgraph/copy", body, **ONCE)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        body = {"source": str(source_thread_id), "target": str(target_thread_id)}
        await self._asender.drain()
        await self._client.apost("langgraph/copy", body, **ONCE)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Forget the checkpoints (and their writes) that these LangGraph runs saved."""
        if run_ids:
            self._sender.flush()
            self._client.post(
                "langgraph/runs/delete", {"run_ids": [str(r) for r in run_ids]}, **ONCE
            )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            await self._asender.drain()
            await self._client.apost(
                "langgraph/runs/delete", {"run_ids": [str(r) for r in run_ids]}, **ONCE
            )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's latest checkpoint; `delete`: forget them all."""
        if thread_ids:
            body = {"thread_ids": [str(t) for t in thread_ids], "strategy": strategy}
            self._sender.flush()
            self._client.post("langgraph/prune", body, **ONCE)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if thread_ids:
            body = {"thread_ids": [str(t) for t in thread_ids], "strategy": strategy}
            await self._asender.drain()
            await self._client.apost("langgraph/prune", body, **ONCE)

    # --- approvals ------------------------------------------------------------------------------

    def decision(self, config: RunnableConfig) -> dict[str, Any] | None:
        """The decision a person made on the `interrupt({"action": ...})` the thread is
        waiting on (approved, arguments as they may have edited them, comment), or None while
        it waits or when the thread waits on nothing. Resume the graph with
        `Command(resume=saver.decision(config))`.

        The decision asked for is that of the interrupt in the thread's latest checkpoint's
        pending writes, so a decision on any other request is never handed to the graph."""
        waiting = self.get_tuple(config)
        interrupt_id = _waiting_interrupt(waiting.pending_writes if waiting else [])
        if interrupt_id is None:
            return None
        conf = config["configurable"]
        found = self._client.get(
            "langgraph/decision",
            thread_id=conf["thread_id"],
            checkpoint_ns=conf.get("checkpoint_ns", ""),
            interrupt_id=interrupt_id,
        )
        return found.get("decision")

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions that sort as strings: a zero-padded counter and a random tiebreak."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # --- helpers --------------------------------------------------------------------------------

    def _put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[dict[str, Any], int]:
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        values = dict(checkpoint.get("channel_values", {}))
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        blobs, size = [], 0
        for channel, version in new_versions.items():
            typed = self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            size += len(typed[1])
            blobs.append(
                {
                    "channel": channel,
                    "version": str(version),
                    "type": typed[0],
                    "blob": _b64(typed[1]),
                }
            )
        kind, raw = self.serde.dumps_typed(rest)
        full_metadata = get_checkpoint_metadata(config, metadata)
        # The graph's words and where it stands (graph.py): its next nodes, the step's name.
        nodes = graph.next_nodes(checkpoint)
        ran = self._next.of(thread_id, ns, conf.get("checkpoint_id"))
        self._next.remember(thread_id, ns, checkpoint["id"], nodes)
        op = {
            "op": "put",
            "thread_id": str(thread_id),
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": conf.get("checkpoint_id") or "",
            "type": kind,
            "blob": _b64(raw),
            "metadata": _jsonable(full_metadata),
            "channel_versions": {k: str(v) for k, v in checkpoint["channel_versions"].items()},
            "blobs": blobs,
            "preview": _preview(values),
            "step": graph.step_name(full_metadata, ran),
            "next": nodes,
        }
        return op, (size + len(raw)) * 4 // 3 + 1024

    def _writes_op(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[dict[str, Any], int]:
        conf = config["configurable"]
        encoded, interrupts, size = [], [], 0
        for idx, (channel, value) in enumerate(writes):
            if channel == INTERRUPT:
                interrupts += _interrupts(value)
            kind, raw = self.serde.dumps_typed(value)
            size += len(raw)
            encoded.append(
                {
                    "idx": WRITES_IDX_MAP.get(channel, idx),
                    "channel": channel,
                    "type": kind,
                    "blob": _b64(raw),
                }
            )
        op = {
            "op": "writes",
            "thread_id": str(conf["thread_id"]),
            "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": conf["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": encoded,
            "interrupts": interrupts,
            **graph.writes_info(task_id, writes),
        }
        return op, size * 4 // 3 + 512

    def _tuple(self, found: dict[str, Any], config: RunnableConfig | None) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed((found["type"], _unb64(found["blob"])))
        values = {}
        for value in found["values"]:
            if value["type"] != "empty":
                values[value["channel"]] = self.serde.loads_typed(
                    (value["type"], _unb64(value["blob"]))
                )
        writes = sorted(
            found["writes"], key=lambda w: writes_sort_key(w["task_path"], w["task_id"], w["idx"])
        )
        thread_id, ns = found["thread_id"], found["checkpoint_ns"]
        parent = found["parent_checkpoint_id"]
        self._next.remember(
            thread_id,
            ns,
            found["checkpoint_id"],
            graph.next_nodes({**checkpoint, "channel_values": values}),
        )
        return CheckpointTuple(
            config=config or _config(thread_id, ns, found["checkpoint_id"]),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=found["metadata"],
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=[
                (w["task_id"], w["channel"], self.serde.loads_typed((w["type"], _unb64(w["blob"]))))
                for w in writes
            ],
        )


def _early(config: RunnableConfig, op: dict[str, Any]) -> bool:
    """Whether `put` may return before the checkpoint is committed: a checkpoint between two
    steps of a graph run with durability "async" (LangGraph's default, which saves in the
    background while the next step runs). The graph's last checkpoint (no next node), and
    every one of durability "sync" or "exit" or saved outside a graph, is waited for."""
    conf = config.get("configurable", {})
    durability = conf.get("__pregel_durability") or (
        "async" if "__pregel_runtime" in conf else None
    )
    return durability == "async" and bool(op.get("next"))


def _get_query(config: RunnableConfig) -> dict[str, Any]:
    conf = config["configurable"]
    query: dict[str, Any] = {
        "thread_id": conf["thread_id"],
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
    }
    checkpoint_id = get_checkpoint_id(config)
    if checkpoint_id:
        query["checkpoint_id"] = checkpoint_id
    else:
        query["limit"] = 1
    return query


def _list_query(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> dict[str, Any]:
    query: dict[str, Any] = {}
    if config is not None:
        conf = config["configurable"]
        query["thread_id"] = conf["thread_id"]
        if conf.get("checkpoint_ns") is not None:
            query["checkpoint_ns"] = conf["checkpoint_ns"]
        if checkpoint_id := get_checkpoint_id(config):
            query["checkpoint_id"] = checkpoint_id
    if before is not None and (before_id := get_checkpoint_id(before)):
        query["before"] = before_id
    if filter:
        query["metadata"] = json.dumps(filter)
    if limit is not None:
        query["limit"] = max(limit, 0)
    return query


def _thread_path(thread_id: str) -> str:
    return f"langgraph/threads/{quote(str(thread_id), safe='')}"


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _interrupts(value: Any) -> list[dict[str, Any]]:
    """The JSON values of the interrupts in an INTERRUPT write (others are left out)."""
    found = []
    for interrupt in value if isinstance(value, list | tuple) else [value]:
        if not getattr(interrupt, "id", None) or not hasattr(interrupt, "value"):
            continue  # not an Interrupt: nothing a person could decide
        try:
            payload = json.loads(json.dumps(interrupt.value))
        except (TypeError, ValueError):
            continue
        found.append({"id": str(interrupt.id), "value": payload})
    return found


def _waiting_interrupt(pending_writes: Any) -> str | None:
    """The id of the first interrupt naming an `action` among a checkpoint's pending writes."""
    for _task, channel, value in pending_writes or []:
        if channel != INTERRUPT:
            continue
        for interrupt in value if isinstance(value, list | tuple) else [value]:
            payload = getattr(interrupt, "value", None)
            if isinstance(payload, dict) and isinstance(payload.get("action"), str):
                return str(interrupt.id)
    return None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _jsonable(value: Any) -> Any:
    """Metadata as JSON (values JSON cannot hold become their text)."""
    return json.loads(json.dumps(value, default=str))


def _preview(values: dict[str, Any]) -> dict[str, Any]:
    """What AgentState's pages show of the state: each channel's value as JSON, long values
    cut (the exact values stay in the serialized checkpoint)."""
    shown: dict[str, Any] = {}
    for channel, value in values.items():
        if not graph.is_state(channel):  # LangGraph's bookkeeping (graph.py)
            continue
        text = json.dumps(value, default=repr)
        shown[channel] = json.loads(text) if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS]
    return shown
