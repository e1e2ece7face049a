"""The agent-author API: one import, steps and tools referenced by their functions, and a name
registered twice refused instead of silently replacing the first."""

from __future__ import annotations

import pytest

from agents.runtime import Agent, ToolAgent, finish, goto, register, tool

pytestmark = pytest.mark.django_db(transaction=True)

greeter = Agent("author_api_greeter", version=1, first="greet")


@tool("author_api_shout", description="The text in capitals.")
def shout(*, text: str) -> str:
    return text.upper()


@greeter.step
def greet(ctx):
    return goto(wave, greeting=ctx.tools.call(shout, text=f"hello {ctx.run_input['name']}"))


@greeter.step
def wave(ctx):
    return finish({"said": ctx.state["greeting"] + "!"})


register(greeter)


def test_an_agent_written_with_one_import_runs_with_steps_and_tools_named_by_their_functions(
    start, step, reload
):
    run = start("author_api_greeter", name="ada")
    assert step(run).status == "succeeded"
    assert reload(run).output == {"said": "HELLO ADA!"}


def test_registering_another_agent_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="author_api_greeter.*already registered"):
        register(Agent("author_api_greeter", version=2, first="greet", steps={"greet": greet}))
    register(greeter)  # the same agent again changes nothing


def test_a_replacement_is_said_out_loud():
    other = Agent("author_api_swapped", version=1, first="greet", steps={"greet": greet})
    register(other)
    newer = Agent("author_api_swapped", version=2, first="greet", steps={"greet": greet})
    assert register(newer, replace=True) is newer


def test_a_second_step_or_tool_of_the_same_name_is_refused():
    agent = Agent("author_api_steps", version=1, first="greet")
    agent.step(greet)
    agent.step(greet)  # the same function again changes nothing

    def another():
        def greet(ctx):
            return finish()

        return greet

    with pytest.raises(ValueError, match="already has a step 'greet'"):
        agent.step(another())

    def author_api_shout(*, text: str) -> str:
        return text

    with pytest.raises(ValueError, match="tool named 'author_api_shout' is already registered"):
        tool("author_api_shout")(author_api_shout)


def test_a_tool_agent_registers_the_one_way_agents_do_with_tools_named_by_function():
    desk = ToolAgent(name="author_api_desk", instructions="Help.", tools=[shout])
    agent = register(desk)
    assert agent.name == "author_api_desk" and set(agent.steps) == {"model", "tools"}
    assert desk.tools == ["author_api_shout"]


def test_a_step_is_a_named_function():
    def stray(ctx):
        return finish()

    assert goto(stray).next_step == "stray" and goto("stray").next_step == "stray"
    with pytest.raises(ValueError, match="a named function"):
        goto(lambda ctx: None)


# --- a typed step context --------------------------------------------------------------------

probe = Agent("author_api_probe", version=1, first="look")


@probe.step
def look(ctx):
    seen = {"memory": ctx.has("memory"), "pack": ctx.has("pack")}
    try:
        ctx.memory  # noqa: B018 - what an author writes
    except AttributeError as exc:
        seen["error"] = str(exc)
    return finish(seen)


register(probe)


def test_ctx_memory_and_pack_are_typed_attributes_present_with_their_apps(start, step, reload):
    import typing

    from agents.runtime.engine.step_context import StepContext
    from agents.runtime.extensions import StepMemory, StepPack

    hints = {name: typing.get_type_hints(getattr(StepContext, name).fget)["return"]
             for name in ("memory", "pack")}  # fmt: skip
    assert hints == {"memory": StepMemory, "pack": StepPack}
    run = start("author_api_probe")
    assert step(run).status == "succeeded"
    assert reload(run).output == {"memory": True, "pack": True}


def test_without_its_app_ctx_memory_is_a_clear_error_naming_the_app(
    start, step, reload, monkeypatch
):
    from agents.runtime import extensions

    monkeypatch.delitem(extensions._step_extensions, "memory")
    run = start("author_api_probe")
    assert step(run).status == "succeeded"
    assert reload(run).output == {
        "memory": False,
        "pack": True,
        "error": "ctx.memory is not available: no installed app provides it (add 'memory' to "
        "INSTALLED_APPS).",
    }


def test_the_engines_bookkeeping_is_not_part_of_the_context_authors_see():
    from agents.runtime.engine.step_context import StepContext

    public = {name for name in dir(StepContext) if not name.startswith("_")}
    assert not public & {"outbox", "writes", "llm_calls"}
    assert {"say", "write_with_step", "model_calls", "memory", "pack", "has"} <= public
