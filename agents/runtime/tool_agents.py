"""Tool-calling agents: declare instructions, tools and a turn limit; the engine runs the loop.

    support = register(ToolAgent(
        name="support",
        instructions="You are a refund desk. Look up billing before refunding.",
        tools=[billing_history, issue_refund],  # the @tool functions, or their names
        max_turns=6,
    ))

The loop is two steps of an ordinary `Agent`, so everything the engine guarantees holds:

- `model`: one model call per step (checkpointed, its tokens streamed live). The context is
  packed by `ctx.pack` when conversations are installed (instructions, the thread, memories
  from `ctx.memory.recall`, tool schemas), then this run's own calls and results in the
  OpenAI format. A reply without tool calls is the answer: it is said and the run finishes.
- `tools`: every call the model asked for in that turn (parallel calls included), in order,
  each through the ledger (intent before, outcome after, exactly once, replayed on resume).
  A side-effecting tool that the tenant's approval policy covers (or that the agent lists in
  `approval_required`, or a call `approval_when(name, arguments)` says needs a person) pauses
  the run with the model's arguments; the manager's decision (and edited arguments) is what
  runs. An unknown tool, arguments that fail the tool's schema, a permanent tool failure or a
  declined approval go back to the model as the tool's result; transient failures retry the
  step under its retry policy.

After `max_turns` model calls without an answer the run finishes with `turn_limit`.

The run's calls and results are kept in two logs of the run (`ctx.append`/`ctx.log`), not in
its state: each turn's part is stored once, in the checkpoint of the step that made it, so a
run's bytes grow with its turns rather than with their square. `exchange` is what the model
is sent after its packed context (the OpenAI format); `transcript` is the same turns as thread
messages, said when the run answers (or stops at the limit), so the packer does not send this
run's calls twice.

Options beyond the loop: `input_context` (run-input keys the model gets as data, in a system
message after the instructions), `extract_memory` (on the first model turn, what the user says
about themselves is remembered through `ctx.memory.extract`), `memory_query` (what else to
recall memories about, besides the request), `approval_when` (a rule per call, e.g. refunds
above an amount), `summary` (the runs lists' one line about a run) and `currency`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from agents.runtime import extensions
from agents.runtime.definitions import (
    Agent,
    RetryPolicy,
    SummaryFunction,
    Transition,
    finish,
    goto,
    wait_for_approval,
)
from agents.runtime.engine.step_context import StepContext
from agents.runtime.errors import ToolFailed
from agents.runtime.llm import ChatModel
from agents.runtime.tools import Tool, get_tool, tool_name
from core.json_schema import schema_errors
from tenants.scope import tenant_scope

# The approvals app answers "does a policy of this tenant cover this action?" when installed.
POLICY_COVERS = "approvals.policy_covers"
# The run's logs (ctx.append / ctx.log): stored once, each turn's part in its step's checkpoint.
EXCHANGE = "exchange"  # this run's calls and results, in the OpenAI format, for the model
TRANSCRIPT = "transcript"  # the same turns as thread messages, said when the run answers
TURN_LIMIT_REPLY = "I could not finish this within the steps I am allowed; a person will follow up."


@dataclass
class ToolAgent:
    name: str
    instructions: str
    tools: Sequence[str | Callable[..., Any]] = ()
    max_turns: int = 8
    version: int = 1
    description: str = ""
    # Tools that always wait for a person, whatever the tenant's policies say.
    approval_required: Sequence[str | Callable[..., Any]] = ()
    # A call (tool name, validated arguments) waits for a person when this returns True, besides
    # `approval_required` and the tenant's policies (e.g. a refund above an amount).
    approval_when: Callable[[str, dict[str, Any]], bool] | None = None
    # Run-input keys the model is given as data (JSON, in a system message after the
    # instructions, never part of them), e.g. ("customer",).
    input_context: Sequence[str] = ()
    # Recall the user's memories for each model call (when the memory app is installed).
    use_memory: bool = True
    # What else to recall memories about, added to the request's words (e.g. "How does the
    # customer prefer to be contacted?"): a fact the request does not mention is still found.
    memory_query: str = ""
    # On the first model turn, remember what the user says about themselves
    # (`ctx.memory.extract(request)`, committed with the step; when the memory app is installed).
    extract_memory: bool = False
    # The chat model; None: the one the settings choose (LLM_PROVIDER).
    model: Callable[[], ChatModel] | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # The runs lists' one line about a run (Agent.summary), and the currency of its amounts.
    summary: SummaryFunction | None = None
    currency: str = ""

    def __post_init__(self) -> None:
        # Tools given by their functions go by their names from here on.
        self.tools = self._tool_names = [tool_name(t) for t in self.tools]
        self.approval_required = [tool_name(t) for t in self.approval_required]

    def build(self) -> Agent:
        """The engine's Agent running this loop (two steps: model, tools); `register(desk)`
        registers it."""
        agent = Agent(
            name=self.name,
            version=self.version,
            first="model",
            description=self.description or self.instructions[:200],
            retry=self.retry,
            summary=self.summary,
            currency=self.currency,
        )
        agent.steps["model"] = self._model_step
        agent.steps["tools"] = self._tools_step
        return agent

    # --- the model's turn -------------------------------------------------------------------

    def _model_step(self, ctx: StepContext) -> Transition:
        _adopt_copies(ctx)
        turn = int(ctx.state.get("turn", 0))
        if turn >= self.max_turns:
            _say_transcript(ctx)
            ctx.say(TURN_LIMIT_REPLY)
            return finish({"answer": None, "reason": "turn_limit", "turns": turn})
        request = str(ctx.run_input.get("message") or "")
        if self.extract_memory and turn == 0 and request and ctx.has("memory"):
            ctx.memory.extract(request)
        messages, schemas = self._context(ctx, request)
        llm = ctx.llm if self.model is None else ctx.live(self.model())
        reply = llm.chat(messages + ctx.log(EXCHANGE), tools=schemas or None)
        if not reply.tool_calls:
            _say_transcript(ctx)
            ctx.say(reply.content)
            return finish({"answer": reply.content, "turns": turn + 1})
        calls = [_call(c) for c in reply.tool_calls]
        assistant = {
            "role": "assistant",
            "content": reply.content or None,
            "tool_calls": [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                }
                for c in calls
            ],
        }
        ctx.append(EXCHANGE, assistant)
        return goto(
            "tools",
            turn=turn + 1,
            pending=calls,
            results={},
            awaiting=None,
            reason=reply.content,
        )

    def _context(self, ctx: StepContext, request: str) -> tuple[list[dict], list[dict]]:
        tools = [t for t in (_lookup(name) for name in self._tool_names) if t is not None]
        data = self._input_data(ctx)
        if not ctx.has("pack"):  # conversations not installed: instructions and the request
            messages = [{"role": "system", "content": self.instructions}, *data]
            if request:
                messages.append({"role": "user", "content": request})
            return messages, [t.schema() for t in tools]
        memory = ctx.memory if self.use_memory and ctx.has("memory") else None
        query = " ".join(part for part in (request, self.memory_query) if part)
        packed = ctx.pack(
            system=self.instructions,
            current=request or None,
            tools=tools,
            memories=memory.recall(query) if memory is not None and request else [],
        )
        # The run's input data goes right after the instructions (the packer's first message).
        return packed.messages[:1] + data + packed.messages[1:], packed.tools

    def _input_data(self, ctx: StepContext) -> list[dict[str, Any]]:
        """The run-input keys listed in `input_context`, as one system message of JSON data."""
        given = {key: ctx.run_input[key] for key in self.input_context if key in ctx.run_input}
        if not given:
            return []
        data = json.dumps(given, ensure_ascii=False, default=str)
        return [{"role": "system", "content": f"Run input (data): {data}"}]

    # --- the tools' turn --------------------------------------------------------------------

    def _tools_step(self, ctx: StepContext) -> Transition:
        _adopt_copies(ctx)
        calls: list[dict[str, Any]] = ctx.state.get("pending", [])
        results: dict[str, Any] = dict(ctx.state.get("results", {}))
        for call in calls:
            if call["id"] in results:
                continue  # made before a pause for approval: its result is in the state
            tool, problem = self._check(call)
            if tool is None:
                results[call["id"]] = {"error": problem}
                continue
            arguments = call["arguments"]
            if self._needs_approval(ctx, tool, arguments):
                decision = ctx.decision if ctx.state.get("awaiting") == call["id"] else None
                if decision is None:
                    return wait_for_approval(
                        action=tool.name,
                        arguments=arguments,
                        then="tools",
                        reason=str(ctx.state.get("reason") or "")[:2000],
                        amount=_amount(arguments),
                        results=results,
                        awaiting=call["id"],
                    )
                if not decision.get("approved"):
                    results[call["id"]] = {
                        "error": "A manager declined this call.",
                        "comment": decision.get("comment", ""),
                    }
                    continue
                arguments = decision.get("arguments") or arguments
            try:
                results[call["id"]] = ctx.tools.call(tool.name, **arguments)
            except ToolFailed as exc:
                results[call["id"]] = {"error": str(exc)}
        ctx.append(EXCHANGE, *(_tool_message(call, results[call["id"]]) for call in calls))
        ctx.append(TRANSCRIPT, *_transcript(calls, results))
        return goto("model", pending=[], results={}, awaiting=None)

    def _check(self, call: dict[str, Any]) -> tuple[Tool | None, str]:
        """The tool a call names and an empty string, or None and what is wrong (for the model)."""
        tool = _lookup(call["name"]) if call["name"] in self._tool_names else None
        if tool is None:
            offered = ", ".join(self._tool_names) or "none"
            return None, f"There is no tool named {call['name']!r}. Tools: {offered}."
        if not isinstance(call["arguments"], dict):
            return None, f"The arguments of {tool.name} must be a JSON object."
        errors = schema_errors(tool.parameters, call["arguments"])
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "arguments"
            return None, f"Invalid arguments for {tool.name}: {where}: {errors[0].message}"
        return tool, ""

    def _needs_approval(self, ctx: StepContext, tool: Tool, arguments: dict[str, Any]) -> bool:
        if tool.name in self.approval_required:
            return True
        if self.approval_when is not None and self.approval_when(tool.name, arguments):
            return True
        covers = extensions.provider(POLICY_COVERS)
        if not tool.side_effects or covers is None:
            return False
        with tenant_scope(ctx.tenant_id):
            return bool(covers(tenant_id=ctx.tenant_id, action=tool.name))


def _say_transcript(ctx: StepContext) -> None:
    """The run's calls and results, said as thread messages (when it answers or gives up)."""
    for message in ctx.log(TRANSCRIPT):
        ctx.say(**message)


def _adopt_copies(ctx: StepContext) -> None:
    """A run checkpointed before the logs (its state holds the whole exchange and transcript)
    moves them into its logs at its next step; its state then stops carrying them."""
    for key in (EXCHANGE, TRANSCRIPT):
        copied = ctx.state.pop(key, None)
        if copied:
            ctx.append(key, *copied)


def _lookup(name: str) -> Tool | None:
    try:
        return get_tool(name)
    except ToolFailed:
        return None


def _call(call: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(call["id"]), "name": str(call["name"]), "arguments": call.get("arguments")}


def _amount(arguments: Any) -> float | None:
    """A money amount among the arguments, for the approval's threshold and the inbox."""
    if not isinstance(arguments, dict):
        return None
    for key in ("amount", "amount_usd", "total"):
        try:
            return float(Decimal(str(arguments[key])))
        except (KeyError, InvalidOperation, ValueError):
            continue
    return None


def _tool_message(call: dict[str, Any], result: Any) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": json.dumps(result, default=str),
    }


def _transcript(calls: list[dict[str, Any]], results: dict[str, Any]) -> list[dict[str, Any]]:
    """The turn as transcript messages (said when the run answers, so the thread shows what
    the agent did without the packer sending this run's calls twice)."""
    said: list[dict[str, Any]] = []
    for call in calls:
        tool_call = {"id": call["id"], "name": call["name"], "arguments": call["arguments"]}
        said.append({"content": "", "role": "assistant", "tool_call": tool_call})
        said.append(
            {
                "content": json.dumps(results[call["id"]], default=str)[:4000],
                "role": "tool",
                "tool_call": {"id": call["id"], "name": call["name"]},
                "tool_result": results[call["id"]],
            }
        )
    return said
