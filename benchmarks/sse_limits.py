"""SSE parsing of one huge event: CPU and the longest single read, before and after #12.

What is measured: the CPU time (``time.process_time_ns``) ``SSEDecoder.feed`` spends on
one event of 1, 4, 16 and 32 MiB that arrives in 64 KiB reads (a ``data: `` line with no
end, then its blank line), and the longest single ``feed`` call on the wall clock —
how long that read holds the event loop, and with it every other stream's timestamps.
With the event-size limit raised to 64 MiB the event is parsed to its end; with the
default limit (4 MiB) the same 32 MiB stream is refused, and the row shows what that
costs. ``--baseline FILE`` also measures another ``_sse.py`` (e.g. the decoder from
before #12, from a checkout of an older commit) on the same input, side by side.

Usage::

    python benchmarks/sse_limits.py                    # rewrites its section of docs/benchmarks.md
    python benchmarks/sse_limits.py --baseline OLD/agentflow/transport/_sse.py
    python benchmarks/sse_limits.py --quick            # smoke run; writes nothing

Only the block between ``<!-- sse_limits:start -->`` and ``<!-- sse_limits:end -->``
in ``docs/benchmarks.md`` is replaced. ``--quick`` never writes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common

from agentflow import StreamProtocolError
from agentflow.transport import SSEDecoder

NAME = "sse_limits"
START, END = _common.markers(NAME)
MiB = 2**20
READ = 64 * 1024

Decoder = Callable[[], Any]


@dataclass(frozen=True)
class Row:
    """One measurement: CPU seconds, longest feed (ms), bytes fed, and how it ended."""

    cpu_s: float
    worst_ms: float
    fed: int
    outcome: str


def measure(make: Decoder, size: int) -> Row:
    """Feed a ``size``-byte event in 64 KiB reads, then its end; time it."""
    dec = make()
    block = b"x" * READ
    reads = [b"data: " + block[6:]] + [block] * (size // READ - 1) + [b"\n\n"]
    worst = 0.0
    fed = 0
    outcome = "parsed"
    cpu0 = time.process_time_ns()
    try:
        for r in reads:
            t = time.perf_counter()
            out = dec.feed(r)
            worst = max(worst, time.perf_counter() - t)
            fed += len(r)
        if [len(x) for x in out] != [size - 6]:
            raise SystemExit(f"the {size}-byte event came out wrong: {[len(x) for x in out]}")
    except StreamProtocolError:
        outcome = "refused"
    cpu = (time.process_time_ns() - cpu0) / 1e9
    return Row(cpu, worst * 1e3, fed, outcome)


def load_baseline(path: Path) -> Decoder:
    """The ``SSEDecoder`` class of another ``_sse.py``, loaded under a private name."""
    spec = importlib.util.spec_from_file_location("_baseline_sse", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cls: Decoder = mod.SSEDecoder
    return cls


def run(sizes: Sequence[int], reps: int, baseline: Decoder | None) -> dict[str, list[Row]]:
    """Every (decoder, size) ``reps`` times, interleaved; keyed ``"decoder|size"``."""
    makers: dict[str, Decoder] = {
        "now, limit 64 MiB": lambda: SSEDecoder(max_event_bytes=64 * MiB),
        "now, default limit (4 MiB)": SSEDecoder,
    }
    if baseline is not None:
        makers["baseline"] = baseline
    res: dict[str, list[Row]] = {}
    for _ in range(reps):
        for name, make in makers.items():
            for size in sizes:
                if name.startswith("now, default") and size != max(sizes):
                    continue
                res.setdefault(f"{name}|{size}", []).append(measure(make, size))
    return res


def table(res: dict[str, list[Row]]) -> str:
    """Medians: CPU, CPU per MiB fed, longest feed."""
    lines = [
        "| decoder | event | CPU | CPU per MiB fed | longest feed | outcome |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for key, rows in res.items():
        name, size = key.split("|")
        cpu = statistics.median(r.cpu_s for r in rows)
        fed = statistics.median(r.fed for r in rows) / MiB
        worst = statistics.median(r.worst_ms for r in rows)
        outcome = rows[0].outcome
        if outcome == "refused":
            outcome += f" after {fed:.1f} MiB"
        lines.append(
            f"| {name} | {int(size) // MiB} MiB | {cpu * 1e3:,.1f} ms | "
            f"{cpu * 1e3 / fed:,.2f} ms | {worst:,.2f} ms | {outcome} |"
        )
    return "\n".join(lines)


def section(res: dict[str, list[Row]], reps: int, command: str, baseline: str | None) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    base = f" The baseline (`OLD`) is {baseline}." if baseline else ""
    return f"""{START}
## SSE parsing of one huge event (`benchmarks/sse_limits.py`)

Measured {now} on {_common.machine()}.
Command: `{command}`; {reps} runs each, interleaved; medians.{base}

{table(res)}

**Method.** One SSE event (`data: ` then `x` bytes) of each size arrives in 64 KiB reads,
then its blank line; `SSEDecoder.feed` takes each read. CPU is this process's
(`time.process_time_ns`) over all the reads; "longest feed" is the longest single call
on the wall clock — how long one read holds the event loop (and every other stream's
stamps): for a parsed event it is the last read, which joins the held reads once. A
decoder that re-joins and re-scans what it holds on every read costs CPU growing with the
square of the event's size; a linear one, the same per MiB at every size. The default
limit refuses the 32 MiB event once 4 MiB are held (`StreamProtocolError`).
{END}"""


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smoke run; writes nothing")
    p.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--baseline", type=Path, default=None, help="another _sse.py to measure")
    p.add_argument(
        "--baseline-label",
        default="an older agentflow/transport/_sse.py",
        help="how the document names the baseline (e.g. the commit it came from)",
    )
    args = p.parse_args(argv)
    sizes = [1 * MiB, 4 * MiB] if args.quick else [1 * MiB, 4 * MiB, 16 * MiB, 32 * MiB]
    reps = args.reps or (1 if args.quick else 3)
    baseline = load_baseline(args.baseline) if args.baseline else None
    res = run(sizes, reps, baseline)
    print(table(res))
    if not args.quick and not args.no_write:
        command = "python benchmarks/sse_limits.py"
        if args.reps:
            command += f" --reps {args.reps}"
        if args.baseline:
            command += " --baseline OLD/agentflow/transport/_sse.py"
        shown = args.baseline_label if args.baseline else None
        _common.write_section(NAME, section(res, reps, command, shown))
        print(f"wrote the {NAME} section of docs/benchmarks.md", file=sys.stderr)


if __name__ == "__main__":
    main()
