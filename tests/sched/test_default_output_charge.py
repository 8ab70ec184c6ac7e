"""An agent that sets no ``max_tokens`` is charged a default output for token limits,
and the docs say which.

The 1,024 output tokens such a turn is charged for ``tpm`` and ``kv_tokens`` were not
documented anywhere, though its requests carry no cap and the server may generate more.
The docs (``docs/scheduling.md``'s limits table) and the ``Limits`` docstring now state
it; these tests hold them to the constant, and show the charge at work (virtual time).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentflow import Agent, Fleet, Limits, Replica
from agentflow._session_turn import DEFAULT_MAX_OUTPUT_TOKENS
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest
from tests.sched.conftest import peak_overlap

_DOC = Path(__file__).parents[2] / "docs" / "scheduling.md"


def test_the_default_output_charge_is_documented_as_it_is() -> None:
    """The scheduling docs and the ``Limits`` docstring name the charge, and its value."""
    shown = f"{DEFAULT_MAX_OUTPUT_TOKENS:,}"
    doc = " ".join(_DOC.read_text().split())
    assert f"sets neither is charged **{shown}** output tokens" in doc
    assert "DEFAULT_MAX_OUTPUT_TOKENS" in doc
    docstring = " ".join((Limits.__doc__ or "").split())
    assert f"sets neither is charged {shown} output tokens" in docstring


def test_a_turn_without_max_tokens_is_charged_the_default_against_kv_tokens() -> None:
    """``kv_tokens`` fits two turns of an agent without ``max_tokens`` (each charged its
    prompt plus the default), not three: six such sessions run two at a time, though
    their requests carry no ``max_tokens`` at all."""
    spans: list[tuple[float, float]] = []
    bodies: list[ChatRequest] = []

    async def handler(request: ChatRequest) -> Reply:
        loop = asyncio.get_running_loop()
        start = loop.time()
        bodies.append(request)
        await asyncio.sleep(1.0)
        spans.append((start, loop.time()))
        return Reply.text("ok", prompt_tokens=5)

    budget = 2 * DEFAULT_MAX_OUTPUT_TOKENS + 100  # two default charges and their prompts
    replica = Replica(
        transport=MockTransport(handler, clock=loop_clock),
        name="a",
        limits=Limits(kv_tokens=budget),
    )
    fleet = Fleet([replica], clock=loop_clock, prefix_warmup=False)
    agent = Agent(name="x", model="m")

    async def main() -> None:
        result = await fleet.run([agent.session(f"q{i}") for i in range(6)])
        assert not result.failed

    run_virtual(main())
    assert len(spans) == 6 and peak_overlap(spans) == 2, spans
    assert all("max_tokens" not in r.params for r in bodies)
