"""A run resumed with one of its agents changed is refused, and the refusal names what
changed — the store holds the recorded agent's configuration. It said only
"(instructions, model, tools, params or limits differ; …)", whatever had changed."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from agentflow import Agent, ConfigError, Tool
from agentflow.context import FleetBudget
from agentflow.embedded import run_virtual

from .fleets import agents, lookup, resume, run_cut


def other_lookup(key: str, count: int = 2) -> str:
    """Look a key up.

    Args:
        key: what to look up.
        count: how many values.
    """
    return key


CHANGES: dict[str, tuple[Callable[[Agent], Agent], str]] = {
    "model": (lambda a: dataclasses.replace(a, model="other"), "model: 'sim' → 'other'"),
    "instructions": (lambda a: dataclasses.replace(a, instructions="x"), "instructions differ"),
    "long model": (lambda a: dataclasses.replace(a, model="m" * 80), "model differs"),
    "params": (
        lambda a: dataclasses.replace(a, params={"max_tokens": 97, "seed": 1}),
        "params['max_tokens']: 32 → 97; params['seed'] added: 1",
    ),
    "max_turns": (lambda a: dataclasses.replace(a, max_turns=9), "max_turns: 8 → 9"),
    "tool schema": (
        lambda a: dataclasses.replace(
            a, tools=(Tool.from_function(other_lookup, name="lookup", in_thread=False),)
        ),
        "tool 'lookup' schema differs",
    ),
    "context": (
        lambda a: dataclasses.replace(a, context=FleetBudget()),
        "context: None → 'FleetBudget'",
    ),
    "tool removed": (lambda a: dataclasses.replace(a, tools=()), "tool 'lookup' removed"),
    "tool limit": (
        lambda a: dataclasses.replace(a, tools=(Tool.from_function(lookup, timeout_s=30.0),)),
        "tool 'lookup' timeout_s: 300.0 → 30.0",
    ),
}


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("changed") / "cut.db"
    assert run_virtual(run_cut(db, agents(), 6, 4)) is None
    return db


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_refusal_names_what_changed(cut_run: Path, change: str) -> None:
    edit, said = CHANGES[change]
    team = agents()
    team[0] = edit(team[0])
    with pytest.raises(ConfigError) as caught:
        run_virtual(resume(cut_run, team))
    message = str(caught.value)
    assert message.startswith("resume: agent 'agent-0' is not configured as it was when run")
    assert f"recorded it ({said}; session 's0" in message, message
    assert re.search(r"session 's\d\d'\); resume with the same agent definition$", message)
