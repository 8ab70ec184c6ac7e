"""An agent's fingerprint is the BLAKE2b-128 of the compact, key-sorted JSON of
``[5, name, text_hash(instructions), config]``, its config holding each tool's own limits
(``tool_limits``); runs recorded before it hold the one of ``[4, ...]`` (the same, over
tool schemas without Field(...) defaults), ``[3, ...]`` (without Annotated extras either),
of ``[2, name, text_hash(instructions), config]`` without them, or of
``[name, instructions, config]`` (the whole prompt), which a resume still accepts. These
tests pin all of them to their
one-``json.dumps`` definitions, byte for byte, and resume a run whose store holds the
earlier ones."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, ConfigError, ContextBudget, FleetResult, Tool, tool
from agentflow.embedded import run_virtual
from agentflow.store._codec import (
    _config,
    _fingerprint_v1,
    _fingerprint_v2,
    _fingerprint_v3,
    _fingerprint_v4,
    fingerprint,
    fingerprints,
    text_hash,
)

from . import fleets
from .fleets import agents, resume, run_cut


@tool
def lookup(key: str, limit: int = 3) -> str:
    """Look ``key`` up."""
    return key * limit


def _blake(blob: str) -> str:
    return hashlib.blake2b(blob.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _reference(agent: Agent, context: str | None = None, version: int = 5) -> str:
    digest = _blake(agent.instructions)
    value = [version, agent.name, digest, _config(agent, context)]
    return _blake(json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr))


def _reference_v4(agent: Agent, context: str | None = None) -> str:
    return _reference(agent, context, 4)


def _reference_v3(agent: Agent, context: str | None = None) -> str:
    return _reference(agent, context, 3)


def _reference_v2(agent: Agent, context: str | None = None) -> str:
    digest = _blake(agent.instructions)
    value = [2, agent.name, digest, _config(agent, context, limits=False)]
    return _blake(json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr))


def _reference_v1(agent: Agent, context: str | None = None) -> str:
    value = [agent.name, agent.instructions, _config(agent, context, limits=False)]
    return _blake(json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr))


INSTRUCTIONS = [
    "",
    "You are terse.",
    'quotes " and \\ backslashes, a tab\t, a newline\n, a NUL \0',
    # (no lone surrogate: an agent cannot hold one, no request could carry it)
    "non-ASCII: é, 日本語, an emoji 🦀, a line separator \u2028, a pair 𝄞",
    "long " * 10_000,
]


@pytest.mark.parametrize("instructions", INSTRUCTIONS)
@pytest.mark.parametrize("name", ["coder", "agent é", 'a"b'])
def test_the_fingerprints_are_their_one_dumps_definitions(name: str, instructions: str) -> None:
    params: dict[str, Any] = {"temperature": 0.5, "z": [1, {"b": 2, "a": 1e300}]}
    agent = Agent(name=name, model="m", instructions=instructions, tools=[lookup], params=params)
    assert fingerprint(agent) == _reference(agent)
    assert fingerprint(agent, context="ContextBudget") == _reference(agent, "ContextBudget")
    budgeted = Agent(name=name, model="m", instructions=instructions, context=ContextBudget())
    assert fingerprint(budgeted) == _reference(budgeted)
    # The earlier definitions, which runs recorded before hold, are accepted at a resume.
    assert _fingerprint_v4(agent) == _reference_v4(agent)
    assert _fingerprint_v3(agent) == _reference_v3(agent)
    assert _fingerprint_v2(agent) == _reference_v2(agent)
    assert _fingerprint_v1(agent) == _reference_v1(agent)
    assert fingerprints(agent) == {
        _reference(agent), _reference_v4(agent), _reference_v3(agent), _reference_v2(agent),
        _reference_v1(agent),
    }  # fmt: skip


def test_agents_sharing_instructions_keep_their_own_fingerprints() -> None:
    """The instructions' digest is remembered; the name and config still tell agents apart."""
    shared = "shared prompt " * 1000
    a, b = (Agent(name=n, model="m", instructions=shared) for n in ("a", "b"))
    c = Agent(name="a", model="other", instructions=shared)
    assert len({fingerprint(a), fingerprint(b), fingerprint(c)}) == 3
    assert [fingerprint(x) for x in (a, b, c)] == [_reference(x) for x in (a, b, c)]


def test_text_hash_is_blake2b_of_the_text() -> None:
    text = "système " * 100
    want = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    assert text_hash(text) == want
    assert text_hash(text) == want  # remembered: the same answer


def test_the_instructions_must_be_text() -> None:
    with pytest.raises(ConfigError, match="'coder': instructions must be a str, got list"):
        Agent(name="coder", model="m", instructions=["You are terse."])  # type: ignore[arg-type]


def _set_fingerprints(path: Path, to: dict[str, str]) -> None:
    with sqlite3.connect(path) as conn:
        for name, fp in to.items():
            conn.execute("UPDATE agents SET fingerprint=? WHERE name=?", (fp, name))
            conn.execute("UPDATE sessions SET fingerprint=? WHERE agent=?", (fp, name))
    conn.close()


@pytest.mark.parametrize(
    "earlier", [_reference_v3, _reference_v2, _reference_v1], ids=["v3", "v2", "v1"]
)
def test_a_run_recorded_with_the_earlier_fingerprints_resumes(tmp_path: Path, earlier: Any) -> None:
    db, team = tmp_path / "cut.db", agents()
    assert run_virtual(run_cut(db, team, 9, 6)) is None
    _set_fingerprints(db, {a.name: earlier(a) for a in team})
    result = run_virtual(resume(db, team))
    assert isinstance(result, FleetResult)
    assert [s.status for s in result.sessions] == ["completed"] * 9


def test_a_run_whose_fingerprint_matches_no_definition_does_not_resume(tmp_path: Path) -> None:
    db, team = tmp_path / "cut.db", agents()
    assert run_virtual(run_cut(db, team, 9, 6)) is None
    _set_fingerprints(db, {team[0].name: "0" * 32})
    with pytest.raises(ConfigError, match="not configured as it was"):
        run_virtual(resume(db, team))


@pytest.mark.parametrize("instructions", INSTRUCTIONS[:4])
def test_the_prefix_key_is_its_one_dumps_definition(instructions: str) -> None:
    """``Agent.prefix_key`` is written with the tool schemas' JSON the agent made once
    (``tool_specs_json``): byte for byte the digest of one ``json.dumps`` of
    ``[model, instructions, tools]``, with tools and without."""
    for tools in ([lookup], []):
        agent = Agent(name="a", model="m", instructions=instructions, tools=tools)
        blob = json.dumps(
            ["m", instructions, agent.tool_specs], sort_keys=True, separators=(",", ":")
        )
        want = hashlib.blake2b(blob.encode(), digest_size=12).hexdigest()
        assert agent.prefix_key == (want if instructions or tools else None)


def _with_tool(agent: Agent, **limits: Any) -> Agent:
    return dataclasses.replace(agent, tools=(Tool.from_function(fleets.lookup, **limits),))


@pytest.mark.parametrize(
    "limits",
    [{"timeout_s": 30.0}, {"timeout_s": math.inf}, {"max_output_chars": 100}],
    ids=["timeout", "no-timeout", "output-cap"],
)
def test_a_tools_own_limits_are_in_the_fingerprint(limits: dict[str, Any]) -> None:
    """A tool's own ``timeout_s`` or ``max_output_chars`` changes its agent's fingerprint
    (it did not: a run resumed with a tool's limit changed went on unnoticed); a limit
    equal to the agent's, which the calls ran under anyway, does not."""
    agent = agents(1)[0]
    changed = _with_tool(agent, **limits)
    assert fingerprint(changed) != fingerprint(agent)
    assert fingerprint(changed) not in fingerprints(agent)
    assert fingerprint(agent) not in fingerprints(changed)
    # The definitions before had no tool limits: they stay equal.
    assert _fingerprint_v2(changed) == _fingerprint_v2(agent)
    same = _with_tool(
        agent, timeout_s=agent.tool_timeout_s, max_output_chars=agent.max_tool_output_chars
    )
    assert fingerprint(same) == fingerprint(agent)


def test_a_run_resumed_with_a_tools_timeout_changed_does_not_resume(tmp_path: Path) -> None:
    db, team = tmp_path / "cut.db", agents()
    assert run_virtual(run_cut(db, team, 9, 6)) is None
    with pytest.raises(ConfigError, match="not configured as it was"):
        run_virtual(resume(db, [_with_tool(a, timeout_s=30.0) for a in team]))
    result = run_virtual(resume(db, team))  # the run as it was recorded: it resumes
    assert [s.status for s in result.sessions] == ["completed"] * 9
