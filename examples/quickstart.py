"""Run a small fleet against a real server and print each agent's latency figures.

python examples/quickstart.py                      # starts llama.cpp (SmolLM2-135M) itself
python examples/quickstart.py --base-url URL --model NAME [--api-key KEY] [--agents N]

A session that failed before its first turn ended (the server is down, the model is
wrong) is printed with its error; a figure that was not measured is shown as ``n/a``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools

from agentflow import Agent, Endpoint, Fleet, HTTPTransport, TokenEvent
from agentflow.llamacpp import LlamaCppServer


def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count.
    """
    return len(text.split())


def _shown(value: float | None, spec: str) -> str:
    """A figure, or ``n/a`` when it was not measured (``None``: no token streamed)."""
    return "n/a" if value is None else format(value, spec)


async def main(base_url: str, model: str, api_key: str | None, agents: int) -> None:
    agent = Agent(
        name="explainer",
        model=model,
        instructions="You explain computing terms in one short paragraph.",
        tools=[word_count],
        params={"temperature": 0, "max_tokens": 48},
    )
    tokens = 0

    def on_event(event: object) -> None:
        nonlocal tokens
        if isinstance(event, TokenEvent):
            tokens += 1

    terms = ["cache", "mutex", "compiler", "socket", "kernel", "thread", "heap", "lambda"]
    asked = itertools.islice(itertools.cycle(terms), agents)  # more agents than terms: again
    async with HTTPTransport(Endpoint(base_url=base_url, api_key=api_key)) as transport:
        fleet = Fleet(transport, max_concurrency=4, callbacks=[on_event])
        result = await fleet.run(agent.session(f"What is a {t}?") for t in asked)
    for s in result.sessions:
        if not s.turns:  # it failed before its first turn ended (server down, a 4xx…)
            print(f"{s.session_id:14} {s.status:9} {s.error}")
            continue
        m = s.turns[-1].metrics
        print(
            f"{s.session_id:14} {s.status:9} ttft={_shown(m.ttft_s, '.3f')}s "
            f"decode={_shown(m.decode_tps, '6.1f')} tok/s out={m.output_tokens:3} "
            f"cached={m.cached_tokens}/{m.prompt_tokens}"
        )
    print(
        f"{tokens} token events · {result.output_tps:.1f} output tok/s over {result.wall_s:.1f} s"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--api-key")
    ap.add_argument("--agents", type=int, default=8)
    args = ap.parse_args()
    if args.agents < 1:
        ap.error(f"--agents must be at least 1, got {args.agents}")
    with contextlib.ExitStack() as stack:
        url = args.base_url or stack.enter_context(LlamaCppServer()).base_url
        asyncio.run(main(url, args.model, args.api_key, args.agents))
