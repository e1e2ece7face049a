"""The agent of docs/agents.md, taken from the page as written, runs: one import, steps and
tools named by their functions."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def test_the_agent_on_the_authors_page_runs_as_written(tmp_path, monkeypatch, start, step, reload):
    found = re.search(r"```python\n(# myproject/greeter\.py.*?)```", DOC.read_text(), re.S)
    assert found, "docs/agents.md no longer shows myproject/greeter.py"
    source = found.group(1)
    assert len(source.strip().splitlines()) <= 25
    imports = [line for line in source.splitlines() if line.startswith(("from ", "import "))]
    assert imports == ["from agents.runtime import Agent, finish, goto, register, tool"]
    (tmp_path / "myproject").mkdir()
    (tmp_path / "myproject" / "greeter.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    # Another test's `myproject` (docs/integrations.md's) may be imported from its own folder.
    saved = {
        name: sys.modules.pop(name)
        for name in list(sys.modules)
        if name.split(".")[0] == "myproject"
    }
    try:
        importlib.import_module("myproject.greeter")
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "myproject"]:
            del sys.modules[name]
        sys.modules.update(saved)

    run = start("greeter", name="Ada")
    assert step(run).status == "succeeded"
    assert reload(run).output == {"said": "HELLO ADA!"}
