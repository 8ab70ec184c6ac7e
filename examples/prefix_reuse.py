"""Prefix reuse on the embedded simulator: a timestamp in a system prompt busts the cache.

Two agents share one long guide. ``stable`` sends the same system prompt in every session;
``clocked`` starts its system prompt with ``datetime.now().isoformat()`` — different in
every session, so the server's prefix cache cannot serve anything after it. The cache-buster
check names the session, the span and the prompt tokens each bust cost (measured from the
server's usage); the prefix-reuse report shows how little of ``clocked``'s prompts any cache
could have served (its fingerprinted cacheable maximum) against ``stable``'s.

python examples/prefix_reuse.py
"""

from __future__ import annotations

import logging
from datetime import datetime

from agentflow import Agent, Event, Fleet
from agentflow.context import (
    CacheBusterCheck,
    CacheBusterWarning,
    ContextBudget,
    PrefixIndex,
    prefix_reuse,
)
from agentflow.demo.workload import repository_guide
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine
from agentflow.sim.driver import EngineDriver

SESSIONS = 4
GUIDE = repository_guide(paragraphs=20)
TASKS = [f"Summarise section {i + 1} of the guide in one sentence." for i in range(SESSIONS)]


def make_agent(
    name: str, instructions: str, check: CacheBusterCheck, index: PrefixIndex, model: str
) -> Agent:
    return Agent(
        name=name,
        model=model,
        instructions=instructions,
        params={"temperature": 0, "max_tokens": 24},
        # The budget counts the prompt, the check compares it with the agent's other
        # sessions, the index fingerprints it: what any prefix cache could have served.
        context=[ContextBudget(), check, index],
    )


async def main() -> None:
    driver = EngineDriver(Engine("deepseek-v4.1-flash-gb300", seed=1))
    transport = SimTransport(driver)
    model = driver.model
    check = CacheBusterCheck()  # one instance: it compares sessions of the same agent
    index = PrefixIndex()  # one for the fleet: prefixes any session sent before
    warnings: list[CacheBusterWarning] = []

    def on_event(event: Event | CacheBusterWarning) -> None:
        if isinstance(event, CacheBusterWarning):
            warnings.append(event)

    stable = make_agent(
        "stable", f"You answer questions about a repository.\n\n{GUIDE}", check, index, model
    )
    sessions = []
    for task in TASKS:
        sessions.append(stable.session(task))
        # The bug: a fresh timestamp in every session's system prompt.
        clocked = make_agent(
            "clocked",
            f"Current time: {datetime.now().isoformat()}.\nYou answer questions about a "
            f"repository.\n\n{GUIDE}",
            check,
            index,
            model,
        )
        sessions.append(clocked.session(task))
    try:
        fleet = Fleet(transport, max_concurrency=1, callbacks=[on_event], clock=loop_clock)
        result = await fleet.run(sessions)
    finally:
        await transport.aclose()

    for w in warnings:
        print(
            f"cache buster in agent {w.agent!r}, session {w.session_id} ({w.kind}, "
            f"{w.segment} chars {w.start}-{w.end}): {w.snippet!r} vs {w.reference_snippet!r} "
            f"in {w.reference_session_id}; {w.lost_tokens:,} prompt tokens missed the cache "
            f"({'measured' if w.lost_source == 'server' else 'estimated'}; bust {w.occurrence} "
            "of this cause)"
        )
    report = prefix_reuse(result.sessions)
    for name, figures in report.per_agent.items():
        hit = "not reported" if figures.hit_rate is None else f"{figures.hit_rate:.1%}"
        print(f"{name:8} prefix-cache hit rate {hit}")
    for line in report.lines():
        print(line)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="log %(name)s: %(message)s")
    run_virtual(main())
