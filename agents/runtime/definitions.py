"""How an agent is written: a named, versioned graph of step functions.

    from agents.runtime import Agent, StepContext, Transition, goto, register

    refund = Agent("refund", version=1, first="lookup")

    @refund.step
    def lookup(ctx: StepContext) -> Transition:
        history = ctx.tools.call(billing_history, customer=ctx.run_input["customer"])
        return goto(decide, history=history)

    register(refund)

A step reads `ctx.state` and returns one transition: `goto`, `finish`, `fail`,
`wait_for_approval`, `sleep_until` or `wait_for_event`; its keyword arguments are merged
into the state; a step or a tool is named by its function (or by its name). Steps must be
deterministic given their state and inputs; anything with a
side effect goes through `ctx.tools`, whose ledger makes a replay return the first result.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agents.runtime.errors import UnknownAgent, UnknownStep

if TYPE_CHECKING:
    from agents.runtime.engine.step_context import StepContext

StepFunction = Callable[["StepContext"], "Transition"]
StateMigration = Callable[[dict], dict]
# summary(run input, run output or None) -> a RunSummary, or a str (what the run was about).
SummaryFunction = Callable[[dict[str, Any], Any], "RunSummary | str"]

log = logging.getLogger(__name__)
SUMMARY_WHAT_CHARS = 90
SUMMARY_OUTCOME_CHARS = 60


@dataclass(frozen=True)
class Transition:
    kind: str  # goto | finish | fail | approval | timer | event
    next_step: str = ""
    update: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    error: str = ""
    approval: dict[str, Any] | None = None
    wake_at: dt.datetime | None = None
    event: str = ""


def step_name(step: str | Callable[..., Any]) -> str:
    """The name a step goes by: given, or its function's (as `Agent.step` registers it)."""
    if isinstance(step, str):
        return step
    name = getattr(step, "__name__", "")
    if not name or not name.isidentifier():
        raise ValueError(f"A step is a named function or its name, not {step!r}.")
    return name


def goto(step: str | StepFunction, **update: Any) -> Transition:
    """Continue with `step`."""
    return Transition("goto", next_step=step_name(step), update=update)


def finish(output: Any = None, **update: Any) -> Transition:
    """The run succeeded with `output`."""
    return Transition("finish", output=output, update=update)


def fail(error: str, **update: Any) -> Transition:
    """The run failed for a reason the agent understands (not retried)."""
    return Transition("fail", error=error, update=update)


def wait_for_approval(
    *,
    action: str,
    arguments: dict[str, Any],
    then: str | StepFunction,
    reason: str = "",
    amount: float | None = None,
    due_in: dt.timedelta | None = None,
    **update: Any,
) -> Transition:
    """Pause until a person decides; `then` runs with `ctx.decision`."""
    approval = {
        "action": action,
        "arguments": arguments,
        "reason": reason,
        "amount": amount,
        "due_in": due_in,
    }
    return Transition("approval", next_step=step_name(then), update=update, approval=approval)


def sleep_until(when: dt.datetime, *, then: str | StepFunction, **update: Any) -> Transition:
    """Pause until `when` (no worker is held); then run `then`."""
    return Transition("timer", next_step=step_name(then), update=update, wake_at=when)


def wait_for_event(name: str, *, then: str | StepFunction, **update: Any) -> Transition:
    """Pause until an event `name` is posted to the run; `then` runs with `ctx.event`."""
    return Transition("event", next_step=step_name(then), update=update, event=name)


@dataclass
class RetryPolicy:
    max_attempts: int = 5
    base_delay: float = 0.5  # seconds; doubled per attempt, with full jitter
    max_delay: float = 60.0


@dataclass(frozen=True)
class RunSummary:
    """One line about a run for the lists: what it was asked to do and how that ended
    ("Refund 40.00 for A-1002" → "refunded"); `outcome` is empty while it has none."""

    what: str
    outcome: str = ""

    def __str__(self) -> str:
        return f"{self.what} → {self.outcome}" if self.outcome else self.what


def generic_summary(run_input: Any, output: Any) -> RunSummary:
    """The first line of the input's message (or the input itself) and the output's outcome."""
    data = run_input if isinstance(run_input, dict) else {}
    message = data.get("message")
    if isinstance(message, str) and message.strip():
        what = message
    elif data:
        what = json.dumps(data, ensure_ascii=False, sort_keys=True, default=str)
    else:
        what = "(no input)"
    return RunSummary(
        _line(what, SUMMARY_WHAT_CHARS), _line(_outcome(output), SUMMARY_OUTCOME_CHARS)
    )


def _outcome(output: Any) -> str:
    if output is None:
        return ""
    if not isinstance(output, dict):
        return str(output) if isinstance(output, str | int | float | bool) else ""
    for key in ("outcome", "status", "result", "reason", "answer"):
        value = output.get(key)
        if isinstance(value, str | int | float) and not isinstance(value, bool) and value != "":
            return str(value)
    return ""


def _line(text: str, limit: int) -> str:
    """The first non-empty line of `text`, whitespace collapsed, cut at `limit` characters."""
    first = next((line for line in str(text).splitlines() if line.strip()), "")
    first = " ".join(first.split())
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


@dataclass
class Agent:
    name: str
    version: int
    first: str
    description: str = ""
    state_version: int = 1
    # migrations[n] turns state of version n into version n + 1.
    migrations: dict[int, StateMigration] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    step_retries: dict[str, RetryPolicy] = field(default_factory=dict)
    # What a user message does while a step runs: queue it, interrupt, or reject (409).
    on_message_while_running: str = "queue"
    # False: its runs are made by a process outside (a LangGraph thread through the saver)
    # and are never started or stepped here.
    startable: bool = True
    # Optional JSON Schema of the run state; the admin console validates edited state with it.
    state_schema: dict[str, Any] | None = None
    # The one line the runs lists show about a run, from its input and output (None before it
    # finishes); without it, or when it fails, the first line of input["message"] and the
    # output's outcome (see `summarize`).
    summary: SummaryFunction | None = None
    # The currency of the amounts its approval requests name (ISO 4217, e.g. "USD"), when the
    # arguments do not say.
    currency: str = ""
    steps: dict[str, StepFunction] = field(default_factory=dict)

    def step(self, fn: StepFunction) -> StepFunction:
        """Decorator: register `fn` as a step named after the function (a second function of
        that name is refused)."""
        name = step_name(fn)
        if self.steps.get(name, fn) is not fn:
            raise ValueError(f"Agent {self.name!r} already has a step {name!r}.")
        self.steps[name] = fn
        return fn

    def get_step(self, name: str) -> StepFunction:
        try:
            return self.steps[name]
        except KeyError:
            raise UnknownStep(f"Agent {self.name!r} has no step {name!r}.") from None

    def summarize(self, run_input: Any, output: Any) -> RunSummary:
        """The run's one line: the agent's `summary`, or the generic one when it has none, or
        it raises or answers nothing usable (a list page never breaks on one agent's code)."""
        fallback = generic_summary(run_input, output)
        if self.summary is None:
            return fallback
        try:
            found = self.summary(run_input if isinstance(run_input, dict) else {}, output)
            if isinstance(found, str):
                found = RunSummary(found, fallback.outcome)
            if isinstance(found, RunSummary) and str(found.what).strip():
                return RunSummary(
                    _line(str(found.what), SUMMARY_WHAT_CHARS),
                    _line(str(found.outcome or ""), SUMMARY_OUTCOME_CHARS),
                )
        except Exception:
            log.warning("the summary of agent %r failed", self.name, exc_info=True)
        return fallback

    def retry_for(self, step: str) -> RetryPolicy:
        return self.step_retries.get(step, self.retry)

    def migrate_state(self, state: dict, from_version: int) -> dict:
        """Bring a checkpoint's state forward to `state_version`, one migration at a time."""
        for version in range(from_version, self.state_version):
            migration = self.migrations.get(version)
            if migration is None:
                raise ValueError(f"no migration from state version {version} to {version + 1}")
            state = migration(dict(state))
            if not isinstance(state, dict):
                raise ValueError(f"migration from version {version} did not return a dict")
        return state


_REGISTRY: dict[str, Agent] = {}


class Builds(Protocol):
    """What builds an Agent (a ToolAgent): registered as the Agent it builds."""

    def build(self) -> Agent: ...


def register(agent: Agent | Builds, *, replace: bool = False) -> Agent:
    """Make `agent` (an Agent, or a ToolAgent) runnable by its name; the one way to register.
    Another agent under a name already taken is refused unless `replace`."""
    if not isinstance(agent, Agent):
        agent = agent.build()
    if agent.first not in agent.steps:
        raise ValueError(f"agent {agent.name!r}: first step {agent.first!r} is not defined")
    if not replace and _REGISTRY.get(agent.name, agent) is not agent:
        raise ValueError(
            f"An agent named {agent.name!r} is already registered; give this one another name,"
            " or register it with replace=True."
        )
    _REGISTRY[agent.name] = agent
    return agent


def get_agent(name: str) -> Agent:
    _load_builtin_agents()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownAgent(f"There is no agent named {name!r}.") from None


def all_agents() -> list[Agent]:
    _load_builtin_agents()
    return sorted(_REGISTRY.values(), key=lambda a: a.name)


def run_summary(agent: str, run_input: Any, output: Any) -> RunSummary:
    """The one line the lists show about a run of `agent`: its summary, or the generic one
    (for an agent this process does not know, too). Never raises."""
    try:
        found = get_agent(agent)
    except UnknownAgent:
        return generic_summary(run_input, output)
    return found.summarize(run_input, output)


def agent_currency(name: str) -> str:
    """The currency the agent's amounts are in, as it declares it ("" if it does not)."""
    try:
        return get_agent(name).currency
    except UnknownAgent:
        return ""


def _load_builtin_agents() -> None:
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    for module in getattr(settings, "AGENTSTATE_AGENT_MODULES", []):
        try:
            __import__(module)
        except ModuleNotFoundError as exc:
            parts = module.split(".")
            if exc.name not in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}:
                raise  # the module is there; something it imports is not
            raise ImproperlyConfigured(
                f"AGENTSTATE_AGENT_MODULES lists {module!r}, which this process cannot import"
                f" ({exc}): put the folder that holds it on PYTHONPATH of the web and the"
                " worker processes"
            ) from exc
