"""`agentflow demo` as users run it, with and without `--store`: the CLI process's own CPU.

`benchmarks/store_overhead.py` measures the store against the demo's fleet alone, built
in-process (no imports, no loop-lag probe, no `/metrics` watcher, no report): the strict
denominator. This one runs the command a user types, `agentflow demo --no-live` and
`agentflow demo --no-live --store PATH`, each in a child process, in pairs, and reads the
CLI process's own CPU when it exits (`getrusage(RUSAGE_SELF)`: every thread of it, never
the simulator child it starts): imports, the run, the report — with `--store`, opening
the store, recording the run and reading it back for the report.

    python benchmarks/store_demo_cli.py            # 6 pairs; writes docs/benchmarks.md
    python benchmarks/store_demo_cli.py --quick    # 1 pair of 8 agents; writes nothing
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import _common

NAME = "store_demo_cli"
START, END = _common.markers(NAME)

#: Runs the CLI in this process and writes its own CPU seconds (user + system, all its
#: threads, not its children) to the file ``$AF_CPU_OUT`` as it exits.
WRAPPER = """
import atexit, os, resource, sys
def _out():
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["AF_CPU_OUT"], "w") as f:
        f.write(repr(r.ru_utime + r.ru_stime))
atexit.register(_out)
sys.argv = ["agentflow", *sys.argv[1:]]
from agentflow.cli import main
raise SystemExit(main())
"""


@dataclass(frozen=True)
class Run:
    cpu_s: float
    wall_s: float


def one_run(args: Sequence[str], tmp: Path, store: Path | None) -> Run:
    """One `agentflow demo` in a child process; its own CPU and its wall time."""
    out = tmp / "cpu.txt"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-c", WRAPPER, "demo", "--no-live", *args]
    if store is not None:
        cmd += ["--store", str(store)]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, env=dict(os.environ, AF_CPU_OUT=str(out)), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, timeout=600, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"agentflow demo exited {proc.returncode}: {proc.stderr[-2000:]}")
    return Run(float(out.read_text()), wall)


def run(args: Sequence[str], reps: int) -> list[tuple[Run, Run]]:
    """``reps`` pairs (without, with the store), the order alternating pair by pair, after
    an untimed run that warms the page cache (imports)."""
    pairs = []
    with tempfile.TemporaryDirectory(prefix="agentflow-demo-cli-") as d:
        tmp = Path(d)
        one_run(args, tmp, None)
        for rep in range(reps):
            store = tmp / f"rep{rep}.db"
            if rep % 2 == 0:
                without, with_ = one_run(args, tmp, None), one_run(args, tmp, store)
            else:
                with_, without = one_run(args, tmp, store), one_run(args, tmp, None)
            pairs.append((without, with_))
            print(
                f"pair {rep + 1}/{reps}: without {without.cpu_s:.3f} s CPU, with the store "
                f"{with_.cpu_s:.3f} s ({with_.cpu_s / without.cpu_s - 1:+.1%})",
                flush=True,
            )
    return pairs


def table(pairs: list[tuple[Run, Run]]) -> str:
    without = [a.cpu_s for a, _ in pairs]
    with_ = [b.cpu_s for _, b in pairs]
    ratios = [b.cpu_s / a.cpu_s - 1 for a, b in pairs]
    extra = [b.cpu_s - a.cpu_s for a, b in pairs]
    wall = [r.wall_s for pair in pairs for r in pair]
    med = statistics.median
    return (
        "| `agentflow demo --no-live` | CPU s, median | min–max |\n|---|--:|--:|\n"
        f"| without `--store` | {med(without):.3f} | {min(without):.3f}–{max(without):.3f} |\n"
        f"| with `--store PATH` | {med(with_):.3f} | {min(with_):.3f}–{max(with_):.3f} |\n\n"
        "| paired per repetition | median | min–max |\n|---|--:|--:|\n"
        f"| extra CPU with the store, s | {med(extra):.3f} | {min(extra):.3f}–{max(extra):.3f} |\n"
        f"| extra CPU with the store ÷ without | **{med(ratios):+.1%}** | "
        f"{min(ratios):+.1%} to {max(ratios):+.1%} |\n\n"
        f"Wall time per run: median {med(wall):.1f} s."
    )


def section(pairs: list[tuple[Run, Run]], command: str) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""{START}
## `agentflow demo` with and without `--store` (`benchmarks/store_demo_cli.py`)

Measured {now} on {_common.machine()}.
Command: `{command}`; {len(pairs)} pairs, the order alternating; medians.

{table(pairs)}

**Method.** Each run is the command a user types, `agentflow demo --no-live` (the
simulator in a child process, the demo's loop-lag probe and `/metrics` watcher, the
summary and report at the end), with `--store PATH` on a fresh file for the other run of a
pair. The CPU is the CLI process's own (`getrusage(RUSAGE_SELF)` as it exits: every thread
of it, the store's writer included; never the simulator child), so it counts the imports,
the run and the report — with `--store`, opening the store, recording every turn, and
reading the run back for the report. Not pinned to CPUs (the simulator is the CLI's child).
`benchmarks/store_overhead.py` measures the store against the demo's fleet alone, a
smaller denominator, and counts the store's own CPU directly; this is the whole command's
difference, noisier (a run's CPU varies by several percent from one run to the next here).
{END}"""


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="agentflow demo's CPU with and without --store.")
    p.add_argument("--quick", action="store_true", help="1 pair of 8 agents; never writes docs")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument("--reps", type=int, help="pairs (default 6; quick 1)")
    args = p.parse_args(argv)
    demo_args = ["--agents", "8", "--turns", "3"] if args.quick else []
    pairs = run(demo_args, args.reps or (1 if args.quick else 6))
    print(f"\n{_common.machine()}\n\n{table(pairs)}")
    if args.quick or args.no_write:
        return
    given = list(argv if argv is not None else sys.argv[1:])
    command = " ".join(["python benchmarks/store_demo_cli.py", *given])
    _common.write_section(NAME, section(pairs, command))
    print(f"\nwrote the {NAME} section of {_common.DOC.relative_to(_common.ROOT)}")


if __name__ == "__main__":
    main()
