"""What a step sees: its state, inputs, tools, the model, and the conversation."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cached_property
from typing import Any

from agents.runtime import extensions
from agents.runtime import tools as tool_registry
from agents.runtime.engine import ledger
from agents.runtime.engine.store import Claim
from agents.runtime.llm import ChatModel, get_model
from agents.runtime.selectors import transcript_for_step
from agents.runtime.streaming import LiveModel


class ToolBox:
    """`ctx.tools.call(name, **arguments)`; side-effecting calls go through the ledger."""

    def __init__(self, claim: Claim, seq: int) -> None:
        self._claim = claim
        self._seq = seq
        self._index = 0
        self.calls: list[dict[str, Any]] = []

    def call(self, name: str | Callable[..., Any], /, **arguments: Any) -> Any:
        """Call a tool, given by its name or its decorated function."""
        tool = tool_registry.get_tool(name)
        index = self._index
        self._index += 1
        if tool.side_effects:
            result = ledger.call(
                tenant_id=self._claim.tenant_id,
                run_id=self._claim.run_id,
                seq=self._seq,
                index=index,
                tool=tool,
                arguments=arguments,
            )
        else:
            result = tool.fn(**arguments)
        self.calls.append({"tool": tool.name, "arguments": arguments, "index": index})
        return result


class StepDiscarded(BaseException):  # noqa: N818 - a signal, as GeneratorExit is
    """The step runs ahead of its predecessor's commit, which did not go on (superseded,
    failed, or the run stopped): it must stop here. A BaseException, so that a step's own
    `except Exception` cannot keep it going."""


class StepContext:
    def __init__(
        self,
        claim: Claim,
        *,
        step: str,
        seq: int,
        attempt: int,
        state: dict,
        wake_payload: dict | None,
        messages_upto: int,
        event_seq: int = 0,
        logs: Callable[[], dict[str, list[Any]]] | None = None,
    ) -> None:
        self.run_id = claim.run_id
        self.tenant_id = claim.tenant_id
        self.session_id = claim.session_id
        self.run_input: dict = claim.input
        self.step = step
        self.seq = seq
        self.attempt = attempt
        # The step's own copy (the runner decodes it from the checkpoint's JSON for each
        # step): a step that raises halfway leaves its edits nowhere.
        self.state: dict = state
        self._claim = claim
        self.messages_upto = messages_upto
        # The engine's bookkeeping (agents.runtime.engine reads it when it persists the step):
        # messages said, and writes that commit with this step or not at all (each called
        # inside the transaction that persists the step, after its fenced write succeeded:
        # memory proposals, the packed-context record, ...). A retried step starts empty.
        self._outbox: list[dict[str, Any]] = []
        self._writes: list[Callable[[], None]] = []
        # Who answered each model call made through `ctx.llm` / `ctx.live(...)`, in order
        # ({"provider", "model"}): the packed-context record names the call's real model.
        self._llm_calls: list[dict[str, str]] = []
        # What this step appends to the run's logs (stored with its checkpoint), and how the
        # earlier steps' parts are read (once per drive, by the runner).
        self._appended: dict[str, list[Any]] = {}
        self._logs = logs
        self._extensions: dict[str, Any] = {}
        wake = wake_payload or {}
        self.decision: dict | None = wake.get("decision")
        self.event: dict | None = wake.get("event")
        self._event_seq = event_seq
        # Set while the step runs ahead of its predecessor's commit (the runner's pipelined
        # step): called once, before the step first reaches outside the process.
        self._gate: Callable[[StepContext], None] | None = None

    def _outside(self) -> None:
        """The step is about to reach outside the process: its predecessor must be durable."""
        gate = self._gate
        if gate is not None:
            self._gate = None
            gate(self)

    @cached_property
    def tools(self) -> ToolBox:
        """`ctx.tools.call(name, **arguments)`: side-effecting calls go through the ledger."""
        self._outside()
        return ToolBox(self._claim, self.seq)

    @cached_property
    def llm(self) -> LiveModel:
        """The chat model the settings choose, its calls announced and streamed live."""
        self._outside()
        return self.live(get_model())

    def live(self, model: ChatModel) -> LiveModel:
        """`model` with its calls announced and its tokens streamed to live pages."""
        self._outside()
        return LiveModel(model, ctx=self, after=self._event_seq)

    @property
    def memory(self) -> extensions.StepMemory:
        """What is remembered about the run's person (the memory app): `recall`, `propose`,
        `extract`. ExtensionMissing (an AttributeError) without the memory app."""
        return self.extension("memory")

    @property
    def pack(self) -> extensions.StepPack:
        """Pack the context of the step's next model call (the conversations app).
        ExtensionMissing (an AttributeError) without it."""
        return self.extension("pack")

    def has(self, name: str) -> bool:
        """Whether `ctx.<name>` is provided (its app is installed)."""
        return name in self._extensions or extensions.step_extension(name) is not None

    def extension(self, name: str) -> Any:
        """What a feature registered under `name` (agents.runtime.extensions), built on first
        use and kept for the step; ExtensionMissing if none did."""
        self._outside()
        found = self._extensions.get(name)
        if found is None:
            factory = extensions.step_extension(name)
            if factory is None:
                raise extensions.ExtensionMissing(name)
            found = self._extensions[name] = factory(self)
        return found

    def __getattr__(self, name: str) -> Any:
        """`ctx.<name>` of any other registered extension."""
        if name.startswith("_"):
            raise AttributeError(f"StepContext has no attribute {name!r}")
        return self.extension(name)

    @property
    def model_calls(self) -> tuple[dict[str, str], ...]:
        """Who answered each model call of this step so far ({"provider", "model"})."""
        return tuple(self._llm_calls)

    def write_with_step(self, write: Callable[[], None]) -> None:
        """Run `write()` in the transaction that persists this step (exactly once with it)."""
        self._writes.append(write)

    def append(self, key: str, *items: Any) -> None:
        """Add `items` (JSON values) to the run's log `key`, committed with this step.

        A state key is copied into every checkpoint, so a list kept in the state costs bytes
        with the square of its length over a run; a log is stored once, each step's part in
        its own checkpoint. Keep what grows with the run (a model's exchange) in a log."""
        self._appended.setdefault(key, []).extend(items)

    def log(self, key: str) -> list[Any]:
        """The run's log `key`: what its earlier steps appended, then this step, oldest first
        (a rewound run's log ends at the checkpoint it was rewound to). A copy, decoded afresh
        as the state is: a step that changes what it read changes nothing stored or kept."""
        self._outside()
        earlier = self._logs().get(key, []) if self._logs is not None else []
        return json.loads(json.dumps([*earlier, *self._appended.get(key, ())], default=str))

    def say(self, content: str, *, role: str = "assistant", **extra: Any) -> None:
        """Append a message to the conversation, committed with this step."""
        self._outbox.append({"role": role, "content": content, **extra})

    @cached_property
    def transcript(self) -> list[dict[str, Any]]:
        """The conversation so far (oldest first), as role/content dicts."""
        self._outside()
        if self.session_id is None:
            return []
        return transcript_for_step(tenant_id=self.tenant_id, session_id=self.session_id)

    @property
    def inbox(self) -> list[dict[str, Any]]:
        """User messages that arrived since the last checkpoint read the conversation."""
        return [m for m in self.transcript if m["role"] == "user" and m["seq"] > self.messages_upto]
