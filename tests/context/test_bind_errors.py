"""A context that cannot bind ends its own session, not the fleet: a ``ContextBudget``
with no window known for the agent's model (or one whose reserve leaves no room) is that
session's ``ConfigError``, with its end event, while the fleet's other sessions finish.
A context that is no link at all is refused when the ``Agent`` is made."""

from __future__ import annotations

import pytest

from agentflow import Agent, ConfigError, Fleet
from agentflow.context import ContextBudget, PrefixIndex
from agentflow.testing import capture_events

from .budget_util import SIM_PROFILE, simulator


@pytest.mark.parametrize(
    ("budget", "model", "says"),
    [
        (ContextBudget(), "my-private-llama", "no window for model 'my-private-llama'"),
        (ContextBudget(window=1000, reserve_output=5000), SIM_PROFILE.model, "leaves no room"),
    ],
)
async def test_a_budget_that_cannot_bind_ends_its_session(
    budget: ContextBudget, model: str, says: str
) -> None:
    broken = Agent(name="broken", model=model, context=budget, params={"max_tokens": 8})
    fine = Agent(name="fine", model=SIM_PROFILE.model, params={"max_tokens": 8})
    events = capture_events()
    async with simulator() as (_, transport):
        result = await Fleet(transport, callbacks=[events]).run(
            [fine.session("hi"), broken.session("hi"), fine.session("hello")]
        )
    by_agent = {r.session_id: r for r in result.sessions}
    statuses = sorted((r.status, r.agent) for r in by_agent.values())
    assert statuses == [("completed", "fine"), ("completed", "fine"), ("error", "broken")]
    failed = next(r for r in result.sessions if r.agent == "broken")
    assert isinstance(failed.error, ConfigError)
    assert says in str(failed.error)
    ends = [e for e in events.events if e.type == "session_end" and e.agent == "broken"]
    assert len(ends) == 1


def test_a_context_that_is_no_link_is_refused_by_the_agent() -> None:
    with pytest.raises(ConfigError, match=r"Agent 'a': context 42 is not a context link"):
        Agent(name="a", model="m", context=42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Agent 'a': the prefix index .* needs a ContextBudget"):
        Agent(name="a", model="m", context=PrefixIndex())  # type: ignore[arg-type]
