"""Fleet-wide token and cost budgets: unit tests, then a fleet on the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import BudgetExceeded, ConfigError, Fleet, FleetResult
from agentflow.context._budget import ContextBudget
from agentflow.context._events import BudgetEvent
from agentflow.context._fleet_budget import FleetBudget, Prices, spend_of
from agentflow.context._overflow import Fail
from agentflow.transport import ChatRequest
from agentflow.typing import ContextPolicy

from .budget_util import ReadFile, sim_agent, simulator, trace


def test_prices_cost_per_million() -> None:
    p = Prices(prompt=2.0, cached=0.5, output=8.0)
    # 1,000 prompt (400 cached) + 100 output: 600×2 + 400×0.5 + 100×8 = 2,200 per million.
    assert p.cost(1000, 400, 100) == pytest.approx(2200 / 1e6)
    assert Prices(prompt=2.0, output=8.0).cost(1000, 400, 0) == pytest.approx(2000 / 1e6)
    assert p.cost(10, 50, 0) == pytest.approx(10 * 0.5 / 1e6)  # cached never exceeds prompt


def test_spend_uses_usage_else_estimates() -> None:
    s = spend_of(trace("a b", prompt=100, cached=64, output=7), Prices(prompt=1, output=1))
    assert (s.prompt_tokens, s.cached_tokens, s.output_tokens, s.tokens) == (100, 64, 7, 107)
    s = spend_of(trace("a b c"), None, prompt_estimate=42)
    assert (s.prompt_tokens, s.output_tokens, s.cost) == (42, 3, 0.0)


def test_token_budget_crosses_warnings_then_is_exceeded() -> None:
    b = FleetBudget(max_tokens=1000, warn_at=(0.5, 0.9))
    events: list[Any] = []

    def charge(prompt: int, output: int) -> None:
        b.charge(trace(prompt=prompt, output=output), model=None, agent="a",
                 session_id="s", turn=0, emit=events.append)  # fmt: skip

    charge(300, 100)
    b.check()
    assert events == []
    charge(150, 0)
    assert [(e.budget, e.fraction, e.exceeded) for e in events] == [("tokens", 0.5, False)]
    charge(350, 0)  # 900: 90% crossed, not yet spent
    b.check()
    charge(100, 0)  # 1000: spent
    assert [(e.fraction, e.exceeded) for e in events][1:] == [(0.9, False), (1.0, True)]
    assert all(isinstance(e, BudgetEvent) and e.limit == 1000 for e in events)
    with pytest.raises(BudgetExceeded) as info:
        b.check()
    assert (info.value.budget, info.value.spent, info.value.limit) == ("tokens", 1000, 1000)
    assert "1,000 of 1,000 tokens" in str(info.value)
    assert b.requests == 4


def test_cost_budget_with_prices_per_model() -> None:
    prices = {"big": Prices(prompt=10.0, output=30.0), "small": Prices(prompt=1.0, output=2.0)}
    b = FleetBudget(max_cost=0.01, prices=prices, warn_at=())
    events: list[Any] = []
    b.charge(trace(prompt=100_000, output=0, model="x"), model="small", agent="a",
             session_id="s", turn=0, emit=events.append)  # fmt: skip
    assert b.cost == pytest.approx(0.1) and b.tokens == 100_000
    assert [(e.budget, e.exceeded) for e in events] == [("cost", True)]
    with pytest.raises(BudgetExceeded, match="cost budget") as info:
        b.check()
    assert info.value.budget == "cost" and info.value.limit == 0.01
    with pytest.raises(ConfigError, match="no entry for model 'other'"):
        b.charge(trace(prompt=1, output=1), model="other", agent="a", session_id="s",
                 turn=1, emit=events.append)  # fmt: skip
    # Without a model of its own the session's server-reported model picks the price.
    b2 = FleetBudget(prices=prices)
    b2.charge(trace(prompt=1_000_000, output=0, model="big"), model=None, agent="a",
              session_id="s", turn=0, emit=events.append)  # fmt: skip
    assert b2.cost == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_tokens": 0}, "FleetBudget.max_tokens"),
        ({"max_cost": 1.0}, "needs prices"),
        ({"max_cost": -1.0, "prices": Prices(prompt=1, output=1)}, "FleetBudget.max_cost"),
        ({"prices": {"m": 3}}, r"FleetBudget.prices\['m'\]"),
        ({"warn_at": (1.5,)}, "FleetBudget.warn_at"),
        # A bare TypeError / AttributeError before:
        ({"warn_at": 0.5}, r"FleetBudget\.warn_at must be a sequence of fractions"),
        ({"warn_at": "0.5"}, r"FleetBudget\.warn_at must be a sequence of fractions"),
        ({"prices": [Prices(prompt=1, output=1)]}, r"FleetBudget\.prices must be a Prices, a"),
        ({"prices": {None: Prices(prompt=1, output=1)}}, r"FleetBudget\.prices keys must be"),
    ],
)
def test_fleet_budget_config_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FleetBudget(**kwargs)


def test_prices_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"Prices\.output"):
        Prices(prompt=1.0, output=float("nan"))


async def test_fleet_budget_alone_is_a_context_policy() -> None:
    b = FleetBudget(max_tokens=100)
    policy: ContextPolicy = b  # it satisfies the protocol, as ContextBudget does
    also: ContextPolicy = ContextBudget(window=10)
    assert also is not policy
    events: list[Any] = []
    ctx = policy.bind(session_id="s", agent="a", emit=events.append, model="m", params={})

    async def never(request: Any) -> Any:
        raise AssertionError

    assert await ctx.before_turn(0, [], (), never) is None
    ctx.after_turn(0, trace(prompt=90, output=20))
    with pytest.raises(BudgetExceeded):
        await ctx.before_turn(1, [], (), never)
    assert events[-1].exceeded


# --- end to end on the simulator, over real HTTP --------------------------------------------

PRICES = Prices(prompt=1.0, cached=0.1, output=4.0)


async def run_fleet(fleet_budget: FleetBudget, sessions: int) -> tuple[FleetResult, list[Any]]:
    budget = ContextBudget(window=4096, reserve_output=48)
    tool = ReadFile([], 80)
    events: list[Any] = []
    async with simulator() as (_, transport):
        agent = sim_agent([fleet_budget, budget], tool, rounds=4)
        fleet = Fleet(transport, max_concurrency=2, callbacks=[events.append])
        result = await fleet.run(agent.session(f"Fix bug {i}") for i in range(sessions))
    return result, events


def usage_totals(result: FleetResult) -> tuple[int, float]:
    tokens, cost = 0, 0.0
    for s in result.sessions:
        for t in s.turns:
            u = t.trace.usage
            assert u is not None and u.prompt_tokens is not None and u.completion_tokens
            tokens += u.prompt_tokens + u.completion_tokens
            cost += PRICES.cost(u.prompt_tokens, u.cached_tokens or 0, u.completion_tokens)
    return tokens, cost


async def test_a_fleet_token_budget_stops_every_session_once_spent() -> None:
    fleet_budget = FleetBudget(max_tokens=6000, prices=PRICES)
    result, events = await run_fleet(fleet_budget, sessions=4)
    # Every turn's reported usage was counted, and priced.
    tokens, cost = usage_totals(result)
    assert fleet_budget.tokens == tokens and fleet_budget.cost == pytest.approx(cost)
    assert fleet_budget.requests == sum(len(s.turns) for s in result.sessions)
    stopped = [s for s in result.sessions if s.status == "error"]
    assert stopped and all(isinstance(s.error, BudgetExceeded) for s in stopped)
    assert all(s.status in ("completed", "error") for s in result.sessions)
    # Budget events reached the fleet's callbacks: the warnings, then the end.
    budget_events = [e for e in events if e.type == "budget"]
    assert [(e.fraction, e.exceeded) for e in budget_events] == [
        (0.5, False), (0.8, False), (0.9, False), (1.0, True),
    ]  # fmt: skip
    assert budget_events[-1].spent >= 6000 and budget_events[-1].limit == 6000
    # Only turns already admitted before the budget ran out could finish after it: at most
    # one per session (each had passed its check), never a turn started afterwards.
    spent = budget_events[-1]
    later = [
        e
        for e in events[events.index(spent) :]
        if e.type == "turn_end" and (e.session_id, e.turn) != (spent.session_id, spent.turn)
    ]
    assert len(later) <= len(result.sessions) - 1
    for s in stopped:
        err = s.error
        assert isinstance(err, BudgetExceeded) and err.budget == "tokens" and err.limit == 6000


async def test_a_fleet_cost_budget() -> None:
    fleet_budget = FleetBudget(max_cost=0.002, prices=PRICES)
    result, events = await run_fleet(fleet_budget, sessions=3)
    _, cost = usage_totals(result)
    assert fleet_budget.cost == pytest.approx(cost) and cost >= 0.002
    errors = [s.error for s in result.sessions if s.status == "error"]
    assert errors and all(isinstance(e, BudgetExceeded) and e.budget == "cost" for e in errors)
    assert [e.exceeded for e in events if e.type == "budget"][-1]


async def test_alone_it_charges_a_prompt_the_server_did_not_count() -> None:
    """No usage in the stream and no ContextBudget in the chain: the turn's prompt is
    charged by a rough count of what was sent (~4 characters a token), not as 0."""
    from agentflow import Agent, HTTPTransport
    from agentflow.testing import Reply, ScriptedServer, sse_frames

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip

    no_usage = Reply(frames=sse_frames([chunk({"role": "assistant", "content": "done"}),
                                        chunk({}, "stop")]))  # fmt: skip
    fleet = FleetBudget(max_tokens=1_000_000)
    agent = Agent(name="a", model="m", context=fleet)
    task = "please read this " * 2000  # 34,000 characters
    async with ScriptedServer([no_usage]) as srv, HTTPTransport(srv.base_url) as http:
        result = await agent.session(task).run(http)
    assert result.status == "completed" and result.turns[0].trace.usage is None
    assert 8_000 <= fleet.tokens <= 9_000


async def test_a_model_the_prices_miss_fails_its_session_before_any_request() -> None:
    """Per-model prices without the agent's model, or without a compaction's summary
    model: the session fails when it binds, and the server never sees a request (it used
    to answer the first turn, which then was neither recorded nor charged)."""
    from agentflow import Agent, HTTPTransport
    from agentflow.context import Compact
    from agentflow.testing import ScriptedServer

    prices = {"m": PRICES}
    cases = [
        (Agent(name="a", model="unpriced", context=FleetBudget(max_cost=1.0, prices=prices)),
         "model 'unpriced', the model of session"),
        (Agent(name="b", model="m", context=[
            FleetBudget(max_cost=1.0, prices=prices),
            ContextBudget(window=4096, overflow=[Compact(model="summariser"), Fail()]),
        ]), "model 'summariser', the summary model of session"),
    ]  # fmt: skip
    async with ScriptedServer() as srv, HTTPTransport(srv.base_url) as http:
        for agent, match in cases:
            result = await agent.session("hello").run(http)
            assert result.status == "error" and isinstance(result.error, ConfigError)
            assert match in str(result.error) and "it has ['m']" in str(result.error)
            assert result.turns == []
        # A priced model and a Compact without a model of its own bind as before.
        fine = FleetBudget(prices=prices)
        fine.bind(session_id="s", agent="a", emit=lambda e: None, model="m")
    assert srv.requests == []


async def test_an_extra_request_of_an_unpriced_model_is_refused_before_it_is_sent() -> None:
    ctx = FleetBudget(prices={"m": PRICES}).bind(
        session_id="s", agent="a", emit=lambda e: None, model="m"
    )
    sent: list[ChatRequest] = []

    async def complete(request: ChatRequest) -> Any:
        sent.append(request)
        return trace(prompt=1, output=1, model=request.model)

    wrapped = ctx.wrap_complete(0, complete)
    with pytest.raises(ConfigError, match="model 'x', an extra request of session 's'"):
        await wrapped(ChatRequest(model="x", messages=[{"role": "user", "content": "hi"}]))
    assert sent == []
    await wrapped(ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert len(sent) == 1
