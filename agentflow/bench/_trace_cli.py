"""The command-line side of trace replay: ``agentflow bench --trace FILE`` (and
``--trace-format``, ``--time-scale``, ``--record``), and ``agentflow trace``:

    agentflow bench --trace agentflow/bench/traces/agentic-small.jsonl --time-scale 0.5
    agentflow bench --trace mooncake.jsonl --trace-format mooncake --base-url URL --model M
    agentflow bench --rate 2 --duration 60 --record run.jsonl     # record a bench run
    agentflow trace convert mooncake.jsonl -o trace.jsonl          # Mooncake → agentflow
    agentflow trace export --store runs.db RUN_ID -o trace.jsonl   # a stored run → trace
    agentflow trace export --store runs.db RUN_ID -o - | jq .      # ... to standard output
    agentflow trace show agentflow/bench/traces/agentic-small.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from agentflow._cli_signals import run_command
from agentflow._cliargs import (
    check_no_overwrite,
    check_output_file,
    check_store_file,
    positive,
    store_inputs,
)
from agentflow._errors import ConfigError

__all__ = ["add_trace_arguments", "add_trace_parser", "apply_trace_arguments"]


def add_trace_arguments(p: argparse.ArgumentParser) -> None:
    """``agentflow bench``'s trace flags."""
    from agentflow.bench._trace_format import TRACE_FORMATS

    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="replay this trace (docs/traces.md; a file, or a shipped trace's name: "
        "agentic-small) instead of a workload: one level, its recorded arrivals and gaps "
        "(--duration is then unbounded unless given)",
    )
    p.add_argument(
        "--trace-format", choices=TRACE_FORMATS, default="agentflow", help="the trace's format"
    )
    p.add_argument(
        "--time-scale",
        type=positive,
        default=None,
        help="multiply the --trace's times by this (0.5: twice as fast; default 1)",
    )
    p.add_argument(
        "--record", type=Path, default=None, help="write the run's requests here as a trace"
    )
    # Tell a --duration given from its default (a replay runs to its end by default).
    default = p.get_default("duration")
    if isinstance(default, float):
        p.set_defaults(duration=_DefaultFloat(default))


class _DefaultFloat(float):
    """A flag's default value, told apart from the same value given."""


def apply_trace_arguments(args: argparse.Namespace, config: Any) -> tuple[Any, Any]:
    """``config`` with the trace replay (``--trace``) and the recorder (``--record``)
    applied; and the recorder (``None`` without ``--record``).

    A replay is one level, ``Load(scale=1)``: the trace's sessions at their recorded
    arrivals, arrivals and gaps already multiplied by ``--time-scale``; it runs until
    every session ended unless ``--duration`` was given.
    """
    from agentflow.bench._load import Load
    from agentflow.bench._record import TraceRecorder
    from agentflow.bench._trace import trace_scripts
    from agentflow.bench._trace_format import load_trace

    if args.trace is None and args.time_scale is not None:
        raise ConfigError(
            "--time-scale scales a replayed trace's times: give --trace, or drop it "
            "(a workload's load is --rate or --concurrency)"
        )
    time_scale = 1.0 if args.time_scale is None else args.time_scale
    recorder = None
    if args.record is not None:
        check_output_file(args.record, "--record")
        recorder = TraceRecorder()
        config = dataclasses.replace(config, callbacks=(*config.callbacks, recorder))
    if args.trace is None:
        return config, recorder
    if args.rate or args.concurrency or args.sweep:
        raise ConfigError(
            "--trace replays the trace's own arrivals as one level: drop --rate, "
            "--concurrency and --sweep (--time-scale speeds it up or slows it down)"
        )
    duration_given = not isinstance(getattr(args, "duration", None), _DefaultFloat)
    if getattr(args, "warmup", None) is not None and not duration_given:
        raise ConfigError(
            "--warmup with --trace needs --duration: without it the replay runs to its end "
            "and every request counts"
        )
    records = load_trace(args.trace, format=args.trace_format)
    scripts = trace_scripts(records, time_scale=time_scale)
    # ignore_eos: the trace's output lengths, exactly.
    params = dict(config.params) if args.no_ignore_eos else {**config.params, "ignore_eos": True}
    duration = config.duration_s if duration_given else None
    config = dataclasses.replace(
        config,
        workload=None,
        scripts=tuple(scripts),
        levels=(Load(scale=1.0),),
        sweep=None,
        concurrency_sweep=False,
        duration_s=duration,
        warmup_s=config.warmup_s if duration is not None else 0.0,
        params=params,
        source={
            "trace": str(args.trace),
            "format": args.trace_format,
            "time_scale": time_scale,
            "sessions": len(scripts),
            "requests": len(records),
        },
    )
    return config, recorder


def write_recording(recorder: Any, path: Path) -> int:
    """Write ``--record``'s trace; the number of requests written."""
    from agentflow.bench._trace_format import write_trace

    path.parent.mkdir(parents=True, exist_ok=True)
    return write_trace(recorder.records(), path)


def add_trace_parser(sub: Any) -> None:
    """Add ``agentflow trace`` (convert, export, show) to the command's subparsers."""
    from agentflow.bench._trace_format import TRACE_FORMATS

    p = sub.add_parser(
        "trace", help="agentflow traces: convert Mooncake's, export a stored run, show one"
    )
    cmds = p.add_subparsers(dest="trace_cmd", required=True)
    conv = cmds.add_parser(
        "convert", help="a Mooncake (or AIPerf mooncake_trace) JSONL → agentflow"
    )
    conv.add_argument("input", type=Path, help="the trace to convert (e.g. a Mooncake JSONL)")
    conv.add_argument(
        "-o", "--output", type=Path, required=True, help=f"where to write the trace {_DASH}"
    )
    conv.add_argument(
        "--format", choices=TRACE_FORMATS, default="mooncake", help="the input's format"
    )
    conv.set_defaults(func=_convert)
    exp = cmds.add_parser("export", help="a run in the durable store → an agentflow trace")
    exp.add_argument("--store", type=Path, required=True, help="the SQLite store file")
    exp.add_argument("run_id", help="the id of the run to export")
    exp.add_argument("-o", "--output", type=Path, required=True, help=f"where to write it {_DASH}")
    exp.add_argument("--lengths-only", action="store_true", help="record no text, only lengths")
    exp.set_defaults(func=_export)
    show = cmds.add_parser("show", help="check a trace and print its sessions and turns")
    show.add_argument("input", type=Path, help="a trace file, or a shipped trace's name")
    show.add_argument(
        "--format", choices=TRACE_FORMATS, default="agentflow", help="the trace's format"
    )
    show.add_argument(
        "--time-scale",
        type=positive,
        default=1.0,
        help="times are multiplied by this (0.5: twice as fast; default 1)",
    )
    show.set_defaults(func=_show)


_DASH = "('-': standard output)"


def _output(args: argparse.Namespace, inputs: list[tuple[str, Path]]) -> Path | None:
    """``--output`` checked, or ``None`` for ``-``: standard output (it was a file named
    ``-``)."""
    if str(args.output) == "-":
        return None
    check_no_overwrite([("--output", args.output)], inputs)
    check_output_file(args.output, "--output")
    return Path(args.output)


def _written(n: int, out: Path | None) -> int:
    if out is None:  # the trace is on standard output: the count is not
        print(f"{n} requests written to standard output", file=sys.stderr)
    else:
        print(f"{n} requests written to {out}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from agentflow.bench._trace_format import load_trace, write_trace

    out = _output(args, [(f"the input {args.input}", args.input)])
    n = write_trace(load_trace(args.input, format=args.format), out or sys.stdout)
    return _written(n, out)


def _export(args: argparse.Namespace) -> int:
    from agentflow.bench._record import record_store
    from agentflow.bench._trace_format import write_trace
    from agentflow.store import SQLiteStore

    check_store_file(args.store, "trace export")
    out = _output(args, store_inputs(args.store))

    async def main() -> int:
        store = SQLiteStore(args.store, journal=False)  # reads only: no journal
        try:
            records = await record_store(store, args.run_id, with_text=not args.lengths_only)
        finally:
            await store.aclose()
        return write_trace(records, out or sys.stdout)

    return _written(run_command(main()), out)


def _show(args: argparse.Namespace) -> int:
    from agentflow.bench._trace import trace_scripts
    from agentflow.bench._trace_format import load_trace

    scripts = trace_scripts(load_trace(args.input, format=args.format), time_scale=args.time_scale)
    out = sys.stdout
    for s in scripts:
        turns = ", ".join(
            f"{'text' if t.text is not None else f'{t.tokens} tok'}→{t.max_tokens}"
            + (f" after {t.tool_s + t.think_s:.3g}s" if k else "")
            for k, t in enumerate(s.turns)
        )
        system = s.system_text()
        prefix = f", prefix ~{len(system.split())} tok" if system else ""
        out.write(f"{s.session_id} @ {s.arrival_s:.3f}s [{s.agent}{prefix}]: {turns}\n")
    out.write(f"{len(scripts)} sessions, {sum(len(s.turns) for s in scripts)} requests\n")
    return 0
