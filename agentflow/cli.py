"""The ``agentflow`` command.

``agentflow demo``      a fleet of coding agents on the embedded simulator, with a live view
``agentflow sim``       serve the engine simulator over HTTP (OpenAI-compatible, vLLM-like)
``agentflow chat``      stream one prompt from any OpenAI-compatible server, with its metrics
``agentflow llamacpp``  serve SmolLM2-135M on 127.0.0.1 with llama.cpp (needs the extra)
``agentflow plan``      KV-cache capacity of a deployment: tokens, and 1M-token sessions held
``agentflow report``    plots of run reports (latency CDFs, interactivity vs throughput) in HTML

Nothing in the library imports this module.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from agentflow._agent import Agent
from agentflow._errors import AgentflowError, ConfigError
from agentflow._events import Event, TokenEvent
from agentflow.transport import Endpoint, HTTPTransport

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentflow`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except AgentflowError as exc:
        print(f"agentflow: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentflow", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(title="commands")

    demo = sub.add_parser("demo", help="run a fleet of coding agents on the embedded simulator")
    demo.add_argument("--agents", type=int, default=64)
    demo.add_argument("--profile", default="deepseek-v4.1-flash-gb300")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--time-scale",
        type=float,
        default=10.0,
        help="run the simulator this many times slower than the deployment it "
        "models (figures are also shown scaled back); default 10",
    )
    demo.add_argument("--max-concurrency", type=int, default=64)
    demo.add_argument("--turns", default="5:20", help="MIN:MAX model turns per agent")
    demo.add_argument("--max-tokens", type=int, default=128)
    demo.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    demo.add_argument("--base-url", help="run against this server instead of the simulator")
    demo.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    demo.add_argument("--model", help="model name (with --base-url)")
    demo.add_argument(
        "--virtual",
        action="store_true",
        help="run in-process on virtual time (no sockets, faster than real time)",
    )
    demo.add_argument("--no-live", action="store_true", help="no live view, summary only")
    demo.set_defaults(func=_demo)

    from agentflow.sim.cli import add_sim_parser

    add_sim_parser(sub)

    from agentflow.planner.cli import add_parser as add_plan_parser

    add_plan_parser(sub)

    from agentflow.report.cli import add_parser as add_report_parser

    add_report_parser(sub)

    chat = sub.add_parser("chat", help="stream one prompt and print its latency figures")
    chat.add_argument("prompt")
    chat.add_argument(
        "--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    )
    chat.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="defaults to $OPENAI_API_KEY"
    )
    chat.add_argument("--model", required=True)
    chat.add_argument("--system", default="")
    chat.add_argument("--max-tokens", type=int, default=256)
    chat.add_argument("--temperature", type=float, default=0.0)
    chat.set_defaults(func=_chat)

    ll = sub.add_parser("llamacpp", help="serve SmolLM2-135M with llama.cpp on 127.0.0.1")
    ll.add_argument("--port", type=int, default=8080)
    ll.add_argument("--n-parallel", type=int, default=4)
    ll.add_argument("--n-ctx", type=int, default=8192)
    ll.set_defaults(func=_llamacpp)
    return p


def _demo(args: argparse.Namespace) -> int:
    from agentflow.demo.run import DemoConfig, run_demo

    lo, _, hi = args.turns.partition(":")
    try:
        turns = (int(lo), int(hi or lo))
    except ValueError:
        raise ConfigError(f"--turns must be MIN:MAX, got {args.turns!r}") from None
    config = DemoConfig(
        agents=args.agents, profile=args.profile, seed=args.seed, time_scale=args.time_scale,
        max_concurrency=args.max_concurrency, turns=turns, max_tokens=args.max_tokens,
        base_url=args.base_url, api_key=args.api_key, model=args.model,
        virtual=args.virtual, live=not args.no_live, report=args.report,
    )  # fmt: skip
    report = run_demo(config)
    return 0 if report["fleet"]["failed"] == 0 else 1


def _chat(args: argparse.Namespace) -> int:
    """Stream one answer to stdout, and its latency figures to stderr.

    On a terminal the answer streams as it arrives. If an attempt fails mid-stream and
    is retried (an ``AttemptDiscardedEvent``), the text it printed is marked as
    discarded on a line of its own and the retry's answer starts on the next line.
    When stdout is not a terminal nothing streams: only the final answer is written,
    once, so a pipe or a file gets exactly the answer. Retries are noted on stderr.
    """
    from agentflow._events import AttemptDiscardedEvent, RetryEvent

    agent = Agent(
        name="chat",
        model=args.model,
        instructions=args.system,
        params={"max_tokens": args.max_tokens, "temperature": args.temperature},
    )
    live = sys.stdout.isatty()

    def show(event: Event) -> None:
        if isinstance(event, TokenEvent):
            if live and event.kind == "content":
                sys.stdout.write(event.text)
                sys.stdout.flush()
        elif isinstance(event, AttemptDiscardedEvent):
            if live and event.content_chars:
                then = "; the answer restarts below" if event.retried else ""
                sys.stdout.write(f"\n[discarded: that attempt failed{then}]\n")
                sys.stdout.flush()
        elif isinstance(event, RetryEvent):
            a = event.attempt
            print(
                f"agentflow: attempt {a.attempt + 1} failed ({type(a.error).__name__}: "
                f"{a.error}); retrying in {a.wait_s:.2f} s",
                file=sys.stderr,
                flush=True,
            )

    async def run() -> int:
        endpoint = Endpoint(base_url=args.base_url, api_key=args.api_key)
        async with HTTPTransport(endpoint) as transport:
            result = await agent.session(args.prompt).run(transport, callbacks=[show])
        if live:
            print()
        elif result.final_output is not None:
            print(result.final_output)
        if not result.turns:
            raise result.error or RuntimeError("no turn finished")
        m = result.turns[-1].metrics
        ttft = f"{m.ttft_s * 1e3:.1f} ms" if m.ttft_s is not None else "n/a"
        tps = f"{m.decode_tps:.1f}" if m.decode_tps is not None else "n/a"
        cached = "not reported" if m.cached_tokens is None else str(m.cached_tokens)
        print(
            f"ttft {ttft} · e2e {m.e2e_s * 1e3:.1f} ms · decode {tps} tok/s · "
            f"output {m.output_tokens} ({m.output_tokens_source}) · prompt {m.prompt_tokens} "
            f"· cached {cached}",
            file=sys.stderr,
        )
        return 0 if result.ok else 1

    return asyncio.run(run())


def _llamacpp(args: argparse.Namespace) -> int:
    from agentflow.llamacpp import LlamaCppServer

    with LlamaCppServer(port=args.port, n_parallel=args.n_parallel, n_ctx=args.n_ctx) as srv:
        print(f"llama.cpp serving SmolLM2-135M at {srv.base_url} (model 'smollm2'); Ctrl-C stops")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
