"""Faults: how a fleet ends under injected faults, with and without its circuit breaker,
and when every replica is killed mid-run.

What is measured, for 1,000 two-turn sessions against simulator servers in child
processes over loopback HTTP, in real time: how many sessions complete, how long the
fleet takes to end, how it fails (error types; ``AllReplicasDown`` must name every
replica), and whether any turn was lost or doubled — every finished turn's token counts
are checked against the simulator's ground truth for its response id
(``GET /agentflow/requests/{id}``), response ids must be unique, and the requests the
server answered must equal the attempts the client accounted for.

Scenarios: one replica at 10% and at 35% faults, the rate shared equally by every
fault kind the simulator injects (429, 500, 503, reset, stall, malformed chunk, cut
stream); one replica and two replicas at 10% faults whose processes are all killed
(SIGKILL) once 30% of the turns have ended. Each runs with agentflow's default breaker
and with no breaker (a threshold no run reaches), alternating, ``--reps`` times; the
machine is shared and noisy, so the tables give medians and the breaker ÷ no-breaker
ratio of each repetition's pair. ``--legacy`` adds the breaker agentflow had before
issue 12 (five failures in a row, in the order requests end, open it on any replica),
with a cap on how long a run may take.

Usage::

    python benchmarks/faults.py            # full run (~5 min); rewrites its section of
                                           # docs/reliability.md
    python benchmarks/faults.py --legacy   # also the old breaker (several minutes more)
    python benchmarks/faults.py --quick    # smoke run (< 1 min); writes nothing
    python benchmarks/faults.py --no-write
    python benchmarks/faults.py --save F   # also keep the measurements in F (pickle)
    python benchmarks/faults.py --render F # rewrite the section from F, measuring nothing

Only the block between ``<!-- faults:start -->`` and ``<!-- faults:end -->`` in
``docs/reliability.md`` is replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import pickle
import signal
import statistics
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import _common
import aiohttp

from agentflow import (
    Agent,
    AllReplicasDown,
    Event,
    Fleet,
    Replica,
    RetryEvent,
    RetryPolicy,
    SessionEndEvent,
    SessionResult,
    Timeouts,
    TransportError,
    TurnEndEvent,
    TurnTrace,
)
from agentflow._process import ChildServer, free_port
from agentflow.sched import CircuitBreaker, ReplicaState, _replica
from agentflow.sim.faults import FAULT_KINDS
from agentflow.transport import Endpoint, HTTPTransport
from agentflow.typing import Clock

NAME = "faults"
DOC = _common.ROOT / "docs" / "reliability.md"
START, END = _common.markers(NAME)

SEED = 20261212
#: The simulator's fault flag for each kind.
FLAGS = {
    "rate_limit": "--fault-rate-limit",
    "server_error": "--fault-server-error",
    "unavailable": "--fault-unavailable",
    "reset_mid_stream": "--fault-reset",
    "stall_mid_stream": "--fault-stall",
    "malformed_chunk": "--fault-malformed",
    "cut_stream": "--fault-cut",
}
assert set(FLAGS) == set(FAULT_KINDS), "a fault kind the benchmark does not inject"
#: A deployment whose streams take a few tenths of a second: 100 tok/s for one sequence,
#: +0.1 ms per extra sequence, room for every stream at once.
PROFILE_SET = (
    "kv_capacity_tokens=1048576",
    "max_num_seqs=128",
    "max_model_len=4096",
    "max_num_batched_tokens=8192",
    "per_agent_tps=100.0",
)
ANSWER_TOKENS = (16, 48)
CAP = 64  # model requests in flight
IDLE_S = 1.0  # the client's idle limit: a stall is detected after this long
STALL_S = 5.0  # a stall fault's length
RETRY_AFTER_S = 1.0  # of 429 and 503 answers
KILL_AT = 0.6  # share of the turns that end before the servers are killed
#: A retry policy that retries every injected kind (malformed chunks included), with
#: attempts enough that retries are not what ends sessions.
POLICY = RetryPolicy(max_attempts=8, retry_protocol_errors=True)
#: With every replica killed: the defaults (4 attempts, ``give_up_after_s`` 120 s), every
#: injected kind retried.
KILLED_POLICY = RetryPolicy(retry_protocol_errors=True)
NO_BREAKER = 10**6  # a breaker threshold no run reaches (the docs say 10**6)
BREAKERS = {
    "rate": "default (rate over 20 outcomes, last closed held)",
    "none": "none",
    "legacy": "before issue 12 (5 in a row, may open the last replica)",
}


async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


AGENT = Agent(
    name="worker",
    model="cpu-tiny",
    instructions="Use the tool once, then answer.",
    tools=[lookup],
    params={"max_tokens": 128},
)


@dataclass(frozen=True, slots=True)
class Scenario:
    """One row group: a fault rate, how many replicas, whether they are all killed."""

    key: str
    label: str
    fault_rate: float
    replicas: int = 1
    kill: bool = False

    @property
    def policy(self) -> RetryPolicy:
        """:data:`POLICY`; with the replicas killed, :data:`KILLED_POLICY`."""
        return KILLED_POLICY if self.kill else POLICY


SCENARIOS = (
    Scenario("f10", "10% faults, 1 replica", 0.10),
    Scenario("f35", "35% faults, 1 replica", 0.35),
    Scenario("kill1", "10% faults, 1 replica, killed", 0.10, 1, True),
    Scenario("kill2", "10% faults, 2 replicas, both killed", 0.10, 2, True),
)


class LegacyBreaker(CircuitBreaker):
    """The breaker before issue 12: ``threshold`` failures in a row (5 of the last 5, in
    the order requests end) open it, on any replica, the last one too."""

    def __init__(
        self,
        clock: Clock,
        *,
        threshold: int = 5,
        failure_rate: float = 0.5,
        window: int = 20,
        cooldown_s: float = 5.0,
        max_cooldown_s: float = 60.0,
    ) -> None:
        super().__init__(
            clock,
            threshold=threshold,
            failure_rate=1.0,
            window=threshold,
            cooldown_s=cooldown_s,
            max_cooldown_s=max_cooldown_s,
        )

    def on_failure(self, probe: bool = False, *, may_open: bool = True) -> None:
        """Open even on the last closed replica, as the old breaker did."""
        super().on_failure(probe, may_open=True)


@contextlib.contextmanager
def breaker_class(kind: str) -> Iterator[None]:
    """Replicas built inside get the legacy breaker when ``kind`` is ``legacy``."""
    if kind != "legacy":
        yield
        return
    original = _replica.__dict__["CircuitBreaker"]
    _replica.__dict__["CircuitBreaker"] = LegacyBreaker
    try:
        yield
    finally:
        _replica.__dict__["CircuitBreaker"] = original


@dataclass(slots=True)
class Run:
    """One run of one scenario with one breaker."""

    scenario: str
    breaker: str
    rep: int
    sessions: int
    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    #: Seconds from the start to the last session's end; ``None``: the cap ended the run.
    end_s: float | None = None
    #: The median session's end, seconds from the start (``None``: it did not end).
    median_end_s: float | None = None
    ended: int = 0
    kill_s: float | None = None
    #: Sessions completed before the kill.
    completed_before_kill: int = 0
    turns: int = 0
    retries: int = 0
    attempts_client: int = 0
    attempts_server: int | None = None
    opened: int | None = None
    held: int | None = None
    #: Finished turns checked against the server's record, and what disagreed.
    checked: int = 0
    mismatched: int = 0
    missing: int = 0
    doubled: int = 0
    #: Turns that ended after the kill (their server's records died with it).
    unverified: int = 0
    #: Failed sessions whose AllReplicasDown did not name every replica.
    bad_down: int = 0

    @property
    def after_kill_s(self) -> float | None:
        if self.kill_s is None or self.end_s is None:
            return None
        return self.end_s - self.kill_s


def sim_cmd(port: int, rate: float) -> list[str]:
    cmd = [
        sys.executable, "-m", "agentflow.sim", "--host", "127.0.0.1", "--port", str(port),
        "--profile", "cpu-tiny", "--seed", str(SEED), "--tool-rounds", "1",
        "--answer-tokens", f"{ANSWER_TOKENS[0]}:{ANSWER_TOKENS[1]}",
        "--keep-records", "1000000", "--retry-after", f"{RETRY_AFTER_S:g}",
        "--stall-seconds", f"{STALL_S:g}", "--quiet",
    ]  # fmt: skip
    for s in PROFILE_SET:
        cmd += ["--profile-set", s]
    for kind in FAULT_KINDS:
        cmd += [FLAGS[kind], f"{rate / len(FAULT_KINDS):.6f}"]
    return cmd


def _stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/agentflow/stats", timeout=10) as r:
        stats: dict[str, Any] = json.load(r)
    return stats


def server_requests(port: int) -> int:
    """Chat requests the server answered: accepted ones plus those refused by a fault
    status (429, 500, 503 are answered before the request reaches the engine)."""
    s = _stats(port)
    statuses = ("rate_limit", "server_error", "unavailable")
    return int(s["driver"]["submitted"]) + sum(int(s["faults"].get(k, 0)) for k in statuses)


class Verifier:
    """Checks finished turns against the simulator's ground truth per response id."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.ports = ports  # endpoint → port
        self.pending: list[TurnTrace] = []
        self.seen: set[tuple[str, str]] = set()
        self.checked = self.mismatched = self.missing = self.doubled = 0

    def add(self, trace: TurnTrace) -> None:
        key = (trace.endpoint, trace.response_id or "")
        if key in self.seen or not trace.response_id:
            self.doubled += 1
        self.seen.add(key)
        self.pending.append(trace)

    async def drain(self, http: aiohttp.ClientSession) -> None:
        """Check every pending turn (16 requests at a time), until none is pending."""
        gate = asyncio.Semaphore(16)

        async def one(trace: TurnTrace) -> None:
            port = self.ports[trace.endpoint]
            url = f"http://127.0.0.1:{port}/agentflow/requests/{trace.response_id}"
            async with gate, http.get(url) as resp:
                if resp.status != 200:
                    self.missing += 1
                    return
                rec = await resp.json()
            self.checked += 1
            usage = trace.usage
            counted = sum(trace.chunk_tokens)
            ok = (
                usage is not None
                and usage.prompt_tokens == rec["prompt_tokens"]
                and usage.completion_tokens == rec["completion_tokens"]
                and counted == rec["completion_tokens"]
                and rec["finished"]
            )
            if not ok:
                self.mismatched += 1

        while self.pending:
            batch, self.pending = self.pending, []
            await asyncio.gather(*(one(t) for t in batch))


async def drive(sc: Scenario, breaker: str, rep: int, children: list[ChildServer], n: int) -> Run:
    ports = [c.port for c in children]
    endpoints = [
        Endpoint(base_url=f"http://127.0.0.1:{p}/v1", name=f"r{i}") for i, p in enumerate(ports)
    ]
    transports = [HTTPTransport(e, timeouts=Timeouts(idle=IDLE_S)) for e in endpoints]
    names = {f"r{i}" for i in range(len(ports))}
    run = Run(sc.key, breaker, rep, n)
    verifier = Verifier({t.endpoint: p for t, p in zip(transports, ports, strict=True)})
    ends: dict[str, tuple[float, SessionResult]] = {}
    turns_ended = 0
    kill_due = asyncio.Event()
    states: list[ReplicaState] = []
    t0 = time.perf_counter()
    http = aiohttp.ClientSession()

    async def checker() -> None:
        """In the killed runs: check finished turns as they come, so that few are left
        when the kill is due; then kill once none is pending — the records die with the
        servers — with no await between the last check and the kill, so no turn ends
        unchecked in between."""
        while True:
            await verifier.drain(http)
            if kill_due.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kill_due.wait(), 0.2)
        for c in children:
            if c.pid is not None:
                os.kill(c.pid, signal.SIGKILL)
        run.kill_s = time.perf_counter() - t0
        run.completed_before_kill = sum(1 for _, r in ends.values() if r.status == "completed")

    checking = asyncio.get_running_loop().create_task(checker()) if sc.kill else None

    def on_event(event: Event) -> None:
        nonlocal turns_ended
        if not states and fleet._scheduler is not None:  # to read breakers after a cut
            states.extend(fleet._scheduler.replicas)
        if isinstance(event, TurnEndEvent):
            turns_ended += 1
            if run.kill_s is None:
                verifier.add(event.trace)
            else:
                run.unverified += 1
            if sc.kill and turns_ended >= KILL_AT * 2 * n:
                kill_due.set()
        elif isinstance(event, RetryEvent):
            run.retries += 1
        elif isinstance(event, SessionEndEvent) and event.result.status != "cancelled":
            # (cancelled: the run's cap cut it, so it did not end)
            ends[event.session_id] = (time.perf_counter() - t0, event.result)

    threshold = NO_BREAKER if breaker == "none" else 5
    replicas = [
        Replica(transport=t, name=e.name, breaker_threshold=threshold)
        for t, e in zip(transports, endpoints, strict=True)
    ]
    fleet = Fleet(replicas, max_concurrency=CAP, retry=sc.policy, callbacks=[on_event])
    sessions = [AGENT.session(f"Task {i}: look up item {i}.", session_id=f"s{i}") for i in range(n)]
    try:
        result = await asyncio.wait_for(fleet.run(sessions), CAP_S)
        run.opened = sum(r.breaker_opened for r in result.replicas)
        run.held = sum(r.breaker_held for r in result.replicas)
    except TimeoutError:  # cut at the cap: read the breakers directly
        run.opened = sum(st.breaker.opened for st in states) if states else None
        run.held = sum(st.breaker.held for st in states) if states else None
    finally:
        if checking is not None:
            kill_due.set()  # a run that ended before the kill was due still ends with one
            await checking
        for t in transports:
            await t.aclose()
    if not sc.kill:
        await verifier.drain(http)
    await http.close()
    run.checked, run.mismatched = verifier.checked, verifier.mismatched
    run.missing, run.doubled = verifier.missing, verifier.doubled
    run.ended = len(ends)
    run.end_s = max(t for t, _ in ends.values()) if len(ends) == n else None
    if 2 * len(ends) > n:  # else the median session did not end before the cap
        run.median_end_s = statistics.median(
            [t for t, _ in ends.values()] + [CAP_S] * (n - len(ends))
        )
    for _, r in ends.values():
        run.turns += len(r.turns)
        if r.status == "completed":
            run.completed += 1
            continue
        run.errors[type(r.error).__name__] += 1
        if isinstance(r.error, AllReplicasDown) and set(r.error.replicas) != names:
            run.bad_down += 1
    wire_errors = sum(1 for _, r in ends.values() if isinstance(r.error, TransportError))
    run.attempts_client = run.turns + run.retries + wire_errors
    if not sc.kill and len(ends) == n:
        run.attempts_server = sum(server_requests(p) for p in ports)
    return run


CAP_S = 120.0  # the longest one run may take (only the legacy breaker comes near it)


def run_one(sc: Scenario, breaker: str, rep: int, n: int) -> Run:
    """Fresh simulator processes, one fleet run, the servers stopped (if still alive)."""
    ports = [free_port() for _ in range(sc.replicas)]
    children = [
        ChildServer(sim_cmd(port, sc.fault_rate), port=port, name=f"sim r{i}")
        for i, port in enumerate(ports)
    ]
    with contextlib.ExitStack() as stack:
        for c in children:
            stack.enter_context(c)
        with breaker_class(breaker):
            run = asyncio.run(drive(sc, breaker, rep, children, n))
    _progress(run)
    return run


def _progress(r: Run) -> None:
    end = f"{r.end_s:.1f} s" if r.end_s is not None else f"not all ended in {CAP_S:g} s ({r.ended})"
    after = f"{r.after_kill_s:.1f} s after" if r.after_kill_s is not None else "not all ended"
    kill = f", killed at {r.kill_s:.1f} s, {after}" if r.kill_s else ""
    print(
        f"  {r.scenario:5} {r.breaker:6} rep {r.rep}: {r.completed}/{r.sessions} completed, "
        f"ended {end}{kill}; errors {dict(r.errors)}; retries {r.retries}; "
        f"attempts {r.attempts_client}/{r.attempts_server}; opened {r.opened} held {r.held}; "
        f"checked {r.checked} mismatched {r.mismatched} missing {r.missing} doubled {r.doubled} "
        f"unverified {r.unverified} bad_down {r.bad_down}",
        flush=True,
    )


# -- the section --------------------------------------------------------------------------


def _med(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def _span(xs: Sequence[float]) -> str:
    return f"{min(xs):.1f}–{max(xs):.1f}" if len(xs) > 1 else "–"


def _time_cell(runs: Sequence[Run], attr: str) -> str:
    xs = [getattr(r, attr) for r in runs]
    if any(x is None for x in xs):
        ended = ", ".join(str(r.ended) for r in runs)
        return f"**not all ended in {CAP_S:g} s** (ended: {ended} of {runs[0].sessions})"
    return f"**{_med(xs):.1f}** ({_span(xs)})"


def _ratio_cell(runs: Sequence[Run], base: Sequence[Run], attr: str) -> str:
    by_rep = {b.rep: b for b in base}
    pairs = [(getattr(a, attr), getattr(by_rep[a.rep], attr)) for a in runs]
    if any(a is None or b is None or b <= 0 for a, b in pairs):
        return "–"
    ratios = [a / b for a, b in pairs]
    span = f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else ""
    return f"{_med(ratios):.2f}×{span}"


def _errors_cell(runs: Sequence[Run]) -> str:
    total: Counter[str] = Counter()
    for r in runs:
        total.update(r.errors)
    if not total:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in total.most_common())


def _checks_cell(runs: Sequence[Run]) -> str:
    checked = sum(r.checked for r in runs)
    bad = sum(r.mismatched + r.missing + r.doubled for r in runs)
    unverified = sum(r.unverified for r in runs)
    tail = f"; {unverified} ended after the kill, unchecked" if unverified else ""
    return f"{checked:,} checked, **{bad}** wrong{tail}"


def _attempts_cell(runs: Sequence[Run]) -> str:
    if any(r.end_s is None for r in runs):  # cut at the cap: not every attempt is known
        return "–"
    if any(r.attempts_server is None for r in runs):
        return f"{_med([r.attempts_client for r in runs]):,.0f} (client)"
    same = all(r.attempts_server == r.attempts_client for r in runs)
    return (
        f"{_med([r.attempts_client for r in runs]):,.0f} ({'= server' if same else '**≠ server**'})"
    )


def _breaker_cell(runs: Sequence[Run]) -> str:
    if any(r.opened is None for r in runs):
        return "–"
    opened = _med([float(r.opened or 0) for r in runs])
    held = _med([float(r.held or 0) for r in runs])
    return f"{opened:.0f} / {held:.0f}"


def table(runs: list[Run], scenarios: Sequence[Scenario], breakers: Sequence[str]) -> str:
    head = (
        "| scenario | breaker | sessions completed (median) | failed sessions: error (all runs) "
        "| time to end, s: median (min–max) | × no breaker (paired, median (min–max)) "
        "| a session's median end, s | × no breaker "
        "| after the kill, s: median (min–max) | × no breaker | attempts: client (vs server) "
        "| breaker opened / held (median) | turns vs ground truth (all runs) |\n"
        "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"
    )
    rows = [head]
    for sc in scenarios:
        base = [r for r in runs if r.scenario == sc.key and r.breaker == "none"]
        for b in breakers:
            rs = [r for r in runs if r.scenario == sc.key and r.breaker == b]
            if not rs:
                continue
            completed = f"{_med([r.completed for r in rs]):,.0f} of {rs[0].sessions:,}"
            x_end = _ratio_cell(rs, base, "end_s") if b != "none" else "1"
            x_med = _ratio_cell(rs, base, "median_end_s") if b != "none" else "1"
            after, x_after = "–", "–"
            if sc.kill:
                after = _time_cell(rs, "after_kill_s")
                x_after = _ratio_cell(rs, base, "after_kill_s") if b != "none" else "1"
            rows.append(
                f"| {sc.label} | {BREAKERS[b]} | {completed} | {_errors_cell(rs)} "
                f"| {_time_cell(rs, 'end_s')} | {x_end} | {_time_cell(rs, 'median_end_s')} "
                f"| {x_med} | {after} | {x_after} "
                f"| {_attempts_cell(rs)} | {_breaker_cell(rs)} | {_checks_cell(rs)} |"
            )
    return "\n".join(rows)


def _plain(runs: Sequence[Run], attr: str) -> str:
    return _time_cell(runs, attr).replace("**", "")


def _legacy_text(legacy: Sequence[Run], none: Sequence[Run], kill: bool) -> str:
    (r,) = legacy[:1]
    opened = f"; its breaker opened {r.opened} times" if r.opened is not None else ""
    if r.end_s is None:
        when = f"{CAP_S - (r.kill_s or 0.0):.0f} s after the kill" if kill else f"after {CAP_S:g} s"
        return (
            f" The old breaker (one run): {when}, {r.ended:,} of {r.sessions:,} sessions had"
            f" ended, and the run was cut{opened} — turns waited on its open breaker, whose"
            " cooldown doubles up to 60 s, and only its probes used retry attempts."
        )
    base = {b.rep: b for b in none}.get(r.rep)
    if kill:
        return f" The old breaker (one run): {r.after_kill_s:.1f} s after the kill{opened}."
    ratio = (
        f", {r.end_s / base.end_s:.2f}× the no-breaker run of its repetition"
        if (base is not None and base.end_s)
        else ""
    )
    return f" The old breaker (one run): {r.end_s:.1f} s{ratio}{opened}."


def findings(runs: list[Run], scenarios: Sequence[Scenario]) -> str:
    out = []
    for sc in scenarios:
        rate = [r for r in runs if r.scenario == sc.key and r.breaker == "rate"]
        none = [r for r in runs if r.scenario == sc.key and r.breaker == "none"]
        legacy = [r for r in runs if r.scenario == sc.key and r.breaker == "legacy"]
        if not rate or not none:
            continue
        if not sc.kill:
            held = sum(r.held or 0 for r in rate)
            same = all(
                a.attempts_client == b.attempts_client for a in rate for b in none if a.rep == b.rep
            )
            text = (
                f"*{sc.label}.* With the default breaker "
                f"{_med([r.completed for r in rate]):,.0f} of {rate[0].sessions:,} sessions "
                f"completed (median) and the fleet ended in {_plain(rate, 'end_s')} s; with "
                f"none, {_med([r.completed for r in none]):,.0f} in {_plain(none, 'end_s')} s: "
                f"{_ratio_cell(rate, none, 'end_s')} the no-breaker time, pair by pair "
                f"({_ratio_cell(rate, none, 'median_end_s')} for a session's median end). "
                f"Over {len(rate)} run{'s' if len(rate) > 1 else ''} the breaker opened "
                f"{sum(r.opened or 0 for r in rate)} "
                f"times and was held closed {held:,} times"
            )
            text += (
                ": it judged the replica failing, but it was the last closed one, and "
                "opening it would have queued every turn behind one probe."
                if held
                else "."
            )
            if same:
                text += (
                    " Both sent exactly the same number of requests: the same requests, so the"
                    " time differences are the machine's noise and the retries' jitter."
                )
            if legacy:
                text += _legacy_text(legacy, none, kill=False)
        else:
            failed = sum(sum(r.errors.values()) for r in rate)
            downs = sum(r.errors.get("AllReplicasDown", 0) for r in rate)
            bad = sum(r.bad_down for r in rate + none)
            before = sum(r.completed_before_kill for r in rate)
            text = (
                f"*{sc.label}.* After the kill every session ended, the last one "
                f"{_plain(rate, 'after_kill_s')} s after it with the default breaker and "
                f"{_plain(none, 'after_kill_s')} s with none. With the breaker, {downs:,} of "
                f"the {failed:,} sessions that failed (all runs) failed with `AllReplicasDown`"
                f" ({bad} without every replica's name)"
                + (
                    "; the others failed before the kill, their attempts spent on injected"
                    " faults while the fleet was up"
                    if failed > downs
                    else ""
                )
                + f". {before:,} sessions (all runs) had completed before the kill. No turn"
                " waited on a"
                f" breaker: each spent its {KILLED_POLICY.max_attempts} attempts (connection"
                " refused at once, jittered backoff of at most 0.5 + 1 + 2 s) and failed."
                " Without a breaker nothing judges the fleet down, and each session fails"
                " with its own last error."
            )
            if legacy:
                text += _legacy_text(legacy, none, kill=True)
        out.append(text)
    return "\n\n".join(out)


@dataclass(slots=True)
class Measured:
    """Everything a section is written from (``--save`` keeps it, ``--render`` reads it)."""

    runs: list[Run]
    breakers: list[str]
    argv: list[str]
    reps: int
    sessions: int
    machine: str
    when: str = field(
        default_factory=lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    )


def section(m: Measured) -> str:
    runs, breakers, argv, reps, n, when = m.runs, m.breakers, m.argv, m.reps, m.sessions, m.when
    scenarios = SCENARIOS
    cmd = " ".join(["python benchmarks/faults.py", *argv])
    kinds = ", ".join(f"`{k}`" for k in FAULT_KINDS)
    return f"""{START}
Measured {when} on {m.machine}.
Command: `{cmd}`; {reps} repetitions of every row (the old breaker's, if any: one),
rows alternating within each.

{table(runs, scenarios, breakers)}

{findings(runs, scenarios)}

**Method.** {n:,} sessions of one agent, two turns each (a tool call, then an answer of
{ANSWER_TOKENS[0]}–{ANSWER_TOKENS[1]} tokens), at most {CAP} model requests in flight,
against `python -m agentflow.sim` servers in child processes on loopback, in real time
(profile `cpu-tiny` with {", ".join(f"`{s}`" for s in PROFILE_SET)}: a stream of 30
tokens takes about 0.3–0.5 s). Faults: the simulator's seeded injection, the rate
shared equally by {kinds} (`Retry-After: {RETRY_AFTER_S:g}` on 429 and 503; a stall
lasts {STALL_S:g} s and the client's idle limit of {IDLE_S:g} s turns it into a
`StreamTimeout`); the draws depend only on each request's body and how often it was
seen, so every run meets the same faults. Retries:
`RetryPolicy(max_attempts={POLICY.max_attempts}, retry_protocol_errors=True)`, otherwise
the defaults (full-jitter backoff from 0.5 s, `give_up_after_s={POLICY.give_up_after_s:g}`),
so that every injected kind is retried and the attempt budget rarely ends a session;
in the killed runs the default `RetryPolicy(retry_protocol_errors=True)`
({KILLED_POLICY.max_attempts} attempts). *Breakers*: the default
`Replica()` breaker; "none" is `Replica(breaker_threshold=10**6)`, a threshold no run
reaches; "before issue 12" (only with `--legacy`) is a subclass
configured as the old breaker was — it opens after 5 failures in a row, in the order
requests end, even on the last replica. *Killed*: once {KILL_AT:.0%} of the turns have
ended, every server process gets SIGKILL; "after the kill" runs from then to the last
session's end. *Time to end*: from the start of `Fleet.run` to the last session's end
(a run is cut at {CAP_S:g} s); it is the slowest session's, set by its chain of jittered
waits, so a session's median end is given too. *Attempts*: the client's count — finished turns,
`RetryEvent`s, and each session that ended on a wire error — against the requests the
server answered (its `submitted` counter plus the 429/500/503 it answered before the
engine), which must be equal: nothing sent twice unaccounted, nothing lost. *Ground
truth*: every finished turn's response id is looked up on its server (`GET
/agentflow/requests/{{id}}`); its prompt and completion tokens (the usage the client
kept, and the tokens the client counted chunk by chunk) must equal the server's record,
the record must be finished, and no (server, id) may appear twice. In the killed runs
finished turns are checked as they come, and the kill is sent as soon as none is
waiting to be checked (no await between the last check and the kill); turns that
complete after it are counted as unchecked. A session's error is the one on its `SessionResult`.
{END}"""


# -- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smoke run (< 1 min); writes nothing")
    p.add_argument("--no-write", action="store_true", help="do not touch docs/reliability.md")
    p.add_argument("--reps", type=int, default=None, help="repetitions of every row (2)")
    p.add_argument("--sessions", type=int, default=None, help="sessions per run (1000)")
    p.add_argument(
        "--legacy", action="store_true", help="also the breaker before issue 12 (first rep only)"
    )
    p.add_argument("--scenarios", default=",".join(s.key for s in SCENARIOS))
    p.add_argument("--save", metavar="FILE", help="also pickle the measurements to FILE")
    p.add_argument(
        "--render", metavar="FILE", help="measure nothing: write the section from a --save FILE"
    )
    args = p.parse_args(argv)
    if args.render:
        with open(args.render, "rb") as f:
            saved: Measured = pickle.load(f)
        _common.write_section(NAME, section(saved), DOC)
        print(f"wrote the {NAME} section of {DOC.relative_to(_common.ROOT)}")
        return
    q = args.quick
    reps = args.reps or (1 if q else 2)
    n = args.sessions or (100 if q else 1000)
    keys = args.scenarios.split(",")
    scenarios = [s for s in SCENARIOS if s.key in keys]
    breakers = ["rate", "none"] + (["legacy"] if args.legacy else [])
    runs: list[Run] = []
    for rep in range(reps):
        for sc in scenarios:
            order = breakers if rep % 2 == 0 else breakers[::-1]
            for b in order:
                if b == "legacy" and rep > 0:  # slow: one repetition
                    continue
                runs.append(run_one(sc, b, rep, n))
    print()
    print(table(runs, scenarios, breakers))
    print()
    print(findings(runs, scenarios))
    if q or args.no_write:
        return
    if len(scenarios) != len(SCENARIOS):
        print("not writing docs: a full run needs every scenario")
        return
    given = list(sys.argv[1:] if argv is None else argv)
    if args.save:  # not part of what was measured
        i = given.index("--save")
        given = given[:i] + given[i + 2 :]
    machine = _common.machine(("agentflow", "aiohttp", "tenacity"))
    measured = Measured(runs, breakers, given, reps, n, machine)
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(measured, f)
    _common.write_section(NAME, section(measured), DOC)
    print(f"wrote the {NAME} section of {DOC.relative_to(_common.ROOT)}")


if __name__ == "__main__":
    main()
