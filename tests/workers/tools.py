"""What the worker tests' agents use: module-level, so a worker process can import them."""

from __future__ import annotations

from agentflow import Agent, Session


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


TOOL = Agent(
    name="tool", model="m", instructions="Use the tool.", tools=[lookup], params={"max_tokens": 32}
)
PLAIN = Agent(name="plain", model="m", instructions="Answer briefly.", params={"max_tokens": 16})


def workload(n: int) -> list[Session]:
    """``n`` tiny sessions with fixed ids: half answer at once, half call a tool first."""
    agents = (PLAIN, TOOL)
    return [agents[i % 2].session(f"question {i}", session_id=f"s{i}") for i in range(n)]
