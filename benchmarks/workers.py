"""``Fleet(workers=2)`` against one process: the client's CPU per streamed chunk.

What is measured: the CPU time of the whole *client* — this process (``RUSAGE_SELF``: the
parent's loop, its pipe readers and the user's callbacks) plus its worker processes
(``RUSAGE_CHILDREN``, read after the run has joined them) — while a fleet streams
``--sessions`` one-turn sessions of ``--tokens`` output tokens each (one token per chunk)
from the simulator (``python -m agentflow.sim``) in a child process, which is not reaped
until every run is over, so its CPU is never counted. Per run: client CPU, the parent's
share, chunks (output tokens), wall time and, with workers, the limits' lease messages.

Rows: one process, and two workers; each with no callback and with a callback that counts
content tokens (which makes the workers forward every token event to the parent). A third
row runs one one-token session per worker (:func:`start_stop`): what starting (spawn,
``import agentflow``) and stopping the workers costs, which a short run pays whole. (Not an
empty run: a run starts no more workers than it has sessions, so an empty one starts none
and would measure nothing; the script exits if that row's workers used no CPU.)

How: repetitions interleave the rows; the table shows each row's median. CPU per chunk is
total client CPU ÷ chunks; the "without start + stop" column subtracts the start + stop
run's CPU and its few chunks (:func:`steady_per_chunk`). Only ratios within one run mean
anything; the machine's load is printed with them.

Usage::

    python benchmarks/workers.py            # full run; rewrites its docs/benchmarks.md section
    python benchmarks/workers.py --quick    # smoke run; writes nothing
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import _common

from agentflow import Agent, Event, Fleet, HTTPTransport
from agentflow._process import ChildServer, free_port

NAME = "workers"


@dataclass(frozen=True, slots=True)
class Run:
    """One run's measurements."""

    cpu_s: float
    parent_cpu_s: float
    chunks: int
    wall_s: float
    lease_messages: int


class CountTokens:
    """Counts content deltas (the callback that makes workers forward tokens)."""

    event_types = frozenset({"token"})

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, event: Event) -> None:
        if event.type == "token":
            self.n += 1


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


async def one_run(url: str, sessions: int, tokens: int, workers: int | None, count: bool) -> Run:
    agent = Agent(name="bench", model="m", params={"max_tokens": tokens})
    todo = [agent.session(f"q{i}", session_id=f"s{i}") for i in range(sessions)]
    callbacks = [CountTokens()] if count else []
    self0, kids0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    async with HTTPTransport(url) as http:
        fleet = Fleet(http, max_concurrency=64, workers=workers, callbacks=callbacks)
        result = await fleet.run(todo)
    wall = time.perf_counter() - t0
    parent = _cpu(resource.RUSAGE_SELF) - self0
    kids = _cpu(resource.RUSAGE_CHILDREN) - kids0
    assert not result.failed, [s.error for s in result.failed][:2]
    return Run(parent + kids, parent, result.output_tokens, wall, fleet._lease_messages)


def start_stop(workers: int) -> tuple[str, int, int]:
    """The run that measures starting and stopping ``workers`` workers: its row name, its
    sessions and their output tokens — one one-token session per worker. Not zero
    sessions: a run starts no more workers than it has sessions (none for an empty one)."""
    return f"{workers} workers, {workers} one-token sessions (start + stop)", workers, 1


def check_start_stop(name: str, workers_cpu_s: Sequence[float]) -> None:
    """Exit unless every start + stop run's workers used CPU: a baseline whose workers
    never started is 0 s, and the steady column would silently equal the raw one."""
    if not workers_cpu_s or min(workers_cpu_s) <= 0:
        raise SystemExit(
            f"the '{name}' runs' workers used no CPU ({list(workers_cpu_s)} s): no worker "
            "started, so the baseline measures nothing; refusing to print a steady column"
        )


def steady_per_chunk(cpu_s: float, chunks: int, base_cpu_s: float, base_chunks: int) -> str:
    """µs of client CPU per chunk once the start + stop run's CPU and chunks are taken out
    ("–" for a run with no more chunks than the baseline)."""
    if chunks <= base_chunks:
        return "–"
    return f"{(cpu_s - base_cpu_s) / (chunks - base_chunks) * 1e6:.1f}"


def setup(
    description: str, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, int, int, int, list[str]]:
    """The options of the client-CPU-per-chunk benchmarks (this one and ``ray_workers.py``)
    and the simulator they run: ``(args, repetitions, sessions, port, command)``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="short smoke run; never writes docs")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument("--reps", type=int, help="repetitions (default 3; quick 1)")
    p.add_argument("--sessions", type=int, help="sessions per run (default 256; quick 32)")
    p.add_argument("--tokens", type=int, default=256, help="output tokens per session")
    args = p.parse_args(argv)
    q = args.quick
    reps = args.reps or (1 if q else 3)
    sessions = args.sessions or (32 if q else 256)
    port = free_port()
    cmd = [
        sys.executable, "-m", "agentflow.sim", "--host", "127.0.0.1", "--port", str(port),
        "--tool-rounds", "0", "--answer-tokens", f"{args.tokens}:{args.tokens}",
        "--profile-set", "max_num_seqs=256", "--profile-set", "per_agent_tps=2000", "--quiet",
    ]  # fmt: skip
    return args, reps, sessions, port, cmd


def main(argv: Sequence[str] | None = None) -> None:
    args, reps, sessions, port, cmd = setup("Client CPU per chunk: 1 process vs 2 workers.", argv)
    base_name, base_n, base_tokens = start_stop(2)
    rows = [
        ("1 process", None, False, sessions, args.tokens),
        ("1 process + token callback", None, True, sessions, args.tokens),
        ("2 workers", 2, False, sessions, args.tokens),
        ("2 workers + token callback", 2, True, sessions, args.tokens),
        (base_name, 2, False, base_n, base_tokens),
    ]
    by: dict[str, list[Run]] = {name: [] for name, *_ in rows}
    with ChildServer(cmd, port=port, name="agentflow sim", startup_timeout_s=60) as _sim:
        url = f"http://127.0.0.1:{port}/v1"
        asyncio.run(one_run(url, 8, args.tokens, None, False))  # warm-up
        for rep in range(reps):
            for name, workers, count, n, tokens in (
                rows[rep % len(rows) :] + rows[: rep % len(rows)]
            ):
                by[name].append(asyncio.run(one_run(url, n, tokens, workers, count)))
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    check_start_stop(base_name, [r.cpu_s - r.parent_cpu_s for r in by[base_name]])
    base_cpu = statistics.median(r.cpu_s for r in by[base_name])
    base_chunks = by[base_name][0].chunks
    lines = [
        "| run | chunks | client CPU (s) | parent CPU (s) | µs / chunk | µs / chunk "
        "without start + stop | wall (s) | lease messages |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, workers, *_ in rows:
        runs = by[name]
        cpu = statistics.median(r.cpu_s for r in runs)
        parent = statistics.median(r.parent_cpu_s for r in runs)
        chunks = runs[0].chunks
        per = f"{cpu / chunks * 1e6:.1f}" if name != base_name else "–"
        per_steady = steady_per_chunk(cpu, chunks, base_cpu, base_chunks) if workers else per
        wall = statistics.median(r.wall_s for r in runs)
        msgs = statistics.median(r.lease_messages for r in runs) if workers else 0
        lines.append(
            f"| {name} | {chunks:,} | {cpu:.2f} | {parent:.2f} | {per} | {per_steady} | "
            f"{wall:.2f} | {msgs:g} |"
        )
    table = "\n".join(lines)
    facts = (
        f"{_common.machine()}; load average {' '.join(load)} after the run; "
        f"{dt.date.today().isoformat()}; {reps} repetitions, medians; {sessions} sessions × "
        f"{args.tokens} tokens, max_concurrency 64"
    )
    print(f"\n{facts}\n\n{table}")
    if args.quick or args.no_write:
        return
    given = list(argv if argv is not None else sys.argv[1:])
    command = " ".join(["python benchmarks/workers.py", *given])
    start, end = _common.markers(NAME)
    text = (
        f"{start}\n## Worker processes: client CPU per chunk (`benchmarks/workers.py`)\n\n"
        f"`{command}` — {facts}. Client CPU is this process plus its workers (never the "
        "simulator's). What 2 workers add: their start (spawn, imports) and each token "
        "event crossing a pipe when a callback reads tokens; what they buy is a second "
        "core for the streams (wall time), which this 2-core machine shares with the "
        f"simulator.\n\n{table}\n{end}"
    )
    _common.write_section(NAME, text)
    print(f"\nwrote the {NAME} section of {_common.DOC.relative_to(_common.ROOT)}")


if __name__ == "__main__":
    main()
