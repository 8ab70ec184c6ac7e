"""The ``Recorder`` makes one ``AgentInfo`` per agent object and remembers it by the
object's ``id``: it keeps the agent alive with it, so that an agent made after another was
garbage-collected — which CPython often places at the same address — is never recorded
with the other's name and fingerprint."""

from __future__ import annotations

import gc
from pathlib import Path

from agentflow import Agent
from agentflow.store import SQLiteStore
from agentflow.store._recorder import Recorder


def test_an_agent_at_a_freed_agents_address_gets_its_own_info(tmp_path: Path) -> None:
    recorder = Recorder(SQLiteStore(tmp_path / "never-opened.db"), "r", 0)
    first = Agent(name="first", model="m", instructions="one")
    freed = id(first)
    assert recorder._info(first).name == "first"
    del first
    gc.collect()
    for _ in range(10_000):  # an agent at the freed address, if the allocator gives one
        other = Agent(name="other", model="m", instructions="two")
        if id(other) == freed:
            break
    info = recorder._info(other)
    assert (info.name, info.instructions) == ("other", "two")
    assert recorder._info(other) is info  # remembered
