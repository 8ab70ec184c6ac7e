"""What a turn is charged when no context policy counts its prompt: ~4 characters a token
over the messages, whatever form their content takes — a string, or a list of parts (text
parts by their text, an image part as many tokens as :class:`MessageCounter` counts it).

Run on :func:`~agentflow.embedded.run_virtual` with a :class:`MockTransport` stamping
each request in loop time: the tpm bucket's refills are exact, and no test waits on the
wall clock.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow import Agent, Fleet, Limits
from agentflow._session_turn import _rough_tokens
from agentflow.context import MessageCounter
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest

#: 16,000 characters: ~4,000 tokens at 4 characters a token.
TEXT = "word " * 3200


def _content(form: str, text: str) -> Any:
    if form == "str":
        return text
    return [{"type": "text", "text": text}]


class QuarterCounter:
    """One token per 4 characters, as the rough estimate counts."""

    name = "quarter"

    def count(self, text: str) -> int:
        return len(text) // 4

    def encode(self, text: str) -> list[int]:
        return [0] * (len(text) // 4)


def test_text_parts_are_charged_like_string_content() -> None:
    """A prompt given as text parts is estimated as the same text given as a string, and
    an image part adds what MessageCounter counts an image as (85 tokens by default)."""
    as_str = [{"role": "user", "content": TEXT}]
    as_parts = [{"role": "user", "content": _content("parts", TEXT)}]
    assert _rough_tokens(as_parts) == _rough_tokens(as_str) >= 4000
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with_image = [{"role": "user", "content": [*as_parts[0]["content"], image]}]
    exact = MessageCounter(QuarterCounter())
    per_image = exact.count_message(with_image[0]) - exact.count_message(as_parts[0])
    assert per_image == 85
    assert _rough_tokens(with_image) - _rough_tokens(as_parts) == per_image


@pytest.mark.parametrize("form", ["str", "parts"])
def test_tpm_holds_for_prompts_given_as_content_parts(form: str) -> None:
    """tpm = 300,000 (5,000 tokens a second, a 5,000-token burst) and ten sessions ready at
    once, each with a ~4,000-token prompt: one request fits the burst, the next waits for
    the bucket to refill (0.8 s for 4,000 tokens). Content parts were charged ~4 tokens
    each, so all ten went out at the first instant."""
    sent: list[float] = []

    def handler(request: ChatRequest) -> Reply:
        sent.append(asyncio.get_running_loop().time())
        return Reply.text("ok", prompt_tokens=4000)

    async def main() -> None:
        agent = Agent(name="a", model="m", params={"max_tokens": 16})
        fleet = Fleet(
            MockTransport(handler, clock=loop_clock),
            limits=Limits(tpm=300_000, burst_s=1.0),
            clock=loop_clock,
            probe_slots=False,
        )
        start = asyncio.get_running_loop().time()
        sessions = [
            agent.session([{"role": "user", "content": _content(form, TEXT + str(i))}])
            for i in range(10)
        ]
        result = await fleet.run(sessions)
        assert all(s.ok for s in result.sessions)
        assert len(sent) == 10
        # Virtual time: every request sent before the first refill went out in the burst.
        assert sum(t - start < 0.5 for t in sent) == 1

    run_virtual(main())
