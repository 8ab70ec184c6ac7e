"""N agents × 848 tok/s against a step-paced server that logs its own write times.

What is measured (issue 15): ``N`` agents each streaming ``--tokens`` output tokens, one
token per chunk, from ``_sse_server.py --step-ms 1.179`` — one global step timer that
writes the next token to *every* stream each 1.179 ms (848 tok/s per agent; the k-th
token of all ``N`` streams leaves in the same server instant, as in one batched decode
step) and records the time of every write (``time.perf_counter_ns``, i.e.
``CLOCK_MONOTONIC`` on Linux: the clock agentflow stamps tokens with, so the client's
stamps and the server's write times compare directly on one machine).

The client is what a user runs: ``Fleet(HTTPTransport(url), max_concurrency=N,
workers=W, callbacks=[count])`` over ``N`` sessions (one ``Agent`` each), where ``count``
is a plain callback that reads every ``TokenEvent`` (so with workers every token crosses
to the parent). Rows: ``N`` = 50, 100, 200 × {1 process, 2 worker processes} × {loop
stamps (``kernel_timestamps=False``: the stamp is when the event loop ran the read — any
non-Linux or TLS endpoint), kernel stamps (``kernel_timestamps=True``: the kernel's
arrival stamp)}. Per run:

* **client CPU** — the parent's and the workers' CPU (``/proc/PID/task/*/schedstat``,
  nanoseconds) from the first token the callback saw to the last, in cores (CPU ÷ wall)
  and in µs per token; the server's CPU over the same window.
* **loop lag** — a probe timer in every client event loop (the parent's; each worker's)
  that re-arms itself every 1 ms and records how late it ran; p50 / p99 / max of the
  samples taken while the server was writing. With workers the loops that read the
  sockets and stamp the tokens are the workers' (their samples pooled); the parent's
  (which decodes the forwarded batches and runs the callback) is shown beside.
* **delay** — each token's client stamp (``TurnTrace.chunk_ns``) minus the server's
  write time of that token: p50 / p99 over all tokens.
* **TPOT error** — per stream, agentflow's own TPOT (``SessionResult.turns[0].metrics
  .tpot_s``: (end − first token) ÷ (tokens − 1)) against the same figure from the
  server's write log ((tail write − first write) ÷ (tokens − 1)), as ``|client ÷ server −
  1|``: median and p99 over the streams.
* **server slip** — p99 of how late the server's writes were against their step deadline
  (a server that cannot keep its own pace would show here), and writes asyncio had to
  buffer because a socket was full (a client that fell behind).

The measurement hook: the lag probe in a worker is started by the transport
(:class:`ProbedHTTPTransport`, an ``HTTPTransport`` subclass defined here, pickled to the
workers like any transport) on its first request, and written to a file when the worker
closes it; nothing in agentflow is changed for it. It costs one check per request, and
the probe itself one timer callback per ms per loop.

Placement on this 2-CPU machine: the server is pinned to the last CPU; one process is
pinned to the first CPU; with workers, the parent and its workers may use every CPU (the
point of workers is a second core; here it is shared with the server). Every run checks
every token: the callback's count, ``N × tokens`` content chunks and the usage of every
stream, and a write log of ``tokens`` writes per stream. Rows alternate within each
repetition; the table gives medians over repetitions, with the machine's load.

The 16-core projection uses the measured CPU per token of the 2-worker rows (parent share
and worker share separately) and states its assumptions next to it.

Usage::

    python benchmarks/agents_848.py            # full run (~3 min); rewrites its section
    python benchmarks/agents_848.py --quick    # smoke run (< 1 min); writes nothing
"""

from __future__ import annotations

import argparse
import array
import asyncio
import datetime as dt
import glob
import json
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import _common
import _sse_server

from agentflow import Agent, Event, Fleet, HTTPTransport, TurnTrace
from agentflow.stats import nearest_rank
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaSink

NAME = "agents_848"
SERVER = Path(_sse_server.__file__).resolve()
MODEL = "bench-model"
PROMPT = "Write a very long story about a fox."
#: 848 tokens/s per agent: one step every 1000 / 848 ms.
STEP_MS = 1.179
#: The lag probe's period.
PROBE_MS = 1.0
#: Spare CPUs read before any pinning.
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


# -- the lag probe --------------------------------------------------------------------------


class LagProbe:
    """How late this process's event loop runs a timer: one sample per ``period_s``.

    Each tick records ``(perf_counter_ns at the tick, lateness in ns)`` and re-arms itself
    ``period_s`` after the tick (not on a fixed grid, so a stalled loop does not queue up
    catch-up ticks). The floor is the selector's resolution: epoll waits in whole
    milliseconds, so an idle loop is up to ~1 ms late too.
    """

    _current: ClassVar[LagProbe | None] = None

    def __init__(self, loop: asyncio.AbstractEventLoop, period_s: float) -> None:
        self.loop = loop
        self.period_s = period_s
        self.t_ns = array.array("q")
        self.lag_ns = array.array("q")
        self._handle: asyncio.TimerHandle | None = loop.call_at(
            loop.time() + period_s, self._tick, loop.time() + period_s
        )

    def _tick(self, when: float) -> None:
        now = self.loop.time()
        self.t_ns.append(time.perf_counter_ns())
        self.lag_ns.append(round((now - when) * 1e9))
        nxt = now + self.period_s
        self._handle = self.loop.call_at(nxt, self._tick, nxt)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @classmethod
    def ensure(cls, period_s: float = PROBE_MS / 1000) -> LagProbe:
        """This process's probe on the running loop (started on first use)."""
        loop = asyncio.get_running_loop()
        probe = cls._current
        if probe is None or probe.loop is not loop:
            probe = cls._current = LagProbe(loop, period_s)
        return probe

    @classmethod
    def take(cls) -> LagProbe | None:
        """Stop this process's probe and hand it over (``None`` if none ran)."""
        probe, cls._current = cls._current, None
        if probe is not None:
            probe.stop()
        return probe


def _write_samples(path: str, probe: LagProbe) -> None:
    with open(path, "wb") as f:
        f.write(len(probe.t_ns).to_bytes(8, "little"))
        probe.t_ns.tofile(f)
        probe.lag_ns.tofile(f)


def read_samples(path: str) -> tuple[array.array[int], array.array[int]]:
    """A probe file's ``(t_ns, lag_ns)`` arrays."""
    t, lag = array.array("q"), array.array("q")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        t.fromfile(f, n)
        lag.fromfile(f, n)
    return t, lag


class ProbedHTTPTransport(HTTPTransport):
    """``HTTPTransport`` that starts this process's :class:`LagProbe` with its first
    request and, on ``aclose``, writes the probe's samples to ``lag_dir/lag-PID.bin``.

    It pickles to the workers like its base class, so each worker's loop gets a probe;
    the parent takes its own probe with :meth:`LagProbe.take` before closing.
    """

    def __init__(self, url: str, *, kernel_timestamps: bool, lag_dir: str) -> None:
        super().__init__(url, kernel_timestamps=kernel_timestamps)
        self.lag_dir = lag_dir

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        """Start the probe (once per process), then stream as ``HTTPTransport`` does."""
        if LagProbe._current is None:
            LagProbe.ensure()
        return await super().stream(request, sink)

    async def aclose(self) -> None:
        """Write this process's probe samples (if a probe ran here), then close."""
        probe = LagProbe.take()
        if probe is not None:
            _write_samples(os.path.join(self.lag_dir, f"lag-{os.getpid()}.bin"), probe)
        await super().aclose()


# -- CPU ------------------------------------------------------------------------------------


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` (``/proc/PID/task/*/schedstat``, ns), or of
    ``/proc/PID/stat`` in clock ticks where schedstat is missing; 0 for a gone process."""
    total = 0
    paths = glob.glob(f"/proc/{pid}/task/*/schedstat")
    if paths:
        for path in paths:
            try:
                with open(path) as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return total
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@dataclass
class Snapshot:
    """CPU of the client's processes and the server at one instant."""

    t_ns: int
    parent_ns: int
    workers_ns: dict[int, int]
    server_ns: int
    tokens: int


def snapshot(server_pid: int, tokens: int, worker_pids: Sequence[int]) -> Snapshot:
    return Snapshot(
        time.perf_counter_ns(),
        cpu_ns(os.getpid()),
        {pid: cpu_ns(pid) for pid in worker_pids},
        cpu_ns(server_pid),
        tokens,
    )


class CountTokens:
    """The callback: reads every token event; snapshots CPU at the first and the last."""

    event_types = frozenset({"token"})

    def __init__(self, expected: int, server_pid: int, workers: bool) -> None:
        self.expected = expected
        self.server_pid = server_pid
        self.with_workers = workers
        self.n = 0
        self.per_session: dict[str, int] = {}
        self.first: Snapshot | None = None
        self.last: Snapshot | None = None
        self.workers: list[int] = []

    def __call__(self, event: Event) -> None:
        if event.type != "token":
            return
        self.n += 1
        sid = event.session_id
        self.per_session[sid] = self.per_session.get(sid, 0) + 1
        if self.first is None:
            if self.with_workers:  # the fleet's worker processes (the server is no such child)
                self.workers = [p.pid for p in multiprocessing.active_children() if p.pid]
            self.first = snapshot(self.server_pid, self.n, self.workers)
        elif self.n == self.expected:
            self.last = snapshot(self.server_pid, self.n, self.workers)


# -- the server -----------------------------------------------------------------------------


@contextmanager
def step_server(step_ms: float, max_seconds: float = 3600.0) -> Iterator[tuple[str, int]]:
    """Start ``_sse_server.py --step-ms`` in a child process; yield its URL and pid."""
    cmd = [
        sys.executable, str(SERVER), "--watch-stdin", "--max-seconds", str(max_seconds),
        "--step-ms", str(step_ms),
    ]  # fmt: skip
    with _common.sse_child(cmd) as served:
        yield served


async def fetch_writelog(url: str, run: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """``GET /writelog?run=…`` on a connection of its own (retried until the run is done)."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    async with asyncio.timeout(timeout_s):
        while True:
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(
                    f"GET /writelog?run={run} HTTP/1.1\r\nhost: bench\r\n"
                    "connection: close\r\n\r\n".encode()
                )
                raw = await reader.read()
            finally:
                writer.close()
            head, _, body = raw.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"GET /writelog: {head.splitlines()[0]!r} {body[:200]!r}")
            log: dict[str, Any] = json.loads(body)
            if log["done"]:
                return log
            await asyncio.sleep(0.05)


# -- one run --------------------------------------------------------------------------------


def pct(xs: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``xs`` by nearest rank (:func:`agentflow.stats.nearest_rank`,
    the report's own definition: p50 of 4 values is the 2nd); NaN when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[nearest_rank(q, len(s))]


@dataclass
class Run:
    """One run's figures (times in ms unless named otherwise)."""

    agents: int
    tokens: int
    workers: int | None
    kernel_stamps: bool
    tokens_counted: int
    window_s: float
    tokens_in_window: int
    parent_cpu_s: float
    workers_cpu_s: float
    server_cpu_s: float
    lag: list[float]  # ms, the loops that stamp tokens (parent, or the workers pooled)
    parent_lag: list[float]  # ms, the parent's loop (the same as lag without workers)
    delay_p50: float
    delay_p99: float
    tpot_err: list[float]  # per stream, |client / server - 1|
    server_tpot_ms: float  # median over streams
    slip_p99: float
    buffered: int
    wall_s: float
    step_ms: float
    streams_logged: int  # streams in the server's write log
    writes_logged: int  # content writes in the server's write log
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def client_cpu_s(self) -> float:
        return self.parent_cpu_s + self.workers_cpu_s

    @property
    def cores(self) -> float:
        return self.client_cpu_s / self.window_s if self.window_s else float("nan")

    @property
    def server_cores(self) -> float:
        return self.server_cpu_s / self.window_s if self.window_s else float("nan")

    def _per_token(self, cpu_s: float) -> float:
        # NaN when the window held no token (all arrived in the first forwarded batch)
        return cpu_s / self.tokens_in_window * 1e6 if self.tokens_in_window else float("nan")

    @property
    def us_per_token(self) -> float:
        return self._per_token(self.client_cpu_s)

    @property
    def parent_us_per_token(self) -> float:
        return self._per_token(self.parent_cpu_s)

    @property
    def workers_us_per_token(self) -> float:
        return self._per_token(self.workers_cpu_s)


def _in_window(t: array.array[int], lag: array.array[int], lo: int, hi: int) -> list[float]:
    return [lg / 1e6 for ti, lg in zip(t, lag, strict=True) if lo <= ti <= hi]


async def measure(
    url: str,
    server_pid: int,
    agents: int,
    tokens: int,
    *,
    workers: int | None,
    kernel_stamps: bool,
) -> Run:
    """One ``Fleet.run`` of ``agents`` sessions × ``tokens`` tokens against the step server,
    checked token by token; see the module docstring for the figures."""
    run_id = uuid.uuid4().hex[:12]
    expected = agents * tokens
    count = CountTokens(expected, server_pid, bool(workers))
    sessions = [
        Agent(
            name=f"agent{i}",
            model=MODEL,
            params={"max_tokens": tokens, "run": run_id, "stream_id": f"s{i}", "expect": agents},
        ).session(PROMPT, session_id=f"s{i}")
        for i in range(agents)
    ]
    with tempfile.TemporaryDirectory(prefix="agents848-") as lag_dir:
        transport = ProbedHTTPTransport(url, kernel_timestamps=kernel_stamps, lag_dir=lag_dir)
        fleet = Fleet(transport, max_concurrency=agents, workers=workers, callbacks=[count])
        LagProbe.ensure()  # the parent's loop (the only one without workers)
        t0 = time.perf_counter()
        try:
            result = await fleet.run(sessions)
        finally:
            parent_probe = LagProbe.take()
            await transport.aclose()
        wall = time.perf_counter() - t0
        files = {
            int(Path(p).stem.split("-")[1]): read_samples(p)
            for p in glob.glob(os.path.join(lag_dir, "lag-*.bin"))
        }
    log = await fetch_writelog(url, run_id)

    # -- every token accounted for
    bad = [s for s in result.sessions if not s.ok or len(s.turns) != 1]
    if bad:
        raise RuntimeError(
            f"{len(bad)} sessions failed, e.g. {bad[0].session_id}: {bad[0].error!r}"
        )
    if count.n != expected:
        raise RuntimeError(f"the callback read {count.n} tokens, expected {expected}")
    streams: dict[str, Any] = log["streams"]
    if len(streams) != agents:
        raise RuntimeError(f"the server logged {len(streams)} streams, expected {agents}")
    delays: list[int] = []
    errs: list[float] = []
    server_tpots: list[float] = []
    slips: list[int] = []
    t0_ns, step_ns = int(log["t0_ns"]), int(log["step_ns"])
    lo, hi = (
        min(s["writes"][0] for s in streams.values()),
        max(s["tail_ns"] for s in streams.values()),
    )
    for s in result.sessions:
        turn = s.turns[0]
        w = streams[s.session_id]
        writes: list[int] = w["writes"]
        chunks = turn.trace.chunk_ns
        if len(writes) != tokens or len(chunks) != tokens or turn.metrics.output_tokens != tokens:
            raise RuntimeError(
                f"{s.session_id}: {len(writes)} writes, {len(chunks)} chunks, "
                f"{turn.metrics.output_tokens} tokens; expected {tokens} each"
            )
        if count.per_session.get(s.session_id) != tokens:
            raise RuntimeError(f"{s.session_id}: the callback read {count.per_session}")
        delays.extend(c - wr for c, wr in zip(chunks, writes, strict=True))
        slips.extend(wr - (t0_ns + k * step_ns) for k, wr in enumerate(writes))
        server_tpot = (w["tail_ns"] - writes[0]) / 1e9 / (tokens - 1)
        client_tpot = turn.metrics.tpot_s
        if client_tpot is None:
            raise RuntimeError(f"{s.session_id}: no TPOT")
        server_tpots.append(server_tpot)
        errs.append(abs(client_tpot / server_tpot - 1))

    first, last = count.first, count.last
    assert first is not None  # the callback read every token: both snapshots were taken
    assert last is not None
    me = os.getpid()
    parent_lag = (
        [] if parent_probe is None else _in_window(parent_probe.t_ns, parent_probe.lag_ns, lo, hi)
    )
    worker_lag = [
        x for pid, (t, lg) in files.items() if pid != me for x in _in_window(t, lg, lo, hi)
    ]
    return Run(
        agents=agents,
        tokens=tokens,
        workers=workers,
        kernel_stamps=kernel_stamps,
        tokens_counted=count.n,
        window_s=(last.t_ns - first.t_ns) / 1e9,
        tokens_in_window=last.tokens - first.tokens,
        parent_cpu_s=(last.parent_ns - first.parent_ns) / 1e9,
        workers_cpu_s=sum(last.workers_ns[p] - first.workers_ns[p] for p in first.workers_ns) / 1e9,
        server_cpu_s=(last.server_ns - first.server_ns) / 1e9,
        lag=worker_lag if workers else parent_lag,
        parent_lag=parent_lag,
        delay_p50=pct(delays, 0.5) / 1e6,
        delay_p99=pct(delays, 0.99) / 1e6,
        tpot_err=errs,
        server_tpot_ms=statistics.median(server_tpots) * 1e3,
        slip_p99=pct(slips, 0.99) / 1e6,
        buffered=sum(int(s["buffered"]) for s in streams.values()),
        wall_s=wall,
        step_ms=step_ns / 1e6,
        streams_logged=len(streams),
        writes_logged=sum(len(s["writes"]) for s in streams.values()),
        extra={"worker_loops": len(files) - (me in files)},
    )


# -- the whole measurement ------------------------------------------------------------------


def place(workers: int | None, server_pid: int, pin: bool) -> str:
    """Pin the server to the last CPU and the client (one process) to the first; with
    workers the client may use every CPU (workers inherit the parent's at spawn)."""
    if not pin or len(CPUS) < 2:
        return "unpinned"
    os.sched_setaffinity(server_pid, {CPUS[-1]})
    if workers:
        os.sched_setaffinity(0, set(CPUS))
        return f"with workers the server on CPU {CPUS[-1]}, the client on CPUs {CPUS[0]}–{CPUS[-1]}"
    os.sched_setaffinity(0, {CPUS[0]})
    return f"one process: the server on CPU {CPUS[-1]}, the client on CPU {CPUS[0]}"


Key = tuple[int, int | None, bool]  # agents, workers, kernel stamps


def run_all(
    agents: Sequence[int], tokens: int, reps: int, step_ms: float, pin: bool
) -> tuple[dict[Key, list[Run]], dict[Key, list[str]], dict[Key, str]]:
    """Every row ``reps`` times; the four client set-ups of one ``N`` alternate, in a
    rotated order each repetition."""
    keys: list[Key] = [(n, w, k) for n in agents for w in (None, 2) for k in (False, True)]
    runs: dict[Key, list[Run]] = {k: [] for k in keys}
    failures: dict[Key, list[str]] = {k: [] for k in keys}
    where: dict[Key, str] = {}
    with step_server(step_ms) as (url, pid):
        try:
            asyncio.run(measure(url, pid, 4, 20, workers=None, kernel_stamps=False))  # warm-up
            for rep in range(reps):
                for n in agents:
                    group = [k for k in keys if k[0] == n]
                    r = rep % len(group)
                    for key in group[r:] + group[:r]:
                        _, w, ks = key
                        where[key] = place(w, pid, pin)
                        label = (
                            f"rep {rep + 1}/{reps} {n:>4} agents {_client(w):<10} {_stamps(ks):<6}"
                        )
                        try:
                            run = asyncio.run(
                                measure(url, pid, n, tokens, workers=w, kernel_stamps=ks)
                            )
                        except Exception as exc:  # one failed run must not lose the others
                            failures[key].append(f"{type(exc).__name__}: {exc}")
                            print(f"{label} FAILED: {exc!r}", file=sys.stderr, flush=True)
                            continue
                        runs[key].append(run)
                        print(
                            f"{label} {run.cores:5.2f} cores {run.us_per_token:6.1f} µs/tok  "
                            f"lag p99 {pct(run.lag, 0.99):7.2f} ms  TPOT err p99 "
                            f"{pct(run.tpot_err, 0.99):7.2%}  {run.wall_s:5.1f} s",
                            file=sys.stderr,
                            flush=True,
                        )
        finally:
            if CPUS:
                os.sched_setaffinity(0, set(CPUS))
    return runs, failures, where


def _client(workers: int | None) -> str:
    return "1 process" if not workers else f"{workers} workers"


def _stamps(kernel: bool) -> str:
    return "kernel" if kernel else "loop"


def _med(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def table(runs: dict[Key, list[Run]], failures: dict[Key, list[str]]) -> str:
    lines = [
        "| agents | client | stamps | client cores | µs / token (parent + workers) | "
        "loop lag p50 / p99 / max (ms) | parent loop lag p99 (ms) | delay p50 / p99 (ms) | "
        "TPOT error median / p99 | server tok/s per agent | server cores | "
        "server slip p99 (ms) | runs |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, rs in runs.items():
        n, w, ks = key
        fails = f" ({len(failures[key])} failed)" if failures[key] else ""
        if not rs:
            lines.append(f"| {n} | {_client(w)} | {_stamps(ks)} |" + " – |" * 9 + f" 0{fails} |")
            continue

        def m(f: Callable[[Run], float], rs: list[Run] = rs) -> float:
            return _med([f(r) for r in rs])

        share = f"{m(lambda r: r.us_per_token):.1f}"
        if w:
            share += (
                f" ({m(lambda r: r.parent_us_per_token):.1f} + "
                f"{m(lambda r: r.workers_us_per_token):.1f})"
            )
        parent_lag = f"{m(lambda r: pct(r.parent_lag, 0.99)):.2f}" if w else "(same)"
        lag = (
            f"{m(lambda r: pct(r.lag, 0.5)):.2f} / {m(lambda r: pct(r.lag, 0.99)):.2f} / "
            f"{m(lambda r: max(r.lag, default=float('nan'))):.1f}"
        )
        tpot = f"{m(lambda r: pct(r.tpot_err, 0.5)):.2%} / {m(lambda r: pct(r.tpot_err, 0.99)):.2%}"
        lines.append(
            f"| {n} | {_client(w)} | {_stamps(ks)} | {m(lambda r: r.cores):.2f} | {share} | "
            f"{lag} | {parent_lag} | "
            f"{m(lambda r: r.delay_p50):.2f} / {m(lambda r: r.delay_p99):.2f} | {tpot} | "
            f"{m(lambda r: 1000 / r.server_tpot_ms):.0f}{slow(rs)} | "
            f"{m(lambda r: r.server_cores):.2f} | "
            f"{m(lambda r: r.slip_p99):.2f} | {len(rs)}{fails} |"
        )
    return "\n".join(lines)


#: A row whose server wrote below this share of its pace is marked: it measured a slower stream.
KEEP_PACE = 0.95


def slow(rs: Sequence[Run]) -> str:
    """A mark (†) when the server's median rate fell below ``KEEP_PACE`` of its step rate."""
    rate = _med([1000 / r.server_tpot_ms for r in rs])
    return " †" if rate < KEEP_PACE * 1000 / rs[0].step_ms else ""


def target(runs: dict[Key, list[Run]]) -> str:
    """The issue's target: 100 agents, 2 workers, loop stamps: lag p99 ≤ 5 ms, TPOT ≤ 1%."""
    rs = runs.get((100, 2, False), [])
    if not rs:
        return "Target (100 agents, 2 workers, loop stamps): not measured in this run."
    lag = _med([pct(r.lag, 0.99) for r in rs])
    err = _med([pct(r.tpot_err, 0.99) for r in rs])
    err50 = _med([pct(r.tpot_err, 0.5) for r in rs])
    verdict = "met" if lag <= 5.0 and err <= 0.01 else "**not met**"
    return (
        f"Target (issue 15: 100 agents on 2 workers with loop stamps, loop lag p99 ≤ 5 ms "
        f"and TPOT error ≤ 1%): {verdict} in this run — loop lag p99 {lag:.2f} ms (workers' "
        f"loops), TPOT error p99 over the streams {err:.2%} (median {err50:.2%})."
    )


#: The per-core utilisation the projection allows (headroom for bursts and loop lag).
PROJECT_UTIL = 0.70
PROJECT_CORES = 16


@dataclass(frozen=True)
class Projection:
    """Agents at 848 tok/s per agent a many-core client carries (see :func:`projection`)."""

    parent_us: float  # µs per token in the parent, 2 workers
    parent_at: int  # the N it was measured at
    workers_us: float  # µs per token in the workers (both together), 2 workers
    workers_at: int
    one_process_us: float  # µs per token, one process (NaN if not measured)
    one_process_at: int
    by_parent: float  # agents the parent's core allows
    by_workers: float  # agents the worker cores allow
    one_process: float  # agents one process on one core allows

    @property
    def agents_16(self) -> float:
        return min(self.by_parent, self.by_workers)


def projection(runs: dict[Key, list[Run]], step_ms: float = STEP_MS) -> Projection | None:
    """Agents a ``PROJECT_CORES``-core client carries at ≤ ``PROJECT_UTIL`` of each core
    busy: one core for the parent, the others for workers. Per-token costs are the largest
    medians of any ``N`` (either stamps): a client that lags reads several tokens per read
    and pays less per token, so the largest is the one that holds at the pace."""

    def worst(pick: Callable[[Run], float], workers: bool) -> tuple[float, int]:
        rows = [
            (_med([pick(r) for r in rs]), key[0])
            for key, rs in runs.items()
            if rs and bool(key[1]) == workers
        ]
        rows = [row for row in rows if math.isfinite(row[0])]
        return max(rows) if rows else (float("nan"), 0)

    parent_us, parent_at = worst(lambda r: r.parent_us_per_token, True)
    workers_us, workers_at = worst(lambda r: r.workers_us_per_token, True)
    if not parent_at:
        return None
    one_us, one_at = worst(lambda r: r.us_per_token, False)
    rate = 1000.0 / step_ms  # tokens/s per agent
    return Projection(
        parent_us=parent_us,
        parent_at=parent_at,
        workers_us=workers_us,
        workers_at=workers_at,
        one_process_us=one_us,
        one_process_at=one_at,
        by_parent=PROJECT_UTIL / (rate * parent_us * 1e-6),
        by_workers=(PROJECT_CORES - 1) * PROJECT_UTIL / (rate * workers_us * 1e-6),
        one_process=PROJECT_UTIL / (rate * one_us * 1e-6),
    )


def projection_text(p: Projection | None) -> str:
    """The projection and its assumptions, as a paragraph."""
    if p is None:
        return "No 2-worker row was measured: no projection."
    limit = "the parent" if p.by_parent < p.by_workers else "the workers"
    return (
        f"**{PROJECT_CORES}-core projection.** Per token, 2 workers cost {p.parent_us:.1f} µs "
        f"in the parent (at {p.parent_at} agents: decoding the forwarded token batches, "
        f"running the callback) and {p.workers_us:.1f} µs in the workers (at "
        f"{p.workers_at} agents: sockets, parsing, events, encoding the batches); one process "
        f"costs {p.one_process_us:.1f} µs (at {p.one_process_at} agents) — the largest "
        f"median of any N, since a client that lags reads several tokens per read and pays "
        f"less per token. At 848 tok/s per agent and at most {PROJECT_UTIL:.0%} of each core "
        f"busy, a {PROJECT_CORES}-core client with one core for the parent and "
        f"{PROJECT_CORES - 1} workers carries about **{p.agents_16:.0f} agents** (the parent's "
        f"core alone allows {p.by_parent:.0f}, the {PROJECT_CORES - 1} workers' cores "
        f"{p.by_workers:.0f}: {limit} bound it); one process on one core: "
        f"{p.one_process:.0f}. Assumptions: the per-token costs stay what they were here (a "
        f"worker's does not grow with the number of workers; the parent's total grows "
        f"linearly with the tokens forwarded to it); the server runs on another machine; "
        f"{PROJECT_CORES} real cores (no SMT siblings) as fast as these; {PROJECT_UTIL:.0%} "
        f"busy per core keeps loop lag within the target — which this 2-core machine cannot "
        f"test. Every token crosses to the parent only because a callback reads tokens: "
        f"without one (statistics callbacks read `turn_end` events) the parent's per-token "
        f"share mostly goes and the workers bound the count (not measured here)."
    )


def comparisons(runs: dict[Key, list[Run]]) -> str:
    """Per N, the rows against their baselines in the same run (medians over repetitions)."""
    out = []
    for n in sorted({k[0] for k in runs}):

        def m(w: int | None, ks: bool, f: Callable[[Run], float], n: int = n) -> float:
            return _med([f(r) for r in runs.get((n, w, ks), [])])

        def lag(r: Run) -> float:
            return pct(r.lag, 0.99)

        def err(r: Run) -> float:
            return pct(r.tpot_err, 0.99)

        def us(r: Run) -> float:
            return r.us_per_token

        out.append(
            f"- **{n} agents**: loop lag p99 {m(None, False, lag):.1f} ms in one process → "
            f"{m(2, False, lag):.1f} ms in the 2 workers' loops (loop stamps; kernel stamps "
            f"{m(None, True, lag):.1f} → {m(2, True, lag):.1f}); TPOT error p99 with loop "
            f"stamps {m(None, False, err):.2%} → {m(2, False, err):.2%}, with kernel stamps "
            f"{m(None, True, err):.2%} → {m(2, True, err):.2%}; client CPU per token "
            f"{m(None, False, us):.1f} → {m(2, False, us):.1f} µs (loop stamps)."
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="N agents × 848 tok/s: CPU, loop lag, TPOT error.")
    p.add_argument("--quick", action="store_true", help="short smoke run; never writes docs")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument("--reps", type=int, help="repetitions (default 5; quick 1)")
    p.add_argument("--agents", type=int, nargs="+", help="N values (default 50 100 200)")
    p.add_argument("--tokens", type=int, help="tokens per stream (default 1000; quick 200)")
    p.add_argument("--step-ms", type=float, default=STEP_MS, help="server step (ms)")
    p.add_argument("--no-pin", action="store_true", help="leave CPU placement to the OS")
    args = p.parse_args(argv)
    q = args.quick
    reps = args.reps or (1 if q else 5)
    agents = args.agents or ([10, 20] if q else [50, 100, 200])
    tokens = args.tokens or (200 if q else 1000)
    if tokens < 2 or reps < 1 or min(agents) < 1 or args.step_ms <= 0:
        p.error("--tokens must be ≥ 2, --reps, --agents and --step-ms > 0")
    load0 = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    t0 = time.perf_counter()
    runs, failures, where = run_all(agents, tokens, reps, args.step_ms, not args.no_pin)
    took = time.perf_counter() - t0
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    tab = table(runs, failures)
    proj = projection(runs, args.step_ms)
    comp = comparisons(runs)
    places = sorted(set(where.values()), reverse=True)
    busy = ""
    if load0 and float(load0[0]) > 0.5:
        busy = (
            f"\n\n**The machine was busy** (load average {load0[0]} when the run started, "
            f"on {len(CPUS) or '?'} CPUs): other processes took CPU time from the client and "
            "the server, which inflates loop lag, delay and TPOT error and can keep the "
            "server from its pace. It also tilts the comparison: a one-process client pinned "
            "to one CPU leaves the other processes to crowd the server's CPU and its own, "
            "while workers may run on either. Rerun on an idle machine for the figures that "
            "count."
        )
    marks = ""
    if "†" in tab:
        marks = (
            f"\n\n† The server wrote below {KEEP_PACE:.0%} of its step rate (it could not "
            "keep its pace: too little CPU for its writes): that row measured slower streams "
            "than 848 tok/s, in bursts."
        )
    facts = (
        f"{_common.machine()}; load average {' '.join(load0)} before and {' '.join(load)} "
        f"after the run; {dt.date.today().isoformat()}; {reps} repetitions, medians; "
        f"{tokens} tokens per stream, one per chunk, a step every {args.step_ms:g} ms "
        f"({1000 / args.step_ms:.0f} tok/s per agent); {'; '.join(places)}; "
        f"the run took {took / 60:.1f} min"
    )
    print(f"\n{facts}{busy}\n\n{tab}{marks}\n\n{comp}\n\n{target(runs)}\n\n{projection_text(proj)}")
    if q or args.no_write:
        return
    given = list(argv if argv is not None else sys.argv[1:])
    command = " ".join(["python benchmarks/agents_848.py", *given])
    start, end = _common.markers(NAME)
    text = (
        f"{start}\n## N agents × 848 tok/s against a step-paced server "
        f"(`benchmarks/agents_848.py`)\n\n"
        f"`{command}` — {facts}.{busy}\n\n"
        "The server (`_sse_server.py --step-ms`) writes the next token to every stream in "
        "one step and logs each write's time; the client is `Fleet(HTTPTransport(url, "
        "kernel_timestamps=…), max_concurrency=N, workers=…, callbacks=[count])` with a "
        "callback that reads every token. *Client cores*: the parent's and the workers' CPU "
        "from the first token the callback saw to the last, ÷ that wall time. *Loop lag*: "
        "how late a 1 ms probe timer ran in the loops that stamp the tokens (the workers' "
        "with workers), while the server wrote; epoll's millisecond timeout puts its floor "
        "near 1 ms. *Delay*: a token's client stamp minus the server's write time. *TPOT "
        "error*: per stream, `|agentflow's TPOT ÷ the write log's TPOT − 1|`, median and p99 "
        "over the streams. *Server slip*: how late the server's writes were against their "
        "step deadlines (its own timer also waits in whole milliseconds). All N streams get "
        "their token in the same step, so a client loop finds many sockets ready per wakeup: "
        "a token costs less here than in `client_overhead.py`'s paced rows, where every read "
        "is a wakeup of its own.\n\n"
        f"{tab}{marks}\n\n{comp}\n\n{target(runs)}\n\n{projection_text(proj)}\n{end}"
    )
    _common.write_section(NAME, text)
    print(f"\nwrote the {NAME} section of {_common.DOC.relative_to(_common.ROOT)}")


if __name__ == "__main__":
    main()
