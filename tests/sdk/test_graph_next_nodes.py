"""The saver reads a checkpoint's next nodes as LangGraph does: for every checkpoint of
real graphs (edges, branches, a fan-in join, Sends, a deferred node, an interrupt, an error,
update_state), `next_nodes` equals what `graph.get_state_history` says comes next."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

import pytest
from agentstate_client.graph import next_nodes, step_name, writes_info
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt


class S(TypedDict, total=False):
    seen: Annotated[list[str], operator.add]
    out: object


def node(name):
    return lambda state: {"seen": [name]}


def linear():
    b = StateGraph(S)
    b.add_node("a", node("a"))
    b.add_node("b", node("b"))
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    return b, [{"seen": []}]


def branching_join_and_sends():
    b = StateGraph(S)
    for name in ("a", "left", "right", "joined", "mapped"):
        b.add_node(name, node(name))
    b.add_edge(START, "a")
    b.add_conditional_edges("a", lambda s: ["left", "right"])
    b.add_edge(["left", "right"], "joined")
    b.add_conditional_edges("joined", lambda s: [Send("mapped", {"seen": [n]}) for n in "12"])
    b.add_edge("mapped", END)
    return b, [{"seen": []}]


def deferred():
    b = StateGraph(S)
    for name in ("a", "slow1", "slow2"):
        b.add_node(name, node(name))
    b.add_node("after", node("after"), defer=True)
    b.add_edge(START, "a")
    b.add_edge("a", "slow1")
    b.add_edge("slow1", "slow2")
    b.add_edge("a", "after")
    return b, [{"seen": []}]


def interrupted():
    b = StateGraph(S)
    b.add_node("a", node("a"))
    b.add_node("ask", lambda s: {"out": interrupt({"action": "x"})})
    b.add_edge(START, "a")
    b.add_edge("a", "ask")
    return b, [{"seen": []}, Command(resume={"ok": 1})]


@pytest.mark.parametrize("make", [linear, branching_join_and_sends, deferred, interrupted])
def test_next_nodes_equal_langgraphs_next_for_every_checkpoint(make):
    builder, inputs = make()
    saver = InMemorySaver()
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    for given in inputs:
        graph.invoke(given, config)
    assert next_nodes(saver.get_tuple(config).checkpoint) == []  # reached END
    graph.update_state(config, {"seen": ["edited"]})

    history = list(graph.get_state_history(config))
    assert len(history) >= 3
    for state in history:
        saved = saver.get_tuple(state.config)
        assert next_nodes(saved.checkpoint) == sorted(set(state.next)), state.metadata


def test_a_failed_node_stays_next_and_its_error_is_said():
    b = StateGraph(S)
    b.add_node("a", node("a"))

    def boom(state):
        raise ValueError("the ledger is closed")

    b.add_node("boom", boom)
    b.add_edge(START, "a")
    b.add_edge("a", "boom")
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(ValueError):
        b.compile(checkpointer=saver).invoke({"seen": []}, config)
    saved = saver.get_tuple(config)
    assert next_nodes(saved.checkpoint) == ["boom"]
    [(task_id, channel, _)] = saved.pending_writes
    raised = ValueError("the ledger is closed")  # what the saver's put_writes is given
    assert writes_info(task_id, [(channel, raised)]) == {
        "errors": ["ValueError: the ledger is closed"]
    }


def test_steps_are_named_by_the_nodes_that_ran():
    assert step_name({"source": "input", "step": -1}, None) == "input"
    assert step_name({"source": "loop", "step": 3}, ["ask"]) == "ask"
    assert step_name({"source": "loop", "step": 3}, ["left", "right"]) == "left, right"
    assert step_name({"source": "update", "step": 4}, ["ask"]) == "update_state"
    assert step_name({"source": "loop", "step": 3}, None) == "loop 3"


def test_a_resume_names_the_interrupts_it_answers():
    null = "00000000-0000-0000-0000-000000000000"
    one = "a" * 32
    assert writes_info(null, [("__resume__", {"approved": True})]) == {"resumed": ["*"]}
    assert writes_info(null, [("__resume__", {one: 1})]) == {"resumed": [one]}
    assert writes_info("task", [("__resume__", [1])]) == {}
