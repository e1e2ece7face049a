"""Where features attach to the runtime. The engine knows no feature: it offers these points,
and features (approvals, memory, conversations) register in their `AppConfig.ready()`.

- **Pause handlers**: a step that returns `wait_for_approval(...)` pauses its run; the handler
  registered for "approval" records what the run waits for, in the transaction that persists
  the step (approvals registers one that opens an ApprovalRequest).
- **Step extensions**: `ctx.<name>` on a `StepContext`, built on first use by the factory
  registered under that name (memory registers `ctx.memory`, conversations `ctx.pack`).
- **Lifecycle signals** (Django signals, sent in the transaction that made the change):
  `run_cancelled`, `pauses_closed`, `messages_appended`.

See docs/architecture.md.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.dispatch import Signal


@dataclass(frozen=True)
class Pause:
    """A step asked to wait for a decision: what, on which run, after which checkpoint."""

    id: uuid.UUID
    tenant_id: Any
    run_id: Any
    checkpoint_seq: int
    step: str
    action: str
    arguments: dict[str, Any]
    reason: str
    amount: Any
    due_at: dt.datetime | None


PauseHandler = Callable[[Pause], None]
_pause_handlers: dict[str, PauseHandler] = {}


def register_pause_handler(kind: str, handler: PauseHandler) -> None:
    """Handle pauses of `kind` ("approval"); the last registration wins (tests may swap)."""
    _pause_handlers[kind] = handler


def pause_handler(kind: str) -> PauseHandler:
    try:
        return _pause_handlers[kind]
    except KeyError:
        raise ImproperlyConfigured(
            f"No pause handler for {kind!r}: is the app that handles it in INSTALLED_APPS?"
        ) from None


StepExtension = Callable[[Any], Any]  # StepContext -> what `ctx.<name>` is
_step_extensions: dict[str, StepExtension] = {}


class StepMemory(Protocol):
    """`ctx.memory` (registered by the memory app): what is remembered about the run's
    person, read and written with the step."""

    def recall(self, query: str, budget: int | None = None) -> Any:
        """The facts that bear on `query`, within `budget` tokens."""
        ...

    def propose(
        self, category: str, text: str, key: str | None = None, confidence: float = 0.8
    ) -> bool:
        """Ask to remember a fact about the person, committed with this step."""
        ...

    def extract(self, message: str | None = None) -> list[Any]:
        """Remember (or forget) what `message` says about the person, with this step."""
        ...


class StepPack(Protocol):
    """`ctx.pack` (registered by the conversations app): pack the context of the step's next
    model call within the model's window, recorded with the step."""

    def __call__(
        self,
        *,
        system: str,
        current: str | None = None,
        tools: Sequence[Any] = (),
        memories: Any = None,
        model: str | None = None,
        window: int | None = None,
        reserve_output: int | None = None,
    ) -> Any: ...


class ExtensionMissing(AttributeError):
    """`ctx.<name>` of an extension that no installed app registered."""

    def __init__(self, name: str) -> None:
        app = {"memory": "memory", "pack": "agents.conversations"}.get(name)
        hint = f" (add {app!r} to INSTALLED_APPS)" if app else ""
        super().__init__(f"ctx.{name} is not available: no installed app provides it{hint}.")


def register_step_extension(name: str, factory: StepExtension) -> None:
    """Make `ctx.<name>` the value `factory(ctx)`, built once per step on first use."""
    _step_extensions[name] = factory


def step_extension(name: str) -> StepExtension | None:
    return _step_extensions.get(name)


# tenant_id, run_id: a run was cancelled (who waits on it should stop waiting).
run_cancelled = Signal()
# tenant_id, run_id, pause_ids (list of str), why: pauses of a run that no longer wait (a
# LangGraph thread moved past its interrupts); what they opened should close, saying why.
pauses_closed = Signal()
# tenant_id, session_id, messages (dicts as cached), count, summary_upto: sent in the
# transaction that appended them; receivers defer their work with on_commit.
messages_appended = Signal()


_providers: dict[str, Callable[..., Any]] = {}


def register_provider(name: str, fn: Callable[..., Any]) -> None:
    """Offer `fn` under `name` ("memory.facts_for_context") to features that may use it when
    present; they must work without it (the app providing it may not be installed)."""
    _providers[name] = fn


def provider(name: str) -> Callable[..., Any] | None:
    return _providers.get(name)
