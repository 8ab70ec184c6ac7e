"""``Fleet.stream`` buffers its events without bound, and says so: a consumer that takes
them slowly never slows the run — every session ends while the events wait for it, and it
still gets each of them. The docstring and the guide used to say nothing of it. Virtual
time: the consumer is slow by a timer."""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path

from agentflow import Agent, Fleet, HTTPTransport
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import Reply, ScriptedServer

GUIDE = (Path(__file__).parents[1] / "docs" / "guide.md").read_text()
SESSIONS = 3


def test_a_slow_consumer_never_slows_the_run() -> None:
    async def main() -> tuple[int, int | None]:
        reply = Reply.text(" ".join(["w"] * 50))
        async with (
            ScriptedServer([reply] * SESSIONS) as srv,
            HTTPTransport(srv.base_url, kernel_timestamps=False) as t,
        ):
            sessions = [Agent(name="a", model="m").session("hi") for _ in range(SESSIONS)]
            taken, at_end = 0, None
            async for _ in Fleet(t, clock=loop_clock).stream(sessions):
                taken += 1
                if at_end is None and all(s.result is not None for s in sessions):
                    at_end = taken
                await asyncio.sleep(1.0)  # a websocket send per event
            return taken, at_end

    taken, at_end = run_virtual(main())
    assert at_end is not None and taken > SESSIONS * 50  # every token and more: all taken
    assert at_end < taken / 2  # every session ended with most events still buffered


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_docs_say_the_stream_is_unbounded() -> None:
    doc = _words(inspect.getdoc(Fleet.stream) or "")
    assert re.search(r"in a queue without bound: a slow consumer never slows the run", doc)
    assert re.search(r"`Fleet.stream` buffers its events without bound", _words(GUIDE))
