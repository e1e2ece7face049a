"""No-op agents for the benchmarks: a chain of N steps that each bump a counter.

Imported by the bench scripts and, through AGENTSTATE_AGENT_MODULES, by the Celery workers
they start, so both sides know the same agents.
"""

from __future__ import annotations

from agents.runtime.definitions import Agent, finish, goto, register

STEP_COUNTS = (10, 20)


def agent_name(steps: int) -> str:
    return f"bench_noop{steps}"


def _make(steps: int) -> Agent:
    agent = Agent(agent_name(steps), version=1, first="s0")
    for index in range(steps):
        nxt = f"s{index + 1}"

        def step(ctx, _i=index, _next=nxt, _last=index == steps - 1):
            if _last:
                return finish({"i": _i + 1}, i=_i + 1)
            return goto(_next, i=_i + 1)

        step.__name__ = f"s{index}"
        agent.step(step)
    return register(agent)


AGENTS = {steps: _make(steps) for steps in STEP_COUNTS}


# bench/recovery.py: a run whose steps take a while, so a worker can be killed mid-step.
SLEEPY = "bench_sleepy"
SLEEPY_STEPS = 20
SLEEPY_SECONDS = 0.3


def _make_sleepy() -> Agent:
    import time

    agent = Agent(SLEEPY, version=1, first="s0")
    for index in range(SLEEPY_STEPS):

        def step(ctx, _i=index, _last=index == SLEEPY_STEPS - 1):
            time.sleep(SLEEPY_SECONDS)
            return finish({"i": _i + 1}) if _last else goto(f"s{_i + 1}", i=_i + 1)

        step.__name__ = f"s{index}"
        agent.step(step)
    return register(agent)


SLEEPY_AGENT = _make_sleepy()
