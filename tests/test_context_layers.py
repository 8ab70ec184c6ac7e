"""The events modules and the chain below the context package (issue 17, part 3).

``_events.py`` (the Event union), ``_event_bus.py`` (what delivers it) and
``_context_events.py`` (the context seam's events) import nothing of ``agentflow.context``
at run time, nor does the chain the agent and the
session use (``_context_chain.py``): a fleet whose agents bring their own context links
never imports the tokenizers. Checked in a fresh interpreter, where nothing was imported
before.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def modules_after_import(module: str) -> list[str]:
    code = (
        f"import json, sys; import {module}; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('agentflow'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


@pytest.mark.parametrize(
    "module",
    [
        "agentflow._events",
        "agentflow._event_bus",
        "agentflow._context_events",
        "agentflow._context_chain",
    ],
)
def test_imports_nothing_of_the_context_package(module: str) -> None:
    loaded = modules_after_import(module)
    assert module in loaded
    assert [m for m in loaded if m.startswith("agentflow.context")] == []


def test_an_agent_with_its_own_link_binds_without_the_context_package() -> None:
    code = """
import asyncio, sys
from agentflow._agent import Agent
from agentflow._context_chain import bind_context

class Link:
    def bind(self, **kw):
        return self
    async def before_turn(self, turn, messages, tools, complete):
        return None
    def after_turn(self, turn, trace):
        pass

agent = Agent(name="a", model="m", context=[Link(), Link()])
ctx = bind_context(agent.context, session_id="s", agent="a", emit=print, model="m", params={})
asyncio.run(ctx.before_turn(0, [], (), None))
print(sorted(m for m in sys.modules if m.startswith("agentflow.context")))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
