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
chat responses carry ``x-agentflow-request-id``. Faults are decided and applied by
:mod:`agentflow.sim.faults`; request bodies are decoded and checked, and the JSON
answers shaped, by :mod:`agentflow.sim.api`; error answers (any exception a handler lets
escape included) are JSON, by :mod:`agentflow.sim.httperrors`.

The streaming path writes HTTP/1.1 chunked-encoding frames straight onto the transport
once the headers are out (:mod:`agentflow.sim.stream`: one chunk, one
``transport.write`` per engine step). A client that goes away cancels its handler
(aiohttp's ``handler_cancellation``), which aborts the request in the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any

import msgspec
from aiohttp import web

from agentflow.sim.api import (
    decode_chat_body,
    decode_tokenize_body,
    error_body,
    models_document,
    parse_request_id,
    record_json,
)
from agentflow.sim.driver import EngineDriver
from agentflow.sim.engine import Engine
from agentflow.sim.errors import RequestRejected
from agentflow.sim.faults import (
    FAULT_HEADER,
    Fault,
    FaultConfig,
    FaultInjector,
    complete_with_fault,
    fault_answer,
    reset_connection,
)
from agentflow.sim.httperrors import error_response as _error
from agentflow.sim.httperrors import json_errors as _json_errors
from agentflow.sim.metrics import CONTENT_TYPE, SimMetrics
from agentflow.sim.profiles import Profile
from agentflow.sim.request import SimRequest
from agentflow.sim.sessions import SESSION_HEADER
from agentflow.sim.stream import SSE_HEADERS, BodyCollector, SSEStream
from agentflow.sim.textgen import TextGenConfig

# error_body, models_document and record_json are api's; they stay importable from here.
__all__ = ["TIME_SCALE_HEADER", "SimServer", "error_body", "models_document", "record_json"]

#: The response header that carries the time scale.
TIME_SCALE_HEADER = "x-agentflow-time-scale"
#: The response header that carries the response id of a chat request.
REQUEST_ID_HEADER = "x-agentflow-request-id"

_encode = msgspec.json.encode


class SimServer:
    """The simulator behind an OpenAI-compatible HTTP server.

    Args:
        profile: a :class:`Profile` or a registry name.
        host: the address to bind (loopback by default).
        port: the port; 0 picks a free one (see :attr:`port` after :meth:`start`).
        seed: fixes every output.
        time_scale: wall seconds per engine second (10 = a rack at a tenth of its speed).
        tokens_per_chunk: output tokens per SSE content chunk after the first token,
            which is sent alone.
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
        self._dirty: list[SSEStream] = []
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
        """Bind and serve; :attr:`base_url` is valid afterwards.

        Raises:
            RuntimeError: the server was stopped (a stopped server does not start again:
                its driver aborted its requests and took no more; make a new one).
        """
        if self._runner is not None:
            return
        if self.driver.closed:
            raise RuntimeError("this SimServer was stopped; make a new SimServer to serve again")
        runner = web.AppRunner(
            self.app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port, backlog=4096)
        try:
            await site.start()
            self.driver.start()
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
            params = decode_chat_body(raw)
        except RequestRejected as exc:
            return _error(exc.status, exc.message, exc.param)
        try:
            fault = self.faults.decide(raw, request.headers.get(FAULT_HEADER))
        except ValueError as exc:
            return _error(400, str(exc), FAULT_HEADER)
        if fault is not None and (answer := fault_answer(fault)) is not None:
            self._injected(fault)
            status, msg, headers = answer
            return _error(status, msg, headers=headers)
        session = request.headers.get(self.session_header) if self.session_header else None
        consumer: SSEStream | BodyCollector = (
            SSEStream(loop, fault, self._max_write_buffer, self._dirty)
            if params.stream
            else BodyCollector(loop)
        )
        try:
            req = self.driver.submit(params, consumer, arrival=arrival, session_id=session)
        except RequestRejected as exc:
            return _error(exc.status, exc.message, exc.param)
        if fault is not None:  # counted once the request runs: a 400 injects nothing
            self._injected(fault)
        if isinstance(consumer, SSEStream):
            return await self._stream(request, req, consumer)
        return await self._complete(request, req, consumer, fault)

    def _injected(self, fault: Fault) -> None:
        self.faults.count(fault)
        self.metrics.faults[fault.kind] = self.metrics.faults.get(fault.kind, 0) + 1

    async def _stream(
        self, request: web.Request, req: SimRequest, stream: SSEStream
    ) -> web.StreamResponse:
        stream.set_request(req)
        try:
            resp = web.StreamResponse(headers={**SSE_HEADERS, REQUEST_ID_HEADER: req.id})
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
                reset_connection(request.transport)
            return resp
        finally:
            stream.close()
            req.cancel()

    async def _complete(
        self,
        request: web.Request,
        req: SimRequest,
        collector: BodyCollector,
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
            faulty = await complete_with_fault(fault, body, request.transport, self._closing)
            if faulty is None:  # the connection was reset
                return web.Response(status=200, body=b"", headers=headers)
            body = faulty
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _models(self, request: web.Request) -> web.Response:
        body = models_document(self.model, self.engine.profile.max_model_len, self._created)
        return web.json_response(body, dumps=_dumps)

    async def _tokenize(self, request: web.Request) -> web.Response:
        try:
            body = decode_tokenize_body(await request.read())
        except RequestRejected as exc:
            return _error(exc.status, exc.message, exc.param)
        tok = self.engine.tokenizer
        if body.messages is not None:
            tokens = tok.render_chat(
                body.messages, body.tools or None, add_generation_prompt=body.add_generation_prompt
            )
        else:
            assert body.prompt is not None
            tokens = tok.encode(body.prompt)
        token_strs = None
        if body.return_token_strs and body.prompt is not None:
            token_strs = tok.pieces(body.prompt)
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
