"""The ToolAgent example of docs/integrations.md, taken from the page as written, works the
way the page says: a module in a folder of one's own, loaded through AGENTSTATE_AGENT_MODULES
(which replaces the demo unless the demo is listed too), a run started through the API with
the request in `input.message`, run by the engine against an OpenAI-compatible endpoint that
streams (or, with AGENTSTATE_LIVE_TOKENS off, one that does not)."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest
from django.test import Client

from agents.runtime.models import Run, ToolCall
from tenants.scope import tenant_scope
from tests import factories
from tests.config.test_manage_py import embedded_checkout, manage  # noqa: F401  (a fixture)
from tests.fakes.openai_server import FakeOpenAIServer, ok

pytestmark = pytest.mark.django_db(transaction=True)

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
REQUEST = "Please refund order A-1001, charged twice"


def example_source() -> str:
    """The page's `myproject/support.py`, exactly as a reader would copy it."""
    found = re.search(r"```python\n(# myproject/support\.py\n.*?)```", DOC.read_text(), re.S)
    assert found, "docs/integrations.md no longer shows myproject/support.py"
    return found.group(1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A folder of one's own holding myproject/support.py (the docs' code, unchanged)."""
    root = tmp_path_factory.mktemp("toolagent-try")
    (root / "myproject").mkdir()
    (root / "myproject" / "support.py").write_text(example_source())
    return root


@pytest.fixture
def support(folder, monkeypatch):
    monkeypatch.syspath_prepend(str(folder))
    return importlib.import_module("myproject.support")  # registers the agent and its tools


@pytest.mark.parametrize("live_tokens", [True, False])
def test_the_docs_example_runs_when_started_through_the_api_with_input_message(
    support, tenant_a, enqueued, step, reload, settings, live_tokens
):
    key = factories.make_api_key(tenant_a, ["write"])
    with FakeOpenAIServer() as server:
        server.enqueue(
            ok("", tool_calls=[{"id": "c1", "name": "find_order",
                                "arguments": {"order": "A-1001"}}]),
            ok("", tool_calls=[{"id": "c2", "name": "refund_order",
                                "arguments": {"order": "A-1001", "amount": "40.00"}}]),
            ok("Refunded 40.00 for A-1001."),
        )  # fmt: skip
        settings.LLM_PROVIDER = "openai"
        settings.LLM_BASE_URL = server.base_url
        settings.LLM_MODEL = "fake-model"
        settings.AGENTSTATE_LIVE_TOKENS = live_tokens
        response = Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}").post(
            "/api/v1/runs",
            {"agent": "support", "input": {"message": REQUEST}},
            content_type="application/json",
        )
        assert response.status_code == 201, response.content
        assert response.json()["agent"] == "support" and len(enqueued) == 1
        with tenant_scope(tenant_a.pk):
            run = Run.objects.for_tenant(tenant_a).get(pk=response.json()["id"])
        for _ in range(10):
            step(run)
            run = reload(run)
            if run.status not in ("queued", "running"):
                break
        bodies = [r.body for r in server.requests]

    assert run.status == "succeeded", run.status
    assert run.output["answer"] == "Refunded 40.00 for A-1001."
    with tenant_scope(tenant_a.pk):
        [refund] = ToolCall.objects.filter(run_id=run.pk)
    assert (refund.tool, refund.status) == ("refund_order", "succeeded")
    assert refund.result["refund_id"].startswith("rf-") and refund.result["amount"] == "40.00"
    # The request reached the model as the user's message, with the example's two tools.
    assert {"role": "user", "content": REQUEST} in bodies[0]["messages"]
    assert sorted(t["function"]["name"] for t in bodies[0]["tools"]) == [
        "find_order",
        "refund_order",
    ]
    if live_tokens:  # every call streams, usage included
        assert all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in bodies)
    else:
        assert not any(b.get("stream") for b in bodies)
    assert len(bodies) == 3


AGENT_NAMES = (
    "from agents.runtime.definitions import all_agents;"
    " print(' '.join(a.name for a in all_agents()))"
)


@pytest.mark.slow  # starts `manage.py` processes
def test_listing_the_module_replaces_the_demo_unless_the_demo_is_listed_too(
    folder,
    embedded_checkout,  # noqa: F811
):
    path = {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    alone = manage(
        "shell", "--verbosity=0", "-c", AGENT_NAMES,
        AGENTSTATE_AGENT_MODULES="myproject.support", **path, **embedded_checkout,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    assert "support" in alone.stdout.split() and "refund_desk" not in alone.stdout.split()
    both = manage(
        "shell", "--verbosity=0", "-c", AGENT_NAMES,
        AGENTSTATE_AGENT_MODULES="agents.demo.refund_desk,myproject.support",
        **path, **embedded_checkout,
    )  # fmt: skip
    assert both.returncode == 0, both.stderr
    assert {"refund_desk", "support"} <= set(both.stdout.split())
    missing = manage(
        "shell", "--verbosity=0", "-c", AGENT_NAMES,
        AGENTSTATE_AGENT_MODULES="myproject.support", **embedded_checkout,
    )  # fmt: skip
    assert missing.returncode != 0
    assert (
        "AGENTSTATE_AGENT_MODULES lists 'myproject.support', which this process cannot import"
        " (No module named 'myproject'): put the folder that holds it on PYTHONPATH"
    ) in missing.stderr


def test_a_listed_module_that_cannot_be_imported_is_named_with_what_to_do(settings):
    from django.core.exceptions import ImproperlyConfigured

    from agents.runtime.definitions import all_agents

    settings.AGENTSTATE_AGENT_MODULES = ["agents.demo.refund_desk", "no_such_project.support"]
    with pytest.raises(ImproperlyConfigured, match="on PYTHONPATH of the web and the worker"):
        all_agents()
