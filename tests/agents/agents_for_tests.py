"""Small agents that exercise the engine. Counters live in module globals per process."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import redis
from django.db import IntegrityError, OperationalError

from agents.runtime import (
    Agent,
    PermanentStepError,
    RetryPolicy,
    fail,
    finish,
    goto,
    register,
    sleep_until,
    tool,
    wait_for_approval,
    wait_for_event,
)
from agents.runtime.errors import LLMRateLimited  # the engine's own error, not an author's

calls: Counter = Counter()
side_effects: Counter = Counter()
events: list[dict] = []  # progress events, where a test subscribes `events.append`


@tool("count_effect", side_effects=True)
def count_effect(*, name: str, idempotency_key: str) -> dict:
    side_effects[idempotency_key] += 1
    return {"done": name, "key": idempotency_key}


three_steps = Agent("three_steps", version=1, first="one")


@three_steps.step
def one(ctx):
    calls["one"] += 1
    if ctx.run_input.get("cancel_during_step"):  # someone presses Cancel meanwhile
        from agents.runtime.models import Run
        from tenants.scope import tenant_scope

        with tenant_scope(ctx.tenant_id):
            Run.objects.for_tenant(ctx.tenant_id).filter(pk=ctx.run_id).update(
                cancel_requested=True
            )
    return goto("two", trail=["one"])


@three_steps.step
def two(ctx):
    calls["two"] += 1
    return goto("three", trail=ctx.state["trail"] + ["two"])


@three_steps.step
def three(ctx):
    calls["three"] += 1
    return finish({"trail": ctx.state["trail"] + ["three"]})


register(three_steps)

flaky = Agent(
    "flaky",
    version=1,
    first="start",
    retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
)


@flaky.step
def start(ctx):
    calls["flaky.start"] += 1
    return goto("wobble", started=True)


@flaky.step
def wobble(ctx):
    calls["flaky.wobble"] += 1
    mode = ctx.run_input.get("mode")
    if mode == "transient" and ctx.attempt < ctx.run_input.get("succeed_on", 99):
        raise LLMRateLimited("429 from the model", retry_after=ctx.run_input.get("retry_after"))
    if mode == "permanent":
        raise PermanentStepError("the request makes no sense")
    if mode == "bug":
        ctx.state["half"] = "written"
        return {}["missing"]
    if mode == "agent_fail":
        return fail("customer not found", looked=True)
    if mode in ("database_lost", "redis_lost") and calls["flaky.wobble"] <= ctx.run_input["times"]:
        # A service the step uses went away mid-step (issue 17): not the step's fault.
        if mode == "redis_lost":
            raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379.")
        raise OperationalError("consuming input failed: server closed the connection unexpectedly")
    return finish({"attempt": ctx.attempt})


register(flaky)

pauses = Agent("pauses", version=1, first="ask")


@pauses.step
def ask(ctx):
    kind = ctx.run_input["kind"]
    if kind == "approval":
        return wait_for_approval(
            action="count_effect",
            arguments={"name": "refund"},
            then="after",
            reason="big",
            amount=400,
        )
    if kind == "timer":
        when = dt.datetime.fromisoformat(ctx.run_input["until"])
        return sleep_until(when, then="after")
    return wait_for_event("shipped", then="after")


@pauses.step
def after(ctx):
    return finish({"decision": ctx.decision, "event": ctx.event})


register(pauses)

effects = Agent("effects", version=1, first="pay")


@effects.step
def pay(ctx):
    # vary_on_retry: the retried step asks for something else first (a model that answers
    # differently the second time).
    changed = ctx.run_input.get("vary_on_retry") and calls["effects.pay"] >= 1
    first = ctx.tools.call("count_effect", name="changed" if changed else "first")
    second = ctx.tools.call("count_effect", name="second")
    calls["effects.pay"] += 1
    if ctx.run_input.get("crash_after_tools") and calls["effects.pay"] == 1:
        raise LLMRateLimited("crashed after the tools returned")
    return finish({"first": first, "second": second})


register(effects)


def migrate_v1(state: dict) -> dict:
    name = state.pop("nm", "")
    return {**state, "name": name, "migrated": True}


versioned = Agent("versioned", version=2, first="read", state_version=2, migrations={1: migrate_v1})


@versioned.step
def read(ctx):
    return finish({"state": ctx.state})


register(versioned)

slow = Agent("slow", version=1, first="nap")


@slow.step
def nap(ctx):
    import time

    time.sleep(ctx.run_input["seconds"])
    return finish({"slept": ctx.run_input["seconds"]})


register(slow)

stroll = Agent("stroll", version=1, first="walk")


@stroll.step
def walk(ctx):
    """Many short steps in one drive; each one registers a write that commits with it."""
    import time

    from agents.runtime.models import Run

    time.sleep(ctx.run_input.get("pause", 0))
    done = ctx.state.get("done", 0) + 1
    calls["walk"] += 1
    ctx.write_with_step(
        lambda: Run.objects.filter(pk=ctx.run_id).update(resolution_note=f"walked {done}")
    )
    if ctx.run_input.get("explode_at") == done:
        raise PermanentStepError("the path ends here")
    if done >= ctx.run_input["steps"]:
        return finish({"done": done})
    return goto("walk", done=done)


register(stroll)

asks_model = Agent(
    "asks_model",
    version=1,
    first="ask_model",
    retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02),
)


@asks_model.step
def ask_model(ctx):
    reply = ctx.llm.chat([{"role": "user", "content": "hello"}])
    return finish({"reply": reply.content})


register(asks_model)

chat = Agent("chat", version=1, first="greet")


@chat.step
def greet(ctx):
    ctx.say("hello, what do you need?")
    return goto("listen")


@chat.step
def listen(ctx):
    heard = [m["content"] for m in ctx.inbox]
    ctx.say(f"you said: {' | '.join(heard)}")
    return finish({"heard": heard})


register(chat)

strict_chat = Agent(
    "strict_chat",
    version=1,
    first="greet",
    on_message_while_running="reject",
    steps=dict(chat.steps),
)
register(strict_chat)

shapes = Agent("shapes", version=1, first="put")


@shapes.step
def put(ctx):
    """Values JSON has no type for: a tuple, integer keys, a datetime."""
    return goto("look", pair=(1, 2), by_id={1: "a"}, when=dt.datetime(2026, 11, 29, 12, 0))


@shapes.step
def look(ctx):
    state = ctx.state
    return finish(
        {
            "pair": state["pair"],
            "keys": list(state["by_id"]),
            "when": [type(state["when"]).__name__, state["when"]],
        }
    )


register(shapes)

persist_breaks = Agent("persist_breaks", version=1, first="only")


@persist_breaks.step
def only(ctx):
    # A write that commits with the step and breaks a constraint (issue 17: a rewind's stale
    # packed-context record did this at every persist).
    def clash():
        raise IntegrityError('duplicate key value violates unique constraint "x_unique"')

    ctx.write_with_step(clash)
    return finish({"done": True})


register(persist_breaks)


# --- every kind of row a step writes (tests/agents/test_rewind.py) --------------------------------

every_row = Agent(
    "every_row",
    version=1,
    first="remember",
    retry=RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001),
)


@every_row.step
def remember(ctx):
    """Checkpoint 1: a packed context, a memory fact, a side effect, a message."""
    ctx.pack(system="You take notes.")
    ctx.memory.propose("preference", "Prefers to be contacted by email", key="contact.channel")
    ctx.tools.call("count_effect", name="remember")
    ctx.say("remember: noted")
    return goto("labour", noted=True)


@every_row.step
def labour(ctx):
    """Checkpoint 2: fails once the first time it runs (a retried attempt), then reads the
    inbox, packs two contexts, makes two side effects, remembers and speaks."""
    calls["every_row.labour"] += 1
    if calls["every_row.labour"] == 1:
        raise LLMRateLimited("429 from the model")
    heard = [m["content"] for m in ctx.inbox]
    ctx.pack(system="You work.")
    ctx.pack(system="You work harder.")
    first = ctx.tools.call("count_effect", name="labour 1")
    second = ctx.tools.call("count_effect", name="labour 2")
    ctx.memory.propose("profile", "Is called Ada", key="profile.name")
    ctx.say(f"labour: heard {' | '.join(heard)}")
    return goto("ask_manager", receipts=[first, second])


@every_row.step
def ask_manager(ctx):
    """Checkpoint 3: waits for a manager (an approval request)."""
    return wait_for_approval(
        action="count_effect",
        arguments={"name": "refund"},
        then="settle",
        reason="over the limit",
        amount=400,
    )


@every_row.step
def settle(ctx):
    """Checkpoint 4: does what the manager decided; never runs without a decision."""
    if ctx.decision is None:
        raise PermanentStepError("settle ran without a manager's decision")
    receipt = None
    if ctx.decision["approved"]:
        receipt = ctx.tools.call("count_effect", **ctx.decision["arguments"])
    ctx.pack(system="You settle.")
    ctx.say(f"settle: {'refunded' if receipt else 'declined'}")
    return finish({"receipt": receipt})


register(every_row)


# --- a step that runs ahead of its predecessor's commit (tests/agents/test_pipelined_steps.py) ----

ahead = Agent("ahead", version=1, first="first")


@tool("peek_checkpoints")
def peek_checkpoints(*, tenant_id: str, run_id: str) -> int:
    """How many checkpoints of the run another session sees committed (a tool with no side
    effects: called directly, not through the ledger)."""
    import psycopg

    from tests.processes import test_database_url

    calls["ahead.peek"] += 1
    with psycopg.connect(test_database_url(), autocommit=True) as other:
        other.execute("SELECT set_config('app.tenant_id', %s, false)", (tenant_id,))
        row = other.execute(
            "SELECT count(*) FROM agents_checkpoint WHERE run_id = %s", (run_id,)
        ).fetchone()
        return row[0] if row else 0


@ahead.step
def first(ctx):
    calls["ahead.first"] += 1
    how = ctx.run_input.get("how")
    if how == "cancel":  # someone presses Cancel while the step runs
        from agents.runtime.models import Run
        from tenants.scope import tenant_scope

        with tenant_scope(ctx.tenant_id):
            Run.objects.for_tenant(ctx.tenant_id).filter(pk=ctx.run_id).update(
                cancel_requested=True
            )
    if how == "unstorable":  # text jsonb refuses: the persist itself fails
        return goto("second", text="nul \u0000 byte")
    if how == "slow":  # a step that computes for a while (RUN_AHEAD_MAX_MS)
        import time

        time.sleep(0.01)
    return goto("second", trail=["first"])


@ahead.step
def second(ctx):
    calls["ahead.second"] += 1  # Python the step runs before anything else: may run ahead
    how = ctx.run_input.get("how")
    seen = {}
    if how == "slow":  # what the step sees before it touches anything: run ahead or not?
        calls["ahead.finished_at_second"] = sum(e["kind"] == "step.finished" for e in events)
        seen["checkpoints"] = peek_checkpoints(tenant_id=str(ctx.tenant_id), run_id=str(ctx.run_id))
        return goto("third", **seen)
    if how == "orm":
        from agents.runtime.models import Checkpoint
        from tenants.scope import tenant_scope

        with tenant_scope(ctx.tenant_id):
            seen["checkpoints"] = (
                Checkpoint.objects.for_tenant(ctx.tenant_id).filter(run_id=ctx.run_id).count()
            )
    elif how == "deallocate":
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")  # as a pooler resetting the session would
    elif how == "swallow":
        try:
            ctx.tools.call("count_effect", name="ahead")
        except Exception:  # noqa: BLE001 - a step that hides every error
            calls["ahead.swallowed"] += 1
    else:
        seen["checkpoints"] = ctx.tools.call(
            peek_checkpoints, tenant_id=str(ctx.tenant_id), run_id=str(ctx.run_id)
        )
        ctx.tools.call("count_effect", name="ahead")
    calls["ahead.second_done"] += 1
    return goto("third", **seen)


@ahead.step
def third(ctx):
    return finish({"seen": ctx.state.get("checkpoints")})


register(ahead)
