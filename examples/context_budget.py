"""Keep long tool-calling sessions inside a small window, and a fleet inside its budget.

Runs on the embedded simulator in virtual time (no server, no network; a second or two):
the ``cpu-tiny`` profile has a 2,048-token window, and each agent reads files far larger
than that over a few tool rounds. Its ContextBudget first cuts long tool outputs, then
compacts older turns into a summary (the pinned system prompt and task stay byte-identical,
so they keep hitting the prefix cache), and fails only if neither helps; a FleetBudget
prices every request and stops the fleet once the money is spent. The simulator knows each
session by the X-Session-ID header the fleet sends, so the tool rounds a summary replaced
still count and every compacted session gets its final answer.

python examples/context_budget.py
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

from agentflow import Agent, Fleet
from agentflow.context import (
    Compact,
    ContextBudget,
    Fail,
    FleetBudget,
    MessageCounter,
    PrefixIndex,
    Prices,
    TiktokenCounter,
    TruncateToolOutputs,
    prefix_reuse,
)
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, get_profile
from agentflow.sim.driver import EngineDriver
from agentflow.sim.textgen import DEFAULT_WORDS, TextGenConfig


def read_file(path: str) -> str:
    """Read a file of the repository.

    Args:
        path: the file's path.
    """
    seed = zlib.crc32(path.encode())
    n = 700 if seed % 2 else 120  # about half the files are long
    return " ".join(DEFAULT_WORDS[(seed + 7 * i) % len(DEFAULT_WORDS)] for i in range(n))


def describe(event: Any) -> None:
    """Print the budget events as they happen."""
    if event.type == "context_trimmed":
        print(
            f"  {event.session_id} turn {event.turn}: {event.policy} "
            f"{event.tokens_before:,} → {event.tokens_after:,} tokens (limit {event.limit:,})"
        )
    elif event.type == "compaction":
        print(
            f"  {event.session_id} turn {event.turn}: summarised {event.messages_summarised} "
            f"messages into {event.summary_tokens} tokens"
        )
    elif event.type == "budget":
        state = "SPENT" if event.exceeded else f"{event.fraction:.0%} used"
        print(f"  fleet {event.budget} budget {state}: {event.spent:.4f} of {event.limit:.4f}")


async def main() -> None:
    fleet_budget = FleetBudget(
        max_cost=0.05, prices=Prices(prompt=2.0, cached=0.2, output=8.0), warn_at=(0.5,)
    )
    counter = MessageCounter(TiktokenCounter())  # shared by the budget and the fingerprints
    budget = ContextBudget(
        model="cpu-tiny",  # the window comes from the model table: 2,048 tokens
        counter=counter,
        reserve_output=64,
        margin=0.05,
        pin_first=1,  # the task stays, verbatim, after the system prompt
        overflow=[TruncateToolOutputs(max_tokens=400), Compact(max_summary_tokens=64), Fail()],
    )
    agent = Agent(
        name="coder",
        model="cpu-tiny",
        instructions="You fix bugs. Read the files you need, then explain the fix briefly.",
        tools=[read_file],
        params={"max_tokens": 64, "agentflow_tool_rounds": 6},
        max_turns=20,
        # The context chain, in order before each turn: refuse once the fleet's money is
        # spent, fit the window, fingerprint the prompt (PromptInfo.max_cacheable_tokens).
        context=[fleet_budget, budget, PrefixIndex(counter)],
    )
    # cpu-tiny's 2,048-token window, with KV room for every session's prefix (its own 4,096
    # tokens would evict them between turns: prefix reuse would then say so, at ~70%).
    profile = dataclasses.replace(get_profile("cpu-tiny"), kv_capacity_tokens=65_536)
    engine = Engine(profile, seed=1, textgen=TextGenConfig(answer_tokens=(16, 48)))
    transport = SimTransport(EngineDriver(engine))
    try:
        fleet = Fleet(transport, max_concurrency=2, callbacks=[describe], clock=loop_clock)
        tasks = [f"Fix bug #{i} in cache.py" for i in range(4)]
        result = await fleet.run(agent.session(t) for t in tasks)
    finally:
        await transport.aclose()
    print()
    for s in result.sessions:
        prompts = [t.trace.usage.prompt_tokens or 0 for t in s.turns if t.trace.usage]
        print(
            f"{s.session_id:8} {s.status:9} turns={len(s.turns):2} "
            f"largest prompt={max(prompts, default=0):,} "
            f"{type(s.error).__name__ if s.error else ''}"
        )
    done = sum(1 for s in result.sessions if s.status == "completed")
    print(f"{done} of {len(result.sessions)} sessions completed")
    print(*prefix_reuse(result.sessions).lines(), sep="\n")
    print(
        f"fleet spent {fleet_budget.tokens:,} tokens, {fleet_budget.cost:.4f} "
        f"over {fleet_budget.requests} requests (summaries included)"
    )


if __name__ == "__main__":
    run_virtual(main())
