"""Client CPU per streamed chunk: a Fleet with a callback, agentflow's transports, a plain
openai-SDK loop, and the floor under every asyncio client.

What is measured: the CPU time (``time.process_time_ns`` — user + system, of this
process only) that the *client* spends per content chunk while it streams chat
completions from a local server, with per-token timing and a no-op callback on.

How: ``_sse_server.py`` runs in a child process (raw asyncio, 127.0.0.1, a free
port) and answers ``POST /v1/chat/completions`` like vLLM does — HTTP/1.1
keep-alive, ``Transfer-Encoding: chunked``, one chunked frame per SSE event, all
frames encoded once at start; the request's ``max_tokens`` sets the number of
content chunks and an extra body field ``pace_ms`` the pacing. The rows:

* ``Fleet + counting callback`` (the headline, issue 15) — the public API as a user runs
  it: ``Fleet(HTTPTransport(url), max_concurrency=…, callbacks=[on_event])`` running
  sessions of an ``Agent`` with no tools, where ``on_event`` is a plain function that
  counts the ``TokenEvent``s; on ``HTTPTransport``'s default (kernel stamps) and with
  ``kernel_timestamps=False``. One ``Fleet.run`` holds every stream of a measurement; the
  paced stagger is the server's (``start_ms``), as a fleet sends its requests at once.
  The headline table compares each with the bare transport it runs on (the rows below,
  per-repetition ratios and differences) and, paced, with the floor.
* ``agentflow AiohttpTransport`` — the aiohttp transport (aiohttp + msgspec):
  ``AiohttpTransport(url).stream(ChatRequest(...), sink)`` with a sink whose
  ``on_delta`` does nothing; the transport timestamps every read itself.
* ``agentflow HTTPTransport(kernel_timestamps=False)`` — the protocol transport on
  asyncio's own sockets, the same request (``asyncio.Protocol`` + httptools): every read
  is parsed inside ``data_received``, with no coroutine wakeup per read.
* ``agentflow HTTPTransport, kernel stamps`` — the same parser on agentflow's own socket
  transport (``recvmsg`` with the kernel's arrival stamp): ``HTTPTransport``'s default on
  Linux for ``http://``.
* ``openai SDK loop`` — what people write today: ``async for chunk in await
  client.chat.completions.create(..., stream=True, stream_options=...)``, reading
  ``chunk.choices[0].delta.content``, taking ``time.perf_counter_ns()`` per chunk and
  calling the same no-op sink.
* ``agentflow OpenAITransport`` — the SDK's client sends the request, agentflow
  parses the raw bytes.
* ``agentflow parsing only`` (bulk only) — the same SSE bytes already in memory, fed
  through agentflow's ``SSEDecoder`` and ``TraceBuilder`` with no I/O: agentflow's own
  share of the bulk figure.
* ``agentflow HTTPTransport on uvloop`` — ``HTTPTransport(kernel_timestamps=False)``
  again, on uvloop's event loop (``uvloop.run``) instead of asyncio's.
* ``floor`` and ``floor on uvloop`` — not a client anyone would use, but the cost every
  asyncio client pays before doing anything with the bytes: a raw ``asyncio.Protocol``
  per kept-alive connection that writes a pre-encoded request and only counts the bytes
  of the response until its chunked terminator (no HTTP, SSE or JSON parsing, no
  timestamps). The exact byte count of an ``n``-chunk response is known from
  ``_sse_server.Frames``, so a short, long or broken stream still fails. In the paced
  modes a second table gives, for each agentflow row, its cost *above the floor* on the
  same event loop (the median of the per-repetition differences): agentflow's own work
  per chunk, net of the event loop's wakeup and the socket read.

uvloop is optional: without it the uvloop rows are skipped (with a note on stderr).

Modes: *bulk* (1 stream of 200,000 chunks written as fast as the socket takes them;
the SDK loop gets 50,000, since µs per chunk is what is compared), *paced* (200
concurrent streams of 300 chunks, each one event per 10 ms, stream starts spread
evenly over one 10 ms period so that each read is a wakeup of its own) and
*paced_1cpu* (the agentflow transport rows and the floors again, client and server on
one CPU). With two or more CPUs the client is pinned to one and the server to another
(``--no-pin`` leaves placement to the scheduler, which on a 2-CPU VM makes paced
figures bimodal). Every
measurement runs in a fresh event loop with a fresh client, after a warm-up round of
short streams on that client; rows alternate within each repetition so that machine
noise spreads over all of them; medians, min–max and paired per-repetition ratios are
reported. Every stream is checked: all content chunks, the finish reason, ``[DONE]``
and the cached-token usage must arrive (the floor checks the exact byte count and the
chunked terminator instead).

Usage::

    python benchmarks/client_overhead.py            # full run (~8 min); rewrites its
                                                    # section of docs/benchmarks.md
    python benchmarks/client_overhead.py --quick    # smoke run (< 1 min); writes nothing
    python benchmarks/client_overhead.py --no-write # full run, print only

Only the block between ``<!-- client_overhead:start -->`` and
``<!-- client_overhead:end -->`` in ``docs/benchmarks.md`` is replaced; the file is
created if missing. ``--quick`` never writes.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import _common
import _sse_server
import openai
from openai.types.chat import ChatCompletionMessageParam

from agentflow import Agent, Event, Fleet, HTTPTransport, TurnTrace
from agentflow.transport import (
    AiohttpTransport,
    ChatRequest,
    OpenAITransport,
    SSEDecoder,
    TraceBuilder,
)
from agentflow.typing import DeltaKind

ROOT = _common.ROOT
SERVER = Path(_sse_server.__file__).resolve()
DOC = _common.DOC
NAME = "client_overhead"
START, END = _common.markers(NAME)

MODEL = "bench-model"
PROMPT = "Write a very long story about a fox."
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]
WARMUP_CHUNKS = 8


# -- clients ------------------------------------------------------------------------------


class _NullSink:
    """The no-op per-token callback every row calls."""

    __slots__ = ()

    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        pass


_SINK = _NullSink()


class Client(Protocol):
    """One way of streaming a completion; :meth:`one` returns the content chunks seen."""

    async def one(self, n: int, pace_ms: float) -> int: ...

    async def aclose(self) -> None: ...


def _check_trace(trace: TurnTrace, n: int) -> int:
    usage = trace.usage
    if (
        len(trace.chunk_ns) != n
        or not trace.done
        or trace.finish_reason != "length"
        or usage is None
        or usage.completion_tokens != n
        or usage.cached_tokens != _sse_server.CACHED_TOKENS
    ):
        raise RuntimeError(f"incomplete stream: {len(trace.chunk_ns)}/{n} chunks, {trace!r:.300}")
    return len(trace.chunk_ns)


class AgentflowHTTP:
    """agentflow's aiohttp transport (aiohttp + msgspec)."""

    def __init__(self, base_url: str) -> None:
        self._transport: AiohttpTransport | HTTPTransport = AiohttpTransport(base_url)

    async def one(self, n: int, pace_ms: float) -> int:
        request = ChatRequest(
            model=MODEL, messages=MESSAGES, params={"max_tokens": n, "pace_ms": pace_ms}
        )
        return _check_trace(await self._transport.stream(request, _SINK), n)

    async def aclose(self) -> None:
        await self._transport.aclose()


class AgentflowProtocol(AgentflowHTTP):
    """agentflow's protocol transport on asyncio's own socket transport
    (asyncio.Protocol + httptools + msgspec; ``kernel_timestamps=False``)."""

    def __init__(self, base_url: str) -> None:
        self._transport = HTTPTransport(base_url, kernel_timestamps=False)


class AgentflowKernelStamps(AgentflowHTTP):
    """``HTTPTransport`` with ``kernel_timestamps=True`` (its default on Linux for
    http://): agentflow's own socket transport, each read taken with ``recvmsg`` and the
    kernel's arrival stamp."""

    def __init__(self, base_url: str) -> None:
        self._transport = HTTPTransport(base_url, kernel_timestamps=True)


class FleetCounting:
    """The public API as a user runs it: a :class:`Fleet` over ``HTTPTransport(url)``
    (kernel stamps, its default on Linux), sessions of an :class:`Agent` with no tools,
    and a plain-function callback that counts ``TokenEvent``s. Nothing is tuned but
    ``max_concurrency`` (it must admit every stream at once).

    A fleet sends all its sessions' requests at once, so the paced stagger is asked of
    the server instead (``start_ms``: stream ``i``'s schedule starts ``i × pace /
    streams`` later), which spreads the events over the pace period as the other rows'
    delayed starts do. Every session's trace is checked like the other rows', and the
    callback's count must equal the chunks received.
    """

    kernel_timestamps = True

    def __init__(self, base_url: str) -> None:
        self._transport = HTTPTransport(base_url, kernel_timestamps=self.kernel_timestamps)
        tokens = 0

        def on_event(event: Event) -> None:
            nonlocal tokens
            if event.type == "token":
                tokens += 1

        def counted() -> int:
            return tokens

        self.counted = counted
        self._fleet = Fleet(self._transport, max_concurrency=4096, callbacks=[on_event])
        self._agents: dict[tuple[int, float, float], Agent] = {}

    def _agent(self, n: int, pace_ms: float, start_ms: float) -> Agent:
        key = (n, pace_ms, start_ms)
        agent = self._agents.get(key)
        if agent is None:
            params = {"max_tokens": n, "pace_ms": pace_ms, "start_ms": start_ms}
            agent = self._agents[key] = Agent(name="bench", model=MODEL, params=params)
        return agent

    def prepare(self, n: int, pace_ms: float, streams: int, stagger_ms: float) -> None:
        """Build (before timing) the agents of one run: sessions are made in the run."""
        for i in range(streams):
            self._agent(n, pace_ms, i * stagger_ms)

    async def many(self, n: int, pace_ms: float, streams: int, stagger_ms: float) -> int:
        """One ``Fleet.run`` of ``streams`` sessions of ``n`` chunks; the chunks received."""
        sessions = [self._agent(n, pace_ms, i * stagger_ms).session(PROMPT) for i in range(streams)]
        before = self.counted()
        result = await self._fleet.run(sessions)
        got = 0
        for s in result.sessions:
            if not s.ok or len(s.turns) != 1:
                raise RuntimeError(f"fleet session {s.session_id} {s.status}: {s.error!r}")
            got += _check_trace(s.turns[0].trace, n)
        if self.counted() - before != got:
            raise RuntimeError(f"the callback counted {self.counted() - before} of {got} tokens")
        return got

    async def one(self, n: int, pace_ms: float) -> int:
        return await self.many(n, pace_ms, 1, 0.0)

    async def aclose(self) -> None:
        await self._transport.aclose()


class FleetCountingNoKStamps(FleetCounting):
    """:class:`FleetCounting` over ``HTTPTransport(url, kernel_timestamps=False)``."""

    kernel_timestamps = False


def _openai_client(base_url: str) -> openai.AsyncOpenAI:
    # No retries, and one long timeout: with 200 paced streams the SDK loop saturates its
    # event loop, and the default 5 s connect timeout then fires on a perfectly good server.
    return openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=600.0)


class AgentflowOpenAI:
    """agentflow's transport over a user's ``AsyncOpenAI`` client (raw bytes, no models)."""

    def __init__(self, base_url: str) -> None:
        client = _openai_client(base_url)
        self._transport = OpenAITransport(client, owns_client=True)

    async def one(self, n: int, pace_ms: float) -> int:
        request = ChatRequest(
            model=MODEL, messages=MESSAGES, params={"max_tokens": n, "pace_ms": pace_ms}
        )
        return _check_trace(await self._transport.stream(request, _SINK), n)

    async def aclose(self) -> None:
        await self._transport.aclose()


class SDKLoop:
    """The baseline: iterate the openai SDK's stream of ``ChatCompletionChunk`` models."""

    def __init__(self, base_url: str) -> None:
        self._client = _openai_client(base_url)

    async def one(self, n: int, pace_ms: float) -> int:
        clock = time.perf_counter_ns
        times: list[int] = []
        parts: list[str] = []
        cached: int | None = None
        finish: str | None = None
        stream = await self._client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=n,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"pace_ms": pace_ms},
        )
        async with stream:
            async for chunk in stream:
                now = clock()
                if chunk.choices:
                    choice = chunk.choices[0]
                    text = choice.delta.content
                    if text:
                        times.append(now)
                        parts.append(text)
                        _SINK.on_delta("content", text, now)
                    if choice.finish_reason is not None:
                        finish = choice.finish_reason
                if chunk.usage is not None and chunk.usage.prompt_tokens_details is not None:
                    cached = chunk.usage.prompt_tokens_details.cached_tokens
        if len(parts) != n or finish != "length" or cached != _sse_server.CACHED_TOKENS:
            raise RuntimeError(f"incomplete SDK stream: {len(parts)}/{n} chunks")
        return len(times)

    async def aclose(self) -> None:
        await self._client.close()


class ParseOnly:
    """agentflow's own per-chunk work with no I/O: the same SSE bytes, already in memory,
    fed in 64 KiB reads through ``SSEDecoder`` and ``TraceBuilder`` (the transport's loop).

    It splits the bulk figure into agentflow's parsing and the HTTP client + socket part,
    and, run next to the others, shows how fast the machine was at the time.
    """

    _READ = 64 * 1024

    def __init__(self, base_url: str) -> None:
        self._reads: dict[int, list[bytes]] = {}
        self.endpoint = base_url

    def prepare(self, n: int) -> list[bytes]:
        """Build (once per length, before timing) the reads of an ``n``-chunk stream."""
        reads = self._reads.get(n)
        if reads is None:
            frames = _sse_server.Frames()
            content = frames.content
            body = b"".join(
                [frames.role, *(content[i % len(content)] for i in range(n)), frames.tail(n)]
            )
            sse = _unchunk(body)
            reads = self._reads[n] = [
                sse[i : i + self._READ] for i in range(0, len(sse), self._READ)
            ]
        return reads

    async def one(self, n: int, pace_ms: float) -> int:
        reads = self.prepare(n)
        clock = time.perf_counter_ns
        builder = TraceBuilder(endpoint=self.endpoint, sent_ns=clock(), sink=_SINK)
        decode = SSEDecoder().feed
        feed = builder.feed
        for data in reads:
            now = clock()
            for payload in decode(data):
                feed(payload, now)
        return _check_trace(builder.finish(clock()), n)

    async def aclose(self) -> None:
        pass


#: The last bytes of every response: the chunked-encoding terminator.
_TERMINATOR = b"0\r\n\r\n"


class _FloorConn(asyncio.Protocol):
    """A keep-alive connection that only counts the bytes of a chunked response."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None
        self.expected = 0
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        # The count ends a good response; the terminator ends a short one at once.
        if self.received >= self.expected or data.endswith(_TERMINATOR):
            self._end(data)

    def _end(self, last: bytes) -> None:
        done = self.done
        if done is None or done.done():
            return
        ends = last.endswith(_TERMINATOR) if len(last) >= 5 else _TERMINATOR.endswith(last)
        if self.received == self.expected and ends:
            done.set_result(None)
        else:
            done.set_exception(
                RuntimeError(
                    f"broken floor stream: {self.received:,} of {self.expected:,} bytes, "
                    f"last read ends {last[-16:]!r}"
                )
            )

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc!r}"))


class Floor:
    """The floor under every Python client here: a raw ``asyncio.Protocol`` per kept-alive
    connection that sends a pre-encoded request and only counts the response's bytes up
    to its last chunked frame — no HTTP parsing, no SSE, no JSON, no timestamps. What is
    left is the event loop's wakeups and the socket reads every paced event costs any
    asyncio client.

    The check is the exact byte count of an ``n``-chunk response (computed from the
    server's own :class:`_sse_server.Frames`) and the chunked terminator at its end.
    """

    def __init__(self, base_url: str) -> None:
        url = urlsplit(base_url)
        assert url.hostname is not None, base_url
        assert url.port is not None, base_url
        self._addr = (url.hostname, url.port)
        self._frames = _sse_server.Frames()
        self._idle: list[_FloorConn] = []
        self._all: list[_FloorConn] = []
        self._requests: dict[tuple[int, float], bytes] = {}
        self._sizes: dict[int, int] = {}

    def _request(self, n: int, pace_ms: float) -> bytes:
        req = self._requests.get((n, pace_ms))
        if req is None:
            body = json.dumps(
                {"model": MODEL, "messages": MESSAGES, "max_tokens": n, "pace_ms": pace_ms}
            ).encode()
            head = (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self._addr[0]}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            req = self._requests[n, pace_ms] = head.encode() + body
        return req

    def _size(self, n: int) -> int:
        """The exact length of the server's response for ``n`` content chunks."""
        size = self._sizes.get(n)
        if size is None:
            f = self._frames
            cycles, rest = divmod(n, len(f.content))
            content = cycles * sum(map(len, f.content)) + sum(map(len, f.content[:rest]))
            size = self._sizes[n] = len(f.head) + len(f.role) + content + len(f.tail(n))
        return size

    async def one(self, n: int, pace_ms: float) -> int:
        loop = asyncio.get_running_loop()
        if self._idle:
            conn = self._idle.pop()
        else:
            _, conn = await loop.create_connection(_FloorConn, *self._addr)
            self._all.append(conn)
        assert conn.transport is not None
        conn.done = loop.create_future()
        conn.expected, conn.received = self._size(n), 0
        conn.transport.write(self._request(n, pace_ms))
        # A stream that stops short without its terminator would otherwise wait forever.
        async with asyncio.timeout(30.0 + 3 * n * pace_ms / 1000):
            await conn.done
        self._idle.append(conn)
        return n

    async def aclose(self) -> None:
        for conn in self._all:
            if conn.transport is not None:
                conn.transport.close()


def _unchunk(body: bytes) -> bytes:
    """Strip chunked transfer-encoding framing (the server's frames) down to the SSE bytes."""
    out: list[bytes] = []
    pos = 0
    while True:
        eol = body.index(b"\r\n", pos)
        size = int(body[pos:eol], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    make: Callable[[str], Client]
    #: Run on uvloop's event loop instead of asyncio's.
    uvloop: bool = False
    #: For agentflow's transports: the key of the floor row on the same event loop, which
    #: the "above the floor" table subtracts. None for every other row.
    floor: str | None = None
    #: For the Fleet rows: the key of the bare transport row they run on.
    bare: str | None = None


ROWS = (
    Row(
        "fleet",
        "**`Fleet` + counting callback** (`HTTPTransport`, kernel stamps)",
        FleetCounting,
        floor="floor",
        bare="protocol_k",
    ),
    Row(
        "fleet_nk",
        "**`Fleet` + counting callback** (`HTTPTransport(kernel_timestamps=False)`)",
        FleetCountingNoKStamps,
        floor="floor",
        bare="protocol",
    ),
    Row("agentflow", "agentflow `AiohttpTransport`", AgentflowHTTP, floor="floor"),
    Row(
        "protocol",
        "agentflow `HTTPTransport(kernel_timestamps=False)`",
        AgentflowProtocol,
        floor="floor",
    ),
    Row(
        "protocol_uv",
        "agentflow `HTTPTransport` on uvloop",
        AgentflowProtocol,
        uvloop=True,
        floor="floor_uv",
    ),
    Row(
        "protocol_k",
        "agentflow `HTTPTransport`, kernel stamps (its default on Linux)",
        AgentflowKernelStamps,
        floor="floor",
    ),
    Row("floor", "floor: raw `asyncio.Protocol`, no parsing", Floor),
    Row("floor_uv", "floor on uvloop", Floor, uvloop=True),
    Row("sdk", "openai SDK loop", SDKLoop),
    Row("af_openai", "agentflow `OpenAITransport`", AgentflowOpenAI, floor="floor"),
    Row("parse", "agentflow parsing only, no I/O", ParseOnly),
)
ROW_KEYS = tuple(r.key for r in ROWS)

#: Issue 15's targets for the Fleet + counting callback rows: at most this many times
#: the bare transport's CPU per chunk in bulk, and at most this many µs per chunk above
#: the floor paced.
FLEET_BULK_RATIO_TARGET = 1.5
FLEET_PACED_ABOVE_TARGET_US = 8.0

#: The issue's targets.
BULK_TARGET_US = 4.0
PACED_TARGET_US = 20.0
SDK_RATIO_TARGET = 25.0


def uvloop_available() -> bool:
    """Whether uvloop (an optional dependency) can be imported."""
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


# -- measuring ----------------------------------------------------------------------------


Pin = Literal["split", "same", "none"]
#: The CPUs this process may use, read before any pinning.
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _pin(how: Pin, server_pid: int) -> Pin:
    """Place this process and the server on CPUs; return the placement in force."""
    if len(CPUS) < 2:
        return "none"
    client, server = (
        ({CPUS[0]}, {CPUS[1]})
        if how == "split"
        else ({CPUS[0]}, {CPUS[0]})
        if how == "same"
        else (set(CPUS), set(CPUS))
    )
    os.sched_setaffinity(0, client)
    os.sched_setaffinity(server_pid, server)
    return how


@dataclass(frozen=True)
class Mode:
    key: str
    streams: int
    chunks: dict[str, int]  # per stream, by row key; the mode runs only these rows
    pace_ms: float
    #: CPU placement: "split" — client on one CPU, server on another; "same" — both on
    #: one CPU; "none" — wherever the scheduler puts them.
    pin: Pin = "split"
    #: Spread stream starts evenly over one pace period (else all start at once and
    #: their events fall due together, as in one batched decode step).
    stagger: bool = True

    def label(self, row: str) -> str:
        n = self.chunks[row]
        where = {"split": "", "same": ", one CPU", "none": ", unpinned"}[self.pin]
        if self.pace_ms:
            sync = "" if self.stagger else ", lockstep"
            return f"paced {self.streams} × {n:,} @ {self.pace_ms:g} ms{sync}{where}"
        return f"bulk {self.streams} × {n:,}{where}"

    def runs(self, row: str) -> bool:
        return row in self.chunks


@dataclass
class Sample:
    cpu_ns: int
    wall_ns: int
    server_cpu_ns: int | None
    chunks: int
    new_connections: int
    other_cpu_ns: int | None  # every other process on the machine, from /proc/stat

    @property
    def other_cores(self) -> float | None:
        return None if self.other_cpu_ns is None else self.other_cpu_ns / self.wall_ns

    @property
    def us_per_chunk(self) -> float:
        return self.cpu_ns / self.chunks / 1000


@dataclass
class Cell:
    by_rep: dict[int, Sample] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def samples(self) -> list[Sample]:
        return [self.by_rep[k] for k in sorted(self.by_rep)]

    def us(self) -> list[float]:
        return [s.us_per_chunk for s in self.samples]


def _proc_cpu_ns(pid: int) -> int | None:
    """User + system CPU of another process, from /proc (Linux); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _system_busy_ns() -> int | None:
    """CPU time all processes spent busy, machine-wide, from /proc/stat; None if unknown."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    busy = user + nice + system + irq + softirq
    return busy * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


async def _server_stats(url: str) -> dict[str, int]:
    """``GET /stats`` from the benchmark server, on a connection of its own."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET /stats HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n")
        raw = await reader.read()
    finally:
        writer.close()
    stats: dict[str, int] = json.loads(raw.split(b"\r\n\r\n", 1)[1])
    return stats


async def _measure(make: Callable[[str], Client], url: str, mode: Mode, n: int, pid: int) -> Sample:
    client = make(url)
    try:
        # Warm-up on the same client: imports, lazily built models, pooled connections.
        stagger = mode.pace_ms / 1000 / mode.streams if mode.stagger else 0.0
        fleet = client if isinstance(client, FleetCounting) else None
        if isinstance(client, ParseOnly):
            client.prepare(n)
        if fleet is not None:  # one fleet run for all streams, as a user would
            fleet.prepare(n, mode.pace_ms, mode.streams, stagger * 1000)
            await fleet.many(WARMUP_CHUNKS, 0.0, mode.streams, 0.0)
        else:
            await asyncio.gather(*(client.one(WARMUP_CHUNKS, 0.0) for _ in range(mode.streams)))
        gc.collect()

        async def delayed(i: int) -> int:
            if stagger:
                await asyncio.sleep(i * stagger)
            return await client.one(n, mode.pace_ms)

        before = await _server_stats(url)
        s0, b0 = _proc_cpu_ns(pid), _system_busy_ns()
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        if fleet is not None:
            got = [await fleet.many(n, mode.pace_ms, mode.streams, stagger * 1000)]
        else:
            got = await asyncio.gather(*(delayed(i) for i in range(mode.streams)))
        c1, w1 = time.process_time_ns(), time.perf_counter_ns()
        s1, b1 = _proc_cpu_ns(pid), _system_busy_ns()
        after = await _server_stats(url)
    finally:
        await client.aclose()
    server = None if s0 is None or s1 is None else s1 - s0
    other = None
    if server is not None and b0 is not None and b1 is not None:
        other = max(0, b1 - b0 - server - (c1 - c0))
    return Sample(
        cpu_ns=c1 - c0,
        wall_ns=w1 - w0,
        server_cpu_ns=server,
        chunks=sum(got),
        # the two /stats requests open one connection each
        new_connections=after["connections"] - before["connections"] - 1,
        other_cpu_ns=other,
    )


@contextmanager
def sse_server(max_seconds: float) -> Iterator[tuple[str, int]]:
    """Start ``_sse_server.py`` in a child process; yield its base URL and pid."""
    cmd = [sys.executable, str(SERVER), "--watch-stdin", "--max-seconds", str(max_seconds)]
    with _common.sse_child(cmd) as served:
        yield served


def _progress(where: str, s: Sample) -> None:
    print(
        f"{where} {s.us_per_chunk:8.2f} µs/chunk"
        f"  {s.wall_ns / 1e9:6.2f} s wall  {s.new_connections} new connections"
        f"  rest of machine {_cores(s.other_cores)} cores",
        file=sys.stderr,
        flush=True,
    )


def _run(coro: Coroutine[Any, Any, Sample], on_uvloop: bool) -> Sample:
    """Run one measurement on a fresh event loop: asyncio's, or uvloop's."""
    if not on_uvloop:
        return asyncio.run(coro)
    import uvloop  # type: ignore[import-not-found,unused-ignore]

    result: Sample = uvloop.run(coro)
    return result


def run(modes: Sequence[Mode], rows: Sequence[Row], reps: int) -> dict[tuple[str, str], Cell]:
    """All measurements; rows and modes alternate inside each repetition."""
    cells = {(m.key, r.key): Cell() for m in modes for r in rows if m.runs(r.key)}
    budget = 600.0 + 120.0 * reps * len(cells)
    with sse_server(budget) as (url, pid):
        try:
            for rep in range(reps):
                for mode in modes:
                    _pin(mode.pin, pid)
                    for row in rows:
                        if not mode.runs(row.key):
                            continue
                        n = mode.chunks[row.key]
                        cell = cells[mode.key, row.key]
                        where = f"rep {rep + 1}/{reps}  {mode.label(row.key):<34} {row.key:<10}"
                        try:
                            sample = _run(_measure(row.make, url, mode, n, pid), row.uvloop)
                        except Exception as exc:  # one failed run must not lose the others
                            cell.failures.append(f"{type(exc).__name__}: {exc}")
                            print(f"{where} FAILED: {exc!r}", file=sys.stderr, flush=True)
                            continue
                        cell.by_rep[rep] = sample
                        _progress(where, sample)
        finally:
            if CPUS:
                os.sched_setaffinity(0, CPUS)
    return cells


# -- reporting ----------------------------------------------------------------------------


def _cores(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _fmt(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _fmt_ratio(x: float) -> str:
    return f"{x:.1f}" if x >= 0.1 else f"{x:.2f}"  # the floors' bulk ratios are ~0.02


def _ratios(a: Cell, b: Cell) -> list[float]:
    """Per-repetition ratios a/b (the two were measured back to back)."""
    reps = sorted(a.by_rep.keys() & b.by_rep.keys())
    return [a.by_rep[k].us_per_chunk / b.by_rep[k].us_per_chunk for k in reps]


def _diffs(a: Cell, b: Cell) -> list[float]:
    """Per-repetition differences a − b in µs per chunk (measured back to back)."""
    reps = sorted(a.by_rep.keys() & b.by_rep.keys())
    return [a.by_rep[k].us_per_chunk - b.by_rep[k].us_per_chunk for k in reps]


def _above(cells: dict[tuple[str, str], Cell], mode: str, row: str, floor: str) -> list[float]:
    """``row``'s per-repetition CPU per chunk above ``floor``'s in ``mode`` ([] if unknown)."""
    a, b = cells.get((mode, row)), cells.get((mode, floor))
    return [] if a is None or b is None else _diffs(a, b)


def table(modes: Sequence[Mode], rows: Sequence[Row], cells: dict[tuple[str, str], Cell]) -> str:
    out = [
        "| mode | client | chunks per run | CPU µs/chunk, median | min–max | × agentflow "
        "| wall s | client CPU | server CPU µs/chunk | new conns | rest of machine, cores |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]

    def med(xs: Sequence[float | None], fmt: Callable[[float], str] = _cores) -> str:
        vals = [x for x in xs if x is not None]
        return fmt(statistics.median(vals)) if vals else "–"

    for mode in modes:
        base = cells[mode.key, "agentflow"]
        for row in rows:
            if (mode.key, row.key) not in cells:
                continue
            cell = cells[mode.key, row.key]
            ss = cell.samples
            us = cell.us()
            label = row.label
            if cell.failures:
                label += f" ({len(cell.failures)} run(s) failed: {cell.failures[0][:80]})"
            if not ss:
                out.append(f"| {mode.label(row.key)} | {label} |" + " – |" * 9)
                continue
            r = _ratios(cell, base)
            if row.key == "agentflow":
                ratio = "1"
            elif not r:
                ratio = "–"
            else:
                lo, mid, hi = (_fmt_ratio(x) for x in (min(r), statistics.median(r), max(r)))
                ratio = f"**{mid}** ({lo}–{hi})"
            wall = statistics.median(s.wall_ns for s in ss) / 1e9
            busy = statistics.median(s.cpu_ns / s.wall_ns for s in ss)
            srv = [
                None if s.server_cpu_ns is None else s.server_cpu_ns / s.chunks / 1000 for s in ss
            ]
            conns = statistics.median(s.new_connections for s in ss)
            out.append(
                f"| {mode.label(row.key)} | {label} | {ss[0].chunks:,} "
                f"| **{_fmt(statistics.median(us))}** | {_fmt(min(us))}–{_fmt(max(us))} "
                f"| {ratio} | {wall:.2f} | {busy:.0%} | {med(srv, _fmt)} | {conns:g} "
                f"| {med([s.other_cores for s in ss])} |"
            )
    return "\n".join(out)


def above_floor(
    modes: Sequence[Mode], rows: Sequence[Row], cells: dict[tuple[str, str], Cell]
) -> str:
    """agentflow's own CPU per chunk in the paced modes: each agentflow row less the floor
    on the same event loop, per repetition. Empty when no floor was measured."""
    out = [
        "| mode | client | CPU µs/chunk | floor µs/chunk, same event loop "
        "| above the floor, µs/chunk | min–max | share of the total |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    med = statistics.median
    for mode in modes:
        if not mode.pace_ms:
            continue
        for row in rows:
            if row.floor is None or (mode.key, row.floor) not in cells:
                continue
            a, f = cells.get((mode.key, row.key)), cells[mode.key, row.floor]
            reps = [] if a is None else sorted(a.by_rep.keys() & f.by_rep.keys())
            if a is None or not reps:
                continue
            pairs = [(a.by_rep[k].us_per_chunk, f.by_rep[k].us_per_chunk) for k in reps]
            d = [t - fl for t, fl in pairs]
            out.append(
                f"| {mode.label(row.key)} | {row.label} | {_fmt(med(a.us()))} "
                f"| {_fmt(med(f.us()))} ({row.floor}) | **{_fmt(med(d))}** "
                f"| {_fmt(min(d))}–{_fmt(max(d))} | {med((t - fl) / t for t, fl in pairs):.0%} |"
            )
    return "\n".join(out) if len(out) > 2 else ""


def headline(modes: Sequence[Mode], cells: dict[tuple[str, str], Cell]) -> str:
    """Issue 15's headline: each ``Fleet`` + counting callback row against the bare
    transport it runs on (per-repetition ratios and differences) and, paced, the floor;
    with the targets. Empty when no Fleet row ran."""
    out = [
        "| mode | `Fleet` + counting callback, on | CPU µs/chunk | bare transport µs/chunk "
        "| × bare transport | the Fleet's own µs/chunk | above the floor, µs/chunk "
        "| target (issue 15) | met |",
        "|---|---|--:|--:|--:|--:|--:|---|:-:|",
    ]
    med = statistics.median
    on = {
        "protocol_k": "`HTTPTransport`, kernel stamps (default)",
        "protocol": "`HTTPTransport(kernel_timestamps=False)`",
    }
    for mode in modes:
        for row in ROWS:
            if row.bare is None:
                continue
            a, b = cells.get((mode.key, row.key)), cells.get((mode.key, row.bare))
            if a is None or b is None or not a.samples or not b.samples:
                continue
            ratios, own = _ratios(a, b), _diffs(a, b)
            if not ratios:
                continue
            ratio = med(ratios)
            above = _above(cells, mode.key, row.key, "floor") if mode.pace_ms else []
            above_s = "–"
            if above:
                above_s = f"**{_fmt(med(above))}** ({_fmt(min(above))}–{_fmt(max(above))})"
            if mode.pace_ms:
                goal = f"≤ {FLEET_PACED_ABOVE_TARGET_US:g} µs above the floor"
                ok = bool(above) and med(above) <= FLEET_PACED_ABOVE_TARGET_US
            else:
                goal = f"≤ {FLEET_BULK_RATIO_TARGET:g}× bare transport"
                ok = ratio <= FLEET_BULK_RATIO_TARGET
            out.append(
                f"| {mode.label(row.key)} | {on[row.bare]} | **{_fmt(med(a.us()))}** "
                f"| {_fmt(med(b.us()))} | **{_fmt_ratio(ratio)}** "
                f"({_fmt_ratio(min(ratios))}–{_fmt_ratio(max(ratios))}) "
                f"| {_fmt(med(own))} ({_fmt(min(own))}–{_fmt(max(own))}) | {above_s} "
                f"| {goal} | {'yes' if ok else '**no**'} |"
            )
    return "\n".join(out) if len(out) > 2 else ""


def targets(cells: dict[tuple[str, str], Cell], modes: Sequence[Mode]) -> str:
    keys = {m.key for m in modes}
    out = ["| target (issue 2) | measured | met |", "|---|--:|:-:|"]

    def line(what: str, value: float, ok: bool, unit: str) -> None:
        out.append(f"| {what} | {_fmt(value)}{unit} | {'yes' if ok else '**no**'} |")

    def us(mode: str, row: str) -> float | None:
        cell = cells.get((mode, row))
        return statistics.median(cell.us()) if cell is not None and cell.samples else None

    labels = {m.key: m.label("agentflow") for m in modes}
    limits = {"bulk": BULK_TARGET_US, "paced": PACED_TARGET_US, "paced_1cpu": PACED_TARGET_US}
    paced = ("paced", "paced_1cpu")
    names = {
        "agentflow": ("`AiohttpTransport`", tuple(limits)),
        "protocol": ("`HTTPTransport(kernel_timestamps=False)`", tuple(limits)),
        "protocol_k": ("`HTTPTransport`, kernel stamps (default)", tuple(limits)),
        "protocol_uv": ("`HTTPTransport(kernel_timestamps=False)` on uvloop", paced),
        # Not a target: what a client that does nothing with the bytes costs, so that a
        # reader sees when a target lies below it.
        "floor": ("*reference:* floor (raw `asyncio.Protocol`, no parsing)", paced),
        "floor_uv": ("*reference:* floor on uvloop", paced),
    }
    for row, (name, where) in names.items():
        for key in where:
            v = us(key, row) if key in keys else None
            if v is not None:
                limit = limits[key]
                line(f"{name} ≤ {limit:g} µs/chunk, {labels[key]}", v, v <= limit, " µs")
    # The SDK loop runs on asyncio's event loop: it is compared with the asyncio rows only.
    for row in ("agentflow", "protocol", "protocol_k"):
        for key in ("bulk", "paced"):
            ratios = (
                _ratios(cells[key, "sdk"], cells[key, row])
                if (key, "sdk") in cells and (key, row) in cells
                else []
            )
            if key in keys and ratios:
                r = statistics.median(ratios)
                line(
                    f"SDK loop ÷ {names[row][0]} ≥ {SDK_RATIO_TARGET:g}×, {key}",
                    r,
                    r >= SDK_RATIO_TARGET,
                    "×",
                )
    return "\n".join(out)


def machine() -> str:
    libs = ("agentflow", "aiohttp", "httptools", "msgspec", "openai", "httpx2", "pydantic")
    return _common.machine((*libs, "uvloop") if uvloop_available() else libs)


def _fleet_findings(modes: Sequence[Mode], cells: dict[tuple[str, str], Cell]) -> list[str]:
    """The headline in words: Fleet + counting callback on each transport, per mode."""
    med = statistics.median
    out: list[str] = []
    for row in ROWS:
        if row.bare is None:
            continue
        parts: list[str] = []
        for mode in modes:
            a, b = cells.get((mode.key, row.key)), cells.get((mode.key, row.bare))
            if a is None or b is None or not a.samples:
                continue
            ratios, own = _ratios(a, b), _diffs(a, b)
            if not ratios:
                continue
            where = f"*{mode.label(row.key)}*"
            if not mode.pace_ms:
                ok = med(ratios) <= FLEET_BULK_RATIO_TARGET
                parts.append(
                    f"in {where} {_fmt(med(a.us()))} µs per chunk, {_fmt_ratio(med(ratios))}× "
                    f"the bare transport ({_fmt(med(own))} µs more; target ≤ "
                    f"{FLEET_BULK_RATIO_TARGET:g}×: {'met' if ok else 'not met'})"
                )
                continue
            above = _above(cells, mode.key, row.key, "floor")
            bare_above = _above(cells, mode.key, row.bare, "floor")
            if not above:
                continue
            ok = med(above) <= FLEET_PACED_ABOVE_TARGET_US
            s = f"in {where} {_fmt(med(above))} µs above the floor"
            if bare_above:
                s += (
                    f" (the bare transport {_fmt(med(bare_above))}, the Fleet's own "
                    f"{_fmt(med(own))})"
                )
            s += f"; target ≤ {FLEET_PACED_ABOVE_TARGET_US:g} µs: {'met' if ok else 'not met'}"
            parts.append(s)
        if parts:
            on = (
                "`HTTPTransport`'s default (kernel stamps)"
                if row.bare == "protocol_k"
                else "`HTTPTransport(kernel_timestamps=False)`"
            )
            out.append(f"`Fleet` + a counting callback on {on} costs " + "; ".join(parts) + ".")
    return out


def _findings(modes: Sequence[Mode], cells: dict[tuple[str, str], Cell]) -> str:
    """Sentences read off this run's numbers (so they stay true when the numbers change)."""
    out: list[str] = _fleet_findings(modes, cells)
    med = statistics.median
    others = [s.other_cores for c in cells.values() for s in c.samples if s.other_cores is not None]
    if others and med(others) > 0.25:
        out.append(
            f"Other work shared the machine during this run (median {med(others):.2f} cores "
            f"busy besides the client and the server, up to {max(others):.2f}): the "
            "absolute figures carry that noise, and the back-to-back ratios are the "
            "steadier numbers."
        )
    if (
        ("bulk", "parse") in cells
        and cells["bulk", "parse"].samples
        and cells["bulk", "agentflow"].samples
    ):
        total = med(cells["bulk", "agentflow"].us())
        parse = med(cells["bulk", "parse"].us())
        out.append(
            f"Of agentflow's {_fmt(total)} µs per bulk chunk, {_fmt(parse)} µs "
            f"({parse / total:.0%}) is its own work — SSE splitting, the msgspec decode and "
            "the trace (the no-I/O row); the rest is aiohttp's HTTP client (chunked "
            "decoding, its stream reader, the read timeout) and the socket."
        )
        if ("bulk", "protocol") in cells and cells["bulk", "protocol"].samples:
            proto = med(cells["bulk", "protocol"].us())
            out.append(
                f"`HTTPTransport` on asyncio's sockets spends {_fmt(proto)} µs per bulk chunk, "
                f"of which the "
                f"same {_fmt(parse)} µs ({parse / proto:.0%}) is parsing; the rest is "
                "httptools' chunked decoding, asyncio's socket reads and the joins of "
                "body pieces."
            )
    first = True
    for mode in modes:
        if mode.pace_ms:
            said = _floor_findings(mode, cells, first)
            out += said
            first = first and not said
    for mode in modes:
        if not mode.pace_ms:
            continue
        nominal = (mode.chunks["agentflow"] + 1) * mode.pace_ms / 1000
        for row in ROWS:
            cell = cells.get((mode.key, row.key))
            if cell is None or not cell.samples:
                continue
            wall = med(s.wall_ns for s in cell.samples) / 1e9
            busy = med(s.cpu_ns / s.wall_ns for s in cell.samples)
            if wall > 1.1 * nominal:
                out.append(
                    f"In *{mode.label(row.key)}* the {row.label} could not keep up: it took "
                    f"{wall:.1f} s for a {nominal:.1f} s stream, so events queued up and were "
                    "read several per wakeup, which lowers its CPU per chunk — its ratio to "
                    "agentflow understates what it would cost if it kept up."
                )
            elif busy >= 0.9:
                out.append(
                    f"In *{mode.label(row.key)}* the {row.label} kept up but used "
                    f"{busy:.0%} of a core: it is at this machine's limit there, and near "
                    "saturation more events arrive per wakeup, so the figure sits on a knee."
                )
    return " ".join(out)


def _floor_findings(mode: Mode, cells: dict[tuple[str, str], Cell], full: bool) -> list[str]:
    """The floor of one paced mode, agentflow's cost above it and what uvloop changes: in
    full for the first paced mode, in one sentence for the others."""
    med = statistics.median

    def us(row: str) -> float | None:
        cell = cells.get((mode.key, row))
        return med(cell.us()) if cell is not None and cell.samples else None

    def above(row: str, floor: str) -> float | None:
        d = _above(cells, mode.key, row, floor)
        return med(d) if d else None

    floor, floor_uv = us("floor"), us("floor_uv")
    proto, proto_uv = us("protocol"), us("protocol_uv")
    net, net_uv = above("protocol", "floor"), above("protocol_uv", "floor_uv")
    if floor is None:
        return []
    target = PACED_TARGET_US
    where = f"*{mode.label('floor')}*"
    if not full:
        s = f"In {where} the floor is {_fmt(floor)} µs per chunk"
        if floor_uv is not None:
            s += f" ({_fmt(floor_uv)} µs on uvloop)"
        if net is not None:
            s += f" and `HTTPTransport` on asyncio's sockets costs {_fmt(net)} µs above it"
            if net_uv is not None:
                s += f" (on uvloop, {_fmt(net_uv)} µs above uvloop's floor)"
        return [s + "."]
    out = []
    s = (
        f"In {where} the floor — a raw `asyncio.Protocol` that parses nothing and only "
        f"counts the response's bytes — costs {_fmt(floor)} µs per chunk: the event "
        "loop's wakeup and the socket read that every paced event costs any asyncio client"
    )
    if floor > target:
        s += (
            f". That is already {_fmt(floor - target)} µs above the {target:g} µs target: "
            "on asyncio's event loop the target lies below what a client that does nothing "
            "with the bytes costs on this machine."
        )
    else:
        s += f", {_fmt(target - floor)} µs under the {target:g} µs target."
    out.append(s)
    if net is not None and proto is not None:
        s = (
            f"`HTTPTransport` on asyncio's sockets costs {_fmt(proto)} µs, "
            f"{_fmt(net)} µs above the floor "
            "(median of the per-repetition differences): that is agentflow's own work per "
            "event — httptools' HTTP parsing, SSE splitting, the msgspec decode, the "
            "timestamp and the trace"
        )
        aio = above("agentflow", "floor")
        if aio is not None:
            s += f"; `AiohttpTransport` costs {_fmt(aio)} µs above it"
        out.append(s + ".")
    if floor_uv is not None:
        dfloor = _above(cells, mode.key, "floor", "floor_uv")
        s = f"On uvloop the floor is {_fmt(floor_uv)} µs"
        if dfloor:
            cut = med(dfloor)
            way = "lower" if cut >= 0 else "higher"
            s += f" ({_fmt(abs(cut))} µs or {abs(cut) / floor:.0%} {way})"
        if proto_uv is not None and net_uv is not None:
            s += f" and `HTTPTransport` {_fmt(proto_uv)} µs, {_fmt(net_uv)} µs above uvloop's floor"
            if net is not None:
                change = net - net_uv
                s += (
                    f", {_fmt(abs(change))} µs {'less' if change >= 0 else 'more'} than "
                    "above asyncio's"
                )
        if floor_uv > target:
            s += f"; even uvloop's floor is above the {target:g} µs target."
        elif proto_uv is not None and proto_uv > target:
            s += (
                f"; under the {target:g} µs target uvloop leaves "
                f"{_fmt(target - floor_uv)} µs for everything above the floor."
            )
        else:
            s += "."
        out.append(s)
    return out


NOTES = """\
**Reading the numbers.** Absolute figures on this kind of 2-vCPU virtual machine drift
by up to about 1.8× between runs made minutes apart (the host's load and clock), while
the ratios between rows measured back to back move far less; hence the interleaved
repetitions and the min–max. Paced figures also depend on how busy the client is: the
same code costs more CPU per event when the process idles between events (wakeups from
idle, clock scaling), and less when it is saturated and finds several events per
wakeup — compare the rows' "client CPU". With client and server on one CPU the two take
turns on one core instead of waking each other across cores, and the client's CPU per
chunk is lower; that row shows the spread the scheduler's placement alone causes when
nothing is pinned (unpinned, paced runs on a 2-CPU VM land on either figure)."""


def section(
    head_table: str,
    body_table: str,
    floor_table: str,
    target_table: str,
    modes: Sequence[Mode],
    cells: dict[tuple[str, str], Cell],
    reps: int,
    skipped: str = "",
) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python benchmarks/client_overhead.py", *sys.argv[1:]])
    tables = "\n\n".join(t for t in (head_table, body_table, floor_table, target_table) if t)
    findings = " ".join(t for t in (_findings(modes, cells), skipped) if t)
    by_key = {m.key: m for m in modes}
    how = []
    if "bulk" in by_key:
        bulk = by_key["bulk"]
        how.append(
            f"*bulk* is one stream of {bulk.chunks['agentflow']:,} content chunks written as "
            "fast as the socket drains (the SDK loop streams "
            f"{bulk.chunks.get('sdk', 0):,}: it is slow, and µs per chunk is what is "
            "compared)"
        )
    if "paced" in by_key:
        paced = by_key["paced"]
        how.append(
            f"*paced* is {paced.streams} concurrent streams of "
            f"{paced.chunks['agentflow']:,} chunks, each sending one event every "
            f"{paced.pace_ms:g} ms on its own schedule, with stream starts spread evenly "
            f"over one {paced.pace_ms:g} ms period so that reads arrive as separate wakeups "
            f"(nominal wall time {(paced.chunks['agentflow'] + 1) * paced.pace_ms / 1000:.2f} s)"
        )
    pin = by_key[next(iter(by_key))].pin if by_key else "none"
    if pin == "split" and len(CPUS) >= 2:
        placement = (
            f"The client is pinned to CPU {CPUS[0]} and the server to CPU {CPUS[1]} "
            f'(rows marked "one CPU": both on CPU {CPUS[0]}).'
        )
    else:
        placement = "Client and server are not pinned to CPUs."
    return f"""{START}
## Client overhead per streamed chunk (`benchmarks/client_overhead.py`)

Measured {now} on {machine()}.
Command: `{command}`; {reps} repetitions, medians.

{tables}

{findings}

**Method.** A local SSE server ([`benchmarks/_sse_server.py`](../benchmarks/_sse_server.py))
runs in a child process, written on raw `asyncio.Protocol`, bound to 127.0.0.1 and
answering `POST /v1/chat/completions` as vLLM does: HTTP/1.1 keep-alive,
`Transfer-Encoding: chunked` with one chunked frame per SSE event (role chunk, one
short word per content chunk, finish chunk, usage chunk with
`prompt_tokens_details.cached_tokens`, `data: [DONE]`), every frame encoded once at
start; the request's `max_tokens` sets the number of content chunks and an extra body
field `pace_ms` the pacing. The figure is the client process's own CPU time
(`time.process_time_ns`, user + system; the server is another process) over the
streaming, divided by the content chunks received — request encoding, stream start and
end are included. Every row timestamps each chunk and calls a no-op per-token callback:
`agentflow AiohttpTransport` is the aiohttp transport (aiohttp + msgspec; its per-read
timestamps are built in) streaming `ChatRequest`s to a sink whose `on_delta` does
nothing; `agentflow HTTPTransport(kernel_timestamps=False)` streams the same requests
through an `asyncio.Protocol` on asyncio's sockets with httptools' C HTTP parser, every
read parsed inside `data_received`, no coroutine wakeup per read; `agentflow
HTTPTransport, kernel stamps` (its default on Linux for `http://`) is the same parser on
agentflow's own socket transport, each read taken with `recvmsg` and the kernel's arrival
stamp; `openai SDK loop` is `async for chunk in
await client.chat.completions.create(..., stream=True, stream_options={{"include_usage":
True}})` reading `chunk.choices[0].delta.content` and calling `time.perf_counter_ns()`
per chunk; `agentflow OpenAITransport` sends through the SDK's `AsyncOpenAI` client and
parses the raw bytes with agentflow's own path; `agentflow parsing only` feeds the same
SSE bytes, already in memory in 64 KiB reads, through agentflow's `SSEDecoder` and
`TraceBuilder` with no I/O at all; `agentflow HTTPTransport on uvloop` is
`HTTPTransport(kernel_timestamps=False)` on uvloop's event loop (`uvloop.run`) instead
of asyncio's. The *floor* rows
are no client anyone would use but the cost under every asyncio client: a raw
`asyncio.Protocol` per kept-alive connection writes a pre-encoded request and only
counts the response's bytes up to its chunked terminator — no HTTP, SSE or JSON
parsing, no timestamps, no callback — so what it spends is the event loop's wakeups
and the socket reads; each response must have the exact byte length of an `n`-chunk
answer, computed from the server's own frames, and end in the terminator. `floor on
uvloop` is the same on uvloop. The "above the floor" table gives, for each agentflow
row in the paced modes, its CPU per chunk less the floor's on the same event loop
(asyncio rows less `floor`, the uvloop row less `floor on uvloop`): the median of the
per-repetition differences, min–max beside it, and its median share of the row's
total — agentflow's own work per chunk, net of the event loop and the socket.
The headline rows, `Fleet` + counting callback, are the public API as a user runs it:
`Fleet(HTTPTransport(url), max_concurrency=4096, callbacks=[on_event])` (defaults
otherwise: retries, scheduler, garbage-collector freeze) running one session per stream
of an `Agent` with no tools and no instructions, `on_event` a plain function that counts
the events whose `type` is `"token"`; every session's trace is checked as the other rows'
are, and the count must equal the chunks received. They run on `HTTPTransport`'s default
(kernel stamps) and on `HTTPTransport(kernel_timestamps=False)`, and the headline table
sets each against that bare transport row of the same repetition ("× bare transport", and
"the Fleet's own µs/chunk": the median of the per-repetition differences) and, paced,
against the floor. A fleet sends all its requests at once, so for it the paced stagger is
the server's: stream `i`'s schedule starts `i × pace / streams` later (`start_ms`).
{"; ".join(how)}. {placement} Each run uses a fresh
event loop and client, after a warm-up round of short streams on that client (so
imports, lazily built models and kept-alive connections are in place, as in a running
fleet; "new conns" counts connections the server accepted during the timed part).
Rows alternate within each repetition, and "× agentflow" is the median of the
per-repetition ratios to the agentflow row of the same mode (min–max in brackets).
"client CPU" is CPU time over wall time (100% = one core); "server CPU" shows the
server is not the bottleneck; "rest of machine" is the machine-wide busy CPU time
(`/proc/stat`) less the client's and the server's, in cores — other processes, and
kernel work charged to no process. Every stream is checked for all its chunks, its
finish reason, `[DONE]` and its cached-token count (the floor's for its byte count and
terminator).

{NOTES}
{END}"""


def write_doc(text: str) -> None:
    _common.write_section(NAME, text)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description="Client CPU µs per streamed chunk: agentflow vs the openai SDK loop."
    )
    p.add_argument("--quick", action="store_true", help="short smoke run; never writes docs")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument("--reps", type=int, help="repetitions (default 5, quick 2)")
    p.add_argument("--bulk-chunks", type=int, help="bulk stream length (default 200,000)")
    p.add_argument("--sdk-bulk-chunks", type=int, help="bulk length for the SDK (default 50,000)")
    p.add_argument("--streams", type=int, help="paced concurrent streams (default 200)")
    p.add_argument("--paced-chunks", type=int, help="paced chunks per stream (default 300)")
    p.add_argument("--pace-ms", type=float, default=10.0, help="paced interval (default 10)")
    p.add_argument(
        "--rows",
        default=",".join(ROW_KEYS),
        help=f"rows to run, comma-separated, from {', '.join(ROW_KEYS)} (default: all); "
        "agentflow is always included; the uvloop rows need uvloop installed",
    )
    p.add_argument(
        "--modes",
        default="bulk,paced,paced_1cpu" if len(CPUS) >= 2 else "bulk,paced",
        help="comma-separated, from bulk, paced, paced_1cpu (default: all)",
    )
    p.add_argument(
        "--lockstep",
        action="store_true",
        help="start all paced streams at once, so their events fall due together "
        "(default: starts spread over one pace period)",
    )
    p.add_argument(
        "--no-pin",
        action="store_true",
        help="let the scheduler place client and server (default: one CPU each)",
    )
    args = p.parse_args(argv)

    q = args.quick
    reps = args.reps or (2 if q else 5)
    bulk_n = args.bulk_chunks or (20_000 if q else 200_000)
    sdk_bulk_n = args.sdk_bulk_chunks or (5_000 if q else 50_000)
    streams = args.streams or (50 if q else 200)
    paced_n = args.paced_chunks or (50 if q else 300)
    wanted = {"agentflow", *(k.strip() for k in args.rows.split(",") if k.strip())}
    if unknown := wanted - set(ROW_KEYS):
        p.error(f"unknown rows: {', '.join(sorted(unknown))} (known: {', '.join(ROW_KEYS)})")
    rows = [r for r in ROWS if r.key in wanted]
    skipped = ""
    if any(r.uvloop for r in rows) and not uvloop_available():
        gone = [r.key for r in rows if r.uvloop]
        rows = [r for r in rows if not r.uvloop]
        skipped = f"uvloop is not installed, so the rows {', '.join(gone)} were skipped."
        print(f"note: {skipped}", file=sys.stderr, flush=True)
    pin: Pin = "split" if len(CPUS) >= 2 and not args.no_pin else "none"
    bulk_chunks = {
        "fleet": bulk_n,
        "fleet_nk": bulk_n,
        "agentflow": bulk_n,
        "protocol": bulk_n,
        "protocol_uv": bulk_n,
        "protocol_k": bulk_n,
        "floor": bulk_n,
        "floor_uv": bulk_n,
        "parse": bulk_n,
        "sdk": sdk_bulk_n,
        "af_openai": bulk_n,
    }
    paced_chunks = dict.fromkeys(
        (
            "fleet",
            "fleet_nk",
            "agentflow",
            "protocol",
            "protocol_uv",
            "protocol_k",
            "floor",
            "floor_uv",
            "sdk",
            "af_openai",
        ),
        paced_n,
    )
    all_modes = {
        "bulk": Mode("bulk", 1, bulk_chunks, 0, pin),
        "paced": Mode("paced", streams, paced_chunks, args.pace_ms, pin, not args.lockstep),
        # The same load with client and server sharing one CPU: on this kind of VM a
        # wakeup from another CPU costs the client far more than one from its own.
        "paced_1cpu": Mode(
            "paced_1cpu",
            streams,
            dict.fromkeys(
                (
                    "fleet",
                    "fleet_nk",
                    "agentflow",
                    "protocol",
                    "protocol_uv",
                    "protocol_k",
                    "floor",
                    "floor_uv",
                ),
                paced_n,
            ),
            args.pace_ms,
            "same",
            not args.lockstep,
        ),
    }
    if unknown_modes := set(args.modes.split(",")) - set(all_modes):
        p.error(f"unknown modes: {', '.join(sorted(unknown_modes))}")
    modes = [all_modes[k] for k in args.modes.split(",")]

    cells = run(modes, rows, reps)
    head = headline(modes, cells)
    body = table(modes, rows, cells)
    floor = above_floor(modes, rows, cells)
    goals = targets(cells, modes)
    tables = "\n\n".join(t for t in (head, body, floor, goals) if t)
    print(f"\n{machine()}\n\n{tables}\n\n{_findings(modes, cells)}")
    if skipped:
        print(f"\nnote: {skipped}")
    if q or args.no_write:
        return
    write_doc(section(head, body, floor, goals, modes, cells, reps, skipped))
    print(f"\nwrote the {NAME} section of {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
