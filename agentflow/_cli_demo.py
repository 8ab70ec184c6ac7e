"""``agentflow demo`` and ``agentflow resume``: their arguments, and the run of a demo
fleet (new, or resumed from its store) with the exit status its report implies."""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
from pathlib import Path
from typing import Any

from agentflow._base_url import check_base_url
from agentflow._cli_signals import run_command
from agentflow._cli_timeouts import _add_timeout_arguments, _timeouts
from agentflow._cliargs import check_store_file
from agentflow._errors import ConfigError

__all__ = ["add_demo_parsers"]


def add_demo_parsers(sub: Any) -> None:
    """Add ``demo`` and ``resume`` to the ``agentflow`` command's subparsers."""
    demo = sub.add_parser("demo", help="run a fleet of coding agents on the embedded simulator")
    demo.add_argument(
        "--agents", type=int, default=64, help="sessions to run (default 64, at most 100,000)"
    )
    demo.add_argument(
        "--profile",
        default=None,
        help="the deployment the simulator models (see `agentflow sim --help`; default "
        "deepseek-v4.1-flash-gb300); with --base-url, its window is the budget's when the "
        "server reports none and the model is not in agentflow's table",
    )
    demo.add_argument(
        "--seed",
        type=int,
        default=0,
        help="fixes the workload and the simulator's output (default 0)",
    )
    demo.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="run the simulator this many times slower than the deployment it "
        "models (figures are also shown scaled back); default 10; not with --virtual "
        "or --base-url",
    )
    demo.add_argument(
        "--max-concurrency",
        type=int,
        default=64,
        help="model requests in flight at once (default 64); against llama.cpp keep it "
        "at or below the server's slots (`agentflow llamacpp --n-parallel`)",
    )
    demo.add_argument(
        "--turns", default="5:20", help="MIN:MAX model turns per agent (default 5:20)"
    )
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
        help="run in-process on virtual time (no sockets, faster than real time); no live "
        "view then (the run outpaces it): only the summary at the end",
    )
    demo.add_argument(
        "--no-live",
        action="store_true",
        help="no live view, summary only (always so with --virtual)",
    )
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
    resume.add_argument(
        "--base-url",
        default=None,
        help="the run's server again, with the user:password@ its URL had (never stored); "
        "it must name the server the run was recorded against",
    )
    resume.add_argument(
        "--no-live",
        action="store_true",
        help="no live view, summary only (always so for a --virtual run)",
    )
    resume.set_defaults(func=_resume)


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
    from agentflow.demo._config import (
        BASE_URL_HAS_NO_PACE,
        DEFAULT_PROFILE,
        DEFAULT_TIME_SCALE,
        VIRTUAL_HAS_NO_PACE,
    )
    from agentflow.demo.run import DemoConfig, run_demo

    lo, _, hi = args.turns.partition(":")
    try:
        turns = (int(lo), int(hi or lo))
    except ValueError:
        raise ConfigError(f"--turns must be MIN:MAX, got {args.turns!r}") from None
    if args.virtual and args.time_scale is not None:  # (DemoConfig sees only a value)
        raise ConfigError(VIRTUAL_HAS_NO_PACE)
    if args.base_url and args.time_scale is not None:
        raise ConfigError(BASE_URL_HAS_NO_PACE)
    if args.base_url:  # named as the flag, not as the Endpoint field it goes to
        check_base_url(args.base_url, "--base-url")
    scale = DEFAULT_TIME_SCALE if args.time_scale is None else args.time_scale
    config = DemoConfig(
        agents=args.agents, profile=args.profile or DEFAULT_PROFILE, seed=args.seed,
        time_scale=scale,
        max_concurrency=args.max_concurrency, turns=turns, max_tokens=args.max_tokens,
        base_url=args.base_url, api_key=args.api_key, model=args.model,
        virtual=args.virtual, live=not args.no_live, report=args.report,
        timeouts=_timeouts(args), store=args.store,
        slos=tuple(parse_slo(text) for text in args.slo), fault_rate=args.fault_rate,
    )  # fmt: skip
    return _demo_status(run_demo(config))


def _resume(args: argparse.Namespace) -> int:
    _need_demo_extra("resume")
    from agentflow.demo.run import resume_config, run_demo
    from agentflow.store import SQLiteStore

    if args.base_url is not None:
        check_base_url(args.base_url, "--base-url")
    check_store_file(args.store, "resume")

    async def recorded() -> dict[str, Any] | None:
        async with SQLiteStore(args.store, journal=False) as store:  # reads only
            return (await store.load(args.run_id)).config

    config = resume_config(
        run_command(recorded()), args.run_id, store=args.store, report=args.report,
        live=not args.no_live, api_key=args.api_key, base_url=args.base_url,
    )  # fmt: skip
    return _demo_status(run_demo(config))


def _demo_status(report: dict[str, Any]) -> int:
    stopped = report["run"].get("interrupted")
    if stopped:  # the report of what ran is written; the status says it was stopped
        return 128 + int(signal.Signals[stopped["signal"]])
    return 0 if report["fleet"]["failed"] == 0 else 1
