"""The run page's context record over the live socket: it arrives when a step that packed a
context finishes (no reload), and each socket gets what its viewer may see of the person's
remembered facts. Real ASGI app, Redis layer and PostgreSQL."""

from __future__ import annotations

import pytest

from tenants.models import Role
from tests import factories
from tests.live.conftest import Socket, run_async, session_cookie, step
from tests.memory.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice(tenant_a):
    return factories.make_member(tenant_a, Role.MEMBER)


@pytest.fixture(autouse=True)
def _words_only(settings):
    settings.MEMORY_EMBEDDING_PROVIDER = "none"  # full-text retrieval: no embedding worker


def test_the_context_record_arrives_when_a_packing_step_finishes_and_only_then(
    alice, members, start_run
):
    fact = remember(alice, "Prefers to be contacted by email", key="contact.channel")
    viewer = members[Role.VIEWER]
    cookies = {m: session_cookie(m.user) for m in (alice, viewer)}
    run = start_run(alice, "Please refund $40 for order A-1002")

    async def scenario():
        async with Socket(cookies[alice]) as mine, Socket(cookies[viewer]) as theirs:
            await mine.subscribe("run", run=str(run.pk), after=2)
            await theirs.subscribe("run", run=str(run.pk), after=2)
            await step(run, slice_seconds=0)  # the model step packs: claimed (3), finished (4)
            own = "".join(await mine.receive_until('data-seq="4"'))
            assert 'id="run-context"' in own and 'id="context-1-0"' in own
            assert '<strong class="answered-by">scripted</strong>' in own
            assert "Prefers to be contacted by email" in own
            assert f'href="/memory/#fact-{fact.pk}"' in own
            # The same update for a viewer without access to Alice's memories: what the fact
            # is, not what it says, and no link.
            seen = "".join(await theirs.receive_until('data-seq="4"'))
            assert 'id="context-1-0"' in seen and "<code>contact.channel</code>" in seen
            assert "Prefers to be contacted" not in seen and "/memory/" not in seen
            await step(run, slice_seconds=0)  # the tools step packs nothing: (5), (6)
            tools = "".join(await mine.receive_until('data-seq="6"'))
            assert 'id="step-2"' in tools and 'id="run-context"' not in tools

    run_async(scenario)
