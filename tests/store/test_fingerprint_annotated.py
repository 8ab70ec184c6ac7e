"""A run recorded before ``Annotated[...]`` hints reached tool schemas (stop 36) still
resumes: its agents' fingerprints were taken over the schemas without them."""

from __future__ import annotations

from typing import Annotated

import pydantic

from agentflow import Agent, Tool, tool
from agentflow._tool_schema import describe
from agentflow.store._codec import _before_annotated, _fingerprint_v3, fingerprint, fingerprints


def _count(n: Annotated[int, pydantic.Field(ge=1, description="how many")]) -> str:
    """Count."""
    return str(n)


def _plain(n: int) -> str:
    """Count."""
    return str(n)


#: ``_count``'s parameters as stop 35 (b61ca14) described them: no minimum, no
#: description (pinned, so that ``describe(annotated=False)`` is checked against them).
STOP_35 = {
    "additionalProperties": False,
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "type": "object",
}


def test_a_fingerprint_recorded_without_annotated_extras_is_still_known() -> None:
    now = Agent(name="a", model="m", tools=[tool(_count)])
    was = describe(_count, annotated=False)  # what releases before stop 36 described
    assert was.parameters == STOP_35
    recorded = Agent(
        name="a",
        model="m",
        tools=[
            Tool(
                name=was.name,
                description=was.description,
                parameters=was.parameters,
                fn=_count,
                _args_model=was.args_model,
            )
        ],
    )
    # What such a run holds: the definition of then (3), over the schema of then.
    assert _fingerprint_v3(recorded) in fingerprints(now)
    assert fingerprint(now) in fingerprints(now)
    # A run recorded now, without the constraint, does not resume with it added.
    plain = Agent(name="a", model="m", tools=[Tool.from_function(_plain, name="_count")])
    assert fingerprint(plain) not in fingerprints(now)


def test_tools_without_annotated_hints_add_no_fingerprint() -> None:
    """Only an agent whose schemas differ without the extras is described again: for the
    others the earlier definitions are taken over the agent itself."""
    agent = Agent(name="a", model="m", tools=[tool(_plain)])
    assert len(fingerprints(agent)) == len(fingerprints(Agent(name="a", model="m")))
    assert _before_annotated(agent) is None
    assert _fingerprint_v3(agent) in fingerprints(agent)
    assert _before_annotated(Agent(name="a", model="m", tools=[tool(_count)])) is not None
