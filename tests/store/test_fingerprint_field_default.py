"""A run recorded before a ``pydantic.Field(...)`` default reached its tool's schema (stop
40) still resumes: its agents' fingerprints were taken over the schemas without it."""

from __future__ import annotations

import warnings

import pydantic

from agentflow import Agent, tool
from agentflow._tool_schema import describe
from agentflow.store._codec import fingerprint, fingerprints


def search(query: str, n: int = pydantic.Field(5, ge=1, le=20)) -> str:
    """Search."""
    return query


#: ``search``'s parameters as stop 39 (1dab2f9) described them: ``n`` a plain default, its
#: constraints left out; and the fingerprint of ``_agent()`` then (pinned from that code).
STOP_39 = {
    "additionalProperties": False,
    "properties": {"query": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["query"],
    "type": "object",
}
STOP_39_FINGERPRINT = "06f8acd66e070f2a0ab29fb5cdffd6ba"


def _agent() -> Agent:
    return Agent(name="a", model="m", instructions="hi", tools=[tool(search)])


def test_a_fingerprint_recorded_before_field_defaults_is_still_known() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pydantic.json_schema.PydanticJsonSchemaWarning)
        assert describe(search, field_defaults=False).parameters == STOP_39
    agent = _agent()
    assert agent.tools[0].parameters != STOP_39  # the Field's constraints are in it now
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # resuming warns nothing (-W error would fail it)
        known = fingerprints(agent)
    assert STOP_39_FINGERPRINT in known
    assert fingerprint(agent) in known


def test_a_run_recorded_since_does_not_resume_with_a_default_added() -> None:
    """The schemas without ``Field(...)`` defaults count as the definition runs recorded
    before held (4), not the current one: a run recorded since, its tool's schema lacking
    a default (``Field(default_factory=...)``), does not resume with one added."""

    def search(query: str, n: int = pydantic.Field(default_factory=lambda: 5)) -> str:
        """Search."""
        return ""

    recorded = fingerprint(Agent(name="a", model="m", instructions="hi", tools=[tool(search)]))

    def search(query: str, n: int = pydantic.Field(5, ge=1, le=20)) -> str:  # type: ignore[no-redef]
        """Search."""
        return ""

    now = Agent(name="a", model="m", instructions="hi", tools=[tool(search)])
    assert recorded not in fingerprints(now)
