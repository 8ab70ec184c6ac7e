"""An agent's fingerprint is the BLAKE2b-128 of the compact, key-sorted JSON of
``[name, instructions, config]``: the definition runs recorded earlier were fingerprinted
with, and what a resume compares against. ``fingerprint`` writes that JSON piece by piece
(the instructions, shared by a fleet's agents, escaped once), so these tests pin it to the
one-``json.dumps`` definition, byte for byte."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from agentflow import Agent, ContextBudget, tool
from agentflow.store._codec import _config, fingerprint, text_hash


@tool
def lookup(key: str, limit: int = 3) -> str:
    """Look ``key`` up."""
    return key * limit


def _reference(agent: Agent, context: str | None = None) -> str:
    blob = json.dumps(
        [agent.name, agent.instructions, _config(agent, context)],
        sort_keys=True,
        separators=(",", ":"),
        default=repr,
    )
    return hashlib.blake2b(blob.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


INSTRUCTIONS = [
    "",
    "You are terse.",
    'quotes " and \\ backslashes, a tab\t, a newline\n, a NUL \0',
    "non-ASCII: é, 日本語, an emoji 🦀, a line separator \u2028, a lone surrogate \ud800",
    "long " * 10_000,
]


@pytest.mark.parametrize("instructions", INSTRUCTIONS)
@pytest.mark.parametrize("name", ["coder", "agent é", 'a"b'])
def test_the_fingerprint_is_the_one_dumps_definition(name: str, instructions: str) -> None:
    params: dict[str, Any] = {"temperature": 0.5, "z": [1, {"b": 2, "a": float("inf")}]}
    agent = Agent(name=name, model="m", instructions=instructions, tools=[lookup], params=params)
    assert fingerprint(agent) == _reference(agent)
    assert fingerprint(agent, context="ContextBudget") == _reference(agent, "ContextBudget")
    budgeted = Agent(name=name, model="m", instructions=instructions, context=ContextBudget())
    assert fingerprint(budgeted) == _reference(budgeted)


def test_agents_sharing_instructions_keep_their_own_fingerprints() -> None:
    """The instructions' JSON is remembered; the name and config still tell agents apart."""
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
