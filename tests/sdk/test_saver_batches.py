"""How the saver groups its calls into requests: one step per request with durability
"sync"; with "async" the graph runs on while its checkpoints between steps are sent, and the
steps queued meanwhile travel together, yet nothing is lost or out of order, a failure reaches
the graph, and a finished `invoke` has saved everything."""

from __future__ import annotations

import asyncio
import collections
import re
import threading
import time
import uuid
from concurrent.futures import Future

import pytest
from agentstate_client import AgentStateSaver
from agentstate_client._batch import AsyncSender, Sender, _Item, _Saved, _take
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from tests import factories


def writes(checkpoint_id: str) -> _Item:
    return _Item({"op": "writes", "checkpoint_id": checkpoint_id}, 10, Future())


def put(checkpoint_id: str, parent: str, *, early: bool = False) -> _Item:
    op = {"op": "put", "checkpoint_id": checkpoint_id, "parent_checkpoint_id": parent}
    return _Item(op, 10, None if early else Future())


def shape(batch: list[_Item]) -> list[tuple[str, str]]:
    return [(item.op["op"], item.op["checkpoint_id"]) for item in batch]


def test_a_checkpoint_takes_the_writes_it_follows_and_leaves_a_later_steps_writes_queued():
    saved = _Saved()
    queue = [writes("a"), writes("b"), writes("c"), put("b", "a")]

    first = _take(queue, saved)
    saved.add(first)
    queue.append(put("c", "b"))
    second = _take(queue, saved)

    assert shape(first) == [("writes", "a"), ("put", "b")]
    assert shape(second) == [("writes", "b"), ("put", "c")]
    assert shape(queue) == [("writes", "c")]  # goes with checkpoint d, or alone after the linger


def test_writes_of_a_saved_checkpoint_travel_with_the_next_checkpoint_and_alone_without_one():
    saved = _Saved()
    saved.add([put("a", "")])
    queue = [writes("a"), writes("x")]  # "x": a checkpoint this saver did not save

    assert shape(_take(queue, saved)) == [("writes", "a"), ("writes", "x")]
    queue = [writes("a"), writes("x"), put("c", "b")]
    assert shape(_take(queue, saved)) == [("writes", "a"), ("put", "c")]
    assert shape(queue) == [("writes", "x")]


class State(TypedDict):
    i: int


def chain(saver: AgentStateSaver, steps: int):
    builder = StateGraph(State)
    names = [f"n{k}" for k in range(steps)]
    for name in names:
        builder.add_node(name, lambda s: {"i": s["i"] + 1})
    builder.add_edge(START, names[0])
    for a, b in zip(names, names[1:], strict=False):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder.compile(checkpointer=saver)


def test_behind_an_early_checkpoint_every_queued_call_goes_in_one_request_in_order():
    queue = [put("a", "", early=True), writes("a"), put("b", "a", early=True), writes("b")]
    assert shape(_take(queue, _Saved())) == [
        ("put", "a"), ("writes", "a"), ("put", "b"), ("writes", "b"),
    ]  # fmt: skip
    assert queue == []


class Recorder:
    """A send function that records each request's checkpoint ids, slowly, and can fail."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.requests: list[list[str]] = []
        self.fail_at = fail_at
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, ops: list[dict]) -> None:
        self.gate.wait(5)
        time.sleep(0.02)
        if self.fail_at is not None and len(self.requests) == self.fail_at:
            self.requests.append(["failed"])
            raise RuntimeError("the server said no")
        self.requests.append([op["checkpoint_id"] for op in ops])


def op(checkpoint_id: str) -> dict:
    return {"op": "put", "checkpoint_id": checkpoint_id, "parent_checkpoint_id": ""}


def test_early_calls_return_at_once_and_go_together_before_any_call_that_waits():
    sent = Recorder()
    sender = Sender(sent, linger=0.01)
    sent.gate.clear()  # the first request hangs until we let it go
    started = time.monotonic()
    for checkpoint_id in "abcd":
        sender.call(op(checkpoint_id), 10, early=True)
    assert time.monotonic() - started < 0.5  # none of them waited for the server
    sent.gate.set()
    sender.call(op("e"), 10)  # waits for its commit, and so for every early one before it
    assert [c for request in sent.requests for c in request] == list("abcde")
    assert len(sent.requests) < 5  # those queued behind the first went together
    sender.flush()


def test_an_early_calls_failure_is_raised_by_the_next_call_and_nothing_behind_it_is_sent():
    sent = Recorder(fail_at=0)
    sender = Sender(sent, linger=0.01)
    sent.gate.clear()
    sender.call(op("a"), 10, early=True)
    sender.call(op("b"), 10, early=True)
    sent.gate.set()
    with pytest.raises(RuntimeError, match="the server said no"):
        sender.flush()
    assert ["b"] not in sent.requests and ["a", "b"] not in sent.requests
    sender.call(op("c"), 10)  # the saver goes on (the graph has been told)
    assert sent.requests[-1] == ["c"]


def test_the_async_sender_lets_early_calls_go_and_drain_raises_their_failure():
    async def scenario() -> list[list[str]]:
        requests: list[list[str]] = []

        async def send(ops: list[dict]) -> None:
            await asyncio.sleep(0.02)
            if any(o["checkpoint_id"] == "x" for o in ops):
                raise RuntimeError("refused")
            requests.append([o["checkpoint_id"] for o in ops])

        sender = AsyncSender(send, linger=0.01)
        for checkpoint_id in "abc":
            await sender.call(op(checkpoint_id), 10, early=True)
        await sender.call(op("d"), 10)
        assert [c for r in requests for c in r] == list("abcd") and len(requests) < 4
        await sender.call(op("x"), 10, early=True)
        with pytest.raises(RuntimeError, match="refused"):
            await sender.drain()
        return requests

    asyncio.run(scenario())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_graphs_requests_carry_its_steps_in_order_and_an_invoke_that_returned_saved_all(
    console_url, tenant_a, durability, monkeypatch
):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    shapes: collections.Counter[str] = collections.Counter()
    elsewhere = AgentStateSaver(console_url, api_key=key)  # another process's view
    with AgentStateSaver(console_url, api_key=key) as saver:
        post = saver._client.post

        def counted(path, body, **kwargs):
            shapes[" ".join(op["op"] for op in body["ops"])] += 1
            return post(path, body, **kwargs)

        monkeypatch.setattr(saver._client, "post", counted)
        graph = chain(saver, 12)
        for _ in range(3):
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}
            assert graph.invoke({"i": 0}, config, durability=durability) == {"i": 12}
            latest = elsewhere.get_tuple(config)  # saved before invoke returned
            assert latest.checkpoint["channel_values"]["i"] == 12
            history = list(elsewhere.list(config))
            assert [c.metadata["step"] for c in history] == list(range(12, -2, -1))
            assert all(
                c.parent_config["configurable"]["checkpoint_id"]
                == p.config["configurable"]["checkpoint_id"]
                for c, p in zip(history, history[1:], strict=False)
            )
    elsewhere.close()
    if durability == "async":  # steps queued behind one in flight went together
        assert sum(n for shape, n in shapes.items() if "put" in shape) <= 3 * 14
        return

    # A checkpoint ends its request, after the writes queued before it: mostly its own step's
    # (the shapes the one-statement path takes, external_fast.eligible). On a loaded machine
    # LangGraph's background thread may queue a step's writes after that step's checkpoint
    # went: they then wait for the linger and travel with the next step's writes and
    # checkpoint ("writes writes put", the general path), or go alone.
    with_checkpoint = {shape for shape in shapes if "put" in shape}
    assert all(re.fullmatch(r"(writes )*put", shape) for shape in with_checkpoint), shapes
    assert sum(n for shape, n in shapes.items() if "put" in shape) == 3 * 14  # one per checkpoint
    fast = sum(shapes[shape] for shape in ("put", "writes put"))
    assert fast >= 3 * 14 // 2, shapes
