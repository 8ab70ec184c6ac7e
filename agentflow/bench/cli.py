"""``agentflow bench``: open-loop agentic load against a server, level by level.

    agentflow bench                                   # the embedded simulator, a rate sweep
    agentflow bench --rate 2 --duration 120 --workload agentic
    agentflow bench --base-url http://127.0.0.1:8000/v1 --model M --sweep --rate 0.5
    agentflow bench --concurrency 8,16,32,64 --slo ttft=2s,tpot=10ms --report bench.json

Without ``--base-url`` it runs on the embedded simulator in virtual time
(``--profile``). Exit status: 0; 1 when a level had failed sessions; 2 a bad argument.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec

from agentflow._base_url import check_base_url
from agentflow._cliargs import (
    at_least,
    check_no_overwrite,
    check_output_file,
    non_negative,
    positive,
)
from agentflow._errors import ConfigError
from agentflow._printable import printable
from agentflow.bench._cli_output import (
    bench_html,
    bench_table,
    shown_number,
    shown_seconds,
    write_bench_report,
)
from agentflow.bench._cli_values import factor as _factor
from agentflow.bench._cli_values import numbers as _numbers
from agentflow.bench._cli_values import parse_slo

__all__ = ["add_parser", "bench_html", "bench_table", "parse_slo"]

#: ``--profile``'s default: the simulator's deployment when no ``--base-url`` is given.
DEFAULT_PROFILE = "qwen2.5-coder-32b"


def add_parser(sub: Any) -> None:
    """Add ``agentflow bench`` to the ``agentflow`` command's subparsers."""
    p = sub.add_parser(
        "bench",
        help="open-loop agentic load, level by level, sweeps to saturation",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument(
        "--base-url", help="an OpenAI-compatible server (default: the embedded simulator)"
    )
    p.add_argument(
        "--model", help="model name (default: the simulator's, or the one the server lists)"
    )
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="the environment variable holding the API key (default OPENAI_API_KEY)",
    )
    p.add_argument(
        "--workload",
        default="agentic",
        help="a built-in workload (agentic, chat, fanout, short) or a JSON file",
    )
    p.add_argument(
        "--show-workload", action="store_true", help="print the workload's JSON and exit"
    )
    p.add_argument(
        "--rate", help="sessions/s (open loop); a comma-separated list for several levels"
    )
    p.add_argument("--concurrency", help="live sessions; a comma-separated list for several levels")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="grow the load from --rate (or --concurrency) by --sweep-factor until over-saturated",
    )
    p.add_argument(
        "--sweep-factor",
        type=_factor,
        default=1.5,
        help="each sweep level's load is the previous one's times this (default 1.5)",
    )
    p.add_argument(
        "--max-levels",
        type=at_least(1),
        default=12,
        help="a sweep stops after this many levels (default 12)",
    )
    p.add_argument(
        "--arrival",
        choices=("poisson", "constant"),
        default="poisson",
        help="how sessions arrive at a --rate: Poisson (random gaps) or evenly spaced",
    )
    p.add_argument("--duration", type=positive, default=60.0, help="seconds per level (default 60)")
    p.add_argument(
        "--warmup",
        type=non_negative,
        default=None,
        help="seconds left out at each level's start (default: a tenth of --duration)",
    )
    p.add_argument("--sessions", type=at_least(1), default=None, help="the most sessions per level")
    p.add_argument(
        "--repeats", type=at_least(1), default=1, help="runs per level (≥ 2: confidence intervals)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the workload's draws and the arrivals (default 0)",
    )
    p.add_argument("--slo", action="append", default=[], help="e.g. ttft=2s,tpot=10ms (repeatable)")
    p.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    p.add_argument(
        "--html",
        type=Path,
        default=None,
        help="write agentflow report's HTML page of the levels here (interactivity vs "
        "throughput: one point per level; needs agentflow[report])",
    )
    p.add_argument(
        "--profile",
        default=None,
        help=f"the simulator's profile (default {DEFAULT_PROFILE}; not with --base-url)",
    )
    p.add_argument(
        "--max-in-flight", type=at_least(1), default=100_000, help="the client's request limit"
    )
    p.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="do not send ignore_eos (servers that reject it)",
    )
    from agentflow.bench._trace_cli import add_trace_arguments

    add_trace_arguments(p)
    p.set_defaults(func=_bench)


def _bench(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("rich") is None:  # the demo extra
        raise ConfigError(
            "bench needs rich (its tables), which is not installed: pip install 'agentflow[demo]'"
        )
    from agentflow.bench._bench import (
        BenchConfig,
        HTTPTarget,
        SimTarget,
        Sweep,
        partial_report,
        run_bench,
    )
    from agentflow.bench._load import Load
    from agentflow.bench._spec import load_workload
    from agentflow.bench._workloads import WORKLOADS

    name = args.workload
    workload = WORKLOADS[name] if name in WORKLOADS else load_workload(Path(name))
    if args.no_ignore_eos:
        workload = msgspec.structs.replace(workload, ignore_eos=False)
    if args.show_workload:
        print(json.dumps(msgspec.to_builtins(workload), indent=2))
        return 0
    if args.base_url and args.profile is not None:
        raise ConfigError(
            "--profile picks the simulator's deployment; with --base-url there is no "
            "simulator: drop --profile or --base-url"
        )
    if args.base_url:
        check_base_url(args.base_url, "--base-url")
    _check_no_overwrite(args)
    if args.report is not None:
        check_output_file(args.report, "--report")
    if args.html is not None:
        check_output_file(args.html, "--html")
        from agentflow.report._canvas import _matplotlib

        _matplotlib()  # the report extra: missing is a ConfigError now, not after every level
    if args.rate and args.concurrency:
        raise ConfigError("--rate and --concurrency: give one (the kind of load)")
    rates = _numbers("--rate", args.rate) if args.rate else None
    concs = _numbers("--concurrency", args.concurrency) if args.concurrency else None
    if concs is not None and any(c != int(c) for c in concs):
        raise ConfigError(f"--concurrency values must be whole numbers, got {args.concurrency!r}")
    sweeping = args.sweep  # as given: --trace refuses it (apply_trace_arguments)
    if sweeping and len(rates or concs or ()) > 1:  # (only the first was swept from)
        flag, given = ("--rate", args.rate) if rates else ("--concurrency", args.concurrency)
        raise ConfigError(f"--sweep starts from one {flag} value, got {given!r}: give one")
    if rates is None and concs is None:
        rates = [1.0]
        sweeping = True
    sweep = None
    levels: tuple[Load, ...] = ()
    if sweeping:
        start = (rates or concs or [1.0])[0]
        sweep = Sweep(start=start, factor=args.sweep_factor, max_levels=args.max_levels)
    elif rates is not None:
        levels = tuple(Load(rate=r, arrival=args.arrival) for r in rates)
    else:
        levels = tuple(Load(concurrency=int(c)) for c in concs or ())
    from agentflow.bench._trace_cli import _DefaultFloat

    duration_given = args.trace is None or not isinstance(args.duration, _DefaultFloat)
    if args.warmup is not None and duration_given and args.warmup >= args.duration:
        raise ConfigError(
            f"--warmup {args.warmup:g} must be shorter than --duration {args.duration:g}"
        )
    warmup = args.warmup if args.warmup is not None else args.duration / 10
    config = BenchConfig(
        workload=workload,
        levels=levels,
        sweep=sweep,
        concurrency_sweep=concs is not None,
        arrival=args.arrival,
        duration_s=args.duration,
        warmup_s=warmup,
        max_sessions=args.sessions,
        seed=args.seed,
        repeats=args.repeats,
        slos=tuple(parse_slo(s) for s in args.slo),
        model=args.model,
        max_in_flight=args.max_in_flight,
    )
    from agentflow.bench._trace_cli import apply_trace_arguments, write_recording

    config, recorder = apply_trace_arguments(args, config)
    target: Any
    if args.base_url:
        key = os.environ.get(args.api_key_env) if args.api_key_env else None
        target = HTTPTarget(base_url=args.base_url, model=args.model, api_key=key)
    else:
        from agentflow.sim.profiles import get_profile

        profile = args.profile or DEFAULT_PROFILE
        get_profile(profile)  # an UnknownProfileError names it
        target = SimTarget(profile=profile)
    # A table of a dozen figures per level: wide, also when printed to a pipe or a file.
    from agentflow._cli_console import CliConsole

    # Asked to write files, it writes them even if the reader of its lines goes away
    # (`agentflow bench --report r.json | head -1`): it then exits 141 (CliConsole).
    files = (args.report, args.record, args.html)
    # No markup: what it prints holds the user's strings — a workload's name, file paths, a
    # URL — and its own "[over-saturated]", which rich would take for tags (and drop, or
    # fail on: "team/[/review]" is a closing tag that matches nothing).
    console = CliConsole(
        width=None if sys.stdout.isatty() else 200,
        finish=any(f is not None for f in files),
        markup=False,
    )
    title = workload.name if config.workload is not None else f"trace {args.trace}"
    console.print(f"agentflow bench: {title} on {target.label}")

    measured: list[dict[str, Any]] = []  # each level's entry as soon as it is measured

    def show(entry: dict[str, Any]) -> None:
        measured.append(entry)
        s = entry
        console.print(
            f"  {s['load']['label']}: {shown_number(s['output_tps'])} out tok/s, "
            f"TTFT p50 {shown_seconds(s['ttft_s']['p50'])}"
            + ("  [over-saturated]" if s["saturation"]["saturated"] else "")
            + ("  [interrupted]" if s.get("interrupted") else "")
        )
        for line in s.get("failures") or ():  # why sessions failed: the commonest errors
            # a server's words: no control characters, no markup
            console.print(f"    {printable(line)}", markup=False, highlight=False)

    try:
        # SIGTERM cancels the run as Ctrl-C does (run_command, agentflow/_cli_signals.py):
        # it unwinds in order, then Terminated, a KeyboardInterrupt, comes out of run_bench.
        report = run_bench(config, target, on_level=show)
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM): keep what was measured — the levels that finished, the
        # one interrupted (its window so far) and the sessions that ended — then stop
        # as interrupted (130 / 143).
        console.print("interrupted: writing what was measured")
        if recorder is not None:
            n = write_recording(recorder, args.record)
            console.print(f"{n} requests recorded to {args.record}")
        if measured and args.report is not None:
            write_bench_report(partial_report(config, target, measured, "interrupted"), args.report)
            n = len(measured)
            last = "" if n == 1 else "the last one "
            cut = f" ({last}interrupted)" if measured[-1].get("interrupted") else ""
            console.print(f"report of {n} level{'s' * (n != 1)}{cut} written to {args.report}")
        elif args.report is not None:  # before a level began: no figure to report
            console.print(f"no level was measured: no report written to {args.report}")
        raise
    from agentflow._cli_signals import Terminated
    from agentflow.demo._stop import Stopper

    # The run is over: a Ctrl-C or SIGTERM now waits until the files are written (as
    # `agentflow demo`'s after its run; a second one exits at once), then exits 130 / 143.
    stopper = Stopper()
    with stopper.guarding():
        stopper.defer()
        console.print(bench_table(report))
        # Cheapest and most irreplaceable first: a failure in a later step loses nothing.
        if recorder is not None:
            n = write_recording(recorder, args.record)
            console.print(f"{n} requests recorded to {args.record}")
        if args.report is not None:
            write_bench_report(report, args.report)
            console.print(f"report written to {args.report}")
        if args.html is not None:
            figures = bench_html(report, args.html)
            console.print(f"{figures} figures written to {args.html}")
    if stopper.signal is not None:
        raise Terminated if stopper.signal == signal.SIGTERM else KeyboardInterrupt
    from agentflow.bench._level_entry import level_failed

    return 1 if any(level_failed(lvl) for lvl in report["levels"]) else 0


def _check_no_overwrite(args: argparse.Namespace) -> None:
    """Raise :class:`ConfigError` if an output would overwrite the replayed trace, the
    workload file or another output (``--trace t.jsonl --record t.jsonl``,
    ``--workload w.json --report w.json``, ``--report x --html x``): each would replace
    what was measured, or what it was measured from; nothing runs until this passes."""
    from agentflow.bench._trace_format import SHIPPED_TRACES, shipped_trace
    from agentflow.bench._workloads import WORKLOADS

    outputs = [
        (flag, path)
        for flag, path in (
            ("--report", args.report),
            ("--html", args.html),
            ("--record", args.record),
        )
        if path is not None
    ]
    inputs: list[tuple[str, Path]] = []
    if args.trace is not None:
        trace = args.trace
        if str(trace) in SHIPPED_TRACES and not trace.exists():
            trace = shipped_trace(str(trace))
        inputs.append((f"the trace {args.trace}", trace))
    if args.workload is not None and args.workload not in WORKLOADS:
        inputs.append((f"the workload {args.workload}", Path(args.workload)))
    check_no_overwrite(outputs, inputs)
