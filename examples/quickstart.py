"""Run a small fleet against a real server and print each agent's latency figures.

python examples/quickstart.py                      # starts llama.cpp (SmolLM2-135M) itself
python examples/quickstart.py --base-url URL --model NAME [--api-key KEY]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from agentflow import Agent, Endpoint, Fleet, HTTPTransport, TokenEvent
from agentflow.llamacpp import LlamaCppServer


def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count.
    """
    return len(text.split())


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
    async with HTTPTransport(Endpoint(base_url=base_url, api_key=api_key)) as transport:
        fleet = Fleet(transport, max_concurrency=4, callbacks=[on_event])
        result = await fleet.run(agent.session(f"What is a {t}?") for t in terms[:agents])
    for s in result.sessions:
        m = s.turns[-1].metrics
        print(
            f"{s.session_id:14} {s.status:9} ttft={m.ttft_s or 0:.3f}s "
            f"decode={m.decode_tps or 0:6.1f} tok/s out={m.output_tokens:3} "
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
    with contextlib.ExitStack() as stack:
        url = args.base_url or stack.enter_context(LlamaCppServer()).base_url
        asyncio.run(main(url, args.model, args.api_key, args.agents))
