"""A fast, framework-free chat-completions SSE server for client benchmarks.

Run it as a separate process (``python benchmarks/_sse_server.py``): it binds
``127.0.0.1`` on a free port, prints ``PORT <n>`` on stdout, and serves
``POST /v1/chat/completions`` (plus ``GET /health`` and ``GET /stats``, the count of
connections accepted and streams served) over HTTP/1.1 keep-alive on a
plain :class:`asyncio.Protocol` — no framework, so the server's own cost stays far
below the client's.

The response is shaped like vLLM's: ``Transfer-Encoding: chunked`` with exactly one
chunked-encoding frame per SSE event — a role chunk, ``max_tokens`` content chunks
of one short word each, a finish chunk, a usage-only chunk (with
``prompt_tokens_details.cached_tokens``) and ``data: [DONE]``. Every frame is
encoded once at start (the usage frame once per distinct length), so serving a
stream is only ``transport.write`` calls.

Request body fields it reads: ``max_tokens`` (or ``max_completion_tokens``) — the
number of content chunks; ``pace_ms`` — 0 writes the whole stream as fast as the
socket takes it (whole blocks of pre-encoded frames per write, with flow control),
> 0 writes one content frame every ``pace_ms`` ms on a schedule anchored at the
request's arrival; ``start_ms`` (paced only, default 0) moves that anchor later, so a
client that sends many requests at once (a fleet) can still have their events fall due
at staggered times.

**Step-paced mode** (``--step-ms S``, for ``benchmarks/agents_848.py``): a request whose
body carries ``run`` (a run id), ``stream_id`` (the stream's id in that run) and ``expect``
(how many streams the run has) joins that run's step group instead. The group waits
until all ``expect`` streams have arrived (or ``_GROUP_WAIT_S`` passed since the first),
then ``settle_ms`` (default 50) later one timer per group steps every ``S`` ms on
absolute deadlines: each step writes the next content frame to *every* active stream of
the group — so the k-th token of all streams leaves in the same server instant, as in
one batched decode step of an engine — and, after a stream's last content frame, its
tail (finish, usage, ``[DONE]``) at the next step. The server logs, per stream, the time
of each write (``time.perf_counter_ns()`` taken right before ``transport.write``:
``CLOCK_MONOTONIC`` on Linux, the clock agentflow stamps tokens with, so the two compare
on one machine) and how many writes asyncio had to buffer because the socket was full
(the client was not reading). ``GET /writelog?run=ID`` returns the group's log as JSON
(``t0_ns``, ``step_ns``, ``joined``, ``done`` and per stream ``writes``, ``tail_ns`` and
``buffered``) and forgets a finished group. Requests without ``run`` (or a server
started without ``--step-ms``) are served by the modes above, unchanged.

It stops by itself: on SIGTERM/SIGINT, after ``--max-seconds``, and with
``--watch-stdin`` when its stdin reaches EOF (the parent exited).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import threading
import time
from typing import Any
from urllib.parse import parse_qs

__all__ = ["CACHED_TOKENS", "PROMPT_TOKENS", "Frames", "StepGroups", "serve"]

#: What the usage chunk reports, so clients can check they parsed it.
PROMPT_TOKENS = 42
CACHED_TOKENS = 32

_MODEL = "bench-model"
_WORDS = (
    " the", " quick", " brown", " fox", " jumps", " over", " a", " lazy",
    " dog", " and", " then", " it", " runs", " back", " home", " again",
)  # fmt: skip
_BLOCK_BYTES = 64 * 1024  # bulk streams write whole blocks of this size (rounded to frames)
_MAX_HEAD = 64 * 1024
_MAX_BODY = 16 * 1024 * 1024
#: A step group starts this long after its first stream joined even if not all came.
_GROUP_WAIT_S = 60.0


def _frame(payload: bytes) -> bytes:
    """One SSE event wrapped in one chunked-encoding frame."""
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def _chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-bench0123456789",
        "object": "chat.completion.chunk",
        "created": 1_760_000_000,
        "model": _MODEL,
        "choices": choices,
    }
    body.update(extra)
    return _frame(json.dumps(body, separators=(",", ":")).encode())


class Frames:
    """Every byte string the server sends, encoded once."""

    def __init__(self) -> None:
        self.head = (
            b"HTTP/1.1 200 OK\r\n"
            b"content-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n"
            b"x-request-id: bench\r\n"
            b"\r\n"
        )
        self.role = _chunk(
            [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )
        self.content = [
            _chunk([{"index": 0, "delta": {"content": w}, "logprobs": None, "finish_reason": None}])
            for w in _WORDS
        ]
        self.finish = _chunk(
            [
                {
                    "index": 0,
                    "delta": {"content": ""},
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                }
            ]
        )
        self.done = _frame(b"[DONE]") + b"0\r\n\r\n"  # last event, then the chunked terminator
        # A bulk block: the content frames repeated up to ~_BLOCK_BYTES, and the byte
        # offset after each frame so that a stream can end part-way through a block.
        cycle = b"".join(self.content)
        reps = max(1, _BLOCK_BYTES // len(cycle))
        self.block = cycle * reps
        self.block_frames = len(self.content) * reps
        self.offsets: list[int] = []
        pos = 0
        for _ in range(reps):
            for f in self.content:
                pos += len(f)
                self.offsets.append(pos)
        self._usage: dict[int, bytes] = {}

    def tail(self, n: int) -> bytes:
        """Finish chunk, usage chunk for ``n`` output tokens, ``[DONE]``, terminator."""
        usage = self._usage.get(n)
        if usage is None:
            usage = self._usage[n] = _chunk(
                [],
                usage={
                    "prompt_tokens": PROMPT_TOKENS,
                    "total_tokens": PROMPT_TOKENS + n,
                    "completion_tokens": n,
                    "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS},
                },
            )
        return self.finish + usage + self.done

    def bulk_prefix(self, k: int) -> bytes:
        """The first ``k`` (< ``block_frames``) content frames of a block."""
        return self.block[: self.offsets[k - 1]] if k else b""


def _simple(status: str, body: bytes, *, close: bool = False) -> bytes:
    conn = b"connection: close\r\n" if close else b""
    return b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        status.encode(),
        len(body),
        conn,
        body,
    )


class Stats:
    """Counters served at ``GET /stats``: clients can check that connections were reused."""

    def __init__(self) -> None:
        self.connections = 0
        self.streams = 0

    def json(self) -> bytes:
        return json.dumps({"connections": self.connections, "streams": self.streams}).encode()


class _Stepped:
    """One stream of a step group, and its write log."""

    __slots__ = ("buffered", "conn", "i", "n", "tail_ns", "writes")

    def __init__(self, conn: _Connection, n: int) -> None:
        self.conn = conn
        self.n = n
        self.i = 0  # the next content frame
        self.writes: list[int] = []
        self.tail_ns = 0
        self.buffered = 0  # writes asyncio buffered because the socket was full


class _StepGroup:
    """The streams of one run, stepped by one timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, step_s: float, expect: int) -> None:
        self.loop = loop
        self.step_s = step_s
        self.expect = expect
        self.streams: dict[str, _Stepped] = {}
        self.active: list[_Stepped] = []
        self.t0 = 0.0  # loop time of step 0 (the first content frame), once started
        self.done = False
        self._timer: asyncio.TimerHandle | None = loop.call_later(_GROUP_WAIT_S, self.start, 0.0)

    def join(self, stream_id: str, conn: _Connection, n: int, settle_s: float) -> None:
        st = _Stepped(conn, n)
        self.streams[stream_id] = st
        self.active.append(st)
        if len(self.streams) >= self.expect and not self.t0:
            self.start(settle_s)
        elif self.t0 and self._timer is None:  # stepping had ended: resume it on the grid
            k = max(0, math.ceil((self.loop.time() - self.t0) / self.step_s))
            self.done = False
            self._timer = self.loop.call_at(self.t0 + k * self.step_s, self._step, k)

    def start(self, settle_s: float) -> None:
        if self.t0:
            return
        if self._timer is not None:
            self._timer.cancel()
        self.t0 = self.loop.time() + settle_s
        self._timer = self.loop.call_at(self.t0, self._step, 0)

    def _step(self, k: int) -> None:
        """Write the next frame of every active stream; deadlines are absolute, so a late
        step does not push the later ones back."""
        now = time.perf_counter_ns
        alive: list[_Stepped] = []
        for st in self.active:
            conn = st.conn
            tr = conn._transport
            if tr is None:
                continue  # the client went away
            i = st.i
            if i < st.n:
                content = conn._frames.content
                st.writes.append(now())
                tr.write(content[i % len(content)])
                if tr.get_write_buffer_size():
                    st.buffered += 1
                st.i = i + 1
                alive.append(st)
            else:
                st.tail_ns = now()
                tr.write(conn._frames.tail(st.n))
                conn._end_response()
        self.active = alive
        if alive:
            self._timer = self.loop.call_at(self.t0 + (k + 1) * self.step_s, self._step, k + 1)
        else:
            self._timer = None
            self.done = True

    def log(self) -> dict[str, Any]:
        return {
            "t0_ns": round(self.t0 * 1e9),
            "step_ns": round(self.step_s * 1e9),
            "joined": len(self.streams),
            "expect": self.expect,
            "done": self.done,
            "streams": {
                sid: {"writes": st.writes, "tail_ns": st.tail_ns, "buffered": st.buffered}
                for sid, st in self.streams.items()
            },
        }


class StepGroups:
    """The server's step groups by run id (``--step-ms``); ``step_ms`` 0 turns them off."""

    def __init__(self, step_ms: float = 0.0) -> None:
        self.step_s = step_ms / 1000.0
        self.groups: dict[str, _StepGroup] = {}

    def join(
        self, run: str, stream_id: str, expect: int, conn: _Connection, n: int, settle_s: float
    ) -> None:
        group = self.groups.get(run)
        if group is None:
            loop = asyncio.get_running_loop()
            group = self.groups[run] = _StepGroup(loop, self.step_s, expect)
        group.join(stream_id, conn, n, settle_s)

    def writelog(self, query: str) -> tuple[str, bytes]:
        """``GET /writelog?run=ID``: the group's log (a finished group is forgotten)."""
        run = (parse_qs(query).get("run") or [""])[0]
        group = self.groups.get(run)
        if group is None:
            return "404 Not Found", json.dumps({"error": {"message": f"no run {run!r}"}}).encode()
        if group.done:
            del self.groups[run]
        return "200 OK", json.dumps(group.log(), separators=(",", ":")).encode()


class _Connection(asyncio.Protocol):
    """One client connection: parse a request, stream the answer, repeat (keep-alive)."""

    def __init__(self, frames: Frames, stats: Stats, steps: StepGroups | None = None) -> None:
        self._frames = frames
        self._stats = stats
        self._steps = steps if steps is not None else StepGroups()
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._busy = False  # a response is being streamed; later requests wait in _buf
        self._close_after = False
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._writable: asyncio.Future[None] | None = None
        self._paused = False

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._stats.connections += 1
        transport.set_write_buffer_limits(high=1024 * 1024)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if not self._busy:
            self._next_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._task is not None:
            self._task.cancel()
        if self._timer is not None:
            self._timer.cancel()
        self._wake()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    # -- requests -----------------------------------------------------------------------
    def _next_request(self) -> None:
        tr = self._transport
        if tr is None or self._busy:
            return
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > _MAX_HEAD:
                tr.write(_simple("431 Request Header Fields Too Large", b"{}", close=True))
                tr.close()
            return
        lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        try:
            method, target, _version = lines[0].split(" ", 2)
        except ValueError:
            tr.write(_simple("400 Bad Request", b"{}", close=True))
            tr.close()
            return
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            tr.write(_simple("411 Length Required", b"{}", close=True))
            tr.close()
            return
        length = int(headers.get("content-length") or 0)
        if length > _MAX_BODY:
            tr.write(_simple("413 Content Too Large", b"{}", close=True))
            tr.close()
            return
        if len(self._buf) < end + 4 + length:
            return  # the body is still coming
        body = bytes(self._buf[end + 4 : end + 4 + length])
        del self._buf[: end + 4 + length]
        self._close_after = headers.get("connection", "").lower() == "close"
        self._dispatch(method, target, body)

    def _dispatch(self, method: str, target: str, body: bytes) -> None:
        tr = self._transport
        assert tr is not None
        path, _, query = target.partition("?")
        if method == "GET" and path == "/writelog":
            status, data = self._steps.writelog(query)
            self._reply(_simple(status, data))
            return
        if method == "GET" and path == "/health":
            self._reply(_simple("200 OK", b'{"status":"ok"}'))
            return
        if method == "GET" and path == "/stats":
            self._reply(_simple("200 OK", self._stats.json()))
            return
        if path != "/v1/chat/completions":
            self._reply(_simple("404 Not Found", b'{"error":{"message":"not found"}}'))
            return
        if method != "POST":
            self._reply(_simple("405 Method Not Allowed", b'{"error":{"message":"POST"}}'))
            return
        try:
            req = json.loads(body)
            n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
            pace_ms = float(req.get("pace_ms") or 0.0)
            start_s = float(req.get("start_ms") or 0.0) / 1000.0
            run = str(req["run"]) if self._steps.step_s and "run" in req else None
            if run is not None:
                stream_id = str(req["stream_id"])
                expect = int(req["expect"])
                settle_s = float(req.get("settle_ms", 50.0)) / 1000.0
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            msg = json.dumps({"error": {"message": f"bad request body: {exc}"}}).encode()
            self._reply(_simple("400 Bad Request", msg))
            return
        self._busy = True
        self._stats.streams += 1
        tr.write(self._frames.head + self._frames.role)
        if run is not None:
            self._steps.join(run, stream_id, expect, self, n, settle_s)
        elif pace_ms > 0:
            loop = asyncio.get_running_loop()
            pace_s = pace_ms / 1000.0
            t0 = loop.time() + start_s
            self._timer = loop.call_at(t0 + pace_s, self._paced_step, loop, n, pace_s, t0, 0)
        else:
            self._task = asyncio.get_running_loop().create_task(self._bulk(n))

    def _reply(self, data: bytes) -> None:
        tr = self._transport
        assert tr is not None
        tr.write(data)
        self._end_response()

    def _end_response(self) -> None:
        self._busy = False
        self._task = None
        self._timer = None
        tr = self._transport
        if tr is None:
            return
        if self._close_after:
            tr.close()
        elif self._buf:
            self._next_request()

    # -- streaming ----------------------------------------------------------------------
    def _wake(self) -> None:
        w = self._writable
        if w is not None and not w.done():
            w.set_result(None)

    async def _bulk(self, n: int) -> None:
        """Write ``n`` content frames as fast as the socket drains, in whole blocks."""
        f = self._frames
        left = n
        while left > 0:
            tr = self._transport
            if tr is None:
                return
            k = min(left, f.block_frames)
            tr.write(f.block if k == f.block_frames else f.bulk_prefix(k))
            left -= k
            if self._paused:
                self._writable = asyncio.get_running_loop().create_future()
                await self._writable
                self._writable = None
        tr = self._transport
        if tr is not None:
            tr.write(f.tail(n))
            self._end_response()

    def _paced_step(
        self, loop: asyncio.AbstractEventLoop, n: int, pace_s: float, t0: float, i: int
    ) -> None:
        """Write content frame ``i`` (or the tail after the last), then schedule the next.

        Frame ``i`` is due at ``t0 + (i + 1) * pace``: deadlines are absolute, so a late
        wakeup does not push the rest of the stream back.
        """
        tr = self._transport
        if tr is None:
            return
        f = self._frames
        if i < n:
            tr.write(f.content[i % len(f.content)])
            self._timer = loop.call_at(
                t0 + (i + 2) * pace_s, self._paced_step, loop, n, pace_s, t0, i + 1
            )
        else:
            tr.write(f.tail(n))
            self._end_response()


async def serve(
    port: int, max_seconds: float, *, watch_stdin: bool = False, step_ms: float = 0.0
) -> None:
    """Serve until a signal arrives, ``max_seconds`` pass or (``watch_stdin``) stdin closes;
    ``step_ms`` > 0 turns the step-paced mode on."""
    loop = asyncio.get_running_loop()
    frames = Frames()
    stats = Stats()
    steps = StepGroups(step_ms)
    server = await loop.create_server(
        lambda: _Connection(frames, stats, steps), host="127.0.0.1", port=port, backlog=1024
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    if watch_stdin:

        def _watch() -> None:
            # Blocks until EOF, i.e. until the parent process closes the pipe or exits.
            # os.read, not sys.stdin: a daemon thread must hold no lock at shutdown.
            fd = sys.stdin.fileno()
            while os.read(fd, 4096):
                pass
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=_watch, name="stdin-watch", daemon=True).start()
    sock = server.sockets[0]
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    try:
        async with asyncio.timeout(max_seconds):
            await stop.wait()
    except TimeoutError:
        pass
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    parser.add_argument(
        "--max-seconds", type=float, default=3600.0, help="exit after this long in any case"
    )
    parser.add_argument(
        "--watch-stdin",
        action="store_true",
        help="exit when stdin reaches EOF (the benchmark passes a pipe it never writes to)",
    )
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="step period of the step-paced mode (requests with a 'run' field); 0: off",
    )
    args = parser.parse_args()
    if args.step_ms < 0:
        parser.error(f"--step-ms must be >= 0, got {args.step_ms}")
    asyncio.run(
        serve(args.port, args.max_seconds, watch_stdin=args.watch_stdin, step_ms=args.step_ms)
    )


if __name__ == "__main__":
    main()
