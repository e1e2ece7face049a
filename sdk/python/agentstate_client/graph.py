"""What `AgentStateSaver` tells AgentState about a graph beside the bytes it stores, so the
thread's run has the graph's status and its words (agents/runtime/graph_runs.py):

- per checkpoint, `next`: the nodes LangGraph will run from it, read from the channels that
  trigger nodes, as LangGraph's own `prepare_next_tasks` reads them — `__start__` (the input),
  `branch:to:<node>` (an edge or a branch chose the node), a `join:<a>+<b>:<node>` barrier that
  every source reached, and the `Send`s in `__pregel_tasks` — each only if the node has not
  seen that channel's version (`versions_seen`). None left: the graph reached END;
- per checkpoint, the step's name: the nodes that ran to make it (the `next` of its parent);
- per task's writes, `resumed` (the interrupt ids a `Command(resume=...)` answers) and
  `errors` (what a failing node raised).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

START = "__start__"
TASKS = "__pregel_tasks"
RESUME = "__resume__"
ERROR = "__error__"
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
BRANCH = "branch:to:"
JOIN = re.compile(r"^join:(?P<sources>.+):(?P<node>[^:]+)$")
INTERRUPT_ID = re.compile(r"^[0-9a-f]{32}$")
REMEMBERED = 256  # checkpoints whose next nodes a saver remembers (to name the next step)


def next_nodes(checkpoint: dict[str, Any]) -> list[str]:
    """The nodes LangGraph will run from `checkpoint` (sorted; empty: the graph is done)."""
    values = checkpoint.get("channel_values") or {}
    versions = checkpoint.get("channel_versions") or {}
    seen = checkpoint.get("versions_seen") or {}
    found: set[str] = set()
    for channel, value in values.items():
        node = _triggered(str(channel), value)
        if node is not None and not _seen(seen.get(node) or {}, channel, versions.get(channel)):
            found.add(node)
    for send in values.get(TASKS) or []:
        if isinstance(getattr(send, "node", None), str):
            found.add(send.node)
    return sorted(found)


def _triggered(channel: str, value: Any) -> str | None:
    if channel == START:
        return START
    if channel.startswith(BRANCH):
        if _deferred(value) and not value[1]:
            return None  # a deferred node's edge: it runs once nothing else is left
        return channel[len(BRANCH) :]
    if match := JOIN.match(channel):
        names = set(match["sources"].split("+"))
        if _deferred(value) and not value[1]:
            return None
        reached = value[0] if _deferred(value) else value
        return match["node"] if isinstance(reached, set | frozenset) and reached >= names else None
    return None


def _deferred(value: Any) -> bool:
    # A deferred node's channels keep (value, finished), a list once serialized: available
    # once finished.
    return isinstance(value, tuple | list) and len(value) == 2 and isinstance(value[1], bool)


def _seen(seen: dict[str, Any], channel: str, version: Any) -> bool:
    if channel not in seen or version is None:
        return False
    try:
        return not version > seen[channel]
    except TypeError:
        return False


def is_state(channel: str) -> bool:
    """Whether a channel holds the graph's state (not LangGraph's own bookkeeping: `__…__`
    channels, and the `branch:to:` and `join:` channels that trigger nodes)."""
    return not (channel.startswith(("__", BRANCH)) or JOIN.match(channel))


def step_name(metadata: dict[str, Any], ran: list[str] | None) -> str:
    """The checkpoint's step in the graph's words: the nodes that ran ("__start__", "ask",
    "a, b"), "input", "update_state", "fork"; LangGraph's source and number when unknown."""
    source = str(metadata.get("source") or "step")
    if source == "input":
        return "input"
    if source == "update":
        return "update_state"
    if source == "loop" and ran:
        return ", ".join(ran)[:100]
    return f"{source} {metadata.get('step', '')}".strip()[:100]


class NextNodes:
    """The next nodes of the checkpoints a saver put or read lately, so the next checkpoint's
    step is named by the nodes that ran from its parent."""

    def __init__(self) -> None:
        self._known: OrderedDict[tuple[str, str, str], list[str]] = OrderedDict()
        self._lock = threading.Lock()  # LangGraph puts from a background thread

    def remember(self, thread_id: str, ns: str, checkpoint_id: str, nodes: list[str]) -> None:
        key = (str(thread_id), ns, checkpoint_id)
        with self._lock:
            self._known[key] = nodes
            self._known.move_to_end(key)
            while len(self._known) > REMEMBERED:
                self._known.popitem(last=False)

    def of(self, thread_id: str, ns: str, checkpoint_id: str | None) -> list[str] | None:
        return self._known.get((str(thread_id), ns, checkpoint_id or ""))


def writes_info(task_id: str, writes: Any) -> dict[str, Any]:
    """What a task's writes say about the graph: resume values it was given, errors raised."""
    resumed: list[str] = []
    errors: list[str] = []
    for channel, value in writes:
        if channel == RESUME and task_id == NULL_TASK_ID:
            keys = list(value) if isinstance(value, dict) else []
            if keys and all(isinstance(k, str) and INTERRUPT_ID.match(k) for k in keys):
                resumed += keys  # Command(resume={interrupt id: value, ...})
            else:
                resumed.append("*")  # one value for whatever waits
        elif channel == ERROR:
            text = value if isinstance(value, str) else f"{type(value).__name__}: {value}"
            errors.append(text[:2000])
    found: dict[str, Any] = {}
    if resumed:
        found["resumed"] = resumed
    if errors:
        found["errors"] = errors
    return found
