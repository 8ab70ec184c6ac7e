"""A bench turn is charged its own ``max_tokens`` by the fleet's token limits (not the
1,024 tokens charged for an agent that sets none), and each turn's request carries it."""

from __future__ import annotations

from agentflow import Fleet, Limits, Replica
from agentflow._events import Event, TurnEndEvent
from agentflow.bench import Load, SessionScript, SimTarget, TurnScript, replay_sessions
from agentflow.bench._level import LevelResult, LevelTap, run_level
from agentflow.embedded import run_virtual

MAX_TOKENS = 16


def _scripts(n: int) -> list[SessionScript]:
    return [
        SessionScript(
            session_id=f"s{i}",
            system="Be brief.",
            system_key="brief",
            turns=(TurnScript(text=f"Say {i}.", max_tokens=MAX_TOKENS),),
        )
        for i in range(n)
    ]


def _run(kv_tokens: int) -> tuple[LevelResult, list[TurnEndEvent]]:
    target = SimTarget(profile="cpu-tiny")
    ends: list[TurnEndEvent] = []

    def collect(event: Event) -> None:
        if isinstance(event, TurnEndEvent):
            ends.append(event)

    async def main() -> LevelResult:
        tap = LevelTap()
        planned = replay_sessions(_scripts(8), Load(scale=1.0))
        async with target.open(planned, 0) as transport:
            fleet = Fleet(
                [Replica(transport=transport, limits=Limits(kv_tokens=kv_tokens))],
                callbacks=[tap, collect],
                clock=target.clock(),
            )
            return await run_level(
                fleet, tap, planned, load=Load(scale=1.0), model="m", params={},
                duration_s=None, clock=target.clock(),
            )  # fmt: skip

    return run_virtual(main()), ends


def test_kv_token_limit_counts_each_turns_own_max_tokens() -> None:
    # Eight one-turn sessions arrive at once. Charged 1,024 output tokens each, not one
    # would fit in 400 KV tokens beside another; charged their own 16 (plus a prompt
    # estimate of a few dozen), several run at once.
    level, ends = _run(kv_tokens=400)
    assert len(ends) == 8
    assert all(e.metrics.output_tokens == MAX_TOKENS for e in ends)
    assert level.summary["peak_in_flight"] >= 4
