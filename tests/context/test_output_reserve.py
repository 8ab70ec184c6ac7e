"""The output reserve reads the agent's output size as the server and the scheduler do:
``max_completion_tokens`` when set, else ``max_tokens`` (one helper, ``output_size``)."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet
from agentflow.context import ContextBudget

from .budget_util import SIM_PROFILE, simulator


def bind(budget: ContextBudget, **kw: Any) -> Any:
    return budget.bind(session_id="s-1", agent="a", emit=lambda e: None, **kw)


def test_max_completion_tokens_wins_over_a_larger_max_tokens() -> None:
    # The reserve took the larger of the two (3000) while the server, the simulator and
    # Agent.max_output_tokens (what the scheduler charges) use max_completion_tokens.
    params = {"max_tokens": 3000, "max_completion_tokens": 256}
    assert Agent(name="a", model="m", params=params).max_output_tokens == 256
    ctx = bind(ContextBudget(window=4096, margin=0), params=params)
    assert (ctx.reserve, ctx.limit) == (256, 3840)
    # reserve_output still raises it; the agent's size is still its floor.
    assert bind(ContextBudget(window=4096, reserve_output=512), params=params).reserve == 512
    assert bind(ContextBudget(window=4096, reserve_output=64), params=params).reserve == 256
    # Either alone is the size.
    assert bind(ContextBudget(window=4096), params={"max_tokens": 300}).reserve == 300
    assert bind(ContextBudget(window=4096), params={"max_completion_tokens": 300}).reserve == 300


async def test_a_session_whose_max_tokens_alone_fills_the_window_runs() -> None:
    # max_tokens=4000 in a 4,096 window refused the session ("leaves no room") though
    # the request asks for 256 output tokens (max_completion_tokens), which the server takes.
    params = {"max_tokens": 4000, "max_completion_tokens": 256}
    budget = ContextBudget(window=SIM_PROFILE.max_model_len, margin=0.05)
    agent = Agent(name="a", model=SIM_PROFILE.model, context=budget, params=params)
    async with simulator() as (_, transport):
        result = await Fleet(transport).run([agent.session("hi")])
    [session] = result.sessions
    assert session.status == "completed", session.error


def test_no_room_names_the_reserve_and_where_it_came_from() -> None:
    # It said reserve_output=4,096 when the user set 256: the 4,096 was the agent's max_tokens.
    budget = ContextBudget(window=4096, reserve_output=256, margin=0)
    with pytest.raises(ConfigError) as caught:
        bind(budget, params={"max_tokens": 4096})
    assert str(caught.value).endswith(
        "leaves no room for a prompt after an output reserve of 4,096 "
        "(reserve_output=256, the agent's max_tokens=4,096) and margin=0"
    )
    with pytest.raises(ConfigError, match=r"\(reserve_output=None, the agent's max_completion"):
        bind(ContextBudget(window=400), params={"max_completion_tokens": 500, "max_tokens": 8})
