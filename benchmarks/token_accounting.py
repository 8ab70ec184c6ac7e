"""Per-turn token accounting cost as a session grows to 1,000,000 tokens.

What is measured: the CPU time agentflow spends, per model turn, accounting for a
session's prompt, through the documented chain ``Agent(context=[ContextBudget(...),
PrefixIndex()])`` exactly as a ``Session`` drives it:

* ``SessionBudget.before_turn`` — the prompt's token count, incremental (only messages
  new or changed since the last turn are tokenized), the calibrated forecast, the
  cache-buster check and the prefix fingerprint (block hashes of the new tokens, the most
  cacheable prompt tokens, recorded in a fleet-wide ``PrefixIndex``);
* ``SessionBudget.after_turn`` — the server's usage taught to the calibrator, the reply
  fingerprinted with the prompt (the server cached both).

How: sessions are bound to one chain (one shared ``MessageCounter``, ``Calibrator`` and
``PrefixIndex``, as in a fleet), each starting from a ~1,000-token system prompt, a task
and four tool schemas. A turn appends a ~500-token tool output (random words from a
fixed vocabulary), runs ``before_turn``, takes the "server's" reply (a short tool call),
runs ``after_turn`` and appends the reply as a ``Session`` appends it (its own dict, from
the trace). Each session's history is first built that way, untimed, to 10k, 100k, 500k
and 1M tokens; then, in each repetition, every session in turn takes one more turn, timed
— rows interleaved, so machine noise spreads over all of them. Each turn is timed with
``time.process_time_ns`` (this process's CPU) and ``perf_counter_ns`` (wall), building
the server's report excepted. For comparison, the stateless
``MessageCounter.count_prompt`` (one cache lookup per message) is timed on the same
histories.

Baselines measured in the same run: tokenizing one new ~500-token message
(``TiktokenCounter.count``), and recounting the whole 1M-token history from scratch
(a fresh ``MessageCounter``) — what a non-incremental counter pays every turn. And the
hash behind the fingerprints: Python's ``hash`` of a tuple against ``hashlib.blake2b``
and ``sha256`` over packed ids, per 16-token block of the 1M-token prompt.

Two more parts (issue 14): sessions at 100k, 500k and 1M tokens taking a ~20k-token
tool output per turn (each output then taken off again, untimed, so that every turn
appends to the same history), against tiktoken alone on such an output; and one
session per window (100k, 500k, 1M) held inside it by
``ContextBudget(overflow=TruncateToolOutputs(all=…))``, each turn a tool call and a
~20k-token output, ``before_turn`` timed, with the share of prompt tokens the
fingerprint reports cacheable — for the default ``all=True`` and for ``all=False``.
Every accounting step also records how many characters the tokenizer was handed,
over the characters appended: 1.00 means each message was tokenized once.

Usage::

    python benchmarks/token_accounting.py            # full run (~2 min); rewrites its
                                                     # section of docs/benchmarks.md
    python benchmarks/token_accounting.py --quick    # smoke run (< 30 s); writes nothing
    python benchmarks/token_accounting.py --no-write
    python benchmarks/token_accounting.py --only-truncation --truncate-all-only \
        --large-lengths 1000000                      # the 1M TruncateToolOutputs row alone
                                                     # (for profiling); writes nothing

Only the block between ``<!-- token_accounting:start -->`` and
``<!-- token_accounting:end -->`` in ``docs/benchmarks.md`` is replaced (appended at
the end of the file if missing). ``--quick`` never writes.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import datetime as dt
import gc
import hashlib
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import _common

from agentflow import PromptInfo, ToolCall, TurnTrace, Usage
from agentflow.context import (
    Calibrator,
    ContextBudget,
    ContextChain,
    ContextTrimmedEvent,
    MessageCounter,
    PrefixIndex,
    PrefixSession,
    PromptCounter,
    SessionBudget,
    TiktokenCounter,
    TruncateToolOutputs,
)

ROOT = _common.ROOT
DOC = _common.DOC
NAME = "token_accounting"
START, END = _common.markers(NAME)
MODEL = "bench-model"
TARGET_MS = 1.0
#: Issue 14's targets: a 20k-token append, and a TruncateToolOutputs turn, at 1M tokens.
LARGE_TARGET_MS = 5.0
#: The TruncateToolOutputs mean as a multiple of tiktoken alone on the new output: the 5 ms
#: of issue 14 where tiktoken takes ~3.5 ms (the machine it was measured on).
RATIO_TARGET = 1.4

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()} in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "A path in the workspace."},
                    "limit": {"type": "integer", "description": "The most lines to read."},
                },
                "required": ["path"],
            },
        },
    }
    for name in ("read_file", "list_directory", "search_text", "run_tests")
]


# -- the history ----------------------------------------------------------------------------


class Texts:
    """Deterministic text of about ``tokens`` cl100k tokens per call (random words)."""

    def __init__(self, seed: int, counter: TiktokenCounter) -> None:
        rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.vocab = [
            "".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)
        ]
        self.vocab += [f"{w}." for w in self.vocab[:300]] + [f"{w}," for w in self.vocab[:300]]
        self.vocab += [str(rng.randint(0, 99999)) for _ in range(200)]
        self.rng = rng
        sample = " ".join(rng.choice(self.vocab) for _ in range(20_000))
        self.tokens_per_word = counter.count(sample) / 20_000

    def text(self, tokens: int) -> str:
        words = max(1, round(tokens / self.tokens_per_word))
        choice = self.rng.choice
        return " ".join([choice(self.vocab) for _ in range(words)])


def message(texts: Texts, i: int, tokens: int = 500) -> dict[str, Any]:
    """The ``i``-th message: assistant (with a tool call) and tool result, alternately."""
    if i % 2 == 0:
        return {
            "role": "assistant",
            "content": texts.text(tokens - 40),
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": f'{{"path": "src/m{i}.py"}}'},
                }
            ],
        }
    return {"role": "tool", "tool_call_id": f"call_{i - 1}", "content": texts.text(tokens)}


def build_history(texts: Texts, mc: MessageCounter, total: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": texts.text(1000)}]
    msgs.append({"role": "user", "content": texts.text(200)})
    n = mc.count_prompt(msgs, TOOLS)
    i = 0
    while n < total:
        m = message(texts, i)
        n += mc.count_message(m)
        msgs.append(m)
        i += 1
    return msgs


# -- measuring ------------------------------------------------------------------------------


class Tally:
    """A :class:`TokenCounter` that hands every text to tiktoken and counts its characters:
    the benchmark's check that each appended message is tokenized once (no second pass)."""

    def __init__(self, inner: TiktokenCounter) -> None:
        self.inner = inner
        self.chars = 0

    @property
    def name(self) -> str:
        return self.inner.name

    def count(self, text: str) -> int:
        self.chars += len(text)
        return self.inner.count(text)

    def encode(self, text: str) -> list[int]:
        self.chars += len(text)
        return self.inner.encode(text)


def text_chars(message: dict[str, Any]) -> int:
    """Characters of a message's text the tokenizer must see: role, content, tool calls."""
    n = len(message["role"]) + len(message.get("content") or "")
    for c in message.get("tool_calls") or ():
        n += len(c["function"]["name"]) + len(c["function"]["arguments"])
    return n


def history_prefix(history: list[dict[str, Any]], tc: TiktokenCounter, target: int) -> int:
    """How many leading messages of ``history`` hold ``target`` tokens."""
    counts = MessageCounter(tc)
    n = counts.count_prompt(history[:2], TOOLS)
    k = 2
    while n < target and k < len(history):
        n += counts.count_message(history[k])
        k += 1
    return k


@dataclass
class Row:
    """One session at one history length and its per-turn samples (ns)."""

    target: int
    messages: list[dict[str, Any]]
    #: The session's side of the chain's budget (the prefix index link joined to it).
    ctx: SessionBudget
    #: The same history under the other change checks (timed on their own).
    checks: dict[str, PromptCounter] = field(default_factory=dict)
    start_tokens: int = 0
    start_messages: int = 0
    tokens: int = 0
    turns: int = 0
    cpu: list[int] = field(default_factory=list)
    wall: list[int] = field(default_factory=list)
    before_cpu: list[int] = field(default_factory=list)
    after_cpu: list[int] = field(default_factory=list)
    stateless_cpu: list[int] = field(default_factory=list)
    check_ns: dict[str, list[int]] = field(default_factory=dict)
    cacheable: list[int] = field(default_factory=list)
    #: Each turn's prompt (estimated tokens), for the cacheable share.
    prompts: list[int] = field(default_factory=list)
    #: Characters tokenized per turn ÷ characters of text appended (1.0: once).
    passes: list[float] = field(default_factory=list)


def _median_ms(xs: Sequence[int]) -> float:
    return statistics.median(xs) / 1e6


def _range_ms(xs: Sequence[int]) -> str:
    return f"{min(xs) / 1e6:.3f}–{max(xs) / 1e6:.3f}"


def _system_busy_ns() -> int | None:
    """CPU time all processes spent busy, machine-wide, from /proc/stat; None if unknown."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def server_trace(reply: dict[str, Any], completion: int, info: PromptInfo) -> TurnTrace:
    """What the "server" reports for a turn: ``reply`` (an assistant tool call) and its usage
    — ``prompt_tokens`` the local count (a tokenizer that agrees with cl100k),
    ``cached_tokens`` what the fingerprint said could be cached."""
    call = reply["tool_calls"][0]
    return TurnTrace(
        endpoint="bench", model=None, response_id=None, sent_ns=0, headers_ns=0, end_ns=0,
        chunk_ns=(), chunk_chars=(), chunk_tokens=(), tokens_exact=False, n_events=1,
        content=reply["content"], reasoning="", finish_reason="tool_calls", done=True,
        tool_calls=(
            ToolCall(index=0, id=call["id"], name=call["function"]["name"],
                     arguments=call["function"]["arguments"]),
        ),
        usage=Usage(
            prompt_tokens=info.raw_estimate,
            completion_tokens=completion,
            cached_tokens=info.max_cacheable_tokens,
        ),
    )  # fmt: skip


async def turn(
    row: Row, output: dict[str, Any], reply: tuple[dict[str, Any], int], tally: Tally
) -> None:
    """One turn of the row's session, as a Session runs it: ``output`` appended (the result
    of the call the last reply made), ``before_turn`` and ``after_turn`` timed, then the
    reply appended — the session's own dict, from the trace."""
    msgs = row.messages
    msgs.append(output)
    cpu, wall = time.process_time_ns, time.perf_counter_ns
    chars = tally.chars
    c0, w0 = cpu(), wall()
    info = await row.ctx.before_turn(row.turns, msgs, TOOLS, _never)
    c1, w1 = cpu(), wall()
    trace = server_trace(*reply, info)  # the server's work, not the client's: untimed
    c2, w2 = cpu(), wall()
    row.ctx.after_turn(row.turns, trace)
    c3, w3 = cpu(), wall()
    msgs.append(trace.assistant_message())
    row.turns += 1
    row.cpu.append(c1 - c0 + c3 - c2)
    row.wall.append(w1 - w0 + w3 - w2)
    row.before_cpu.append(c1 - c0)
    row.after_cpu.append(c3 - c2)
    row.cacheable.append(info.max_cacheable_tokens or 0)
    row.prompts.append(info.estimated_tokens)
    row.passes.append((tally.chars - chars) / (text_chars(output) + text_chars(reply[0])))
    row.tokens = info.raw_estimate


def extras(row: Row, mc: MessageCounter) -> None:
    """The comparisons, timed after a repetition's turns: the stateless count, and the
    change check alone under each mode (after a count nothing has changed, so
    ``changed_from`` compares the whole history with its snapshots)."""
    msgs = row.messages
    cpu = time.process_time_ns
    s0 = cpu()
    mc.count_prompt(msgs, TOOLS)
    row.stateless_cpu.append(cpu() - s0)
    prompt = row.ctx._est.counter  # the budget's own: what before_turn's count compares
    for name, pc in (("identity", prompt), *row.checks.items()):
        if pc is not prompt:
            pc.count(msgs, TOOLS)
        s0 = cpu()
        pc.changed_from(msgs)
        row.check_ns.setdefault(name, []).append(cpu() - s0)


def hash_costs(tokens: list[int], size: int, reps: int) -> dict[str, float]:
    """µs per block of four chained block hashes over ``tokens``."""
    full = len(tokens) - len(tokens) % size
    packed = array.array("q", tokens)

    # Both as PrefixSession iterates: each block a tuple, built by zip over one iterator.
    def py_hash() -> None:
        h = 0
        for block in zip(*[islice(tokens, 0, full)] * size, strict=False):
            h = hash((h, block))

    def py_hash_flat() -> None:
        h = 0
        for block in zip(*[islice(tokens, 0, full)] * size, strict=False):
            h = hash((h, *block))

    def blake2b() -> None:
        d = b""
        b2 = hashlib.blake2b
        for i in range(0, full, size):
            d = b2(d + packed[i : i + size].tobytes(), digest_size=8).digest()

    def sha256() -> None:
        d = b""
        sha = hashlib.sha256
        for i in range(0, full, size):
            d = sha(d + packed[i : i + size].tobytes()).digest()

    out: dict[str, float] = {}
    fns: dict[str, Callable[[], None]] = {
        "Python `hash((prev, block))`": py_hash,
        "Python `hash((prev, *ids))`": py_hash_flat,
        "`hashlib.blake2b(prev + ids, digest_size=8)`": blake2b,
        "`hashlib.sha256(prev + ids)`": sha256,
    }
    samples: dict[str, list[int]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.process_time_ns()
            fn()
            samples[name].append(time.process_time_ns() - t0)
    for name, xs in samples.items():
        out[name] = statistics.median(xs) / (full // size) / 1e3
    return out


@dataclass
class Results:
    texts: Texts
    history: list[dict[str, Any]]
    rows: list[Row]
    one_message_ns: list[int]
    recount_ns: list[int]
    refingerprint_ns: list[int]
    hashes: dict[str, float]
    reps: int
    history_tokens: int
    other_cores: float | None
    message_tokens: float
    large: Large | None = None
    truncation: Truncation | None = None


def run(targets: Sequence[int], reps: int, scratch_reps: int, history_tokens: int = 0) -> Results:
    tc = TiktokenCounter()
    texts = Texts(1, tc)
    tally = Tally(tc)
    mc = MessageCounter(tally)
    # The large appends' history (its first two messages start every session here).
    print(f"generating a {history_tokens:,}-token history …", file=sys.stderr)
    history = build_history(texts, MessageCounter(tc), history_tokens)
    index = PrefixIndex(mc)
    # The documented chain, bound once per session as an agent binds it; the window is
    # never reached (no policy runs).
    budget = ContextBudget(window=4 * max(targets), counter=mc, calibrator=Calibrator())
    chain = ContextChain([budget, index])
    plain = MessageCounter(tc)  # the server's count of a reply (untimed, not tallied)
    # Each turn: a ~500-token tool output, then the reply calling the next tool (~40 tokens).
    outputs = [message(texts, 20_001 + 2 * i) for i in range(reps * len(targets))]
    replies = [message(texts, 20_002 + 2 * i, 80) for i in range(reps * len(targets))]
    replied = [(r, plain.count_message(r)) for r in replies]
    rows: list[Row] = []
    #: The turns every session's history is built of (shared, as tool outputs of the same
    #: files would be): a reply, its server count, the output of its call.
    built: list[tuple[dict[str, Any], int, dict[str, Any]]] = []

    async def prefill(row: Row) -> None:
        """Untimed, turn by turn through the chain, as a session builds its history (every
        reply the session's own dict from the trace), until ``row.target`` tokens."""
        msgs, ctx = row.messages, row.ctx
        while True:
            if row.turns == len(built):
                reply = message(texts, 2 * row.turns, 80)
                built.append((reply, plain.count_message(reply), message(texts, 2 * row.turns + 1)))
            reply, n, output = built[row.turns]
            info = await ctx.before_turn(row.turns, msgs, TOOLS, _never)
            ctx.after_turn(row.turns, server_trace(reply, n, info))
            msgs.append(server_trace(reply, n, info).assistant_message())
            row.turns += 1
            if info.raw_estimate >= row.target:
                row.tokens = row.start_tokens = info.raw_estimate
                return
            msgs.append(output)

    async def bind() -> None:
        for i, target in enumerate(sorted(targets)):
            msgs = history[:2]  # the system prompt and the task
            bound: Any = chain.bind(session_id=f"s{i}", agent="bench", emit=_drop, model=MODEL)
            row = Row(target, msgs, bound._sessions[0])
            await prefill(row)
            row.checks = {"values": mc.session(check="values"), "deep": mc.session(check="deep")}
            for pc in row.checks.values():
                pc.count(msgs, TOOLS)
            row.start_messages = len(msgs)
            rows.append(row)
            print(f"  session at {row.tokens:,} tokens, {len(msgs):,} messages", file=sys.stderr)

    asyncio.run(bind())
    # Fresh texts for the tokenizer baseline, timed in the same repetitions.
    fresh_texts = [str(message(texts, 50_001 + 2 * i)["content"]) for i in range(reps)]
    message_tokens = statistics.fmean(plain.count_message(m) for m in outputs[:50])
    busy0, wall0, cpu0 = _system_busy_ns(), time.perf_counter_ns(), time.process_time_ns()
    gc.collect()
    it = iter(zip(outputs, replied, strict=False))
    one: list[int] = []
    # The order rotates each repetition, the tokenizer baseline taking its turn among the
    # sessions, so that every row follows every other equally often: what ran just before
    # decides how warm the CPU caches (tiktoken's rank table above all) are.
    slots: list[Row | None] = [*rows, None]

    async def turns() -> None:
        for rep in range(reps):
            shift = rep % len(slots)
            for slot in slots[shift:] + slots[:shift]:
                if slot is None:
                    t0 = time.process_time_ns()
                    tc.count(fresh_texts[rep])
                    one.append(time.process_time_ns() - t0)
                else:
                    await turn(slot, *next(it), tally)
            for row in rows:
                extras(row, mc)

    asyncio.run(turns())
    busy1, wall1, cpu1 = _system_busy_ns(), time.perf_counter_ns(), time.process_time_ns()
    other = (
        None
        if busy0 is None or busy1 is None
        else max(0.0, (busy1 - busy0 - (cpu1 - cpu0)) / (wall1 - wall0))
    )
    # Baselines.
    biggest = rows[-1]
    recount: list[int] = []
    refingerprint: list[int] = []
    for _ in range(scratch_reps):
        fresh = MessageCounter(tc)
        t0 = time.process_time_ns()
        fresh.count_prompt(biggest.messages, TOOLS)
        recount.append(time.process_time_ns() - t0)
        session = PrefixIndex(fresh).session()
        t0 = time.process_time_ns()
        session.observe(biggest.messages, TOOLS)
        refingerprint.append(time.process_time_ns() - t0)
    tokens = list(mc.render_tools(TOOLS))
    for m in biggest.messages:
        tokens += mc.render(m)
    hashes = hash_costs(tokens, index.block_size, max(1, scratch_reps))
    return Results(
        texts=texts,
        history=history,
        rows=rows,
        one_message_ns=one,
        recount_ns=recount,
        refingerprint_ns=refingerprint,
        hashes=hashes,
        reps=reps,
        history_tokens=len(tokens),
        other_cores=other,
        message_tokens=message_tokens,
    )


# -- large appends --------------------------------------------------------------------------


@dataclass
class LargeRow:
    """One session at one history length, taking a ~20k-token tool output per turn (ns)."""

    messages: list[dict[str, Any]]
    prompt: PromptCounter
    prefix: PrefixSession
    tokens: int = 0
    cpu: list[int] = field(default_factory=list)
    count_cpu: list[int] = field(default_factory=list)
    observe_cpu: list[int] = field(default_factory=list)
    passes: list[float] = field(default_factory=list)
    cacheable: list[int] = field(default_factory=list)


@dataclass
class Large:
    rows: list[LargeRow]
    output_tokens: float
    #: tiktoken alone on a fresh output of the same size, timed among the turns (ns).
    tokenize_ns: list[int]
    reps: int


def run_large(res: Results, targets: Sequence[int], reps: int, size: int) -> Large:
    """Sessions at each history length (fresh counters, one shared index) take one
    ``size``-token tool output per turn, timed; the output is then taken off again,
    untimed, so that every timed turn appends to the same history."""
    tc = TiktokenCounter()
    tally = Tally(tc)
    mc = MessageCounter(tally)
    index = PrefixIndex(mc)
    cal = Calibrator()
    cal.observe(MODEL, 1000, 1100)
    cal.observe(MODEL, 2000, 2150)
    rows: list[LargeRow] = []
    for target in sorted(targets):
        msgs = [dict(m) for m in res.history[: history_prefix(res.history, tc, target)]]
        prompt = mc.session()
        row = LargeRow(msgs, prompt, index.session(prompt))
        row.tokens = prompt.count(msgs, TOOLS)
        row.prefix.observe(msgs, TOOLS)
        prompt.anchor(row.tokens)
        rows.append(row)
    texts = res.texts
    print(f"generating {reps * (len(rows) + 1)} outputs of ~{size:,} tokens …", file=sys.stderr)
    outputs = [
        {"role": "tool", "tool_call_id": f"call_{i}", "content": texts.text(size)}
        for i in range(reps * len(rows))
    ]
    fresh = [texts.text(size) for _ in range(reps)]
    output_tokens = statistics.fmean(tc.count(str(m["content"])) for m in outputs[:5])
    it = iter(outputs)
    tokenize: list[int] = []
    gc.collect()
    cpu = time.process_time_ns
    slots: list[LargeRow | None] = [*rows, None]
    for rep in range(reps):
        shift = rep % len(slots)
        for slot in slots[shift:] + slots[:shift]:
            if slot is None:
                t0 = cpu()
                tc.count(fresh[rep])
                tokenize.append(cpu() - t0)
                continue
            new = next(it)
            msgs = slot.messages
            msgs.append(new)
            chars = tally.chars
            c0 = cpu()
            slot.prompt.count(msgs, TOOLS)
            cal.estimate(MODEL, slot.prompt)
            c1 = cpu()
            cacheable = slot.prefix.observe(msgs, TOOLS)
            c2 = cpu()
            slot.cpu.append(c2 - c0)
            slot.count_cpu.append(c1 - c0)
            slot.observe_cpu.append(c2 - c1)
            slot.passes.append((tally.chars - chars) / text_chars(new))
            slot.cacheable.append(cacheable)
            msgs.pop()  # untimed: back to the history's length for the next turn
            slot.prompt.count(msgs, TOOLS)
            slot.prefix.observe(msgs, TOOLS)
            slot.prompt.anchor(slot.tokens)
    return Large(rows=rows, output_tokens=output_tokens, tokenize_ns=tokenize, reps=reps)


# -- TruncateToolOutputs near the window ----------------------------------------------------


@dataclass
class TruncRow:
    """One session held inside a window by TruncateToolOutputs, turn by turn."""

    window: int
    all: bool
    turns: int
    limit: int = 0
    start_tokens: int = 0
    cpu: list[int] = field(default_factory=list)
    #: Whether the policy cut anything on that turn.
    cut: list[bool] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    cacheable: list[int] = field(default_factory=list)
    #: Tokens tiktoken produced during the turn (every text it was handed), and the tool
    #: outputs the turn cut.
    tokenized: list[int] = field(default_factory=list)
    outputs_cut: list[int] = field(default_factory=list)

    @property
    def hit_share(self) -> float:
        return sum(self.cacheable) / sum(self.tokens)


@dataclass
class Truncation:
    rows: list[TruncRow]
    #: tiktoken alone on a fresh output of the same size, timed among the turns (ns).
    tokenize_ns: list[int]
    other_cores: float | None


async def _never(request: Any) -> Any:
    raise AssertionError("no policy here makes a model call")


def _drop(event: Any) -> None:
    """Events of the budget rows (none expected: no policy runs) go nowhere."""


class _TruncSession:
    """One session near ``window`` under ``ContextBudget(overflow=TruncateToolOutputs())``:
    each turn appends the model's reply (an assistant tool call, from the trace as a Session
    appends it) and a ``size``-token
    output, then the budget's ``before_turn`` (count, policy, cache-buster check,
    fingerprint) and ``after_turn`` (the server's usage: calibration, the reply's
    fingerprint) are timed. The server's report is a tokenizer that agrees with cl100k
    and a cache that serves what the fingerprint says it could."""

    def __init__(self, texts: Texts, row: TruncRow, size: int) -> None:
        tc = TiktokenCounter()
        encode = tc._encode  # what every count, cut and render of this session ends in
        self.encoded = 0

        def counting(text: str) -> list[int]:
            ids = encode(text)
            self.encoded += len(ids)
            return ids

        tc._encode = counting
        counter = MessageCounter(tc)
        self.counter = counter
        self.policy = TruncateToolOutputs(all=row.all)
        budget = ContextBudget(
            window=row.window, reserve_output=4096, counter=counter, overflow=self.policy
        )
        self.events: list[Any] = []
        # Bound as an agent binds its chain; the budget's session (joined with the index
        # link after it, which does nothing of its own) is what is timed.
        chain = ContextChain([budget, PrefixIndex(counter)])
        bound: Any = chain.bind(session_id="bench", agent="bench", emit=self.events.append)
        self.ctx: SessionBudget = bound._sessions[0]
        assert isinstance(self.ctx, SessionBudget)
        row.limit = self.ctx.limit
        self.row, self.texts, self.size, self.i = row, texts, size, 0
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": texts.text(1000)},
            {"role": "user", "content": texts.text(200)},
        ]
        self.reply = message(texts, 0, 80)

    def append(self) -> None:
        self.messages.append(self.reply)
        self.messages.append(message(self.texts, 2 * self.i + 1, self.size))
        self.reply = message(self.texts, 2 * self.i + 2, 80)

    def cuts(self) -> int:
        return sum(isinstance(e, ContextTrimmedEvent) for e in self.events)

    def outputs_cut(self) -> int:
        was_cut = self.policy.was_cut
        return sum(m["role"] == "tool" and was_cut(m["content"]) for m in self.messages)

    def trace(self, info: PromptInfo) -> TurnTrace:
        """What the server reports for the turn: the next reply, and its usage."""
        return server_trace(self.reply, self.counter.count_message(self.reply), info)

    async def turn(self) -> tuple[PromptInfo, int]:
        """One turn; returns what ``before_turn`` said and the accounting's CPU ns."""
        cpu = time.process_time_ns
        c0 = cpu()
        info = await self.ctx.before_turn(self.i, self.messages, TOOLS, _never)
        c1 = cpu()
        trace = self.trace(info)  # the server's work, not the client's: untimed
        # The reply goes into the history as a Session puts it there: from the trace.
        self.reply = trace.assistant_message()
        c2 = cpu()
        self.ctx.after_turn(self.i, trace)
        ns = c1 - c0 + cpu() - c2
        self.i += 1
        return info, ns

    async def prefill(self) -> None:
        """Untimed, turn by turn, up to four outputs short of the limit."""
        tokens = 0
        while tokens + 4 * self.size < self.ctx.limit:
            self.append()
            info, _ = await self.turn()
            tokens = info.estimated_tokens
        if self.cuts():
            raise RuntimeError(f"the prefill at {self.row.window:,} already overflowed")
        self.row.start_tokens = tokens

    async def step(self) -> None:
        self.append()
        seen, cut, encoded = self.cuts(), self.outputs_cut(), self.encoded
        info, ns = await self.turn()
        row = self.row
        row.cpu.append(ns)
        row.cut.append(self.cuts() > seen)
        row.tokenized.append(self.encoded - encoded)
        row.outputs_cut.append(self.outputs_cut() - cut)
        row.tokens.append(info.estimated_tokens)
        row.cacheable.append(info.max_cacheable_tokens or 0)


def run_truncation(texts: Texts, rows: list[TruncRow], size: int) -> Truncation:
    """Every row's session, turn by turn in a rotating order (with tiktoken alone on a
    fresh output taking its turn among them), until each has had its turns."""
    tc = TiktokenCounter()
    sessions = [_TruncSession(texts, row, size) for row in rows]
    most = max(row.turns for row in rows)
    fresh = [texts.text(size) for _ in range(most)]
    tokenize: list[int] = []

    async def main() -> float | None:
        for session in sessions:
            print(
                f"TruncateToolOutputs(all={session.row.all}) at {session.row.window:,} …",
                file=sys.stderr,
            )
            await session.prefill()
        gc.collect()
        busy0, wall0, cpu0 = _system_busy_ns(), time.perf_counter_ns(), time.process_time_ns()
        slots: list[_TruncSession | None] = [*sessions, None]
        for t in range(most):
            shift = t % len(slots)
            for slot in slots[shift:] + slots[:shift]:
                if slot is None:
                    c0 = time.process_time_ns()
                    tc.count(fresh[t])
                    tokenize.append(time.process_time_ns() - c0)
                elif t < slot.row.turns:
                    await slot.step()
        busy1, wall1, cpu1 = _system_busy_ns(), time.perf_counter_ns(), time.process_time_ns()
        if busy0 is None or busy1 is None:
            return None
        return max(0.0, (busy1 - busy0 - (cpu1 - cpu0)) / (wall1 - wall0))

    other = asyncio.run(main())
    return Truncation(rows=rows, tokenize_ns=tokenize, other_cores=other)


# -- reporting ------------------------------------------------------------------------------


def machine() -> str:
    return _common.machine(("agentflow", "tiktoken"))


def tables(res: Results) -> tuple[str, str, str]:
    head = (
        "| history (tokens) | messages | per turn, CPU ms (median) | min–max | wall ms "
        "| `before_turn` | `after_turn` | tokenized ÷ appended | cacheable / prompt "
        "| stateless `count_prompt` | change check µs: identity / values / deep |\n"
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    )
    lines = [head]
    for r in res.rows:
        share = sum(r.cacheable) / sum(r.prompts)
        checks = " / ".join(
            f"{statistics.median(r.check_ns[k]) / 1e3:.0f}" for k in ("identity", "values", "deep")
        )
        lines.append(
            f"| {r.start_tokens:,} → {r.tokens:,} | {r.start_messages:,} → {len(r.messages):,} "
            f"| **{_median_ms(r.cpu):.3f}** | {_range_ms(r.cpu)} | {_median_ms(r.wall):.3f} "
            f"| {_median_ms(r.before_cpu):.3f} | {_median_ms(r.after_cpu):.3f} "
            f"| {_passes(r.passes)} | {share:.1%} "
            f"| {_median_ms(r.stateless_cpu):.3f} | {checks} |"
        )
    base = (
        "| baseline (same run) | CPU, median | min–max |\n|---|--:|--:|\n"
        f"| tokenize one new ~{res.message_tokens:.0f}-token message (`TiktokenCounter.count`) "
        f"| {_median_ms(res.one_message_ns):.3f} ms | {_range_ms(res.one_message_ns)} ms |\n"
        f"| recount the {res.rows[-1].tokens:,}-token history from scratch "
        f"(fresh `MessageCounter.count_prompt`) | {_median_ms(res.recount_ns) / 1e3:.3f} s "
        f"| {min(res.recount_ns) / 1e9:.3f}–{max(res.recount_ns) / 1e9:.3f} s |\n"
        f"| fingerprint it from scratch (fresh `PrefixIndex`, first `observe`) "
        f"| {_median_ms(res.refingerprint_ns) / 1e3:.3f} s "
        f"| {min(res.refingerprint_ns) / 1e9:.3f}–{max(res.refingerprint_ns) / 1e9:.3f} s |"
    )
    blocks = res.history_tokens // 16
    hashes = (
        "| block hash (16 tokens, chained) | µs per block | ms per 1M tokens |\n|---|--:|--:|\n"
    )
    hashes += "\n".join(
        f"| {name} | {us:.2f} | {us * 1_000_000 / 16 / 1e3:.1f} |"
        for name, us in res.hashes.items()
    )
    hashes += f"\n\n({blocks:,} blocks of the {res.history_tokens:,}-token rendered prompt.)"
    return "\n".join(lines), base, hashes


def _passes(xs: Sequence[float]) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}"


def _p90_ms(xs: Sequence[int]) -> float:
    return (
        statistics.quantiles(xs, n=10, method="inclusive")[-1] / 1e6 if len(xs) > 1 else xs[0] / 1e6
    )


def large_table(large: Large) -> str:
    lines = [
        "| history (tokens) | per turn, CPU ms (median) | p90 | min–max | count + estimate "
        "| fingerprint | tokenized ÷ appended | cacheable / prompt |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in large.rows:
        share = statistics.median(c / (r.tokens + large.output_tokens) for c in r.cacheable)
        lines.append(
            f"| {r.tokens:,} | **{_median_ms(r.cpu):.3f}** | {_p90_ms(r.cpu):.3f} "
            f"| {_range_ms(r.cpu)} | {_median_ms(r.count_cpu):.3f} "
            f"| {_median_ms(r.observe_cpu):.3f} | {_passes(r.passes)} | {share:.1%} |"
        )
    lines.append(
        f"\nBaseline in the same run: tiktoken alone on a fresh ~{large.output_tokens:,.0f}-token "
        f"output (`TiktokenCounter.count`): {_median_ms(large.tokenize_ns):.3f} ms median "
        f"({_range_ms(large.tokenize_ns)})."
    )
    return "\n".join(lines)


def _sweep(r: TruncRow) -> tuple[float, float]:
    """Outputs cut per sweep, and the tokens a sweep tokenized per output cut beyond a
    turn's own (the median of the turns that did not cut: the new output and reply)."""
    own = statistics.median(
        [t for t, cut in zip(r.tokenized, r.cut, strict=True) if not cut] or [0]
    )
    sweeps = [(t, n) for t, n, cut in zip(r.tokenized, r.outputs_cut, r.cut, strict=True) if cut]
    outputs = sum(n for _, n in sweeps)
    if not outputs:
        return 0.0, 0.0
    return outputs / len(sweeps), sum(t - own for t, _ in sweeps) / outputs


def truncation_table(trunc: Truncation) -> str:
    lines = [
        "| `TruncateToolOutputs` | window (prompt limit) | turns | turns that cut "
        "| per turn, CPU ms (median) | mean | p90 | max | on turns that cut (median) "
        "| outputs cut per sweep | tokenized per output cut | cacheable / prompt tokens |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in trunc.rows:
        cuts = [c for c, cut in zip(r.cpu, r.cut, strict=True) if cut]
        on_cut = f"{_median_ms(cuts):.3f}" if cuts else "—"
        per_sweep, per_output = _sweep(r)
        lines.append(
            f"| `all={r.all}`{' (default)' if r.all else ''} | {r.window:,} ({r.limit:,}) "
            f"| {len(r.cpu)} | {len(cuts)} | **{_median_ms(r.cpu):.3f}** "
            f"| {statistics.fmean(r.cpu) / 1e6:.3f} | {_p90_ms(r.cpu):.3f} "
            f"| {max(r.cpu) / 1e6:.3f} | {on_cut} "
            + (f"| {per_sweep:.1f} | {per_output:,.0f} " if cuts else "| — | — ")
            + f"| {r.hit_share:.1%} |"
        )
    lines.append(
        f"\nBaseline among these turns: tiktoken alone on a fresh output of the same size: "
        f"{_median_ms(trunc.tokenize_ns):.3f} ms median ({_range_ms(trunc.tokenize_ns)})."
    )
    return "\n".join(lines)


def large_findings(large: Large) -> str:
    last = large.rows[-1]
    b = _median_ms(last.cpu)
    met = "met" if b <= LARGE_TARGET_MS else "**not met**"
    if last.tokens < 1_000_000:
        met += " (this run stopped short of 1M tokens)"
    once = all(abs(x - 1) < 0.005 for r in large.rows for x in r.passes)
    return (
        f"Target (issue 14, part 6): a ~{large.output_tokens:,.0f}-token append costs "
        f"≤ {LARGE_TARGET_MS:g} ms of accounting at 1M tokens — {met}: {b:.3f} ms median at "
        f"{last.tokens:,} tokens, of which tiktoken's own tokenizing is most "
        f"({_median_ms(large.tokenize_ns):.3f} ms for a fresh output alone); the fingerprint "
        f"adds {_median_ms(last.observe_cpu):.3f} ms (hashing ~"
        f"{large.output_tokens / 16:,.0f} blocks and recording them). "
        + (
            "Every output's text was tokenized exactly once (tokenized ÷ appended = 1.00 on "
            "every turn): the fingerprint took the count's ids, no second pass."
            if once
            else "**Some turn tokenized the text more than once** (see the column)."
        )
    )


def truncation_findings(trunc: Truncation) -> str:
    new = [r for r in trunc.rows if r.all]
    old = [r for r in trunc.rows if not r.all]
    if not new:
        return ""
    top = max(new, key=lambda r: r.window)
    m, mean = _median_ms(top.cpu), statistics.fmean(top.cpu) / 1e6
    # Per turn means every turn, the cutting ones included: judged on the mean.
    met = "met" if mean <= LARGE_TARGET_MS else "**not met**"
    cuts = [c for c, cut in zip(top.cpu, top.cut, strict=True) if cut]
    base = _median_ms(trunc.tokenize_ns)
    ratio = mean / base
    per_sweep, per_output = _sweep(top)
    out = (
        f"Target (issue 14, part 4): TruncateToolOutputs at ≤ {LARGE_TARGET_MS:g} ms per turn "
        f"at 1M, with a cut that stays put — {met} at the {top.window:,}-token window: "
        f"{mean:.2f} ms per turn on average over {len(top.cpu)} turns, the turns that cut "
        f"included (median {m:.3f} ms, p90 {_p90_ms(top.cpu):.3f} ms). Tiktoken alone took "
        f"{base:.3f} ms on a fresh output of the same size among the same turns, so the mean "
        f"is {ratio:.2f}× that — the figure that carries to a faster or slower machine, and "
        + (
            f"within the {RATIO_TARGET:g}× that 5 ms is where tiktoken takes ~3.5 ms. "
            if ratio <= RATIO_TARGET
            else f"**above** the {RATIO_TARGET:g}× that 5 ms is where tiktoken takes ~3.5 ms. "
        )
        + f"{len(cuts)} of {len(top.cpu)} turns cut"
        + (
            f" (every long output at once, {per_sweep:.0f} per sweep); those cost "
            f"{_median_ms(cuts):.1f} ms median and tokenized {per_output:,.0f} tokens per "
            "output cut beyond the turn's own — "
            + (
                "no head of it: its first ids were kept from its count and say where its "
                "first 512 tokens end; what was tokenized is a few characters after a space "
                "before each cut: the counts that confirm it, and the cut message with its "
                "marker"
                if per_output < 256
                else "the head that finds its first 512 tokens and a few characters after a "
                "space before the cut (the cut message's render reuses the head's tokens)"
            )
            if cuts
            else ""
        )
        + f". {top.hit_share:.1%} of the prompt tokens were cacheable."
    )
    same = [r for r in old if r.window == top.window]
    if same:
        o = same[0]
        out += (
            f" Cutting only until the prompt fits (`all=False`, the previous default) cut on "
            f"{sum(o.cut)} of {len(o.cpu)} turns there, {_median_ms(o.cpu):.1f} ms median per "
            f"turn (everything after each cut fingerprinted again: tokenized by the first "
            f"cut, then taken from the ids it kept), with {o.hit_share:.1%} cacheable."
        )
    if trunc.other_cores is not None and trunc.other_cores > 0.25:
        out += (
            f" Other work shared the machine during these turns (median "
            f"{trunc.other_cores:.2f} cores busy besides this process)."
        )
    return out


def findings(res: Results) -> str:
    first, last = res.rows[0], res.rows[-1]
    a, b = _median_ms(first.cpu), _median_ms(last.cpu)
    met = "met" if b <= TARGET_MS else "**not met**"
    if last.start_tokens < 1_000_000:
        met += " (this run stopped short of 1M tokens)"
    out = [
        f"Target (issue 4): per-turn accounting ≤ {TARGET_MS:g} ms at 1M tokens — {met}: "
        f"{b:.3f} ms median from {last.start_tokens:,} tokens on, against {a:.3f} ms from "
        f"{first.start_tokens:,} ({b / a:.2f}×, for "
        f"{last.start_tokens / first.start_tokens:.0f}× the history and "
        f"{last.start_messages / first.start_messages:.0f}× the messages).",
        f"Recounting from scratch instead would cost "
        f"{_median_ms(res.recount_ns) / 1e3:.2f} s per turn at that length, "
        f"{_median_ms(res.recount_ns) / b:,.0f}× the incremental figure; the stateless "
        f"`count_prompt` (cached per message, but one lookup per message) costs "
        f"{_median_ms(last.stateless_cpu):.2f} ms there, growing with the messages, as do "
        f"the stricter change checks (`values`: "
        f"{statistics.median(last.check_ns['values']) / 1e3:.0f} µs, `deep`: "
        f"{statistics.median(last.check_ns['deep']) / 1e3:.0f} µs at that length, against "
        f"{statistics.median(last.check_ns['identity']) / 1e3:.0f} µs for the default).",
    ]
    c0 = statistics.median(first.check_ns["identity"]) / 1e3
    c1 = statistics.median(last.check_ns["identity"]) / 1e3
    out.append(
        f"The one step whose work grows with the history is the change check ({c0:.0f} µs "
        f"at {first.start_messages:,} messages, {c1:.0f} µs at {last.start_messages:,}: one "
        "pointer comparison per message, the replies the session appended included); the "
        "rest of the per-turn figure is tokenizing the new output and reply (compare the "
        "tokenizer baseline, and its spread: a fresh text right after other work costs "
        "up to twice a warm one), hashing their blocks, the forecast, the cache-buster "
        "check and a few lookups."
    )
    if res.other_cores is not None and res.other_cores > 0.25:
        out.append(
            f"Other work shared the machine during the timed turns (median "
            f"{res.other_cores:.2f} cores busy besides this process): absolute figures "
            "carry that noise; the rows, interleaved, carry it alike."
        )
    return " ".join(out)


def section(res: Results, command: str) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    main, base, hashes = tables(res)
    return f"""{START}
## Token accounting per turn, up to 1M tokens (`benchmarks/token_accounting.py`)

Measured {now} on {machine()}.
Command: `{command}`; {res.reps} turns per session, interleaved; medians. Each turn runs the
chain `[ContextBudget(...), PrefixIndex()]` as a `Session` does (`SessionBudget.before_turn` +
`after_turn`); each session's history grows by a ~{res.message_tokens:.0f}-token tool output and
a short reply per turn (first → last turn shown).

{main}

{base}

{findings(res)}

{hashes}
{extra_sections(res)}
**Method.** Sessions bound to one chain
`[ContextBudget(window=W, counter=counter), PrefixIndex(counter)]` (so they share one
`MessageCounter`, `Calibrator` and `PrefixIndex` — block size 16, capacity 4M tokens — as a
fleet's sessions do; the window is never reached, no policy runs; the default cache-buster
check runs), each starting from a ~1,000-token system prompt, a user task and four tool
schemas. Each session's history is first built turn by turn through its chain, untimed,
as below (tool outputs of ~{res.message_tokens:.0f} cl100k tokens, random words from a fixed
vocabulary, and the replies calling for them), to 10k, 100k, 500k and 1M tokens: every
reply in it is the session's own dict, as in a real session's history. In each
repetition every session takes one turn, in an order that rotates from one repetition to
the next (with the tokenizer baseline taking its turn among them), so that each row
follows each other equally often: a new tool output appended,
`SessionBudget.before_turn` (count, forecast, cache-buster check, fingerprint), the
"server's" reply — a tool call of ~40 tokens, with `prompt_tokens` the local count and
`cached_tokens` what the fingerprint said — then `SessionBudget.after_turn` (calibration,
the reply fingerprinted with the prompt) and the reply appended as a `Session` appends it,
its own dict from `TurnTrace.assistant_message()`. Both calls are timed with
`time.process_time_ns` (building the server's report is not). The stateless
`MessageCounter.count_prompt` is timed after the repetition's turns, on the same messages
(its cache is warm: only the lookups are measured), and so is the change check alone
(`PromptCounter.changed_from` over the whole history) under each `check` mode — the
default `identity` on the budget's own counter, the one in the per-turn figure. "cacheable /
prompt" is Σ `max_cacheable_tokens` ÷ Σ `estimated_tokens` over the timed turns: the share
the fingerprint reports as servable from a prefix cache (all but the new output, in whole
blocks). A turn's cost is the change check (one C-level list comparison, by pointer),
tokenizing the new output and reply once (the fingerprint follows the budget's
`PromptCounter` and reuses the count's tokens), hashing their ~33 blocks and a binary
search of the index — not the history's tokens.
The tokenizer baseline encodes one fresh ~500-token text per repetition, among the
turns; the others recount and re-fingerprint the largest history with a fresh counter
and index. The hash rows time four chained block
hashes over the largest history's rendered tokens; agentflow uses the first (the second,
each block's ids unpacked into the tuple, is what it used before).
"tokenized ÷ appended" is the characters the tokenizer was handed during the turn (a
`TokenCounter` that counts them, around tiktoken) over the characters of text in the
output and reply appended: 1.00 means each was tokenized once, for count and fingerprint
together.
{extra_method(res)}{END}"""


def extra_sections(res: Results) -> str:
    out = ""
    if res.large is not None:
        out += (
            f"\n### ~{res.large.output_tokens:,.0f}-token appends (a large tool output)\n\n"
            f"{res.large.reps} turns per session, interleaved; medians.\n\n"
            f"{large_table(res.large)}\n\n{large_findings(res.large)}\n"
        )
    if res.truncation is not None:
        out += (
            "\n### `TruncateToolOutputs` near the window\n\n"
            f"{truncation_table(res.truncation)}\n\n{truncation_findings(res.truncation)}\n"
        )
    return out + ("\n" if out else "")


def extra_method(res: Results) -> str:
    out = ""
    if res.large is not None:
        out += f"""
The large appends: sessions holding the first 100k, 500k and 1M tokens of one
deterministic history (the system prompt and task above, then ~500-token assistant messages
with a tool call and tool results, alternately; fresh counters, one shared `PrefixIndex`)
each take one tool output of ~{res.large.output_tokens:,.0f} tokens (fresh random words) per turn,
accounted for by the pieces a budget runs — `PromptCounter.count` +
`Calibrator.estimate` ("count + estimate"), then `PrefixSession.observe` ("fingerprint")
— not through the chain; the output is then taken off again, untimed, so that every
timed turn appends to the same history (the index keeps its blocks and evicts at
capacity, as under load). The tokenizer baseline there encodes a fresh output of the
same size among the turns.
"""
    if res.truncation is not None:
        turns = max(len(r.cpu) for r in res.truncation.rows)
        out += f"""
The `TruncateToolOutputs` rows: one session per window, through the chain
`[ContextBudget(window=W, reserve_output=4096, margin=0.02, overflow=TruncateToolOutputs(all=…)),
PrefixIndex(counter)]` with the default cache-buster check; each turn appends
the model's reply (an assistant message with a tool call, ~40 tokens of text — from the
trace, `TurnTrace.assistant_message()`, as a `Session` appends it) and a tool
output like the ones above (max_tokens=512, keep_last=0), then `SessionBudget.before_turn`
— count, overflow policy when over the limit, cache-buster check, fingerprint — and
`SessionBudget.after_turn` — the server's usage taught to the calibrator, the next reply
fingerprinted — are timed with `time.process_time_ns` (building the server's report is not).
The "server" reports every turn, as real ones do: `prompt_tokens` equal to the local count
(a tokenizer that agrees with cl100k), `cached_tokens` what the fingerprint said could be
cached; so the calibrated margin is learnt, not the 50% a model gets before any report.
Each history is first built turn by turn, untimed, to four outputs short of the limit;
then the sessions take their turns in a rotating order, with tiktoken alone on a fresh
output of the same size among them, {turns} turns each (a fifth of that for `all=False`,
whose turns cost more). "cacheable / prompt tokens" is Σ `max_cacheable_tokens` ÷
Σ `estimated_tokens` over the timed turns: the share a prefix cache could serve (the
simulator's cache, in `tests/context/test_truncation_cache.py`, served 93.8% on a 64k
window).
"""
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Per-turn token accounting cost up to 1M tokens.")
    p.add_argument("--quick", action="store_true", help="short smoke run; never writes docs")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument("--reps", type=int, help="turns per history length (default 100, quick 5)")
    p.add_argument(
        "--lengths",
        help="history lengths in tokens, comma-separated "
        "(default 10000,100000,500000,1000000; quick 10000,100000)",
    )
    p.add_argument(
        "--large-lengths",
        help="history lengths for the large appends and the TruncateToolOutputs windows "
        "(default 100000,500000,1000000; quick 100000)",
    )
    p.add_argument("--large-tokens", type=int, default=20_000, help="tokens of a large tool output")
    p.add_argument("--large-reps", type=int, help="large appends per session (default 30)")
    p.add_argument(
        "--truncate-turns",
        type=int,
        help="TruncateToolOutputs turns timed per window (default 100; all=False: a fifth)",
    )
    p.add_argument(
        "--only-truncation",
        action="store_true",
        help="run only the TruncateToolOutputs rows (windows: --large-lengths; "
        "--truncate-all-only for all=True alone); prints them, never writes docs",
    )
    p.add_argument(
        "--truncate-all-only",
        action="store_true",
        help="with --only-truncation: the default all=True rows only",
    )
    args = p.parse_args(argv)
    q = args.quick
    reps = args.reps or (5 if q else 100)
    lengths = [
        int(x)
        for x in (args.lengths or ("10000,100000" if q else "10000,100000,500000,1000000")).split(
            ","
        )
    ]
    large_lengths = [
        int(x)
        for x in (args.large_lengths or ("100000" if q else "100000,500000,1000000")).split(",")
    ]
    size = args.large_tokens
    if args.only_truncation:
        turns = args.truncate_turns or (10 if q else 100)
        kinds = (True,) if args.truncate_all_only else (True, False)
        rows = [
            TruncRow(window, all_, turns if all_ else max(2, turns // 5))
            for all_ in kinds
            for window in large_lengths
        ]
        trunc = run_truncation(Texts(1, TiktokenCounter()), rows, size)
        print(f"\n{machine()}\n\n{truncation_table(trunc)}\n\n{truncation_findings(trunc)}")
        return
    res = run(lengths, reps, 1 if q else 3, history_tokens=max(large_lengths))
    res.large = run_large(res, large_lengths, args.large_reps or (3 if q else 30), size)
    turns = args.truncate_turns or (10 if q else 100)
    rows = [
        TruncRow(window, all_, turns if all_ else max(2, turns // 5))
        for all_ in (True, False)
        for window in large_lengths
    ]
    res.truncation = run_truncation(res.texts, rows, size)
    main_t, base, hashes = tables(res)
    print(f"\n{machine()}\n\n{main_t}\n\n{base}\n\n{findings(res)}\n\n{hashes}")
    print(extra_sections(res))
    if q or args.no_write:
        return
    command = "python benchmarks/token_accounting.py" + (
        " " + " ".join(argv if argv is not None else sys.argv[1:])
        if (argv if argv is not None else sys.argv[1:])
        else ""
    )
    _common.write_section(NAME, section(res, command))
    print(f"\nwrote the {NAME} section of {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
