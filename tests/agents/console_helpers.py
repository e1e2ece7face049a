"""An agent and run rows for the admin console's tests."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone

from agents.runtime.definitions import Agent, RetryPolicy, finish, goto, register, wait_for_approval
from agents.runtime.errors import LLMRateLimited
from agents.runtime.models import Checkpoint, Run
from tenants.scope import tenant_scope
from tests.agents import agents_for_tests  # noqa: F401 - registers count_effect

BROKEN = {"charge": False}  # the charge step fails with a 429 while this is set

shop = Agent(
    "console_shop",
    version=2,
    first="pick",
    retry=RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001),
    state_schema={
        "type": "object",
        "properties": {
            "item": {"type": "string"},
            "qty": {"type": "integer", "minimum": 1},
        },
        "required": ["item", "qty"],
    },
)


@shop.step
def pick(ctx):
    return goto("charge", item=ctx.run_input.get("item", "lamp"), qty=1)


@shop.step
def charge(ctx):
    if BROKEN["charge"]:
        raise LLMRateLimited("429 from the payment provider")
    receipt = ctx.tools.call("count_effect", name=f"charge {ctx.state['item']}")
    return goto("done", receipt=receipt)


@shop.step
def done(ctx):
    return finish({"item": ctx.state["item"], "qty": ctx.state["qty"]})


@shop.step
def ask(ctx):
    return wait_for_approval(action="refund", arguments={"n": 1}, then="done", amount=5)


register(shop)


def make_run(tenant, **fields: Any) -> Run:
    """A run row as the engine would leave it (no engine involved)."""
    defaults: dict[str, Any] = {
        "agent": "console_shop",
        "agent_version": 2,
        "current_step": "charge",
        "step_seq": 1,
    }
    with tenant_scope(tenant.pk):
        run = Run.objects.create(tenant=tenant, **{**defaults, **fields})
        if run.step_seq:
            Checkpoint.objects.create(
                tenant=tenant,
                run=run,
                seq=run.step_seq,
                step="pick",
                next_step=run.current_step,
                state={"item": "lamp", "qty": 1},
                schema_version=1,
            )
    return run


def ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)
