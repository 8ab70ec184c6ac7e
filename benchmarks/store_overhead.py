"""The run store's cost: client CPU of the demo workload with and without ``SQLiteStore``.

What is measured: the CPU time of the *client* process — ``time.process_time_ns``, user +
system of every thread of this process, so the store's writer thread is included —
while it runs ``agentflow demo``'s workload (64 coding agents, 5–20 tool-calling turns
each, real Python tools, the demo's ``LiveView`` as the fleet's callback, not drawing)
over HTTP against the simulator in a child process, once as the demo runs it and once
with ``Fleet(store=SQLiteStore(path))`` recording every session start, finished turn,
tool result and session end. Per run: the client's CPU, the event-loop thread's CPU
(``time.thread_time_ns`` on the main thread), the writer thread's CPU
(``time.thread_time_ns`` read by the writer itself as it exits, in a benchmark-only
subclass that also times every commit), the server's CPU (``/proc/PID/stat``), the
turns, streamed chunks, records and commits.

How: a repetition is one run without the store and one with it per batch interval
(``--intervals``, default the store's 10 ms and 50 ms), in an order that rotates from one
repetition to the next; each run gets a fresh simulator child
(same seed, so the same replies), a fresh event loop and transport, and a fresh store
file in a temporary directory. One untimed warm-up pair runs first (imports, SQLite's
first open). With two or more CPUs the client is pinned to one and the server to
another (``--no-pin`` leaves placement to the scheduler). The verdict is the median of
the per-repetition ratios of client CPU, with store ÷ without (target < 1.05), together
with the store's own CPU counted directly: the writer thread's, plus the loop thread's inside
the ``Recorder`` (its methods wrapped with two clock reads each, less the cost of a
third read right after, in this process only).

Usage::

    python benchmarks/store_overhead.py            # full run (~8 min); rewrites its
                                                   # section of docs/benchmarks.md
    python benchmarks/store_overhead.py --quick    # smoke run (< 1 min); writes nothing
    python benchmarks/store_overhead.py --no-write # full run, print only

Only the block between ``<!-- store_overhead:start -->`` and
``<!-- store_overhead:end -->`` in ``docs/benchmarks.md`` is replaced. ``--quick`` never
writes.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import io
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common
from rich.console import Console

from agentflow import Fleet
from agentflow._process import ChildServer, free_port
from agentflow.demo.workload import make_workload
from agentflow.report import LiveView
from agentflow.sim.profiles import get_profile
from agentflow.store import SQLiteStore
from agentflow.store._recorder import Recorder
from agentflow.store._records import Record
from agentflow.store._sqlite_io import Row
from agentflow.transport import Endpoint, HTTPTransport

NAME = "store_overhead"
START, END = _common.markers(NAME)
TARGET = 0.05
#: A run's store: ``SQLiteStore``'s (batch interval, journal), or ``None`` for a run
#: without a store.
Interval = tuple[float, bool] | None
#: ``SQLiteStore``'s default settings (the ones the target is judged on): the journal,
#: a commit every 5 s.
DEFAULT_INTERVAL: Interval = (5.0, True)
#: The CPUs this process may use, read before any pinning.
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


# -- the store, timed (benchmark only) ------------------------------------------------------


class TimedStore(SQLiteStore):
    """``SQLiteStore`` whose writer thread reports its own CPU time as it exits, and the
    CPU and wall time of every commit (two clock reads per commit on top of the store's
    own work)."""

    def __init__(self, path: Path, setting: tuple[float, bool]) -> None:
        super().__init__(path, batch_interval_s=setting[0], journal=setting[1])
        self.writer_cpu_ns: int | None = None
        #: (records, CPU ns, wall ns) per committed batch.
        self.batches: list[tuple[int, int, int]] = []

    def _main(self) -> None:
        try:
            super()._main()
        finally:
            self.writer_cpu_ns = time.thread_time_ns()

    def _commit(
        self, conn: sqlite3.Connection, records: list[Record | Row], mark: tuple[int, int] | None
    ) -> None:
        if not records:
            return
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        super()._commit(conn, records, mark)
        self.batches.append((len(records), time.thread_time_ns() - c0, time.perf_counter_ns() - w0))


#: CPU the event-loop thread spent inside the store's ``Recorder`` (building records and
#: queueing them; the agents' fingerprints at the run's start), summed across runs.
_RECORDER_NS = [0]
#: The probe's own cost in ``_RECORDER_NS``: one more read of the clock right after each
#: call, summed; it is subtracted from the Recorder's figure (the two reads around a call
#: cost about one read's worth inside the interval, and a cold read of the thread's CPU
#: clock is a system call of several µs here).
_PROBE_NS = [0]


def _time_recorder() -> None:
    """Wrap each of ``Recorder``'s record-building methods (benchmark only) so that the
    loop thread's CPU in them is summed into ``_RECORDER_NS``: two clock reads per call,
    and a third right after, whose cost is summed into ``_PROBE_NS``."""
    clock = time.thread_time_ns

    def timed(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                t1 = clock()
                _RECORDER_NS[0] += t1 - t0
                _PROBE_NS[0] += clock() - t1

        return wrapper

    for name in ("start_run", "end_run", "turn_finished", "tool_finished", "session_ended"):
        setattr(Recorder, name, timed(getattr(Recorder, name)))


# -- one run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    agents: int
    turns: tuple[int, int]
    profile: str
    seed: int
    time_scale: float
    max_concurrency: int
    max_tokens: int
    pin: bool


@dataclass
class Sample:
    cpu_ns: int
    loop_ns: int
    wall_ns: int
    server_ns: int | None
    other_ns: int | None
    turns: int
    chunks: int
    completed: int
    sessions: int
    writer_ns: int | None = None
    recorder_ns: int = 0
    probe_ns: int = 0
    records: int = 0
    commits: int = 0
    batches: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def other_cores(self) -> float | None:
        return None if self.other_ns is None else self.other_ns / self.wall_ns


def _proc_cpu_ns(pid: int | None) -> int | None:
    """User + system CPU of another process, from /proc (Linux); None elsewhere."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _system_busy_ns() -> int | None:
    """CPU time all processes spent busy, machine-wide, from /proc/stat; None if unknown."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _simulator(cfg: Config) -> ChildServer:
    """The demo's server: ``python -m agentflow.sim`` in a child, on a free port."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "agentflow.sim", "--host", "127.0.0.1", "--port", str(port),
        "--profile", cfg.profile, "--seed", str(cfg.seed), "--time-scale", f"{cfg.time_scale:g}",
    ]  # fmt: skip
    return ChildServer(cmd, port=port, name="agentflow sim", startup_timeout_s=60)


async def _fleet(cfg: Config, url: str, store: TimedStore | None) -> list[Any]:
    """The demo's fleet (``agentflow/demo/run.py``), built and run through the public API."""
    workload = make_workload(
        cfg.agents,
        model="agentflow-sim",
        seed=cfg.seed,
        turns=cfg.turns,
        max_tokens=cfg.max_tokens,
        window=get_profile(cfg.profile).max_model_len,
    )
    sessions = [a.session(t) for a, t in zip(workload.agents, workload.tasks, strict=True)]
    view = LiveView(
        total_sessions=cfg.agents, time_scale=cfg.time_scale, console=Console(file=io.StringIO())
    )
    async with HTTPTransport(Endpoint(base_url=url)) as transport:
        fleet = Fleet(transport, max_concurrency=cfg.max_concurrency, callbacks=[view], store=store)
        result = await fleet.run(sessions)
        if store is not None:
            await store.aclose()
    return list(result.sessions)


def one_run(cfg: Config, interval: Interval, tmp: Path, tag: str) -> Sample:
    """One run of the workload on a fresh simulator, timed from the client's side."""
    with _simulator(cfg) as server:
        if cfg.pin and len(CPUS) >= 2 and server.pid is not None:
            os.sched_setaffinity(server.pid, {CPUS[1]})
        url = f"http://127.0.0.1:{server.port}/v1"
        store = None if interval is None else TimedStore(tmp / f"{tag}.db", interval)
        gc.collect()
        r0, p0 = _RECORDER_NS[0], _PROBE_NS[0]
        s0, b0 = _proc_cpu_ns(server.pid), _system_busy_ns()
        c0, l0, w0 = time.process_time_ns(), time.thread_time_ns(), time.perf_counter_ns()
        sessions = asyncio.run(_fleet(cfg, url, store))
        c1, l1, w1 = time.process_time_ns(), time.thread_time_ns(), time.perf_counter_ns()
        s1, b1 = _proc_cpu_ns(server.pid), _system_busy_ns()
    server_ns = None if s0 is None or s1 is None else s1 - s0
    other = None
    if server_ns is not None and b0 is not None and b1 is not None:
        other = max(0, b1 - b0 - server_ns - (c1 - c0))
    turns = [t for s in sessions for t in s.turns]
    sample = Sample(
        cpu_ns=c1 - c0,
        loop_ns=l1 - l0,
        wall_ns=w1 - w0,
        server_ns=server_ns,
        other_ns=other,
        turns=len(turns),
        chunks=sum(len(t.trace.chunk_ns) for t in turns),
        completed=sum(s.status == "completed" for s in sessions),
        sessions=len(sessions),
    )
    if store is not None:
        sample.writer_ns = store.writer_cpu_ns
        sample.probe_ns = _PROBE_NS[0] - p0
        sample.recorder_ns = max(0, _RECORDER_NS[0] - r0 - sample.probe_ns)
        sample.records, sample.commits = store.committed, store.commits
        sample.batches = store.batches
    return sample


By = dict[Interval, dict[int, Sample]]


def run(cfg: Config, reps: int, warmup: Config, intervals: Sequence[tuple[float, bool]]) -> By:
    """Every measurement: per repetition one run without the store and one per batch
    interval with it, in an order that rotates from one repetition to the next."""
    rows: list[Interval] = [None, *intervals]
    _time_recorder()
    by: By = {r: {} for r in rows}
    if cfg.pin and len(CPUS) >= 2:
        os.sched_setaffinity(0, {CPUS[0]})  # this thread; threads started later inherit it
    try:
        with tempfile.TemporaryDirectory(prefix="agentflow-store-bench-") as d:
            tmp = Path(d)
            for r in rows[:2]:  # imports, SQLite's first open: untimed
                one_run(warmup, r, tmp, f"warmup-{r}")
            for rep in range(reps):
                k = rep % len(rows)
                for r in rows[k:] + rows[:k]:
                    s = one_run(cfg, r, tmp, f"rep{rep}-{r}")
                    by[r][rep] = s
                    _progress(rep, reps, r, s)
    finally:
        if cfg.pin and CPUS:
            os.sched_setaffinity(0, CPUS)
    return by


def _label(r: Interval, md: bool = True) -> str:
    if r is None:
        return "without a store (the demo)" if md else "without store"
    name = "`SQLiteStore`" if md else "SQLiteStore"
    default = ", the default" if r == DEFAULT_INTERVAL else ""
    return f"with {name}, {_short(r)}{default}"


def _short(r: tuple[float, bool]) -> str:
    journal = "journal" if r[1] else "no journal"
    return f"{journal}, commits every {_ms(r[0])}"


def _ms(seconds: float) -> str:
    return f"{seconds:g} s" if seconds >= 1 else f"{seconds * 1e3:g} ms"


def _parse_stores(text: str) -> list[tuple[float, bool]]:
    """``journal:1,batch:0.01`` → [(1.0, True), (0.01, False)]."""
    out = []
    for item in text.split(","):
        kind, _, seconds = item.partition(":")
        if kind not in ("journal", "batch") or not seconds:
            raise SystemExit(f"--stores: {item!r} is not journal:SECONDS or batch:SECONDS")
        out.append((float(seconds), kind == "journal"))
    return out


def _progress(rep: int, reps: int, r: Interval, s: Sample) -> None:
    extra = f"  {s.records} records in {s.commits} commits" if r is not None else ""
    other = "–" if s.other_cores is None else f"{s.other_cores:.2f}"
    print(
        f"rep {rep + 1}/{reps} {_label(r, md=False):<44} {s.cpu_ns / 1e9:6.3f} s CPU"
        f"  {s.wall_ns / 1e9:6.2f} s wall  {s.turns} turns  {s.chunks} chunks{extra}"
        f"  rest of machine {other} cores",
        file=sys.stderr,
        flush=True,
    )


# -- reporting ------------------------------------------------------------------------------


def _med(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def _p(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _span(xs: Sequence[float], fmt: str) -> str:
    return f"{min(xs):{fmt}}–{max(xs):{fmt}}"


def _pairs(by: By, r: Interval) -> list[tuple[Sample, Sample]]:
    reps = sorted(by[None].keys() & by[r].keys())
    return [(by[None][k], by[r][k]) for k in reps]


def table(by: By) -> str:
    out = [
        "| run | client CPU s, median | min–max | µs per turn | µs per chunk "
        "| event-loop thread s | writer thread s | server CPU µs/chunk | wall s "
        "| turns | chunks | records | commits | rest of machine, cores |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r, samples in by.items():
        ss = list(samples.values())
        if not ss:
            continue
        cpu = [s.cpu_ns / 1e9 for s in ss]
        per_turn = _med([s.cpu_ns / s.turns / 1e3 for s in ss])
        per_chunk = _med([s.cpu_ns / s.chunks / 1e3 for s in ss])
        srv = [s.server_ns / s.chunks / 1e3 for s in ss if s.server_ns is not None]
        other = [s.other_cores for s in ss if s.other_cores is not None]
        writer = [s.writer_ns / 1e9 for s in ss if s.writer_ns is not None]
        stored = r is not None
        out.append(
            f"| {_label(r)} | **{_med(cpu):.3f}** | {_span(cpu, '.3f')} | {per_turn:,.0f} "
            f"| {per_chunk:.1f} | {_med([s.loop_ns / 1e9 for s in ss]):.3f} "
            f"| {f'{_med(writer):.3f}' if writer else '–'} "
            f"| {f'{_med(srv):.1f}' if srv else '–'} | {_med([s.wall_ns / 1e9 for s in ss]):.2f} "
            f"| {_med([s.turns for s in ss]):,.0f} | {_med([s.chunks for s in ss]):,.0f} "
            f"| {f'{_med([s.records for s in ss]):,.0f}' if stored else '–'} "
            f"| {f'{_med([s.commits for s in ss]):,.0f}' if stored else '–'} "
            f"| {f'{_med(other):.2f}' if other else '–'} |"
        )
    return "\n".join(out)


@dataclass
class Overhead:
    ratios: list[float]
    per_turn_us: list[float]
    per_chunk_us: list[float]
    per_record_us: list[float]
    loop_per_record_us: list[float]
    writer_per_record_us: list[float]
    #: The store's own CPU — the writer thread plus the loop's time in the Recorder —
    #: over the client CPU of the paired run without the store.
    own_share: list[float]
    own_per_turn_us: list[float]
    own_per_chunk_us: list[float]
    recorder_per_record_us: list[float]
    probe_per_record_us: list[float]
    same_work: bool


def overhead(by: By, r: Interval) -> Overhead:
    pairs = _pairs(by, r)
    return Overhead(
        ratios=[b.cpu_ns / a.cpu_ns for a, b in pairs],
        # the extra CPU of the run with the store, spread over what it recorded / streamed
        per_turn_us=[(b.cpu_ns - a.cpu_ns) / b.turns / 1e3 for a, b in pairs],
        per_chunk_us=[(b.cpu_ns - a.cpu_ns) / b.chunks / 1e3 for a, b in pairs],
        per_record_us=[(b.cpu_ns - a.cpu_ns) / b.records / 1e3 for a, b in pairs],
        loop_per_record_us=[(b.loop_ns - a.loop_ns) / b.records / 1e3 for a, b in pairs],
        writer_per_record_us=[
            b.writer_ns / b.records / 1e3 for _, b in pairs if b.writer_ns is not None
        ],
        own_share=[_own(b) / a.cpu_ns for a, b in pairs],
        own_per_turn_us=[_own(b) / b.turns / 1e3 for _, b in pairs],
        own_per_chunk_us=[_own(b) / b.chunks / 1e3 for _, b in pairs],
        recorder_per_record_us=[b.recorder_ns / b.records / 1e3 for _, b in pairs],
        probe_per_record_us=[b.probe_ns / b.records / 1e3 for _, b in pairs],
        same_work=all(a.turns == b.turns and a.chunks == b.chunks for a, b in pairs),
    )


def _spread_note(ratios: Sequence[float]) -> str:
    """What the paired ratios' spread says about the target."""
    if min(ratios) - 1 >= TARGET:
        return ": every repetition above the target"
    if max(ratios) - 1 < TARGET:
        return ": every repetition below the target"
    return (
        ": a run's client CPU varies more than that from run to run here, so this figure "
        "alone cannot settle a 5% target"
    )


def _own(s: Sample) -> int:
    """The store's own CPU in run ``s``: its writer thread and the loop's Recorder calls."""
    return (s.writer_ns or 0) + s.recorder_ns


def overhead_table(by: By) -> str:
    stores = [r for r in by if r is not None]
    os_ = {r: overhead(by, r) for r in stores}
    head = " | ".join(f"{_short(r)}: median | min–max" for r in stores)
    out = [
        f"| with the store vs without, paired per repetition | {head} |",
        "|---|" + "--:|--:|" * len(stores),
    ]
    rows: list[tuple[str, str, str]] = [
        ("client CPU, with ÷ without", "ratios", ".3f"),
        ("extra client CPU per recorded turn, µs", "per_turn_us", ".0f"),
        ("extra client CPU per streamed chunk, µs", "per_chunk_us", ".2f"),
        ("extra client CPU per record, µs", "per_record_us", ".1f"),
        ("… of which on the event-loop thread, µs per record", "loop_per_record_us", ".1f"),
        ("writer thread CPU per record, µs (all of its work)", "writer_per_record_us", ".1f"),
        ("loop CPU in the Recorder per record, µs", "recorder_per_record_us", ".1f"),
        (
            "… its probe's one clock read, per record, µs (left out above)",
            "probe_per_record_us",
            ".1f",
        ),
        ("the store's own CPU (writer + Recorder) ÷ client CPU without", "own_share", ".1%"),
        ("… per recorded turn, µs", "own_per_turn_us", ".0f"),
        ("… per streamed chunk, µs", "own_per_chunk_us", ".2f"),
    ]
    for i, (label, attr, fmt) in enumerate(rows):
        cells = []
        for r in stores:
            xs: list[float] = getattr(os_[r], attr)
            m = f"{_med(xs):{fmt}}" if xs else "–"
            cells.append(f"{f'**{m}**' if i == 0 else m} | {_span(xs, fmt) if xs else '–'}")
        out.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(out)


def commit_table(by: By) -> str:
    out = [
        "| commit batches (every timed run) | records per commit, median / p90 / max "
        "| writer CPU per commit, µs: median / p90 / max | wall per commit, µs: median / p90 / max "
        "| writer CPU per record in a commit, µs (median) | commits' share of the writer's CPU |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for r, samples in by.items():
        ss = list(samples.values())
        batches = [b for s in ss for b in s.batches]
        if r is None or not batches:
            continue
        sizes = [b[0] for b in batches]
        cpu = [b[1] / 1e3 for b in batches]
        wall = [b[2] / 1e3 for b in batches]
        per_rec = _med([b[1] / b[0] / 1e3 for b in batches])
        share = _med([sum(b[1] for b in s.batches) / s.writer_ns for s in ss if s.writer_ns])
        out.append(
            f"| {_short(r)} ({len(batches):,} commits) "
            f"| {_med(sizes):g} / {_p(sizes, 0.9):g} / {max(sizes)} "
            f"| {_med(cpu):.0f} / {_p(cpu, 0.9):.0f} / {max(cpu):,.0f} "
            f"| {_med(wall):.0f} / {_p(wall, 0.9):.0f} / {max(wall):,.0f} "
            f"| {per_rec:.1f} | {share:.0%} |"
        )
    return "\n".join(out) if len(out) > 2 else ""


def findings(by: By) -> str:
    o = overhead(by, DEFAULT_INTERVAL) if DEFAULT_INTERVAL in by else None
    out = []
    if o is not None and o.ratios:
        r, own = _med(o.ratios) - 1, _med(o.own_share)
        verdict = "met" if r < TARGET and own < TARGET else "**not met**"
        out.append(
            f"Target (issue 13): the store adds < {TARGET:.0%} client CPU on the demo "
            f"workload — {verdict} with the default settings. Paired runs: {r:+.1%} (median "
            f"of {len(o.ratios)} per-repetition ratios, {min(o.ratios) - 1:+.1%} to "
            f"{max(o.ratios) - 1:+.1%}{_spread_note(o.ratios)}). Counted directly, "
            f"the store's own CPU — its writer thread and the loop's calls into the Recorder — "
            f"is {own:.1%} of a run without it ({min(o.own_share):.1%} to "
            f"{max(o.own_share):.1%}): {_med(o.own_per_turn_us):.0f} µs per recorded turn, "
            f"{_med(o.writer_per_record_us):.0f} µs of writer CPU and "
            f"{_med(o.recorder_per_record_us):.1f} µs on the loop per record. That is a floor "
            "(it leaves out what the writer's wakeups cost the loop indirectly)."
        )
        if not o.same_work:
            out.append(
                "Paired runs did not always stream the same turns and chunks (see the table); "
                "the per-turn and per-chunk figures divide by each run's own counts."
            )
    for setting in by:
        if setting is None or setting == DEFAULT_INTERVAL:
            continue
        x = overhead(by, setting)
        if not x.ratios:
            continue
        interval, journal = setting
        if journal:
            how = (
                f"With the journal and a commit every {_ms(interval)} (`SQLiteStore(path, "
                f"batch_interval_s={interval:g})`; a `kill -9` loses nothing recorded)"
            )
        else:
            how = (
                f"Without the journal, committing every {_ms(interval)} (`SQLiteStore(path, "
                f"journal=False, batch_interval_s={interval:g})`; a `kill -9` then loses up "
                f"to {_ms(interval)} of records)"
            )
        out.append(
            f"{how}: paired {_med(x.ratios) - 1:+.1%} ({min(x.ratios) - 1:+.1%} to "
            f"{max(x.ratios) - 1:+.1%}); the store's own CPU {_med(x.own_share):.1%} "
            f"({_med(x.writer_per_record_us):.0f} µs of writer CPU and "
            f"{_med(x.recorder_per_record_us):.1f} µs on the loop per record)."
        )
    samples = [s for ss in by.values() for s in ss.values()]
    incomplete = [s for s in samples if s.completed != s.sessions]
    if incomplete:
        out.append(f"**{len(incomplete)} run(s) had sessions that did not complete.**")
    other = [s.other_cores for s in samples if s.other_cores is not None]
    if other and _med(other) > 0.25:
        out.append(
            f"Other work shared the machine (median {_med(other):.2f} cores busy besides "
            "client and server): absolute figures carry that noise; the paired runs carry "
            "it alike."
        )
    return " ".join(out)


def report(by: By) -> tuple[str, str]:
    tables = "\n\n".join(t for t in (table(by), overhead_table(by), commit_table(by)) if t)
    return tables, findings(by)


def section(cfg: Config, reps: int, by: By, command: str) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    tables, found = report(by)
    placement = (
        f"The client (with its writer thread) is pinned to CPU {CPUS[0]} and the simulator to "
        f"CPU {CPUS[1]}."
        if cfg.pin and len(CPUS) >= 2
        else "Client and server are not pinned to CPUs."
    )
    return f"""{START}
## The run store's overhead (`benchmarks/store_overhead.py`)

Measured {now} on {_common.machine()}.
Command: `{command}`; {reps} repetitions, each one run without the store and one with
it per batch interval; medians.

{tables}

{found}

**Method.** The workload is `agentflow demo`'s, built with the public API as
`agentflow/demo/run.py` builds it: `make_workload` ({cfg.agents} coding agents, seed
{cfg.seed}, {cfg.turns[0]}–{cfg.turns[1]} turns each, `max_tokens` {cfg.max_tokens}, real
Python tools over in-memory repositories, the default `ContextBudget` with prefix
fingerprints and the cache-buster check), `Fleet(HTTPTransport(...),
max_concurrency={cfg.max_concurrency}, callbacks=[LiveView(...)])` (the demo's callback, not
drawing), against `python -m agentflow.sim --profile {cfg.profile} --time-scale
{cfg.time_scale:g}` in a child process over HTTP on loopback — the demo's default (its
loop-lag probe and `/metrics` watcher are left out: they would add the same CPU to both runs
and shrink the ratio). The
recorded runs add `store=SQLiteStore(path)` (default settings: the journal — each record
copied into a memory-mapped file as it is written — WAL, `synchronous=NORMAL`, a commit
every 5 s; other rows set `journal=False` and `batch_interval_s`) on a fresh file in the
system's temporary directory (ext4 here) and close it after the run. The client is this
process alone, so its CPU is separated from the server's: "client CPU" is
`time.process_time_ns` (user + system, every thread of the process — the event loop's and
the store's writer thread, which is where SQLite's work goes) over the whole run: building
the transport and the fleet, the run, and with the store opening the file and its schema,
the leases, the final flush and `aclose`; building the workload's agents is outside it.
"event-loop thread" is `time.thread_time_ns` on the main thread (the loop runs there; the
record building, with the journal its encoding and copy, the append to the batch and,
without the journal, once per batch a loop timer and the queue put are its share of the
store); "writer thread" is the
writer's own `time.thread_time_ns`, read as it exits, through a subclass of `SQLiteStore`
defined in the benchmark that also times each commit (`BEGIN IMMEDIATE`, the inserts with
their JSON encoding, `COMMIT`) with `thread_time_ns` and `perf_counter_ns`. "Recorder" is
the loop thread's CPU inside the `Recorder`'s methods (`Store.write` included, so with the
journal its encoding and copy): two reads of `thread_time_ns` around
each call, less the cost of a third read taken right after it (a read of that clock is a
system call; the probe's share is its own row). The runs of a
repetition go back to back, in an order that rotates from one repetition to the next, each
on a fresh simulator child (same seed: the same replies, so both runs stream the same turns
and chunks), a fresh event loop and transport; an untimed pair of small runs warms up
imports and SQLite first. "with ÷ without" and the "extra" rows are medians of
per-repetition figures (the run with the store less the run without, per turn, chunk or
record of the run with the store). "chunks" counts output-bearing streamed chunks
(`TurnTrace.chunk_ns`); "records" are what the store committed: {_records_line(by)}.
{placement} "rest of machine" is the machine-wide busy CPU (`/proc/stat`) less the client's
and the server's, in cores. The in-process virtual-time mode (`agentflow demo --virtual`) is
not used: there the simulator's CPU is the client's, and virtual time runs ahead of the
writer's real-time batching, so neither the ratio nor the batches would be what a user's
run sees.
{END}"""


def _records_line(by: By) -> str:
    ss = list(by.get(DEFAULT_INTERVAL, {}).values())
    if not ss:
        return "none"
    s = ss[0]
    return (
        f"per run the run's start, {s.sessions} session starts, one per finished turn "
        f"({s.turns:,}), one per tool result, {s.sessions} session ends and the run's end "
        f"({s.records:,} in the first timed run)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="The run store's client CPU overhead on the demo.")
    p.add_argument("--quick", action="store_true", help="short smoke run; never writes docs")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument("--reps", type=int, help="repetitions (default 8; quick 1)")
    p.add_argument("--agents", type=int, help="agents (default 64, the demo's; quick 8)")
    p.add_argument("--turns", help="MIN:MAX turns per agent (default 5:20; quick 3:6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-scale", type=float, default=10.0, help="the demo's default: 10")
    p.add_argument("--profile", default="deepseek-v4.1-flash-gb300")
    p.add_argument("--no-pin", action="store_true", help="do not pin client and server")
    p.add_argument(
        "--stores",
        help="SQLiteStore settings to run besides none, comma-separated journal:SECONDS or "
        "batch:SECONDS (batch = journal=False) (default journal:5,journal:1,batch:1; quick "
        "journal:5); journal:5 is the store's default",
    )
    args = p.parse_args(argv)
    q = args.quick
    lo, hi = (int(x) for x in (args.turns or ("3:6" if q else "5:20")).split(":"))
    cfg = Config(
        agents=args.agents or (8 if q else 64),
        turns=(lo, hi),
        profile=args.profile,
        seed=args.seed,
        time_scale=args.time_scale,
        max_concurrency=64,
        max_tokens=128,
        pin=not args.no_pin,
    )
    warmup = Config(**{**cfg.__dict__, "agents": min(cfg.agents, 4), "turns": (2, 3)})
    reps = args.reps or (1 if q else 8)
    intervals = _parse_stores(args.stores or ("journal:5" if q else "journal:5,journal:1,batch:1"))
    by = run(cfg, reps, warmup, intervals)
    tables, found = report(by)
    print(f"\n{_common.machine()}\n\n{tables}\n\n{found}")
    if q or args.no_write:
        return
    given = list(argv if argv is not None else sys.argv[1:])
    command = " ".join(["python benchmarks/store_overhead.py", *given])
    _common.write_section(NAME, section(cfg, reps, by, command))
    print(f"\nwrote the {NAME} section of {_common.DOC.relative_to(_common.ROOT)}")


if __name__ == "__main__":
    main()
