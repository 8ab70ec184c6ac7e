"""Scheduling and routing on the simulator: agentflow's Fleet vs ``asyncio.gather`` + ``Semaphore``.

What is measured: how long agents take to finish (mean and p99 agent completion time),
fleet throughput (output tokens/s), the servers' prefix-cache hit rate (cached / prompt
tokens, from the usage every response reports) and preemptions (from the engines'
counters), for the baseline people write today — ``asyncio.gather`` over the sessions, an
``asyncio.Semaphore(N)`` around each model call, calls sent round-robin over the
replicas — and for agentflow's :class:`~agentflow.Fleet` with each scheduling policy
(``fcfs``, ``fair``, ``plas``, ``priority``, ``deadline``) and two routers (sticky +
prefix-affine, agentflow's default; and round-robin), all under the same concurrency cap.
And the CPU the scheduler and router cost per dispatched turn with 10,000 sessions queued.

How: a workload of agentic sessions under KV pressure (``docs/benchmarks.md`` defines it
exactly; :func:`make_workload`) runs against several simulator replicas. The main
comparison runs in virtual time: one :class:`~agentflow.embedded.VirtualTimeLoop`, one
:class:`~agentflow.sim.driver.EngineDriver` per replica, the real Fleet, scheduler,
router and session code talking to them through :class:`~agentflow.embedded.SimTransport`
— deterministic, and minutes of modelled time in seconds. Two arrival patterns: every
agent at once (what ``gather`` over a list of sessions does) and a Poisson burst. A
smaller run of the same workload then goes over real HTTP, against simulator servers in
child processes on loopback at a time scale, to confirm that the ranking holds; the same
small workload also runs in virtual time, for comparison. The overhead part drives
:meth:`Scheduler.acquire` / :meth:`Scheduler.release` (and :meth:`TurnRunner.send`)
directly, against a bare ``asyncio.Semaphore`` in the same run. The session-cost part
(issue 15) runs whole :class:`~agentflow.Fleet` runs of 10,000 and 100,000 sessions on an
in-process no-op transport against ``gather`` + ``Semaphore`` in the same run: bytes and
tracked objects per queued session, and CPU per turn.

Usage::

    python benchmarks/scheduling.py            # full run (~7 min); rewrites its section
                                               # of docs/benchmarks.md
    python benchmarks/scheduling.py --quick    # smoke run (< 1 min); writes nothing
    python benchmarks/scheduling.py --no-write
    python benchmarks/scheduling.py --save F   # also keep the measurements in F (pickle)
    python benchmarks/scheduling.py --render F # rewrite the section from F, measuring nothing
    python benchmarks/scheduling.py --session-cost  # only the session-cost part (~8 min);
                                               # rewrites only its own section

Only the blocks between ``<!-- scheduling:start -->`` and ``<!-- scheduling:end -->``
(and ``<!-- scheduling-sessions:start/end -->``, the session-cost part) in
``docs/benchmarks.md`` are replaced (appended at the end if the markers are missing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import gc
import itertools
import json
import math
import os
import pickle
import random
import statistics
import sys
import time
import tracemalloc
import urllib.request
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import _common

from agentflow import Agent, Fleet, Session, SessionResult, Tool, ToolCall, TurnTrace
from agentflow._errors import ToolError
from agentflow._process import ChildServer, free_port
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.planner import Deployment, get_hardware, get_model, plan
from agentflow.sched import (
    FCFS,
    PLAS,
    Deadline,
    FairShare,
    Limits,
    Policy,
    Priority,
    Replica,
    ReplicaState,
    Router,
    Scheduler,
    Ticket,
    TurnRunner,
)
from agentflow.sim import Engine, Profile, TextGenConfig, Tokenizer
from agentflow.sim.driver import EngineDriver
from agentflow.transport import ChatRequest, Endpoint, HTTPTransport
from agentflow.typing import DeltaSink, Transport

NAME = "scheduling"
START, END = _common.markers(NAME)

# -- the deployment -----------------------------------------------------------------------

MODEL = "qwen2.5-coder-32b"
SEED = 20261201
MAX_MODEL_LEN = 65_536

PROFILE_SOURCES = (
    "Qwen2.5-Coder-32B (64 layers, 8 KV heads × 128, bf16) on 2 × H100 SXM 80 GB "
    "(3.35 TB/s, 989 TFLOP/s dense bf16 each), TP 2. KV capacity: agentflow.planner "
    "(262,144 B/token, 0.90 utilisation). Decode: each step reads 65 GB of weights, "
    "32.5 GB a GPU, ≈12.5 ms at ~80% of HBM bandwidth → 80 tok/s alone at 4k context; "
    "+49 ns per attended token (128 KiB of KV a GPU at 2.7 TB/s); +20 µs per sequence. "
    "Prefill: 65 GFLOP/token at 40% of 2 × 989 TFLOP/s ≈ 12,200 tok/s; attention "
    "4 × 5120 × 64 FLOP per token pair at that rate ≈ 1.66 ns. Estimates."
)


def planned_kv_tokens() -> int:
    """KV capacity of one replica: Qwen2.5-Coder-32B on 2 × H100 80 GB, TP 2, bf16 KV."""
    d = Deployment(
        name="qwen2.5-coder-32b-h100-tp2",
        model=get_model(MODEL),
        hardware=get_hardware("hgx-h100"),
        gpus=2,
        tp=2,
    )
    return int(plan(d).kv_tokens_total)


def replica_profile(kv_tokens: int) -> Profile:
    """One replica: Qwen2.5-Coder-32B (bf16) on 2 × H100 80 GB, tensor-parallel 2.

    Every figure but the KV capacity (agentflow.planner's) is an estimate; the
    arithmetic is in :data:`PROFILE_SOURCES`.
    """
    return Profile(
        name="qwen2.5-coder-32b-h100-tp2",
        model=MODEL,
        description="Qwen2.5-Coder-32B, TP 2 on 2 × H100 80 GB (benchmarks/scheduling.py)",
        kv_capacity_tokens=kv_tokens,
        max_num_seqs=256,
        max_model_len=min(MAX_MODEL_LEN, kv_tokens // 16 * 16),
        max_num_batched_tokens=8192,
        prefill_tps=12_200.0,
        prefill_per_ctx_token_s=1.66e-9,
        per_agent_tps=80.0,
        calibration_context_tokens=4096,
        decode_per_seq_s=2e-5,
        decode_per_ctx_token_s=4.9e-8,
        sources=PROFILE_SOURCES,
    )


#: The profile fields the HTTP servers get through ``--profile-set`` (on the shipped
#: qwen2.5-coder-32b profile).
PROFILE_SET = (
    "name",
    "kv_capacity_tokens",
    "max_num_seqs",
    "max_model_len",
    "max_num_batched_tokens",
    "prefill_tps",
    "prefill_per_ctx_token_s",
    "per_agent_tps",
    "calibration_context_tokens",
    "decode_per_seq_s",
    "decode_per_ctx_token_s",
)


# -- the workload -------------------------------------------------------------------------

#: Every turn's output limit (never reached: answers are ≤ 768 tokens, tool calls shorter).
MAX_TOKENS = 2048
#: The simulator's final answers: uniform in 64–768 tokens.
ANSWER_TOKENS = (64, 768)
#: Turns per agent: ⌊5 · U^(−1/1.1)⌋ (a Pareto with α = 1.1), cut at 50.
TURNS_MIN, TURNS_MAX, TURNS_ALPHA = 5, 50, 1.1
#: Result sizes and tool latencies are lognormal around each tool's median, cut at a multiple.
RESULT_SIGMA, RESULT_CUT = 0.6, 4.0
LATENCY_SIGMA, LATENCY_CUT = 0.8, 8.0

_WORDS = """the of and to in is that for it as with was on be by this are from at or an
which but not have has had were can all their there been if more when will would who so
no agent fleet token cache prefix queue step batch model value error test file build
run check read write find keep make use show start stop wait send count time first last
each every other same new old small large fast slow good fix add table row query sort
join index page note item user order plan task scope owner field type rule case state
""".split()


@dataclass(frozen=True, slots=True)
class ToolDef:
    """One tool of an agent kind: its arguments' schema, its result size and latency."""

    name: str
    description: str
    parameters: dict[str, Any]
    #: Median tokens of its result.
    result_tokens: int
    #: Median seconds it takes.
    latency_s: float


def _args(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


def _text(lo: int = 0, hi: int = 40, **more: Any) -> dict[str, Any]:
    return {"type": "string", "minLength": lo, "maxLength": hi, **more}


@dataclass(frozen=True, slots=True)
class KindDef:
    """An agent kind: its own system prompt and tools — a prefix its sessions share."""

    name: str
    share: float
    prompt_words: int
    priority: int
    slo_s: float
    tools: tuple[ToolDef, ...]


KINDS: tuple[KindDef, ...] = (
    KindDef(
        "coder",
        0.40,
        3000,
        0,
        30.0,
        (
            ToolDef("read_file", "Read lines of a file.", _args(path=_text(8, 40)), 700, 0.05),
            ToolDef("search_code", "Search the repository.", _args(query=_text(4, 30)), 300, 0.4),
            ToolDef(
                "edit_file",
                "Replace a block of a file with new code.",
                _args(path=_text(8, 40), new_code=_text(300, 2400)),
                30,
                0.05,
            ),
            ToolDef("run_tests", "Run a test module.", _args(path=_text(8, 40)), 400, 4.0),
        ),
    ),
    KindDef(
        "research",
        0.25,
        1500,
        0,
        30.0,
        (
            ToolDef("web_search", "Search the web.", _args(query=_text(8, 60)), 450, 1.5),
            ToolDef(
                "fetch_page", "Fetch a page as text.", _args(url=_text(format="uri")), 1200, 2.0
            ),
            ToolDef("save_note", "Save a note.", _args(text=_text(200, 1200)), 10, 0.05),
        ),
    ),
    KindDef(
        "analyst",
        0.20,
        2000,
        0,
        30.0,
        (
            ToolDef("run_sql", "Run a SQL query.", _args(sql=_text(60, 600)), 500, 3.0),
            ToolDef(
                "describe_table",
                "Describe a table.",
                _args(table={"type": "string", "enum": ["orders", "users", "events", "items"]}),
                300,
                0.2,
            ),
            ToolDef("make_chart", "Render a chart.", _args(spec=_text(40, 400)), 40, 1.0),
        ),
    ),
    KindDef(
        "support",
        0.15,
        1000,
        1,
        5.0,
        (
            ToolDef(
                "lookup_customer",
                "Look a customer up.",
                _args(email=_text(format="email")),
                200,
                0.3,
            ),
            ToolDef("search_kb", "Search the help centre.", _args(query=_text(8, 60)), 500, 0.5),
            ToolDef("send_reply", "Reply to the customer.", _args(text=_text(100, 800)), 20, 0.05),
        ),
    ),
)
_KIND = {k.name: k for k in KINDS}


@dataclass(frozen=True, slots=True)
class SessionSpec:
    session_id: str
    kind: str
    turns: int
    arrival_s: float
    task: str


@dataclass(frozen=True, slots=True)
class Scenario:
    """A workload: how many agents, when they arrive, the cap, the replicas and their KV."""

    key: str
    label: str
    agents: int
    cap: int
    replicas: int
    kv_tokens: int
    #: Agents arrive as a Poisson process over about this long; 0: all at once.
    window_s: float

    @property
    def profile(self) -> Profile:
        return replica_profile(self.kv_tokens)

    @property
    def sessions(self) -> tuple[SessionSpec, ...]:
        return make_workload(self.agents, self.window_s)


def _prose(rng: random.Random, words: int) -> str:
    out: list[str] = []
    for i in range(words):
        w = rng.choice(_WORDS)
        out.append(w.capitalize() if i % 12 == 0 else w)
        if i % 12 == 11:
            out.append(".\n" if i % 60 == 59 else ".")
    return " ".join(out)


def instructions(kind: KindDef) -> str:
    """The kind's system prompt (deterministic)."""
    return f"You are the {kind.name} agent.\n" + _prose(
        random.Random(f"{SEED}/{kind.name}"), kind.prompt_words
    )


@functools.lru_cache(maxsize=8)
def make_workload(agents: int, window_s: float, seed: int = SEED) -> tuple[SessionSpec, ...]:
    """The sessions: kind, turns and task from one seeded stream, arrivals from another.

    The first ``n`` sessions of a bigger workload are the sessions of a workload of ``n``.
    """
    rng = random.Random(seed)
    arrivals = random.Random(f"{seed}/arrivals")
    shares = [k.share for k in KINDS]
    specs: list[SessionSpec] = []
    t = 0.0
    for i in range(agents):
        kind = rng.choices(KINDS, weights=shares)[0]
        u = 1.0 - rng.random()  # (0, 1]
        turns = min(TURNS_MAX, int(TURNS_MIN * u ** (-1.0 / TURNS_ALPHA)))
        task = f"Task {i} for the {kind.name} agent: " + _prose(rng, rng.randint(20, 80))
        specs.append(SessionSpec(f"{kind.name}-{i:04d}", kind.name, turns, t, task))
        if window_s > 0:
            t += arrivals.expovariate(agents / window_s)
    return tuple(specs)


_OUTCOMES: dict[str, tuple[float, str]] = {}


def tool_outcome(kind: str, tool: ToolDef, kwargs: dict[str, Any]) -> tuple[float, str]:
    """A call's latency (modelled seconds) and result, a function of its arguments only."""
    key = f"{kind}/{tool.name}/{sorted(kwargs.items())!r}"
    hit = _OUTCOMES.get(key)
    if hit is None:
        rng = random.Random(key)
        latency = min(
            tool.latency_s * rng.lognormvariate(0.0, LATENCY_SIGMA), LATENCY_CUT * tool.latency_s
        )
        n = tool.result_tokens * rng.lognormvariate(0.0, RESULT_SIGMA)
        n = max(5, int(min(n, RESULT_CUT * tool.result_tokens)))
        text = " ".join([rng.choice(_WORDS) for _ in range(n)])
        hit = _OUTCOMES[key] = (latency, text)
    return hit


def make_tools(kind: KindDef, scale: float) -> list[Tool]:
    """The kind's tools: each sleeps its latency × ``scale`` and returns its result."""

    def fn_for(td: ToolDef) -> Callable[..., Awaitable[str]]:
        async def fn(**kwargs: Any) -> str:
            latency, text = tool_outcome(kind.name, td, kwargs)
            await asyncio.sleep(latency * scale)
            return text

        return fn

    return [
        Tool(
            name=td.name,
            description=td.description,
            parameters=td.parameters,
            fn=fn_for(td),
            in_thread=False,
        )
        for td in kind.tools
    ]


def make_agents(specs: Sequence[SessionSpec], scale: float) -> dict[str, Agent]:
    """One agent per session (its turn count rides in its params); kinds share prefixes."""
    tools = {k.name: make_tools(k, scale) for k in KINDS}
    prompts = {k.name: instructions(k) for k in KINDS}
    return {
        s.session_id: Agent(
            name=s.kind,
            model=MODEL,
            instructions=prompts[s.kind],
            tools=tools[s.kind],
            params={
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
                "agentflow_tool_rounds": s.turns - 1,
            },
            max_turns=s.turns + 2,
            priority=_KIND[s.kind].priority,
        )
        for s in specs
    }


def prefix_tokens(kind: KindDef) -> int:
    """Tokens of the kind's shared prefix: system prompt + tool schemas, as the sim renders them."""
    agent = Agent(name=kind.name, model=MODEL, tools=make_tools(kind, 1.0))
    rendered = Tokenizer().render_chat(
        [{"role": "system", "content": instructions(kind)}], agent.tool_specs
    )
    return len(rendered)


# -- what a run measured ------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """One session, times in modelled seconds from the start of the run."""

    session_id: str
    kind: str
    turns: int
    arrival_s: float
    end_s: float
    output_tokens: int
    prompt_tokens: int
    cached_tokens: int
    ok: bool
    #: Waiting for a slot at the client (the semaphore, or the scheduler's queue).
    queue_s: float
    #: Model calls, from sending to the end of the stream (server queue included).
    model_s: float
    #: The longest prompt of its turns.
    max_prompt_tokens: int = 0


@dataclass(slots=True)
class RunResult:
    variant: str
    scenario: str
    outcomes: list[Outcome]
    preemptions: int
    prefill_tokens: int
    evictions: int
    cpu_s: float
    lag_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    def completion(self, turns: tuple[int, int] = (0, 10**9)) -> list[float]:
        lo, hi = turns
        return [o.end_s - o.arrival_s for o in self.outcomes if lo <= o.turns <= hi]

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.completion())

    @property
    def p99_s(self) -> float:
        xs = sorted(self.completion())
        return xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)]

    @property
    def short_mean_s(self) -> float:
        xs = self.completion((0, SHORT_TURNS))
        return statistics.fmean(xs) if xs else math.nan

    @property
    def long_mean_s(self) -> float:
        xs = self.completion((LONG_TURNS, 10**9))
        return statistics.fmean(xs) if xs else math.nan

    @property
    def makespan_s(self) -> float:
        return max(o.end_s for o in self.outcomes) - min(o.arrival_s for o in self.outcomes)

    @property
    def output_tokens(self) -> int:
        return sum(o.output_tokens for o in self.outcomes)

    @property
    def prompt_tokens(self) -> int:
        return sum(o.prompt_tokens for o in self.outcomes)

    @property
    def output_tps(self) -> float:
        return self.output_tokens / self.makespan_s

    @property
    def hit_rate(self) -> float:
        p = sum(o.prompt_tokens for o in self.outcomes)
        return sum(o.cached_tokens for o in self.outcomes) / p if p else 0.0

    @property
    def queue_s(self) -> float:
        return statistics.fmean(o.queue_s for o in self.outcomes)

    @property
    def model_s(self) -> float:
        return statistics.fmean(o.model_s for o in self.outcomes)

    @property
    def failed(self) -> int:
        return sum(not o.ok for o in self.outcomes)

    @property
    def turns(self) -> int:
        return sum(o.turns for o in self.outcomes)


#: Agents with at most this many turns are "short", with at least LONG_TURNS "long".
SHORT_TURNS, LONG_TURNS = 8, 25


def _usage(trace: TurnTrace) -> tuple[int, int, int]:
    u = trace.usage
    if u is None:
        return 0, 0, 0
    return u.prompt_tokens or 0, u.cached_tokens or 0, u.completion_tokens or 0


# -- the baseline: gather + Semaphore -----------------------------------------------------


async def run_baseline(
    sc: Scenario, agents: dict[str, Agent], transports: Sequence[Transport], scale: float
) -> list[Outcome]:
    """What people write today: gather over the sessions, a semaphore around each call,
    each call to the next replica in turn — with agentflow's transports, no Fleet."""
    loop = asyncio.get_running_loop()
    origin = loop.time()
    sem = asyncio.Semaphore(sc.cap)
    replicas = itertools.cycle(transports)

    async def call_tool(agent: Agent, name: str, arguments: str) -> str:
        tool = agent.tool(name)
        if tool is None:
            return f"Error: the model called unknown tool {name!r}"
        try:
            return await tool.invoke(arguments)
        except ToolError as exc:
            return f"Error: {exc}"

    async def session(spec: SessionSpec) -> Outcome:
        await asyncio.sleep(spec.arrival_s * scale)
        start = loop.time()
        agent = agents[spec.session_id]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": agent.instructions},
            {"role": "user", "content": spec.task},
        ]
        tools = agent.tool_specs
        turns = prompt = cached = out = longest = 0
        queue = model = 0.0
        ok = False
        for _ in range(agent.max_turns):
            request = ChatRequest(
                model=agent.model, messages=messages, tools=tools, params=agent.params
            )
            t0 = loop.time()
            async with sem:
                t1 = loop.time()
                trace = await next(replicas).stream(request)
            queue += t1 - t0
            model += loop.time() - t1
            turns += 1
            p, c, o = _usage(trace)
            prompt, cached, out, longest = prompt + p, cached + c, out + o, max(longest, p)
            messages.append(trace.assistant_message())
            if not trace.tool_calls:
                ok = True
                break
            results = await asyncio.gather(
                *(call_tool(agent, call.name, call.arguments) for call in trace.tool_calls)
            )
            for call, r in zip(trace.tool_calls, results, strict=True):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": r})
        end = loop.time()
        return Outcome(
            spec.session_id,
            spec.kind,
            turns,
            (start - origin) / scale,
            (end - origin) / scale,
            out,
            prompt,
            cached,
            ok,
            queue / scale,
            model / scale,
            longest,
        )

    return list(await asyncio.gather(*(session(s) for s in sc.sessions)))


# -- agentflow's Fleet --------------------------------------------------------------------


class RoundRobinRouter(Router):
    """Each turn to the next replica in turn, whatever its session: no stickiness."""

    def __init__(self) -> None:
        super().__init__(sticky=False, prefix_affinity=False)
        self._next = 0

    def choose(self, ticket: Ticket, replicas: list[ReplicaState]) -> ReplicaState | None:
        n = len(replicas)
        for k in range(n):
            r = replicas[(self._next + k) % n]
            if r.breaker.allows() and r.has_room(ticket):
                return r
        return None

    def placed(self, ticket: Ticket, replica: ReplicaState) -> None:
        super().placed(ticket, replica)
        self._next += 1


class TimedSession(Session):
    """A session that starts at its arrival time and notes when it ran."""

    def __init__(self, agent: Agent, spec: SessionSpec, arrival: float) -> None:
        super().__init__(agent, spec.task, session_id=spec.session_id)
        self.spec = spec
        self.arrival = arrival
        self.started = self.ended = 0.0

    async def run(self, *args: Any, **kwargs: Any) -> SessionResult:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, self.arrival - loop.time()))
        self.started = loop.time()
        try:
            return await super().run(*args, **kwargs)
        finally:
            self.ended = loop.time()


def make_policy(name: str, scale: float) -> Policy:
    """The shipped policies with their defaults; Deadline gets each kind's SLO."""
    if name == "fcfs":
        return FCFS()
    if name == "fair":
        return FairShare(quantum_s=0.1 * scale)
    if name == "plas":
        return PLAS()
    if name == "priority":
        return Priority(boost_s=30.0 * scale)
    if name == "deadline":
        return Deadline(default_slo_s=10.0 * scale, slo_s={k.name: k.slo_s * scale for k in KINDS})
    raise ValueError(f"unknown policy {name!r}")


@dataclass(frozen=True, slots=True)
class Variant:
    key: str
    #: None: the baseline (no Fleet).
    policy: str | None
    #: "sticky": agentflow's Router (sticky, prefix-affine, least-loaded); "rr": round-robin.
    router: str = "sticky"

    @property
    def client(self) -> str:
        return "`gather` + `Semaphore`" if self.policy is None else "Fleet"

    @property
    def policy_label(self) -> str:
        return "FIFO (the semaphore)" if self.policy is None else f"`{self.policy}`"

    @property
    def router_label(self) -> str:
        return "sticky + prefix" if self.router == "sticky" else "round-robin"


VARIANTS: dict[str, Variant] = {
    v.key: v
    for v in (
        Variant("baseline", None, "rr"),
        Variant("fcfs-rr", "fcfs", "rr"),
        Variant("fcfs", "fcfs"),
        Variant("fair", "fair"),
        Variant("plas", "plas"),
        Variant("priority", "priority"),
        Variant("deadline", "deadline"),
        Variant("plas-rr", "plas", "rr"),
    )
}
POLICY_KEYS = ("fcfs", "fair", "plas", "priority", "deadline")
#: The variants run again at other concurrency caps: is the baseline just badly tuned?
SWEEP_KEYS = ("baseline", "plas", "plas-rr")


def at_cap(sc: Scenario, cap: int) -> Scenario:
    """The same workload under another concurrency cap."""
    return dataclasses.replace(sc, key=f"{sc.key}@{cap}", cap=cap)


@dataclass(frozen=True, slots=True)
class Sweep:
    """One scenario's :data:`SWEEP_KEYS` variants at every cap (its own cap included)."""

    scenario: Scenario
    #: cap → variant → result.
    runs: dict[int, dict[str, RunResult]]

    def best(self, keys: Sequence[str]) -> tuple[int, RunResult]:
        """The cap and run with the lowest mean completion among ``keys``."""
        return min(
            ((cap, r) for cap, rs in self.runs.items() for k, r in rs.items() if k in keys),
            key=lambda cr: cr[1].mean_s,
        )


async def run_fleet(
    v: Variant,
    sc: Scenario,
    agents: dict[str, Agent],
    transports: Sequence[Transport],
    scale: float,
    clock: Callable[[], int],
) -> tuple[list[Outcome], dict[str, float]]:
    assert v.policy is not None
    loop = asyncio.get_running_loop()
    origin = loop.time()
    replicas = [Replica(transport=t, name=f"r{i}") for i, t in enumerate(transports)]
    router: Router = RoundRobinRouter() if v.router == "rr" else Router()
    fleet = Fleet(
        replicas,
        max_concurrency=sc.cap,
        max_tool_concurrency=sc.agents,  # tools are not what is compared
        policy=make_policy(v.policy, scale),
        router=router,
        clock=clock,
    )
    specs = sc.sessions
    sessions = [TimedSession(agents[s.session_id], s, origin + s.arrival_s * scale) for s in specs]
    result = await fleet.run(sessions)
    outcomes = []
    for s, r in zip(sessions, result.sessions, strict=True):
        prompt = cached = out = longest = 0
        queue = model = 0.0
        for t in r.turns:
            p, c, o = _usage(t.trace)
            prompt, cached, out, longest = prompt + p, cached + c, out + o, max(longest, p)
            queue += t.metrics.queue_wait_s
            model += t.metrics.e2e_s
        outcomes.append(
            Outcome(
                s.spec.session_id,
                s.spec.kind,
                len(r.turns),
                (s.started - origin) / scale,
                (s.ended - origin) / scale,
                out,
                prompt,
                cached,
                r.ok,
                queue / scale,
                model / scale,
                longest,
            )
        )
    return outcomes, {"sticky_hits": float(router.sticky_hits), "moves": float(router.moves)}


# -- virtual time -------------------------------------------------------------------------


def run_virtual_variant(v: Variant, sc: Scenario, agents: dict[str, Agent]) -> RunResult:
    """One variant on fresh simulated replicas, in virtual time (modelled seconds)."""

    async def main() -> tuple[list[Outcome], dict[str, float], list[Any]]:
        textgen = TextGenConfig(answer_tokens=ANSWER_TOKENS)
        drivers = [
            EngineDriver(Engine(sc.profile, seed=SEED, textgen=textgen)) for _ in range(sc.replicas)
        ]
        transports = [SimTransport(d) for d in drivers]
        extra: dict[str, float] = {}
        try:
            if v.policy is None:
                outcomes = await run_baseline(sc, agents, transports, 1.0)
            else:
                outcomes, extra = await run_fleet(v, sc, agents, transports, 1.0, loop_clock)
        finally:
            for t in transports:
                await t.aclose()
        return outcomes, extra, [d.engine.stats() for d in drivers]

    cpu = time.process_time()
    outcomes, extra, stats = run_virtual(main())
    return RunResult(
        v.key,
        sc.key,
        outcomes,
        preemptions=sum(s.num_preemptions for s in stats),
        prefill_tokens=sum(s.computed_prompt_tokens for s in stats),
        evictions=sum(s.kv_evictions for s in stats),
        cpu_s=time.process_time() - cpu,
        extra=extra,
    )


_AGENTS: dict[tuple[int, float], dict[str, Agent]] = {}


def _virtual_job(job: tuple[Scenario, str]) -> RunResult:
    sc, key = job
    agents = _AGENTS.get((sc.agents, sc.window_s))
    if agents is None:
        agents = _AGENTS[sc.agents, sc.window_s] = make_agents(sc.sessions, 1.0)
    return run_virtual_variant(VARIANTS[key], sc, agents)


def run_virtual_jobs(jobs: Sequence[tuple[Scenario, str]]) -> list[RunResult]:
    """Run the jobs on a process per CPU (virtual time makes each run deterministic)."""
    workers = min(
        len(jobs), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    )
    results: list[RunResult] = []
    if workers <= 1:
        for job in jobs:
            results.append(_virtual_job(job))
            _progress(results[-1])
        return results
    with ProcessPoolExecutor(workers) as pool:
        for r in pool.map(_virtual_job, jobs):
            results.append(r)
            _progress(r)
    return results


def _progress(r: RunResult, where: str = "virtual") -> None:
    print(
        f"{where:8} {r.scenario:12} {r.variant:9} mean {r.mean_s:7.1f} s  p99 {r.p99_s:7.1f} s  "
        f"{r.output_tps:7.0f} tok/s  hit {r.hit_rate:6.1%}  preempt {r.preemptions:4}  "
        f"prefill {r.prefill_tokens / 1e6:5.2f}M  queue {r.queue_s:6.1f} s  "
        f"failed {r.failed}  cpu {r.cpu_s:5.1f} s",
        file=sys.stderr,
        flush=True,
    )


# -- real time over HTTP ------------------------------------------------------------------


def _sim_cmd(port: int, sc: Scenario, time_scale: float) -> list[str]:
    profile = sc.profile
    sets = [f"{k}={getattr(profile, k)!r}".replace("'", "") for k in PROFILE_SET]
    cmd = [
        sys.executable, "-m", "agentflow.sim", "--host", "127.0.0.1", "--port", str(port),
        "--profile", MODEL, "--seed", str(SEED), "--time-scale", f"{time_scale:g}",
        "--answer-tokens", f"{ANSWER_TOKENS[0]}:{ANSWER_TOKENS[1]}",
        "--served-model-name", MODEL, "--keep-records", "10", "--quiet",
    ]  # fmt: skip
    for s in sets:
        cmd += ["--profile-set", s]
    return cmd


@contextlib.contextmanager
def sim_servers(sc: Scenario, time_scale: float) -> Iterator[list[int]]:
    """``sc.replicas`` simulator servers in child processes (started at once); yields ports."""
    ports = [free_port() for _ in range(sc.replicas)]
    children = [
        ChildServer(_sim_cmd(p, sc, time_scale), port=p, name=f"sim r{i}", startup_timeout_s=60)
        for i, p in enumerate(ports)
    ]
    try:
        with ThreadPoolExecutor(len(children)) as pool:
            list(pool.map(lambda c: c.start(), children))
        yield ports
    finally:
        for c in children:
            c.stop()


def _sim_stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/agentflow/stats", timeout=10) as r:
        stats: dict[str, Any] = json.load(r)
    return stats


def run_http_variant(v: Variant, sc: Scenario, time_scale: float) -> RunResult:
    """One variant against fresh simulator servers over loopback HTTP, in real time."""
    agents = make_agents(sc.sessions, time_scale)

    async def main(ports: list[int]) -> tuple[list[Outcome], dict[str, float]]:
        transports = [
            HTTPTransport(Endpoint(base_url=f"http://127.0.0.1:{p}/v1", name=f"r{i}"))
            for i, p in enumerate(ports)
        ]
        try:
            if v.policy is None:
                return await run_baseline(sc, agents, transports, time_scale), {}
            return await run_fleet(v, sc, agents, transports, time_scale, time.perf_counter_ns)
        finally:
            for t in transports:
                await t.aclose()

    with sim_servers(sc, time_scale) as ports:
        cpu = time.process_time()
        outcomes, extra = asyncio.run(main(ports))
        cpu = time.process_time() - cpu
        stats = [_sim_stats(p) for p in ports]
    return RunResult(
        v.key,
        sc.key,
        outcomes,
        preemptions=sum(int(s["engine"]["num_preemptions"]) for s in stats),
        prefill_tokens=sum(int(s["engine"]["computed_prompt_tokens"]) for s in stats),
        evictions=sum(int(s["engine"]["kv_evictions"]) for s in stats),
        cpu_s=cpu,
        lag_s=sum(float(s["driver"]["lag_s"]) for s in stats) / time_scale,
        extra=extra,
    )


# -- overhead: the scheduler's CPU per dispatched turn ------------------------------------


class _NoopTransport:
    """Answers every request at once (after one event-loop iteration) with one fixed trace."""

    def __init__(self, name: str) -> None:
        self.endpoint = f"noop://{name}"
        self._trace = TurnTrace(
            endpoint=self.endpoint,
            model=MODEL,
            response_id=None,
            sent_ns=0,
            headers_ns=0,
            end_ns=0,
            chunk_ns=(),
            chunk_chars=(),
            chunk_tokens=(),
            tokens_exact=True,
            n_events=0,
            content="ok",
            reasoning="",
            tool_calls=(),
            finish_reason="stop",
            usage=None,
            done=True,
        )

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        await asyncio.sleep(0)
        return self._trace

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class OverheadRow:
    key: str
    label: str
    #: None: a bare asyncio.Semaphore.
    policy: str | None
    runner: bool = False


OVERHEAD_ROWS = (
    OverheadRow("semaphore", "`asyncio.Semaphore(64)`", None),
    *(OverheadRow(p, f"`Scheduler`, `{p}`", p) for p in POLICY_KEYS),
    OverheadRow("runner", "`TurnRunner.send`, `plas` (whole turn path)", "plas", runner=True),
)
OVERHEAD_REPLICAS, OVERHEAD_PER_REPLICA = 4, 16


async def _overhead_once(row: OverheadRow, sessions: int, turns: int, collect: bool) -> float:
    """CPU µs per dispatched turn with ``sessions`` sessions contending for 64 slots.

    ``collect``: leave Python's cyclic garbage collector on during the timed part.
    """
    gate = asyncio.Event()
    cap = OVERHEAD_REPLICAS * OVERHEAD_PER_REPLICA
    clock = time.perf_counter_ns
    request = ChatRequest(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    scheduler: Scheduler | None = None
    if row.policy is not None:
        scheduler = Scheduler(
            [
                Replica(
                    transport=_NoopTransport(f"r{i}"),
                    name=f"r{i}",
                    limits=Limits(max_in_flight=OVERHEAD_PER_REPLICA),
                )
                for i in range(OVERHEAD_REPLICAS)
            ],
            policy=make_policy(row.policy, 1.0),
            limits=Limits(max_in_flight=cap),
            router=Router(),
            clock=clock,
        )

    async def with_semaphore(i: int) -> None:
        sem = semaphore
        await gate.wait()
        for _ in range(turns):
            async with sem:
                await asyncio.sleep(0)  # the request "streams" for one loop iteration
            await asyncio.sleep(0)  # and its tool call takes one

    async def with_scheduler(i: int) -> None:
        assert scheduler is not None
        sid = f"s{i}"
        kind = KINDS[i % len(KINDS)].name
        await gate.wait()
        for t in range(turns):
            ticket = Ticket(
                session_id=sid,
                agent=kind,
                turn=t,
                ready_ns=clock(),
                prompt_tokens=2000,
                max_output_tokens=MAX_TOKENS,
                prefix_key=kind,
            )
            if runner is not None:
                await runner.send(ticket, request)
            else:
                grant = await scheduler.acquire(ticket)
                await asyncio.sleep(0)  # the request "streams" for one loop iteration
                scheduler.release(grant, used_tokens=None, ok=True)
            await asyncio.sleep(0)  # and its tool call takes one
        scheduler.forget(sid)

    semaphore = asyncio.Semaphore(cap)
    runner = TurnRunner(scheduler, None) if row.runner and scheduler is not None else None
    body = with_semaphore if scheduler is None else with_scheduler
    tasks = [asyncio.create_task(body(i)) for i in range(sessions)]
    await asyncio.sleep(0)  # every task is waiting at the gate
    gc.collect()
    if not collect:
        gc.disable()
    try:
        cpu = time.process_time()
        gate.set()
        await asyncio.gather(*tasks)
        cpu = time.process_time() - cpu
    finally:
        gc.enable()
    if scheduler is not None:
        assert scheduler.dispatched == sessions * turns
        await scheduler.aclose()
    return cpu / (sessions * turns) * 1e6


#: Rows also measured with the garbage collector off (keyed ``ROW/nogc``).
NOGC_ROWS = ("semaphore", "plas", "runner")


def run_overhead(sessions: int, turns: int, reps: int) -> dict[str, list[float]]:
    """Rows alternate within each repetition; each run gets a fresh event loop."""
    plan_ = [(row, True) for row in OVERHEAD_ROWS]
    plan_ += [(row, False) for row in OVERHEAD_ROWS if row.key in NOGC_ROWS]
    out: dict[str, list[float]] = {}
    for rep in range(reps):
        for row, collect in plan_:
            us = asyncio.run(_overhead_once(row, sessions, turns, collect))
            key = row.key if collect else f"{row.key}/nogc"
            out.setdefault(key, []).append(us)
            print(
                f"overhead rep {rep + 1}/{reps} {key:14} {us:6.2f} µs/turn",
                file=sys.stderr,
                flush=True,
            )
    return out


# -- per-session and per-turn cost: Fleet vs gather + Semaphore on a no-op transport -------

#: The section this part writes (its own markers: it can run alone, ``--session-cost``).
COST_NAME = "scheduling-sessions"
#: Model turns per session: two tool rounds, then the answer.
COST_TURNS = 3
COST_CAP = 64
COST_SIZES = (10_000, 100_000)


def _cost_trace(tool: bool) -> TurnTrace:
    """A finished one-chunk trace: a tool call, or the final answer."""
    calls = (ToolCall(index=0, id="call-0", name="noop", arguments="{}"),) if tool else ()
    return TurnTrace(
        endpoint="noop://cost",
        model=MODEL,
        response_id=None,
        sent_ns=0,
        headers_ns=0,
        end_ns=1_000,
        chunk_ns=(500,),
        chunk_chars=(2,),
        chunk_tokens=(1,),
        tokens_exact=True,
        n_events=1,
        content="" if tool else "ok",
        reasoning="",
        tool_calls=calls,
        finish_reason="tool_calls" if tool else "stop",
        usage=None,
        done=True,
    )


class _TurnTransport:
    """In-process, no I/O: each request is answered after one event-loop iteration (or,
    with a ``gate``, once it opens) with a finished one-chunk trace — a tool call until
    the session's last turn, then the answer."""

    endpoint = "noop://cost"

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.gate = gate
        self._tool, self._final = _cost_trace(True), _cost_trace(False)

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        if self.gate is not None:
            await self.gate.wait()
        else:
            await asyncio.sleep(0)
        done = sum(1 for m in request.messages if m["role"] == "assistant")
        return self._tool if done < COST_TURNS - 1 else self._final

    async def aclose(self) -> None:
        return None


async def _noop_tool() -> str:
    """Do nothing."""
    return "ok"


def _cost_agent() -> Agent:
    return Agent(
        name="cost",
        model=MODEL,
        instructions="You answer in one word.",
        tools=[Tool.from_function(_noop_tool, name="noop")],
        max_turns=COST_TURNS + 1,
    )


async def _gather_run(n: int, transport: Transport, agent: Agent) -> int:
    """The baseline: gather over one coroutine per session, a Semaphore around each
    model call, the tool calls gathered — what ``run_baseline`` does, minus the figures."""
    sem = asyncio.Semaphore(COST_CAP)

    async def session(i: int) -> int:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": agent.instructions},
            {"role": "user", "content": f"task {i}"},
        ]
        for turn in range(agent.max_turns):
            request = ChatRequest(
                model=agent.model, messages=messages, tools=agent.tool_specs, params=agent.params
            )
            async with sem:
                trace = await transport.stream(request)
            messages.append(trace.assistant_message())
            if not trace.tool_calls:
                return turn + 1
            outputs = await asyncio.gather(
                *(_call_tool(agent, c.name, c.arguments) for c in trace.tool_calls)
            )
            for call, out in zip(trace.tool_calls, outputs, strict=True):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": out})
        return agent.max_turns

    return sum(await asyncio.gather(*(session(i) for i in range(n))))


async def _call_tool(agent: Agent, name: str, arguments: str) -> str:
    tool = agent.tool(name)
    if tool is None:
        return f"Error: the model called unknown tool {name!r}"
    try:
        return await tool.invoke(arguments)
    except ToolError as exc:
        return f"Error: {exc}"


class _TurnCounter:
    """A sync callback that reads only ``turn_end`` events and counts output tokens."""

    event_types = frozenset({"turn_end"})

    def __init__(self) -> None:
        self.turns = self.tokens = 0

    def __call__(self, event: Any) -> None:
        self.turns += 1
        self.tokens += event.metrics.output_tokens


async def _fleet_run(n: int, transport: Transport, agent: Agent, callback: bool) -> int:
    fleet = Fleet(
        transport, max_concurrency=COST_CAP, callbacks=[_TurnCounter()] if callback else ()
    )
    result = await fleet.run([agent.session(f"task {i}") for i in range(n)])
    assert all(s.ok for s in result.sessions)
    return sum(len(s.turns) for s in result.sessions)


#: Client rows: key, label, runner.
COST_ROWS = (
    ("gather", "`gather` + `Semaphore(64)`"),
    ("fleet", "`Fleet(max_concurrency=64)`"),
    ("fleet+cb", "`Fleet`, + a `turn_end` callback"),
)


def _cost_run(key: str, n: int, transport: Transport, agent: Agent) -> Coroutine[Any, Any, int]:
    if key == "gather":
        return _gather_run(n, transport, agent)
    return _fleet_run(n, transport, agent, callback=key == "fleet+cb")


def _queued_cost(key: str, n: int) -> tuple[float, float]:
    """Bytes (tracemalloc) and garbage-collector-tracked objects per queued session:
    from before the sessions are made until every one of them is queued behind the 64
    whose first request hangs on a gate; then the gate opens and the run ends."""

    async def main() -> tuple[float, float]:
        gate = asyncio.Event()
        agent = _cost_agent()
        gc.collect()
        objects = _tracked()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        task = asyncio.create_task(_cost_run(key, n, _TurnTransport(gate), agent))
        for _ in range(10):  # every session's first step (its first turn queued)
            await asyncio.sleep(0)
        gc.collect()
        size = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        tracked = _tracked() - objects
        gate.set()
        assert await task == n * COST_TURNS
        return size / n, tracked / n

    return asyncio.run(main())


def _tracked() -> int:
    """Objects the garbage collector tracks, frozen ones included (a Fleet freezes)."""
    return len(gc.get_objects()) + gc.get_freeze_count()


def _turn_cpu(key: str, n: int) -> float:
    """CPU µs per dispatched turn: making the sessions and running them to the end."""

    async def main() -> float:
        agent = _cost_agent()
        transport = _TurnTransport()
        gc.collect()
        cpu = time.process_time()
        turns = await _cost_run(key, n, transport, agent)
        cpu = time.process_time() - cpu
        assert turns == n * COST_TURNS
        return cpu / turns * 1e6

    return asyncio.run(main())


@dataclass(slots=True)
class SessionCost:
    """What the per-session part measured (``--save`` keeps it with the rest)."""

    #: (key, sessions) → bytes per queued session, tracked objects per queued session.
    memory: dict[tuple[str, int], tuple[float, float]]
    #: (key, sessions) → CPU µs per turn, one per repetition.
    cpu: dict[tuple[str, int], list[float]]
    reps: int
    load: float
    when: str = field(
        default_factory=lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    )


def run_session_cost(sizes: Sequence[int], reps: int) -> SessionCost:
    """Rows alternate within each repetition; every run gets a fresh event loop."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    memory: dict[tuple[str, int], tuple[float, float]] = {}
    cpu: dict[tuple[str, int], list[float]] = {}
    for n in sizes:
        for key, _ in COST_ROWS:
            memory[key, n] = _queued_cost(key, n)
            print(
                f"queued {n:,} {key:9} {memory[key, n][0]:7.0f} B/session "
                f"{memory[key, n][1]:5.1f} objects",
                file=sys.stderr,
                flush=True,
            )
        for rep in range(reps):
            for key, _ in COST_ROWS:
                us = _turn_cpu(key, n)
                cpu.setdefault((key, n), []).append(us)
                print(
                    f"turns {n:,} rep {rep + 1}/{reps} {key:9} {us:6.1f} µs/turn",
                    file=sys.stderr,
                    flush=True,
                )
    return SessionCost(memory, cpu, reps, load)


def _added(sc: SessionCost, key: str, n: int) -> float:
    """Median over repetitions of (row − gather + Semaphore), paired within a repetition."""
    pairs = zip(sc.cpu[key, n], sc.cpu["gather", n], strict=True)
    return statistics.median(a - b for a, b in pairs)


def session_cost_table(sc: SessionCost) -> str:
    med = statistics.median
    out = [
        "| sessions | client | bytes per queued session | × `gather` + `Semaphore` | "
        "tracked objects per queued session | CPU µs per turn, median | min–max | "
        "added over `gather` + `Semaphore`, µs (median of paired differences) |",
        "|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    sizes = sorted({n for _, n in sc.memory})
    for n in sizes:
        base = sc.memory["gather", n][0]
        for key, label in COST_ROWS:
            size, tracked = sc.memory[key, n]
            xs = sc.cpu[key, n]
            added = "–" if key == "gather" else f"**{_added(sc, key, n):.1f}**"
            out.append(
                f"| {n:,} | {label} | **{size:,.0f}** | {size / base:.2f}× | {tracked:.1f} | "
                f"{med(xs):.1f} | {min(xs):.1f}–{max(xs):.1f} | {added} |"
            )
    return "\n".join(out)


def session_cost_targets(sc: SessionCost) -> str:
    out = ["| target (issue 15) | measured | met |", "|---|---|:-:|"]
    sizes = sorted({n for _, n in sc.memory})
    worst = max(sc.memory["fleet", n][0] for n in sizes)
    each = ", ".join(f"{sc.memory['fleet', n][0]:,.0f} B at {n:,}" for n in sizes)
    out.append(f"| ≤ 3 KB per queued session | {each} | {'yes' if worst <= 3072 else '**no**'} |")
    added = [_added(sc, "fleet", n) for n in sizes]
    each = ", ".join(f"{a:.1f} µs at {n:,}" for a, n in zip(added, sizes, strict=True))
    out.append(
        f"| ≤ 25 µs per dispatched turn over `gather` + `Semaphore`, no-op transport | "
        f"{each} | {'yes' if max(added) <= 25 else '**no**'} |"
    )
    return "\n".join(out)


def session_cost_text(sc: SessionCost) -> str:
    sizes = " and ".join(f"{n:,}" for n in sorted({n for _, n in sc.memory}))
    return f"""**Method.** One agent with one tool; every session takes {COST_TURNS} model
turns (two tool rounds, then the answer) against an in-process transport that answers
each request after one event-loop iteration with a finished one-chunk trace — no
sockets, no parsing, so what is left is the client's own work per session and per
turn. *`gather` + `Semaphore`*: one coroutine per session, gathered; each turn builds a
`ChatRequest` from the conversation, takes an `asyncio.Semaphore(64)`, streams, appends
the answer and runs the tool calls with `asyncio.gather` (the loop `run_baseline`
runs). *`Fleet`*: `Fleet(transport, max_concurrency=64)` with its defaults (`fcfs`,
the default router, retries, the garbage-collector freeze) running `Session`s; the
third row adds one sync callback that reads `turn_end` events (what a statistics
callback does; without one, events nobody reads are not built). *Per queued
session*: `tracemalloc`'s traced bytes, and the number of objects the garbage
collector tracks, from before the sessions are made until all {sizes} are waiting —
64 with a request in flight (the transport holds them on a gate), the rest queued
for their first turn — divided by the number of sessions; the conversation (system
and user messages) counts on both sides. *Per turn*: this process's CPU time
(`time.process_time`) from making the sessions to the end of the run, over every
turn; {sc.reps} repetitions, the rows alternating within each, a fresh event loop
and `gc.collect()` before every run; "added" is the median over repetitions of the
difference to the `gather` row of the same repetition. The 1-minute load average
was {sc.load:.2f} when this part started (other work shares this 2-vCPU machine;
absolute figures move with it, the paired differences less)."""


#: What the same benchmark measured on the code before issue 15 part 2 (main at ee6acc3).
COST_BEFORE = """\
*Before* (the same part on main's code before these changes, measured the same hour at
load 5–8): 7,737 / 7,723 bytes and 58 tracked objects per queued session at 10,000 /
100,000 sessions (a task, its coroutine stack, closures and contexts for each), and
48.9 / 47.8 µs per turn over `gather` + `Semaphore`."""


def session_cost_section(sc: SessionCost) -> str:
    start, end = _common.markers(COST_NAME)
    return "\n".join(
        [
            start,
            "### Per queued session and per turn: `Fleet` vs `gather` + `Semaphore` "
            "(`benchmarks/scheduling.py --session-cost`)",
            "",
            f"Measured {sc.when} on {_common.machine(('agentflow', 'msgspec', 'structlog'))}.",
            "",
            session_cost_table(sc),
            "",
            session_cost_targets(sc),
            "",
            session_cost_text(sc),
            "",
            COST_BEFORE,
            end,
        ]
    )


# -- reporting ----------------------------------------------------------------------------


def _x(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "–"


def _s(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.1f}"


def results_table(rs: Sequence[RunResult]) -> str:
    base = next(r for r in rs if r.variant == "baseline")
    out = [
        "| client | policy | routing | mean agent completion, s | × baseline | p99, s "
        f"| agents ≤ {SHORT_TURNS} turns, mean s | agents ≥ {LONG_TURNS} turns, mean s "
        "| output tok/s | × baseline | cache hit | preemptions | prefill computed, M tok "
        "| client queue, s/agent |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rs:
        v = VARIANTS[r.variant]
        out.append(
            f"| {v.client} | {v.policy_label} | {v.router_label} | **{r.mean_s:.1f}** "
            f"| {_x(base.mean_s, r.mean_s)} | {r.p99_s:.1f} | {_s(r.short_mean_s)} "
            f"| {_s(r.long_mean_s)} | {r.output_tps:,.0f} | {_x(r.output_tps, base.output_tps)} "
            f"| {r.hit_rate:.1%} | {r.preemptions:,} | {r.prefill_tokens / 1e6:.2f} "
            f"| {r.queue_s:.1f} |"
        )
    return "\n".join(out)


def http_table(http: Sequence[RunResult], virtual: Sequence[RunResult]) -> str:
    base = next(r for r in http if r.variant == "baseline")
    vbase = next((r for r in virtual if r.variant == "baseline"), None)
    vby = {r.variant: r for r in virtual}
    out = [
        "| client | policy | routing | mean agent completion, s | × baseline | p99, s "
        "| output tok/s | × baseline | cache hit | preemptions | simulator lag, s "
        "| same in virtual time: mean s (× baseline) |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in http:
        v = VARIANTS[r.variant]
        vr = vby.get(r.variant)
        same = (
            f"{vr.mean_s:.1f} ({_x(vbase.mean_s, vr.mean_s)})"
            if vr is not None and vbase is not None
            else "–"
        )
        out.append(
            f"| {v.client} | {v.policy_label} | {v.router_label} | **{r.mean_s:.1f}** "
            f"| {_x(base.mean_s, r.mean_s)} | {r.p99_s:.1f} | {r.output_tps:,.0f} "
            f"| {_x(r.output_tps, base.output_tps)} | {r.hit_rate:.1%} | {r.preemptions:,} "
            f"| {r.lag_s:.1f} | {same} |"
        )
    return "\n".join(out)


def sweep_table(sw: Sweep) -> str:
    """Baseline, sticky Fleet and round-robin Fleet at every concurrency cap."""
    out = [
        "| cap | baseline: mean s | tok/s | cache hit | preemptions "
        "| Fleet `plas` sticky: mean s | × baseline at this cap | tok/s | cache hit "
        "| preemptions | Fleet `plas` round-robin: mean s | cache hit | sticky ÷ round-robin "
        "cache hit |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for cap in sorted(sw.runs):
        rs = sw.runs[cap]
        b, f, rr = rs["baseline"], rs["plas"], rs["plas-rr"]
        mark = " (the tables above)" if cap == sw.scenario.cap else ""
        out.append(
            f"| {cap}{mark} | {b.mean_s:.1f} | {b.output_tps:,.0f} | {b.hit_rate:.1%} "
            f"| {b.preemptions:,} | **{f.mean_s:.1f}** | {_x(b.mean_s, f.mean_s)} "
            f"| {f.output_tps:,.0f} | {f.hit_rate:.1%} | {f.preemptions:,} | {rr.mean_s:.1f} "
            f"| {rr.hit_rate:.1%} | {_x(f.hit_rate, rr.hit_rate)} |"
        )
    return "\n".join(out)


def overhead_table(ov: dict[str, list[float]]) -> str:
    med = statistics.median
    sem = ov["semaphore"]
    out = [
        "| dispatcher | CPU µs per dispatched turn, median | min–max | added over the "
        "`Semaphore`, µs (median of paired differences) | garbage collector off: µs per "
        "turn, median |",
        "|---|--:|--:|--:|--:|",
    ]
    for row in OVERHEAD_ROWS:
        xs = ov[row.key]
        added = (
            "–"
            if row.policy is None
            else f"{med([a - b for a, b in zip(xs, sem, strict=True)]):.2f}"
        )
        nogc = ov.get(f"{row.key}/nogc")
        off = f"{med(nogc):.2f}" if nogc else "–"
        out.append(
            f"| {row.label} | **{med(xs):.2f}** | {min(xs):.2f}–{max(xs):.2f} | {added} | {off} |"
        )
    return "\n".join(out)


def _best(rs: Sequence[RunResult]) -> RunResult:
    fleet = [r for r in rs if r.variant in POLICY_KEYS]
    return min(fleet, key=lambda r: r.mean_s)


def _by(rs: Sequence[RunResult], key: str) -> RunResult:
    return next(r for r in rs if r.variant == key)


def overhead_added(ov: dict[str, list[float]]) -> tuple[float, float, float, float]:
    """What the scheduler adds over the Semaphore, µs: the median over every policy and
    repetition (the policies differ by one rank function; pooled, the machine's noise
    averages out), the lowest and highest per-policy median; and the absolute median."""
    sem = ov["semaphore"]
    per = {p: [a - b for a, b in zip(ov[p], sem, strict=True)] for p in POLICY_KEYS}
    medians = [statistics.median(xs) for xs in per.values()]
    pooled = statistics.median([x for xs in per.values() for x in xs])
    absolute = statistics.median([x for p in POLICY_KEYS for x in ov[p]])
    return pooled, min(medians), max(medians), absolute


def targets_table(
    scenarios: Sequence[tuple[Scenario, list[RunResult]]],
    ov: dict[str, list[float]] | None,
    sweeps: Sequence[Sweep] = (),
) -> str:
    out = ["| target (issue 5) | measured | met |", "|---|---|:-:|"]

    def yes(ok: bool) -> str:
        return "yes" if ok else "**no**"

    sweep_of = {sw.scenario.key: sw for sw in sweeps}
    for sc, rs in scenarios:
        base, best = _by(rs, "baseline"), _best(rs)
        speed, tps = base.mean_s / best.mean_s, best.output_tps / base.output_tps
        out.append(
            f"| best policy ≥ 2× lower mean agent completion than the baseline, no "
            f"throughput loss — {sc.label}, both at cap {sc.cap} | `{best.variant}`: "
            f"{speed:.2f}× lower mean, throughput {tps:.2f}× | {yes(speed >= 2 and tps >= 1)} |"
        )
        sw = sweep_of.get(sc.key)
        if sw is not None:
            bcap, b = sw.best(("baseline",))
            fcap, f = sw.best(("plas",))
            if f.mean_s > best.mean_s:  # a policy of the main table at the scenario's cap
                fcap, f = sc.cap, best
            speed, tps = b.mean_s / f.mean_s, f.output_tps / b.output_tps
            out.append(
                f"| the same, each client at its best cap ({', '.join(map(str, sorted(sw.runs)))}"
                f") — {sc.label} | Fleet `{f.variant}` at cap {fcap} vs the baseline at cap "
                f"{bcap}: {speed:.2f}× lower mean, throughput {tps:.2f}× "
                f"| {yes(speed >= 2 and tps >= 1)} |"
            )
    for sc, rs in scenarios:
        sticky, rr = _by(rs, "plas"), _by(rs, "plas-rr")
        ratio = sticky.hit_rate / rr.hit_rate if rr.hit_rate else math.inf
        out.append(
            f"| sticky routing ≥ 1.3× the cache hit rate of round-robin — {sc.label} "
            f"(both `plas`, cap {sc.cap}) | {sticky.hit_rate:.1%} vs {rr.hit_rate:.1%}: "
            f"{ratio:.2f}× | {yes(ratio >= 1.3)} |"
        )
        sw = sweep_of.get(sc.key)
        if sw is not None:
            others = [c for c in sorted(sw.runs) if c != sc.cap]
            ratios = [sw.runs[c]["plas"].hit_rate / sw.runs[c]["plas-rr"].hit_rate for c in others]
            if ratios:
                each = ", ".join(f"{x:.2f}× at {c}" for c, x in zip(others, ratios, strict=True))
                out.append(
                    f"| the same at the other caps — {sc.label} | {each} "
                    f"| {yes(min(ratios) >= 1.3)} |"
                )
    if ov is not None:
        added, lo, hi, absolute = overhead_added(ov)
        out.append(
            f"| scheduler + router ≤ 20 µs per dispatched turn, 10,000 sessions | "
            f"{added:.1f} µs over a bare `Semaphore` (per policy {lo:.1f}–{hi:.1f}); "
            f"{absolute:.1f} µs per turn in all, of which "
            f"{statistics.median(ov['semaphore']):.1f} are the task switches a `Semaphore` "
            f"costs too | {yes(added <= 20)} |"
        )
    return "\n".join(out)


def findings(scenarios: Sequence[tuple[Scenario, list[RunResult]]]) -> str:
    """Sentences read off this run's numbers, so they stay true when the numbers change."""
    out: list[str] = []
    for sc, rs in scenarios:
        base, ctrl = _by(rs, "baseline"), _by(rs, "fcfs-rr")
        fcfs, plas, plas_rr = _by(rs, "fcfs"), _by(rs, "plas"), _by(rs, "plas-rr")
        best = _best(rs)
        means = [_by(rs, p).mean_s for p in POLICY_KEYS]
        tools = fcfs.mean_s - fcfs.queue_s - fcfs.model_s
        text = (
            f"*{sc.label[0].upper()}{sc.label[1:]}.* The Fleet set up as the baseline is "
            f"(`fcfs`, round-robin) lands within {abs(1 - ctrl.mean_s / base.mean_s):.0%} of "
            f"it ({ctrl.mean_s:.1f} vs {base.mean_s:.1f} s mean): the machinery itself "
            f"neither helps nor hurts. Routing is what moves the numbers: sticky + "
            f"prefix-affine placement cuts the prompt tokens the servers compute from "
            f"{ctrl.prefill_tokens / 1e6:.2f}M to {fcfs.prefill_tokens / 1e6:.2f}M (cache "
            f"hits {ctrl.hit_rate:.1%} → {fcfs.hit_rate:.1%}; cached blocks evicted "
            f"{ctrl.evictions:,} → {fcfs.evictions:,}; preemptions {ctrl.preemptions} → "
            f"{fcfs.preemptions}), the mean agent completion from {ctrl.mean_s:.1f} to "
            f"{fcfs.mean_s:.1f} s ({ctrl.mean_s / fcfs.mean_s:.2f}×), with "
            f"{fcfs.output_tps / ctrl.output_tps:.2f}× the throughput. The policy moves it "
            f"far less: the five policies' means span {min(means):.1f}–{max(means):.1f} s; "
            f"`plas` vs `fcfs` is {fcfs.mean_s / plas.mean_s:.2f}× with sticky routing and "
            f"{ctrl.mean_s / plas_rr.mean_s:.2f}× with round-robin. Agents ≤ {SHORT_TURNS} "
            f"turns finish in {plas.short_mean_s:.1f} s under `plas` vs "
            f"{fcfs.short_mean_s:.1f} s under `fcfs`, agents ≥ {LONG_TURNS} turns in "
            f"{plas.long_mean_s:.1f} vs {fcfs.long_mean_s:.1f} s. A policy can only reorder "
            f"the client's queue: under sticky `fcfs` an agent spends {fcfs.queue_s:.1f} s of "
            f"its {fcfs.mean_s:.1f} s there, {fcfs.model_s:.1f} s in model calls and "
            f"{tools:.1f} s in tools."
        )
        if sc.window_s == 0:
            text += (
                " With every agent arriving at once, least attained service is processor "
                "sharing — every waiting agent has had about the same service — and FIFO "
                "over turns is too, since a turn that ends sends its agent to the back of "
                "the queue: neither can favour the short agents without knowing which they "
                "are, and the means agree."
            )
        else:
            active_f = sc.agents / sc.window_s * fcfs.mean_s
            active_b = sc.agents / sc.window_s * base.mean_s
            want_f = active_f * (fcfs.queue_s + fcfs.model_s) / fcfs.mean_s
            want_b = active_b * (base.queue_s + base.model_s) / base.mean_s
            text += (
                f" The burst brings {sc.agents / sc.window_s:.2f} agents/s. By Little's law "
                f"about {active_f:.0f} agents are in the sticky Fleet at a time, "
                f"{want_f:.0f} of them waiting for or in a model call — under the cap of "
                f"{sc.cap}, which therefore rarely binds ({fcfs.queue_s:.1f} s of queue per "
                f"agent) and leaves a policy almost nothing to reorder. The baseline's turns, "
                f"missing the cache, take longer: about {active_b:.0f} agents are in it at a "
                f"time, {want_b:.0f} wanting a slot, and its queue grows to "
                f"{base.queue_s:.1f} s per agent."
            )
        text += (
            f" The best Fleet variant (`{best.variant}`) is {base.mean_s / best.mean_s:.2f}× "
            f"the baseline's mean (makespan {best.makespan_s:.0f} vs {base.makespan_s:.0f} s)."
        )
        out.append(text)
    return "\n\n".join(out)


def sweep_findings(sw: Sweep) -> str:
    """What the cap sweep says, read off its numbers."""
    sc, caps = sw.scenario, sorted(sw.runs)
    base = [sw.runs[c]["baseline"] for c in caps]
    fleet = [sw.runs[c]["plas"] for c in caps]
    bcap, b = sw.best(("baseline",))
    fcap, f = sw.best(("plas",))
    top = caps[-1]
    bt, rt = base[-1], sw.runs[top]["plas-rr"]
    text = (
        f"*Is the baseline only badly tuned? ({sc.label})* Its mean agent completion at caps "
        f"{', '.join(map(str, caps))} is {', '.join(f'{r.mean_s:.1f}' for r in base)} s: "
        f"best at cap {bcap} ({b.mean_s:.1f} s)."
    )
    if bcap < top:
        text += (
            f" Past that, more concurrency makes it slower, not faster: with turns spread "
            f"round-robin every replica holds pieces of every conversation, so at cap {top} "
            f"its cache hit rate is {bt.hit_rate:.1%} and its engines preempt "
            f"{bt.preemptions:,} times (round-robin `plas` in the Fleet: {rt.hit_rate:.1%}, "
            f"{rt.preemptions:,})."
        )
    lo, hi = min(r.hit_rate for r in fleet), max(r.hit_rate for r in fleet)
    hits = f"{lo:.1%}" if f"{lo:.1%}" == f"{hi:.1%}" else f"{lo:.1%}–{hi:.1%}"
    most = max(r.preemptions for r in fleet)
    preempts = "no preemptions" if most == 0 else f"at most {most:,} preemptions"
    text += (
        f" The sticky Fleet keeps {hits} cache hits and {preempts} at every cap; its means are "
        f"{', '.join(f'{r.mean_s:.1f}' for r in fleet)} s, best at cap {fcap} "
        f"({f.mean_s:.1f} s). Each at its best cap, the Fleet's mean is "
        f"{b.mean_s / f.mean_s:.2f}× lower than the baseline's, at "
        f"{f.output_tps / b.output_tps:.2f}× the throughput."
    )
    return text


def workload_text(
    big: Scenario, burst: Scenario, small: Scenario, http_scale: float, base: RunResult
) -> str:
    specs = big.sessions
    turns = [s.turns for s in specs]
    kinds = {k.name: sum(s.kind == k.name for s in specs) for k in KINDS}
    kind_rows = []
    for k in KINDS:
        tools = "; ".join(f"`{t.name}` ({t.result_tokens} tok, {t.latency_s:g} s)" for t in k.tools)
        kind_rows.append(
            f"| {k.name} | {k.share:.0%} ({kinds[k.name]}) | {prefix_tokens(k):,} | "
            f"{k.priority} | {k.slo_s:g} s | {tools} |"
        )
    kind_table = "\n".join(
        [
            "| kind | share (agents) | shared prefix, tokens | priority | SLO (`deadline`) "
            "| tools: median result, median latency |",
            "|---|--:|--:|--:|--:|---|",
            *kind_rows,
        ]
    )
    p = big.profile
    last = burst.sessions[-1].arrival_s
    return f"""**Workload** (`make_workload`, seed {SEED}). {big.agents} agents, one session
each, of four kinds; each kind has its own system prompt and tool schemas — a prefix
its sessions share ({len(KINDS)} prefixes):

{kind_table}

- Each agent: a kind drawn by share; a task — "Task *i* for the *kind* agent: " and 20–80
  words of prose — as its first user message; `temperature` 0. System prompts are
  prose of 1,000–3,000 words (the shared-prefix column counts them with the tool
  schemas, in the simulator's tokenizer).
- Turns per agent: ⌊{TURNS_MIN} · U^(−1/{TURNS_ALPHA})⌋, U uniform in (0, 1] — a
  Pareto tail — cut at {TURNS_MAX}: here mean {statistics.fmean(turns):.1f}, median
  {statistics.median(turns):g}, {sum(t <= SHORT_TURNS for t in turns)} agents with ≤
  {SHORT_TURNS} turns, {sum(t >= LONG_TURNS for t in turns)} with ≥ {LONG_TURNS},
  {turns.count(TURNS_MAX)} with {TURNS_MAX}; {sum(turns):,} turns in all. Every turn but
  the last calls one tool (the simulator is told the agent's tool rounds through
  `agentflow_tool_rounds`); the last answers in {ANSWER_TOKENS[0]}–{ANSWER_TOKENS[1]}
  tokens. A tool call's arguments are the simulator's, from the tool's schema (it fills
  a string to its `minLength`), so tool-call turns run ~30–160 tokens by tool: ~35 for
  a path or a query, ~100 for `save_note`, ~150 for `edit_file`'s new code.
  `max_tokens` {MAX_TOKENS}, never reached. Prompts grow with the conversation:
  {base.prompt_tokens / base.turns:,.0f} tokens per turn on average, the longest
  {max(o.max_prompt_tokens for o in base.outcomes):,}.
- Tools: each call sleeps a lognormal latency (σ {LATENCY_SIGMA}, cut at
  {LATENCY_CUT:g}× the median) and returns a lognormal number of tokens (σ
  {RESULT_SIGMA}, cut at {RESULT_CUT:g}× the median), both drawn from a hash of the
  call's arguments, so every variant sees the same conversations: the simulator's output
  is a function of the prompt, and the prompts are the same.
- Arrivals: *all at once* — every session starts at t = 0, as `gather` over a list does;
  *a Poisson burst* — the same sessions in the same order arrive as a Poisson process of
  {burst.agents / burst.window_s:.2f} agents/s (interarrival times from their own seeded
  stream; the last arrives at {last:.0f} s).
- Servers: {big.replicas} replicas — one 8-GPU HGX H100 node split into
  {big.replicas} × TP 2 — each a simulator (`agentflow.sim`) with this profile: KV
  capacity {p.kv_capacity_tokens:,} tokens ({p.num_blocks:,} blocks of {p.block_size};
  agentflow.planner's figure for Qwen2.5-Coder-32B on 2 × H100 80 GB, TP 2, bf16 KV),
  max_num_seqs {p.max_num_seqs}, max_num_batched_tokens {p.max_num_batched_tokens},
  max_model_len {p.max_model_len:,}; steps per the profile's timing model with
  per_agent_tps {p.per_agent_tps:g} (at {p.calibration_context_tokens:,} tokens of
  context), decode_per_seq_s {p.decode_per_seq_s:g}, decode_per_ctx_token_s
  {p.decode_per_ctx_token_s:g}, prefill_tps {p.prefill_tps:,.0f},
  prefill_per_ctx_token_s {p.prefill_per_ctx_token_s:g}. {PROFILE_SOURCES} The
  replicas' KV is the constraint: together they hold
  {big.replicas * p.kv_capacity_tokens / 1e6:.1f}M tokens, while the {big.agents}
  conversations' last prompts add up to
  {sum(o.max_prompt_tokens for o in base.outcomes) / 1e6:.1f}M, so the prefix cache
  evicts (the baseline's engines evicted {base.evictions:,} cached blocks), and with
  round-robin placement a replica that gets more than its share of long requests
  preempts.
- Concurrency cap: {big.cap} model requests in flight for every variant — the
  baseline's `asyncio.Semaphore({big.cap})`, the Fleet's `max_concurrency={big.cap}`
  (no per-replica caps). Tools never hold a slot; the Fleet's tool bound is the number
  of agents, so it never binds. The cap sweep runs the baseline, `plas` with sticky
  routing and `plas` with round-robin again at the other caps its table lists, the
  same cap for every client in a row: a user of `gather` + `Semaphore` can pick any
  cap too, and the fair comparison is each client at its best.
- Real time: the first {small.agents} agents, all at once, cap {small.cap},
  {small.replicas} replicas of the same profile with {small.kv_tokens:,} tokens of KV
  each — each `python -m agentflow.sim` in its own process on loopback, at time scale
  {http_scale:g} (the servers run {1 / http_scale:g}× faster than modelled; tool
  latencies and arrivals are scaled the same), through agentflow's `HTTPTransport`;
  servers are restarted for every variant, so no variant finds another's cache."""


METHOD = """\
**Method.** Every variant runs the same sessions against fresh replicas. *Baseline*:
`asyncio.gather` over one coroutine per session; each turn builds the request from the
conversation, takes the `Semaphore`, sends it with agentflow's transport to the next
replica in a round-robin cycle (per call, not per session), appends the answer and runs
the tool calls (`asyncio.gather`), as agentflow's `Session` does — without a Fleet.
*Fleet*: `Fleet(replicas, max_concurrency=N, policy=…, router=…)` running
`Session`s that start at their arrival time; "sticky + prefix" is agentflow's default
`Router()`, "round-robin" a small `Router` subclass that sends each turn to the next
replica with room. Policies are the shipped ones with their defaults (`plas` weight 10,
`fair` quantum 0.1 s, `priority` 30 s per level — the support agents are level 1,
`deadline` the SLOs above). Agent completion time runs from a session's arrival to its
final answer; p99 is the 99th percentile over agents; throughput is all output tokens
over the time from the first arrival to the last completion (every variant produces
the same tokens); the cache hit rate is Σ `cached_tokens` / Σ `prompt_tokens` from the
usage each response reports; preemptions and "prefill computed" (prompt tokens the
engines computed — cache misses and recomputes) are the engines' own counters; "client
queue" is the mean time an agent's turns waited for a slot at the client (the
semaphore, or the scheduler's queue). Virtual-time runs are deterministic (the same
numbers on every run and machine); times are modelled seconds. The real-time runs share
this machine with whatever else runs on it: "simulator lag" is modelled time the
servers' step loops fell behind wall time (their clocks skip ahead, which slows every
request equally)."""


def overhead_text(sessions: int, turns: int, reps: int, load: float) -> str:
    return f"""**Overhead.** {sessions:,} sessions, each taking {turns} turns, contend for
{OVERHEAD_REPLICAS * OVERHEAD_PER_REPLICA} slots: {OVERHEAD_REPLICAS} replicas with
`max_in_flight={OVERHEAD_PER_REPLICA}` each, agentflow's default `Router` (sticky +
prefix-affine, least-loaded), one prefix per agent kind, a `Ticket` of 2,000 + 2,048
tokens per turn. All sessions start together, so ~{sessions - 64:,} tickets wait in the
heap at every dispatch. A granted turn "streams" for one event-loop iteration
(`await asyncio.sleep(0)`, the no-op transport) and releases; its "tool" takes one more
iteration before the session's next ticket. The figure is this process's CPU time
(`time.process_time`) from the start to the last release, over the
{sessions * turns:,} dispatches: the policy's rank, the heap, the router, the
dispatcher task's wakeups, the grant's future, the release, every task switch of the
sessions themselves, and the garbage collector's share of all that. The `Semaphore` row
runs the same sessions through `async with Semaphore(64): await asyncio.sleep(0)` — the
task switches any dispatcher pays — so "added over the `Semaphore`" is what the
scheduler and router cost; the `TurnRunner` row is the whole per-turn path of a Fleet
turn (acquire, the session header put on the request, the stream, release) with a
transport that answers at once. {reps} repetitions, rows alternating within each, a
fresh event loop per run, `gc.collect()` before each; the collector stays on (as in a
real run), and three rows run again with it off. Absolute figures on this kind of shared
2-vCPU virtual machine move by up to ~2× with other load (the 1-minute load average was
{load:.2f} when this part started); the paired differences move less."""


def overhead_findings(ov: dict[str, list[float]]) -> str:
    med = statistics.median
    if not all(k in ov for k in ("runner/nogc", "plas/nogc", "semaphore/nogc")):
        return ""
    return (
        f"With the garbage collector off, the whole `TurnRunner` path costs "
        f"{med(ov['runner/nogc']):.1f} µs per turn instead of {med(ov['runner']):.1f} (the "
        f"`plas` scheduler alone {med(ov['plas/nogc']):.1f} vs {med(ov['plas']):.1f}, the "
        f"`Semaphore` {med(ov['semaphore/nogc']):.1f} vs {med(ov['semaphore']):.1f}). The "
        f"runner allocates more per turn — a new request (`dataclasses.replace`, to add the "
        f"session header), its dicts, the coroutines of `send` and `_once` — and these live "
        f"across the stream's await, so they survive into the older generations and make "
        f"CPython's full collections, which walk every live session's objects, come more "
        f"often."
    )


@dataclass(slots=True)
class Measured:
    """Everything a full run measured (what ``--save`` pickles and ``--render`` reads)."""

    scenarios: list[tuple[Scenario, list[RunResult]]]
    http: tuple[Scenario, list[RunResult], list[RunResult]] | None
    http_scale: float
    ov: dict[str, list[float]]
    #: Overhead: sessions, turns per session, repetitions.
    ov_shape: tuple[int, int, int]
    #: The command's arguments.
    argv: list[str]
    #: The 1-minute load average when the overhead part started (other work on the machine).
    ov_load: float = math.nan
    #: When the measuring ended.
    when: str = field(
        default_factory=lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    )
    #: The concurrency-cap sweep of each scenario (empty in older saves).
    sweeps: list[Sweep] = field(default_factory=list)
    #: Per queued session and per turn (``None`` in older saves).
    sessions: SessionCost | None = None


def section(m: Measured) -> str:
    scenarios, http, http_scale, ov, ov_shape, argv = (
        m.scenarios,
        m.http,
        m.http_scale,
        m.ov,
        m.ov_shape,
        m.argv,
    )
    when = m.when
    cmd = " ".join(["python benchmarks/scheduling.py", *argv])
    parts = [
        START,
        "## Scheduling and routing: agentflow's Fleet vs `gather` + `Semaphore` "
        "(`benchmarks/scheduling.py`)",
        "",
        f"Measured {when} on {_common.machine(('agentflow', 'aiolimiter', 'msgspec'))}.",
        f"Command: `{cmd}`.",
        "",
    ]
    sweeps = getattr(m, "sweeps", [])
    sweep_of = {sw.scenario.key: sw for sw in sweeps}
    for sc, rs in scenarios:
        cpu = sum(r.cpu_s for r in rs)
        parts += [
            f"**{sc.agents} agents, {sc.label}** — virtual time, {sc.replicas} replicas, cap "
            f"{sc.cap} ({cpu:.0f} s of CPU for the {len(rs)} runs):",
            "",
            results_table(rs),
            "",
        ]
        sw = sweep_of.get(sc.key)
        if sw is not None:
            parts += [
                f"*The same workload ({sc.label}) at other concurrency caps* — every client "
                "gets the same cap; virtual time:",
                "",
                sweep_table(sw),
                "",
            ]
    if http is not None:
        hsc, hrs, vrs = http
        parts += [
            f"**Real time over HTTP: {hsc.agents} agents, {hsc.label}**, cap {hsc.cap}, "
            f"{hsc.replicas} simulator processes on loopback at time scale {http_scale:g} "
            "(times in modelled seconds):",
            "",
            http_table(hrs, vrs),
            "",
        ]
    sessions, turns, reps = ov_shape
    parts += [
        f"**Overhead with {sessions:,} sessions queued** (CPU per dispatched turn):",
        "",
        overhead_table(ov),
        "",
        targets_table(scenarios, ov, sweeps),
        "",
        findings(scenarios),
        "",
        *(x for sw in sweeps for x in (sweep_findings(sw), "")),
        overhead_findings(ov),
        "",
    ]
    if http is not None:
        parts += [http_findings(*http), ""]
    big, burst = scenarios[0][0], scenarios[-1][0]
    small = http[0] if http is not None else big
    parts += [
        workload_text(big, burst, small, http_scale, _by(scenarios[0][1], "baseline")),
        "",
        METHOD,
        "",
        overhead_text(sessions, turns, reps, m.ov_load),
        END,
    ]
    return "\n".join(parts)


def http_findings(sc: Scenario, http: Sequence[RunResult], virtual: Sequence[RunResult]) -> str:
    hb = _by(http, "baseline")
    vb = next((r for r in virtual if r.variant == "baseline"), None)
    vby = {r.variant: r for r in virtual}
    parts = []
    for r in http:
        v = vby.get(r.variant)
        if r.variant == "baseline" or v is None or vb is None:
            continue
        parts.append(
            f"`{r.variant}` {hb.mean_s / r.mean_s:.2f}× the baseline's mean over HTTP "
            f"({vb.mean_s / v.mean_s:.2f}× in virtual time)"
        )
    order_h = [r.variant for r in sorted(http, key=lambda r: r.mean_s)]
    order_v = [
        r.variant
        for r in sorted((vby[x.variant] for x in http if x.variant in vby), key=lambda r: r.mean_s)
    ]
    same = "the same order as" if order_h == order_v else "not in the order of"
    lag = max(r.lag_s for r in http)
    diffs = [r.mean_s - vby[r.variant].mean_s for r in http if r.variant in vby]
    return (
        f"*Real time.* {'; '.join(parts)}: over HTTP the variants come in {same} virtual "
        f"time. The real-time means are {min(diffs):+.1f} to {max(diffs):+.1f} s off the "
        f"virtual ones: the servers' step loops fell behind wall time by up to {lag:.0f} "
        f"modelled seconds in a run (parsing and tokenizing every request takes CPU that "
        f"virtual time does not count), not by the same amount in every run."
    )


# -- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smoke run (< 1 min); writes nothing")
    p.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    p.add_argument("--no-http", action="store_true", help="skip the real-time HTTP runs")
    p.add_argument(
        "--time-scale", type=float, default=None, help="the HTTP servers' time scale (0.25)"
    )
    p.add_argument("--variants", default=",".join(VARIANTS), help="virtual-time variants")
    p.add_argument("--save", metavar="FILE", help="also pickle the measurements to FILE")
    p.add_argument(
        "--render", metavar="FILE", help="measure nothing: write the section from a --save FILE"
    )
    p.add_argument(
        "--session-cost",
        action="store_true",
        help="measure only the per-queued-session and per-turn cost (~6 min; its own section)",
    )
    p.add_argument("--reps", type=int, default=5, help="repetitions of the per-turn runs")
    args = p.parse_args(argv)
    if args.render:
        with open(args.render, "rb") as f:
            saved: Measured = pickle.load(f)
        _common.write_section(NAME, section(saved))
        print(f"wrote the {NAME} section of {_common.DOC.relative_to(_common.ROOT)}")
        cost = getattr(saved, "sessions", None)
        if cost is not None:
            _common.write_section(COST_NAME, session_cost_section(cost))
            print(f"wrote the {COST_NAME} section")
        return
    q = args.quick
    if args.session_cost:
        cost = run_session_cost((2_000,) if q else COST_SIZES, 1 if q else args.reps)
        print(f"\n{session_cost_table(cost)}\n\n{session_cost_targets(cost)}")
        if not (q or args.no_write):
            _common.write_section(COST_NAME, session_cost_section(cost))
            print(f"wrote the {COST_NAME} section of {_common.DOC.relative_to(_common.ROOT)}")
        return
    kv = planned_kv_tokens()
    if q:
        big = Scenario("all", "all at once", 32, 8, 4, kv // 4, 0.0)
        scenarios = [big]
        keys = ["baseline", "fcfs", "plas", "plas-rr"]
        small = Scenario("small", "all at once", 8, 4, 2, kv // 4, 0.0)
        http_keys = ["baseline", "plas"]
        ov_shape = (2000, 3, 1)
        caps: tuple[int, ...] = (16,)
    else:
        big = Scenario("all", "all at once", 256, 64, 4, kv, 0.0)
        burst = Scenario("burst", "a Poisson burst", 256, 64, 4, kv, 100.0)
        scenarios = [big, burst]
        keys = args.variants.split(",")
        small = Scenario("small", "all at once", 64, 16, 4, kv // 4, 0.0)
        http_keys = ["baseline", "plas", "plas-rr"]
        ov_shape = (10_000, 3, 5)
        caps = (32, 128, 256)
    http_scale = args.time_scale or (0.25 if not q else 0.02)
    keys = ["baseline", *(k for k in keys if k != "baseline")]

    jobs = [(sc, k) for sc in scenarios for k in keys]
    swept = [(sc, at_cap(sc, c)) for sc in scenarios for c in caps if c != sc.cap]
    jobs += [(at, k) for _, at in swept for k in SWEEP_KEYS]
    jobs += [(small, k) for k in http_keys]
    results = run_virtual_jobs(jobs)
    by_sc = [(sc, [r for r in results if r.scenario == sc.key]) for sc in scenarios]
    sweeps = []
    if all(k in keys for k in SWEEP_KEYS):
        for sc, rs in by_sc:
            runs = {sc.cap: {r.variant: r for r in rs if r.variant in SWEEP_KEYS}}
            for base, at in swept:
                if base is sc:
                    runs[at.cap] = {r.variant: r for r in results if r.scenario == at.key}
            sweeps.append(Sweep(sc, runs))
    small_virtual = [r for r in results if r.scenario == small.key]

    http: tuple[Scenario, list[RunResult], list[RunResult]] | None = None
    if not args.no_http:
        hrs = []
        for k in http_keys:
            r = run_http_variant(VARIANTS[k], small, http_scale)
            _progress(r, "http")
            hrs.append(r)
        http = (small, hrs, small_virtual)

    ov_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    ov = run_overhead(*ov_shape)
    cost = run_session_cost((2_000,) if q else COST_SIZES, 1 if q else args.reps)

    for sc, rs in by_sc:
        print(f"\n{sc.agents} agents, {sc.label}:\n{results_table(rs)}")
    for sw in sweeps:
        print(f"\ncap sweep, {sw.scenario.label}:\n{sweep_table(sw)}\n\n{sweep_findings(sw)}")
    if http is not None:
        print(f"\nHTTP, {small.agents} agents:\n{http_table(http[1], http[2])}")
    print(f"\n{overhead_table(ov)}")
    print(f"\n{session_cost_table(cost)}\n\n{session_cost_targets(cost)}")
    full = all(k in keys for k in VARIANTS)
    if full:
        print(f"\n{targets_table(by_sc, ov, sweeps)}\n\n{findings(by_sc)}")
    if q or args.no_write:
        return
    if not full or http is None:
        print("not writing docs: a full run needs every variant and the HTTP runs")
        return
    given = list(sys.argv[1:] if argv is None else argv)
    if args.save:  # not part of what was measured
        i = given.index("--save") if "--save" in given else -1
        given = given[:i] + given[i + 2 :] if i >= 0 else [a for a in given if "--save" not in a]
    measured = Measured(
        by_sc, http, http_scale, ov, ov_shape, given, ov_load, sweeps=sweeps, sessions=cost
    )
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(measured, f)
    _common.write_section(NAME, section(measured))
    _common.write_section(COST_NAME, session_cost_section(cost))
    print(f"wrote the {NAME} section of {_common.DOC.relative_to(_common.ROOT)}")


if __name__ == "__main__":
    main()
