"""``Fleet(workers=2, backend="ray")`` against worker processes and one process: the
client's CPU per streamed chunk and wall time, on a local Ray (``ray.init(num_cpus=2)``).

What is measured, per run of ``--sessions`` one-turn sessions of ``--tokens`` output
tokens each (one token per chunk) from the simulator (``python -m agentflow.sim``, a child
process whose CPU is never counted), each with a callback that counts content tokens (so
every token event crosses from the workers to the driver — the channel's whole load):

- **driver CPU**: this process (``RUSAGE_SELF``: the loop, the broker, the merge, the
  callbacks, and Ray's core-worker threads in it for the Ray rows);
- **workers' CPU**: worker processes (``RUSAGE_CHILDREN``, read after the run joined
  them), or the Ray actors' processes (``ray::RayWorker`` in ``/proc``, read at the run's
  ``fleet_end``, before the actors are killed — so it includes each actor process's
  start, as the processes' includes spawn and imports);
- **Ray daemons' CPU**: ``raylet`` and ``gcs_server`` over the run (``/proc``), which the
  client pays too on a local Ray.

A start + stop row per backend — one one-token session per worker
(:func:`workers.start_stop`; an empty run would start no worker and measure nothing, so the
script exits if that row's workers used no CPU) — is what starting and stopping the
workers costs; "µs / chunk steady" subtracts its CPU and its few chunks. Repetitions
interleave the rows; the table shows medians. Only ratios within one run mean anything;
the machine's load is printed with them.

Usage::

    python benchmarks/ray_workers.py            # full run; rewrites its docs/benchmarks.md section
    python benchmarks/ray_workers.py --quick    # smoke run; writes nothing
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import _common
from workers import check_start_stop, setup, start_stop, steady_per_chunk

from agentflow import Agent, Event, Fleet, HTTPTransport
from agentflow._process import ChildServer

NAME = "ray-workers"
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Run:
    """One run's measurements."""

    driver_cpu_s: float
    workers_cpu_s: float
    daemons_cpu_s: float
    chunks: int
    wall_s: float
    lease_messages: int

    @property
    def cpu_s(self) -> float:
        return self.driver_cpu_s + self.workers_cpu_s + self.daemons_cpu_s


class CountTokens:
    """Counts content deltas; at ``fleet_end`` (the actors still alive) reads their CPU."""

    event_types = frozenset({"token", "fleet_end"})

    def __init__(self) -> None:
        self.n = 0
        self.actors_cpu_s = 0.0

    def __call__(self, event: Event) -> None:
        if event.type == "token":
            self.n += 1
        elif event.type == "fleet_end":
            self.actors_cpu_s = sum(_proc_cpu(p) for p in _pids("ray::RayWorker"))


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _pids(prefix: str) -> list[int]:
    """Processes whose command line (or process title) starts with ``prefix``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if cmd.startswith(prefix) or os.path.basename(cmd.split(" ", 1)[0]) == prefix:
                out.append(int(entry))
    return out


def _proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def _daemons_cpu() -> float:
    return sum(_proc_cpu(p) for name in ("raylet", "gcs_server") for p in _pids(name))


async def one_run(url: str, sessions: int, tokens: int, workers: int | None, backend: str) -> Run:
    agent = Agent(name="bench", model="m", params={"max_tokens": tokens})
    todo = [agent.session(f"q{i}", session_id=f"s{i}") for i in range(sessions)]
    count = CountTokens()
    self0, kids0, daemons0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), 0.0
    if backend == "ray":
        daemons0 = _daemons_cpu()
    t0 = time.perf_counter()
    async with HTTPTransport(url) as http:
        fleet = Fleet(
            http,
            max_concurrency=64,
            workers=workers,
            backend=backend,  # type: ignore[arg-type]
            callbacks=[count],
        )
        result = await fleet.run(todo)
    wall = time.perf_counter() - t0
    driver = _cpu(resource.RUSAGE_SELF) - self0
    if backend == "ray":
        workers_cpu, daemons = count.actors_cpu_s, _daemons_cpu() - daemons0
    else:
        workers_cpu, daemons = _cpu(resource.RUSAGE_CHILDREN) - kids0, 0.0
    assert not result.failed, [s.error for s in result.failed][:2]
    return Run(driver, workers_cpu, daemons, result.output_tokens, wall, fleet._lease_messages)


def main(argv: Sequence[str] | None = None) -> None:
    import ray

    args, reps, sessions, port, cmd = setup("Client CPU per chunk: Ray actors vs processes.", argv)
    _, base_n, base_tokens = start_stop(2)
    one = f"{base_n} one-token sessions (start + stop)"
    tokens = args.tokens
    rows = [
        ("1 process", None, "processes", sessions, tokens),
        ("2 worker processes", 2, "processes", sessions, tokens),
        ("2 Ray actors", 2, "ray", sessions, tokens),
        (f"2 worker processes, {one}", 2, "processes", base_n, base_tokens),
        (f"2 Ray actors, {one}", 2, "ray", base_n, base_tokens),
    ]
    empty = {"processes": rows[3][0], "ray": rows[4][0]}
    by: dict[str, list[Run]] = {name: [] for name, *_ in rows}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        with ChildServer(cmd, port=port, name="agentflow sim", startup_timeout_s=60) as _sim:
            url = f"http://127.0.0.1:{port}/v1"
            asyncio.run(one_run(url, 8, args.tokens, None, "processes"))  # warm-up
            asyncio.run(one_run(url, 8, args.tokens, 2, "ray"))  # warm-up: Ray's worker pool
            for rep in range(reps):
                for name, workers, backend, n, k in (
                    rows[rep % len(rows) :] + rows[: rep % len(rows)]
                ):
                    by[name].append(asyncio.run(one_run(url, n, k, workers, backend)))
    finally:
        ray.shutdown()
    load = Path("/proc/loadavg").read_text().split()[:3]
    for base_name in empty.values():
        check_start_stop(base_name, [r.workers_cpu_s for r in by[base_name]])
    lines = [
        "| run | chunks | client CPU (s) | driver | workers | Ray daemons | µs / chunk | "
        "µs / chunk steady | wall (s) | lease messages |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, workers, backend, *_ in rows:
        runs = by[name]
        cpu = statistics.median(r.cpu_s for r in runs)
        chunks = runs[0].chunks
        per = f"{cpu / chunks * 1e6:.1f}" if name not in empty.values() else "–"
        if workers:
            base = by[empty[backend]]
            base_cpu = statistics.median(r.cpu_s for r in base)
            steady = steady_per_chunk(cpu, chunks, base_cpu, base[0].chunks)
        else:
            steady = per
        med = {
            k: statistics.median(getattr(r, k) for r in runs)
            for k in ("driver_cpu_s", "workers_cpu_s", "daemons_cpu_s", "wall_s", "lease_messages")
        }
        lines.append(
            f"| {name} | {chunks:,} | {cpu:.2f} | {med['driver_cpu_s']:.2f} | "
            f"{med['workers_cpu_s']:.2f} | {med['daemons_cpu_s']:.2f} | {per} | {steady} | "
            f"{med['wall_s']:.2f} | {med['lease_messages']:g} |"
        )
    table = "\n".join(lines)
    facts = (
        f"{_common.machine(('agentflow', 'ray'))}; load average {' '.join(load)} after the run; "
        f"{dt.date.today().isoformat()}; {reps} repetitions, medians; {sessions} sessions × "
        f"{args.tokens} tokens, max_concurrency 64, a token-counting callback in the driver"
    )
    print(f"\n{facts}\n\n{table}")
    if args.quick or args.no_write:
        return
    given = list(argv if argv is not None else sys.argv[1:])
    command = " ".join(["python benchmarks/ray_workers.py", *given])
    start, end = _common.markers(NAME)
    text = (
        f"{start}\n## Ray actors: client CPU per chunk (`benchmarks/ray_workers.py`)\n\n"
        f"`{command}` — {facts}. Client CPU is the driver, its workers (processes or Ray "
        "actors) and, for Ray, the local Ray daemons (`raylet`, `gcs_server`) over the run; "
        "never the simulator's. Every token event crosses to the driver (the callback reads "
        "tokens): over a pipe for processes, in the actors' answers to the driver's polls for "
        f"Ray.\n\n{table}\n{end}"
    )
    _common.write_section(NAME, text)
    print(f"\nwrote the {NAME} section of {_common.DOC.relative_to(_common.ROOT)}")


if __name__ == "__main__":
    main()
