"""The refusal of a changed agent names only what changed for a run recorded under an
earlier fingerprint definition: its summary describes the tool schemas and the context
as that definition did (no ``Annotated[...]`` extras; a chain holding a
``ContextBudget`` named ``ContextBudget``). It named them too, though they had not
changed: ``model: 'sim' → 'other'; tool 'lookup' schema differs``."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Annotated, Any

import pydantic
import pytest

from agentflow import Agent, ConfigError, Tool
from agentflow._tool_schema import describe
from agentflow.context import ContextBudget, FleetBudget
from agentflow.embedded import run_virtual
from agentflow.store._codec import _before_annotated, _fingerprint_v3

from .fleets import agents, resume, run_cut

N = 6


def lookup(key: Annotated[str, pydantic.Field(description="what to look up")]) -> str:
    """Look a key up."""
    return f"value of {key!r}"


def with_lookup(agent: Agent) -> Agent:
    return dataclasses.replace(agent, tools=(Tool.from_function(lookup, in_thread=False),))


def as_described_then(agent: Agent) -> Agent:
    """``agent`` with ``lookup`` described as before stop 36 (no ``Annotated`` extras)."""
    was = describe(lookup, annotated=False)
    tool = Tool(
        name=was.name,
        description=was.description,
        parameters=was.parameters,
        fn=lookup,
        _args_model=was.args_model,
    )
    return dataclasses.replace(agent, tools=(tool,))


def record_v3(db: Path, team: list[Agent]) -> None:
    """Store the run's agents as a release of the definition 3 did: its fingerprint and
    summary over the schemas of then."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            for a in team:
                fp = _fingerprint_v3(a)
                conn.execute("UPDATE sessions SET fingerprint=? WHERE agent=?", (fp, a.name))
                conn.execute("UPDATE agents SET fingerprint=? WHERE name=?", (fp, a.name))
    finally:
        conn.close()


def with_context(context: Any) -> list[Agent]:
    return [dataclasses.replace(a, context=context) for a in agents()]


def refusal(db: Path, team: list[Agent]) -> str:
    with pytest.raises(ConfigError) as caught:
        run_virtual(resume(db, team))
    return str(caught.value)


def test_a_run_recorded_without_annotated_extras_names_only_the_model(tmp_path: Path) -> None:
    now = [with_lookup(a) for a in agents()]
    assert _before_annotated(now[0]) is not None  # the schema differs between definitions
    then = [as_described_then(a) for a in now]
    db = tmp_path / "cut.db"
    assert run_virtual(run_cut(db, then, N, 4)) is None
    record_v3(db, then)
    now[0] = dataclasses.replace(now[0], model="other")
    message = refusal(db, now)
    assert "recorded it (model: 'sim' → 'other'; session 's0" in message, message


def test_a_run_recorded_with_the_deprecated_budget_names_only_the_model(
    tmp_path: Path,
) -> None:
    with pytest.warns(DeprecationWarning, match="fleet="):
        old = ContextBudget(window=32_768, fleet=FleetBudget(max_tokens=10**9))
    db = tmp_path / "cut.db"
    assert run_virtual(run_cut(db, with_context(old), N, 4)) is None
    team = with_context([FleetBudget(max_tokens=10**9), ContextBudget(window=32_768)])
    team[0] = dataclasses.replace(team[0], model="other")
    message = refusal(db, team)
    assert "recorded it (model: 'sim' → 'other'; session 's0" in message, message


def other_lookup(key: str, count: int = 2) -> str:
    """Look a key up."""
    return key


def test_a_changed_schema_is_still_named_for_such_a_run(tmp_path: Path) -> None:
    now = [with_lookup(a) for a in agents()]
    then = [as_described_then(a) for a in now]
    db = tmp_path / "cut.db"
    assert run_virtual(run_cut(db, then, N, 4)) is None
    record_v3(db, then)
    now[0] = dataclasses.replace(
        now[0], tools=(Tool.from_function(other_lookup, name="lookup", in_thread=False),)
    )
    message = refusal(db, now)
    assert "recorded it (tool 'lookup' schema differs; session 's0" in message, message
