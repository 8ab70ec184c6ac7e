"""The simulator as an OpenAI-compatible HTTP server (aiohttp), shaped like vLLM's.

Routes:

- ``POST /v1/chat/completions`` — streaming (SSE, ``stream_options.include_usage``) and
  not; ``n`` must be 1; ``max_tokens``/``max_completion_tokens``, ``stop``, ``tools``,
  ``tool_choice``, ``parallel_tool_calls``, ``seed``. Errors are vLLM's:
  ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status in ``code``
  (the maximum-context-length message is vLLM's wording, status 400).
- ``GET /v1/models`` — the one served model.
- ``POST /tokenize`` — vLLM's: ``{"count", "max_model_len", "tokens", "token_strs"}`` of
  ``messages`` (chat template applied; ``add_generation_prompt`` defaults to true, and
  ``tools`` are rendered) or of a ``prompt`` string.
- ``GET /health`` — 200, empty.
- ``GET /metrics`` — Prometheus text with vLLM's metric names (:mod:`agentflow.sim.metrics`).
- ``GET /agentflow/requests/{id}`` — the ground truth of one request (``id`` is the
  response id ``chatcmpl-<n>`` or ``<n>``): arrival, admission, prefill, every token's
  emit time (engine seconds), cached tokens, preemptions, ``time_scale``.
- ``GET /agentflow/stats`` — the engine's and the driver's counters as JSON.

Every response carries ``x-agentflow-time-scale`` (wall seconds per engine second);
chat responses carry ``x-agentflow-request-id``. Faults are injected per
:mod:`agentflow.sim.faults`.

The streaming path writes HTTP/1.1 chunked-encoding frames straight onto the transport
once the headers are out: all the SSE events one engine step produced for one request go
out as ONE chunk in ONE ``transport.write`` (aiohttp's ``StreamResponse.write`` costs
an await and its own framing per call). A client that goes away cancels its handler
(aiohttp's ``handler_cancellation``), which aborts the request in the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
from aiohttp import web

from agentflow.sim.driver import (
    EngineDriver,
    SimRequest,
    parse_chat_body,
    parse_request_id,
)
from agentflow.sim.engine import Engine
from agentflow.sim.errors import RequestRejected
from agentflow.sim.faults import FAULT_HEADER, Fault, FaultConfig, FaultInjector
from agentflow.sim.frames import malformed_payload
from agentflow.sim.metrics import CONTENT_TYPE, SimMetrics
from agentflow.sim.profiles import Profile
from agentflow.sim.records import RequestRecord
from agentflow.sim.sessions import SESSION_HEADER
from agentflow.sim.textgen import TextGenConfig

__all__ = ["TIME_SCALE_HEADER", "SimServer", "error_body", "models_document", "record_json"]

#: The response header that carries the time scale.
TIME_SCALE_HEADER = "x-agentflow-time-scale"
#: The response header that carries the response id of a chat request.
REQUEST_ID_HEADER = "x-agentflow-request-id"

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}
_SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
}
_CRLF = b"\r\n"


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's JSON error body."""
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "BadRequestError" if status < 500 else "ServerError"),
            "param": param,
            "code": status,
        }
    }


def _error(
    status: int, message: str, param: str | None = None, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=_encode(error_body(status, message, param)),
        content_type="application/json",
        headers=headers,
    )


@web.middleware
async def _json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """aiohttp's own 404/405/413 answers, in vLLM's JSON error shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(
            exc.status,
            exc.reason,
            headers={"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None,
        )


def record_json(
    record: RequestRecord, *, time_scale: float, loop_origin_s: float | None = None
) -> dict[str, Any]:
    """A request's ground truth as JSON (times in engine seconds).

    ``loop_origin_s`` is the server loop's time at engine time 0: on a normal loop that
    is ``time.monotonic()``, so a client on the same host can place every engine time
    on its own monotonic clock as ``loop_origin_s + t × time_scale``.
    """
    return {
        "id": f"chatcmpl-{record.request_id}",
        "request_id": record.request_id,
        "time_scale": time_scale,
        "loop_origin_s": loop_origin_s,
        "finished": record.finished,
        "finish_reason": record.finish_reason,
        "prompt_tokens": record.prompt_tokens,
        "cached_tokens": record.cached_tokens,
        "completion_tokens": record.completion_tokens,
        "max_tokens": record.max_tokens,
        "arrival_s": record.arrival_s,
        "admitted_s": record.admitted_s,
        "prefill_start_s": record.prefill_start_s,
        "prefill_end_s": record.prefill_end_s,
        "finished_s": record.finished_s,
        "queue_s": record.queue_s,
        "prefill_s": record.prefill_s,
        "ttft_s": record.ttft_s,
        "tpot_s": record.tpot_s,
        "e2e_s": record.e2e_s,
        "num_preemptions": record.num_preemptions,
        "preempted_at_s": record.preempted_at_s,
        "recomputed_tokens": record.recomputed_tokens,
        "token_times_s": record.token_times_s,
        "timings": record.timings(),
    }


def _reset(transport: asyncio.Transport | None) -> None:
    """Close a connection with a TCP RST (SO_LINGER 0), not a FIN."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class _SSEStream:
    """One streamed response: a :class:`StreamConsumer` that writes chunked frames.

    Payloads are collected in :meth:`on_payloads` and written by :meth:`flush`, which
    the driver's flush hook calls once per step (or once per batch of late steps): one
    chunked-encoding frame, one ``transport.write``. Before the headers are out, and
    while a stall fault holds the stream, frames wait in the same buffer.
    """

    __slots__ = (
        "_dirty",
        "_dirty_list",
        "_fault",
        "_fired",
        "_held",
        "_last",
        "_max_buffer",
        "_out",
        "_prev_tokens",
        "_strike",
        "_timer",
        "_transport",
        "_trigger",
        "ended",
        "loop",
        "request",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fault: Fault | None,
        max_buffer: int,
        dirty_list: list[_SSEStream],
    ) -> None:
        self.loop = loop
        self.ended: asyncio.Future[str] = loop.create_future()
        self.request: SimRequest | None = None
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._last = False
        self._dirty = False
        self._dirty_list = dirty_list
        self._held = True  # until attached, and while stalled
        self._fault = fault
        self._fired = False
        self._trigger = 0
        self._prev_tokens = 0
        self._strike: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._max_buffer = max_buffer

    def set_request(self, request: SimRequest) -> None:
        self.request = request
        if self._fault is not None:
            self._trigger = self._fault.after_tokens(request.expected_tokens)

    def attach(self, transport: asyncio.Transport | None) -> None:
        """The headers are out: write what waited, and from now on write directly."""
        if self.ended.done():
            return
        if transport is None or transport.is_closing():
            self._gone()
            return
        self._transport = transport
        if self._timer is None:
            self._held = False
            self.flush()

    def _end(self, how: str) -> None:
        if not self.ended.done():
            self.ended.set_result(how)

    # --- StreamConsumer ----------------------------------------------------------------

    def on_payloads(self, payloads: list[bytes], last: bool) -> None:
        if (
            self._fault is not None
            and not self._fired
            and self._fault_fires(last)
            and self._apply_fault(payloads)
        ):
            return
        if len(payloads) == 1:
            self._out.append(b"data: " + payloads[0] + b"\n\n")
        else:
            self._out.append(b"data: " + b"\n\ndata: ".join(payloads) + b"\n\n")
        if last:
            self._last = True
        if not self._dirty:
            self._dirty = True
            self._dirty_list.append(self)

    def on_abort(self, reason: str) -> None:
        tr = self._transport
        if tr is not None and not tr.is_closing():
            tr.abort()
        self._end("aborted")

    def flush(self) -> None:
        """Write what was collected as one chunked frame (unless held)."""
        self._dirty = False
        if self._held or self.ended.done():
            return
        out = self._out
        if out:
            tr = self._transport
            if tr is None or tr.is_closing():
                self._gone()
                return
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            tr.write(b"%x\r\n" % len(data) + data + _CRLF)
            if tr.get_write_buffer_size() > self._max_buffer and not self._last:
                self._gone()  # the client stopped reading; do not buffer without bound
                tr.abort()
                return
        if self._strike is not None:
            if self._strike == "reset":
                _reset(self._transport)
            self._end(self._strike)
        elif self._last:
            self._end("done")

    def _gone(self) -> None:
        if self.request is not None:
            self.request.cancel()
        self._end("gone")

    # --- Faults --------------------------------------------------------------------------

    def _fault_fires(self, last: bool) -> bool:
        req = self.request
        assert req is not None
        before = self._prev_tokens
        self._prev_tokens = req.encoder.tokens_sent
        return before >= self._trigger or last

    def _apply_fault(self, payloads: list[bytes]) -> bool:
        """Strike; ``True`` when this delivery's payloads must not be written."""
        fault = self._fault
        assert fault is not None
        assert self.request is not None
        self._fired = True
        kind = fault.kind
        if kind in ("reset_mid_stream", "cut_stream"):
            # What was collected goes out first, then the reset or the cut.
            self.request.cancel()
            self._strike = "reset" if kind == "reset_mid_stream" else "cut"
            if not self._held:
                self.flush()
            return True
        if kind == "malformed_chunk":
            payloads.insert(0, malformed_payload(self.request.id))
            return False
        if kind == "stall_mid_stream":
            self.flush()
            self._held = True
            self._timer = self.loop.call_later(fault.stall_s, self._unstall)
            return False
        return False  # pragma: no cover - pre-stream kinds never reach a stream

    def _unstall(self) -> None:
        self._timer = None
        if self._transport is not None:
            self._held = False
            self.flush()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _BodyCollector:
    """A non-streamed response: waits for the one ``chat.completion`` body."""

    __slots__ = ("future",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[bytes] = loop.create_future()

    def on_payloads(self, payloads: list[bytes], last: bool) -> None:
        if last and not self.future.done():
            self.future.set_result(payloads[-1])

    def on_abort(self, reason: str) -> None:
        if not self.future.done():
            self.future.set_exception(ConnectionAbortedError(reason))


def models_document(model: str, max_model_len: int, created: int) -> dict[str, Any]:
    """The ``GET /v1/models`` answer, vLLM's shape: one model with its ``max_model_len``."""
    entry = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "agentflow-sim",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [],
    }
    return {"object": "list", "data": [entry]}


class SimServer:
    """The simulator behind an OpenAI-compatible HTTP server.

    Args:
        profile: a :class:`Profile` or a registry name.
        host: the address to bind (loopback by default).
        port: the port; 0 picks a free one (see :attr:`port` after :meth:`start`).
        seed: fixes every output.
        time_scale: wall seconds per engine second (10 = a rack at a tenth of its speed).
        tokens_per_chunk: output tokens per SSE content chunk.
        textgen: the model's behaviour (tool rounds, answer lengths).
        faults: fault rates; none by default (the fault header still works).
        served_model_name: the model name of ``/v1/models`` (default: the profile's).
        enable_prefix_caching: the prefix cache (on, as in vLLM v1).
        keep_records: finished requests whose ground truth stays retrievable.
        max_batch_s: when the server cannot keep up with the modelled speed, how long it
            may take steps back to back before writing (one write per stream per batch;
            see :class:`~agentflow.sim.driver.EngineDriver`).
        max_write_buffer: bytes a stream may have queued for a client that does not
            read before it is dropped.
        session_header: the request header that names a conversation; its tool rounds
            are then counted across its requests, so compaction does not reset them
            (:mod:`agentflow.sim.sessions`). ``None``: count the rounds a request shows.

    Example::

        async with SimServer("cpu-tiny") as sim:
            client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="x")
    """

    def __init__(
        self,
        profile: Profile | str = "cpu-tiny",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        time_scale: float = 1.0,
        tokens_per_chunk: int = 1,
        textgen: TextGenConfig | None = None,
        faults: FaultConfig | None = None,
        served_model_name: str | None = None,
        enable_prefix_caching: bool = True,
        keep_records: int = 1000,
        max_batch_s: float = 0.01,
        max_write_buffer: int = 64 * 1024 * 1024,
        session_header: str | None = SESSION_HEADER,
    ) -> None:
        self.engine = Engine(
            profile, seed=seed, textgen=textgen, enable_prefix_caching=enable_prefix_caching
        )
        self.driver = EngineDriver(
            self.engine,
            time_scale=time_scale,
            tokens_per_chunk=tokens_per_chunk,
            model=served_model_name,
            keep_records=keep_records,
            max_batch_s=max_batch_s,
        )
        self.faults = FaultInjector(faults)
        self.metrics = SimMetrics(self.driver.model)
        self.driver.add_finish_hook(self.metrics.observe)
        self._dirty: list[_SSEStream] = []
        self.driver.add_flush_hook(self._flush)
        self.host = host
        self._port = port
        self._max_write_buffer = max_write_buffer
        self.session_header = session_header
        self._scale_header = f"{time_scale:g}"
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._created = int(time.time())
        self.app = self._make_app()

    # --- Lifecycle ---------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=512 * 1024 * 1024, middlewares=[_json_errors])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/agentflow/requests/{id}", self._request_record)
        app.router.add_get("/agentflow/stats", self._stats)
        app.on_response_prepare.append(self._add_headers)
        return app

    async def start(self) -> None:
        """Bind and serve; :attr:`base_url` is valid afterwards."""
        if self._runner is not None:
            return
        runner = web.AppRunner(
            self.app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port, backlog=4096)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        server = site._server
        if server is not None:
            sockets = getattr(server, "sockets", None) or ()
            for s in sockets:
                self._port = int(s.getsockname()[1])
                break
        self.driver.start()

    async def stop(self) -> None:
        """Stop serving: running requests are aborted, connections closed."""
        runner, self._runner = self._runner, None
        self._closing.set()
        await self.driver.aclose()
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        """The bound port."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (no path)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``http://host:port/v1``."""
        return f"{self.url}/v1"

    @property
    def model(self) -> str:
        """The served model name."""
        return self.driver.model

    def _flush(self) -> None:
        dirty = self._dirty
        if dirty:
            for stream in dirty:
                stream.flush()
            dirty.clear()

    # --- Handlers ----------------------------------------------------------------------

    async def _add_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers[TIME_SCALE_HEADER] = self._scale_header

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        # Let every handler woken in this loop iteration stamp its arrival before any of
        # them parses and plans (which takes ~1 ms for a long answer): requests that came
        # in together then queue inside the server on the engine's clock, as in vLLM.
        await asyncio.sleep(0)
        raw = await request.read()
        try:
            body = _decode(raw)
        except msgspec.DecodeError as exc:
            return _error(400, f"Invalid JSON body: {exc}")
        try:
            params = parse_chat_body(body)
        except RequestRejected as exc:
            return _error(exc.status, exc.message, exc.param)
        try:
            fault = self.faults.decide(raw, request.headers.get(FAULT_HEADER))
        except ValueError as exc:
            return _error(400, str(exc), FAULT_HEADER)
        if fault is not None:
            self.metrics.faults[fault.kind] = self.metrics.faults.get(fault.kind, 0) + 1
            status = fault.status
            if status is not None:
                headers = {}
                if status in (429, 503):
                    headers["Retry-After"] = f"{fault.retry_after_s:g}"
                msg = {
                    429: "Rate limit exceeded; retry later (injected fault).",
                    500: "Internal server error (injected fault).",
                    503: "The server is overloaded; retry later (injected fault).",
                }[status]
                return _error(status, msg, headers=headers)
        session = request.headers.get(self.session_header) if self.session_header else None
        if params.stream:
            stream = _SSEStream(loop, fault, self._max_write_buffer, self._dirty)
            try:
                req = self.driver.submit(params, stream, arrival=arrival, session_id=session)
            except RequestRejected as exc:
                return _error(exc.status, exc.message, exc.param)
            return await self._stream(request, req, stream)
        collector = _BodyCollector(loop)
        try:
            req = self.driver.submit(params, collector, arrival=arrival, session_id=session)
        except RequestRejected as exc:
            return _error(exc.status, exc.message, exc.param)
        return await self._complete(request, req, collector, fault)

    async def _stream(
        self, request: web.Request, req: SimRequest, stream: _SSEStream
    ) -> web.StreamResponse:
        stream.set_request(req)
        try:
            resp = web.StreamResponse(headers={**_SSE_HEADERS, REQUEST_ID_HEADER: req.id})
            resp.enable_chunked_encoding()
            try:
                await resp.prepare(request)
            except ConnectionError:
                return resp  # the client left while the request was queued
            stream.attach(request.transport)
            how = await stream.ended
            if how in ("done", "cut"):
                with contextlib.suppress(ConnectionError):  # the client left meanwhile
                    await resp.write_eof()
            elif how == "reset":
                _reset(request.transport)
            return resp
        finally:
            stream.close()
            req.cancel()

    async def _complete(
        self,
        request: web.Request,
        req: SimRequest,
        collector: _BodyCollector,
        fault: Fault | None,
    ) -> web.StreamResponse:
        try:
            body = await collector.future
        except ConnectionAbortedError as exc:
            return _error(503, f"The simulator is shutting down: {exc}")
        finally:
            req.cancel()
        headers = {REQUEST_ID_HEADER: req.id}
        if fault is not None:
            if fault.kind in ("reset_mid_stream", "cut_stream"):
                _reset(request.transport)
                return web.Response(status=200, body=b"", headers=headers)
            if fault.kind == "stall_mid_stream":
                with contextlib.suppress(TimeoutError):  # the stall ends early on stop()
                    await asyncio.wait_for(self._closing.wait(), fault.stall_s)
            elif fault.kind == "malformed_chunk":
                body = body[: len(body) // 2]
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _models(self, request: web.Request) -> web.Response:
        body = models_document(self.model, self.engine.profile.max_model_len, self._created)
        return web.json_response(body, dumps=_dumps)

    async def _tokenize(self, request: web.Request) -> web.Response:
        try:
            body = _decode(await request.read())
        except msgspec.DecodeError as exc:
            return _error(400, f"Invalid JSON body: {exc}")
        if not isinstance(body, dict):
            return _error(400, "The request body must be a JSON object.")
        tok = self.engine.tokenizer
        if "messages" in body:
            messages = body["messages"]
            if not isinstance(messages, list) or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
            ):
                return _error(400, "messages must be a list of message objects.", "messages")
            tools = body.get("tools") or None
            add_gen = bool(body.get("add_generation_prompt", True))
            tokens = tok.render_chat(messages, tools, add_generation_prompt=add_gen)
        elif isinstance(body.get("prompt"), str):
            tokens = tok.encode(body["prompt"])
        else:
            return _error(400, "Either `prompt` (a string) or `messages` is required.", "prompt")
        token_strs = None
        if body.get("return_token_strs"):
            token_strs = tok.pieces(body["prompt"]) if "prompt" in body else None
        return web.json_response(
            {
                "count": len(tokens),
                "max_model_len": self.engine.profile.max_model_len,
                "tokens": tokens,
                "token_strs": token_strs,
            },
            dumps=_dumps,
        )

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _metrics(self, request: web.Request) -> web.Response:
        text = self.metrics.render(self.engine.stats(), self.driver.stats())
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def _request_record(self, request: web.Request) -> web.Response:
        rid = request.match_info["id"]
        record = self.driver.record(rid) if parse_request_id(rid) is not None else None
        if record is None:
            return _error(404, f"No such request: {rid!r} (unknown, or forgotten).", "id")
        return web.json_response(
            record_json(
                record,
                time_scale=self.driver.time_scale,
                loop_origin_s=self.driver.loop_time_of(0.0),
            ),
            dumps=_dumps,
        )

    async def _stats(self, request: web.Request) -> web.Response:
        s = self.engine.stats()
        d = self.driver.stats()
        return web.json_response(
            {
                "profile": self.engine.profile.name,
                "model": self.model,
                "engine": dataclasses.asdict(s),
                "driver": dataclasses.asdict(d),
                "faults": dict(self.faults.counts),
            },
            dumps=_dumps,
        )


def _dumps(obj: Any) -> str:
    return _encode(obj).decode()
