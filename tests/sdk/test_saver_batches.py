"""How the saver groups its calls into requests: one step per request, whatever the
durability (a graph running ahead with durability "async" queues later steps' writes early)."""

from __future__ import annotations

import collections
import uuid

import pytest
from agentstate_client import AgentStateSaver
from agentstate_client._batch import _Item, _Saved, _take
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from tests import factories


def writes(checkpoint_id: str) -> _Item:
    return _Item({"op": "writes", "checkpoint_id": checkpoint_id}, 10, None)


def put(checkpoint_id: str, parent: str) -> _Item:
    return _Item(
        {"op": "put", "checkpoint_id": checkpoint_id, "parent_checkpoint_id": parent}, 10, None
    )


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


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_every_request_of_a_graph_carries_one_step_and_takes_the_one_statement_path(
    console_url, tenant_a, durability, monkeypatch
):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    shapes: collections.Counter[str] = collections.Counter()
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

    # A checkpoint travels with its own step's writes only: the shapes the one-statement path
    # takes (external_fast.eligible). Writes whose checkpoint is late (a loaded machine) go
    # alone once the linger has passed, and the checkpoint after them.
    with_checkpoint = {shape for shape in shapes if "put" in shape}
    assert with_checkpoint <= {"put", "writes put"}, shapes
    assert sum(n for shape, n in shapes.items() if "put" in shape) == 3 * 14  # one per checkpoint
