"""What a step sees of long-term memory: `ctx.memory.recall(...)` and `ctx.memory.propose(...)`.

Proposals are written with the step (ctx.write_with_step): they commit exactly once, in the
transaction that persists the step, or not at all. A refused proposal (a secret, a category
agents may not write) is dropped and logged; it never fails the step.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction

from agents.runtime.models import AgentSession
from core.errors import AppError
from memory import errors, selectors
from memory.facts import extraction, remember, services
from memory.models import MemoryFact, SourceKind
from tenants.scope import tenant_scope

if TYPE_CHECKING:
    from agents.runtime.engine.step_context import StepContext

logger = logging.getLogger(__name__)


class StepMemory:
    def __init__(self, ctx: StepContext) -> None:
        self._ctx = ctx
        self.recalled: list[selectors.MemoryContext] = []
        self.proposed: list[dict[str, Any]] = []
        self.refused: list[dict[str, Any]] = []

    @cached_property
    def subject_id(self) -> int | None:
        """The end user the conversation is with; no user, no memory."""
        if self._ctx.session_id is None:
            return None
        with tenant_scope(self._ctx.tenant_id):
            return (
                AgentSession.objects.for_tenant(self._ctx.tenant_id)
                .filter(pk=self._ctx.session_id)
                .values_list("user_id", flat=True)
                .first()
            )

    def recall(self, query: str, budget: int | None = None) -> selectors.MemoryContext:
        """The user's facts most relevant to `query`, quoted as data, within `budget` tokens."""
        if self.subject_id is None:
            return selectors.MemoryContext()
        budget = settings.MEMORY_CONTEXT_BUDGET_TOKENS if budget is None else budget
        with tenant_scope(self._ctx.tenant_id):
            found = selectors.facts_for_context(
                tenant_id=self._ctx.tenant_id,
                subject_id=self.subject_id,
                query=query,
                budget_tokens=budget,
            )
        self.recalled.append(found)
        return found

    def propose(
        self, category: str, text: str, key: str | None = None, confidence: float = 0.8
    ) -> bool:
        """Ask to remember a fact about the user, committed with this step. False if refused
        at once (a secret, bad text); the category policy is checked when it is written."""
        if self.subject_id is None:
            return False
        try:
            text = services.clean_text(text)
            key = services.clean_key(key)
        except AppError as exc:
            self._refuse(category, exc)
            return False
        # The newest message the step has read, without reading the transcript for it (a read
        # marks the user's messages as consumed).
        read = self._ctx.__dict__.get("transcript") or []
        seq = max([m["seq"] for m in read], default=self._ctx.messages_upto) or None
        proposal = {
            "category": category,
            "text": text,
            "key": key,
            "confidence": confidence,
            "seq": seq,
        }
        self.proposed.append(proposal)
        self._ctx.write_with_step(lambda: self._write(proposal))
        return True

    def extract(self, message: str | None = None) -> list[extraction.Operation]:
        """Propose, supersede or forget facts about the user from `message` (default: the
        run's message), committed with the step. A real model decides through tool calls;
        offline (the scripted model, or MEMORY_EXTRACTOR=patterns) patterns do."""
        if self.subject_id is None:
            return []
        if message is None:
            message = str(self._ctx.run_input.get("message") or "")
        if not message.strip():
            return []
        operations = self._operations(message)
        for op in operations:
            if op.kind == "forget":
                self._ctx.write_with_step(lambda key=op.key: self._forget(key))
            else:
                known = self._known().get(op.key, {}) if op.kind == "supersede" else {}
                self.propose(known.get("category", op.category), op.text, key=op.key or None)
        return operations

    def _operations(self, message: str) -> list[extraction.Operation]:
        llm = self._ctx.llm
        mode = settings.MEMORY_EXTRACTOR
        if mode == "patterns" or (mode == "auto" and getattr(llm, "model", "") == "scripted"):
            return extraction.from_patterns(message)
        known = [{"key": k, **v} for k, v in self._known().items()]
        reply = llm.chat(extraction.prompt(message, known), tools=extraction.TOOLS)
        return extraction.from_tool_calls(reply.tool_calls)

    def _known(self) -> dict[str, dict[str, str]]:
        """The user's live facts that have a key: key -> text and category."""
        with tenant_scope(self._ctx.tenant_id):
            facts = selectors.live_facts(tenant_id=self._ctx.tenant_id, subject_id=self.subject_id)
        return {f.key: {"text": f.text, "category": f.category} for f in facts if f.key}

    def _forget(self, key: str) -> None:
        ctx = self._ctx
        facts = MemoryFact.objects.for_tenant(ctx.tenant_id).filter(
            subject_id=self.subject_id, key=key, valid_until__isnull=True
        )
        for fact in facts:
            services.fact_delete(actor=f"agent:{ctx.run_id}", fact=fact)

    def _write(self, proposal: dict[str, Any]) -> None:
        ctx = self._ctx
        try:
            with transaction.atomic():  # a savepoint: a refusal must not undo the step
                remember.fact_remember(
                    tenant_id=ctx.tenant_id,
                    subject_id=self.subject_id,  # type: ignore[arg-type]
                    category=proposal["category"],
                    text=proposal["text"],
                    key=proposal["key"],
                    confidence=proposal["confidence"],
                    source_kind=SourceKind.CONVERSATION,
                    source_session_id=ctx.session_id,
                    source_run_id=ctx.run_id,
                    source_message_seq=proposal["seq"],
                    by_agent=True,
                )
        except (errors.CategoryNotWritable, errors.UnknownCategory, errors.SecretRefused) as exc:
            self._refuse(proposal["category"], exc)

    def _refuse(self, category: str, exc: AppError) -> None:
        self.refused.append({"category": category, "code": exc.code})
        logger.info("run %s: memory proposal refused (%s)", self._ctx.run_id, exc.code)
