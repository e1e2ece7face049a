"""`ctx.pack(...)`: a step builds a model call's context, and the record of what was packed
commits with the step (ctx.write_with_step), exactly once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.conversations.packing.build import build_context
from agents.conversations.packing.memories import Memory, as_memories
from agents.conversations.packing.packer import Packed
from agents.conversations.packing.records import record_fields
from agents.runtime.models import PackedContext

if TYPE_CHECKING:
    from agents.runtime.engine.step_context import StepContext


def pack_for_step(
    ctx: StepContext,
    *,
    system: str,
    current: str | None = None,
    tools: Sequence[Any] = (),
    memories: Sequence[Memory] | Any | None = None,
    model: str | None = None,
    window: int | None = None,
    reserve_output: int | None = None,
) -> Packed:
    """Pack the context of the step's next model call and record it with the step."""
    if memories is not None and not isinstance(memories, list | tuple):
        memories = as_memories(memories)  # e.g. what ctx.memory.recall() returned
    packed = build_context(
        tenant_id=ctx.tenant_id,
        session_id=ctx.session_id,
        system=system,
        current=current,
        tools=tools,
        used_tools=[call["tool"] for call in ctx.tools.calls],
        memories=memories,
        model=model,
        window=window,
        reserve_output=reserve_output,
    )
    done: list[Packed] = ctx.__dict__.setdefault("packed", [])
    index = len(done)
    done.append(packed)
    # How many model calls the step had made when it packed this context: the call that
    # answers it is the next one, unless the step packs again first.
    marks: list[int] = ctx.__dict__.setdefault("packed_at_call", [])
    marks.append(len(ctx.model_calls))
    fields = record_fields(packed)

    def write() -> None:
        # Written when the step persists, so every call the step made is known by then.
        PackedContext.objects.create(
            tenant_id=ctx.tenant_id,
            run_id=ctx.run_id,
            seq=ctx.seq,
            index=index,
            step=ctx.step,
            **fields,
            **answered_by(list(ctx.model_calls), marks, index),
        )

    ctx.write_with_step(write)
    return packed


def answered_by(calls: list[dict[str, str]], marks: list[int], index: int) -> dict[str, str]:
    """The provider and model of the first model call after pack `index` and before the next
    pack; blank when the step made none in between."""
    start = marks[index]
    end = marks[index + 1] if index + 1 < len(marks) else len(calls)
    if start >= end:
        return {"provider": "", "provider_model": ""}
    call = calls[start]
    return {"provider": call.get("provider", ""), "provider_model": call.get("model", "")}
