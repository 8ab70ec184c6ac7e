"""The in-process transport: agentflow's client on the simulator, with no sockets.

:class:`SimTransport` implements :class:`agentflow.typing.Transport` over an
:class:`~agentflow.sim.driver.EngineDriver`. The driver hands each request the same
payload bytes the HTTP server would write after ``data:``, and they go through the same
read loop (:class:`~agentflow.transport._stream.StreamState`, past its SSE split) into the
same :class:`~agentflow.transport.TraceBuilder` — so a trace is what the HTTP path would
produce, minus the network. Under :class:`VirtualTimeLoop` a whole fleet run, with the
real scheduler code, runs faster than real time; the transport's default clock is the
event loop's, which the driver's ground truth also uses, so client and server times are
directly comparable.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentflow._errors import BadRequestError, ConnectError, StreamInterrupted
from agentflow._trace import TurnTrace
from agentflow.sim.api import models_document
from agentflow.sim.driver import EngineDriver, SimRequest
from agentflow.sim.errors import DriverFailed, RequestRejected
from agentflow.sim.sessions import SESSION_HEADER
from agentflow.transport._overflow import context_length_error
from agentflow.transport._request import ChatRequest
from agentflow.transport._stream import StreamState
from agentflow.typing import Clock, DeltaSink

__all__ = ["SimTransport", "loop_clock"]


def loop_clock() -> int:
    """The running event loop's time in integer nanoseconds (virtual under VirtualTimeLoop)."""
    return int(asyncio.get_running_loop().time() * 1e9)


class _Consumer:
    """Feeds a request's payloads into its stream state as the driver delivers them."""

    __slots__ = ("done", "request", "stream")

    def __init__(self, stream: StreamState, done: asyncio.Future[None]) -> None:
        self.stream = stream
        self.done = done
        self.request: SimRequest | None = None

    def on_payloads(self, payloads: list[bytes], last: bool) -> None:
        if self.done.done():
            return
        st = self.stream
        try:
            st.payloads(payloads, st.clock())
        except Exception as exc:  # malformed output, or the caller's sink raised
            # As the HTTP transports do: the stream ends with it, in stream()'s caller.
            self.done.set_exception(exc)
            if self.request is not None:
                self.request.cancel()
            return
        if last:
            self.done.set_result(None)

    def on_abort(self, reason: str) -> None:
        if not self.done.done():
            self.done.set_exception(
                StreamInterrupted(
                    f"the simulator ended the stream: {reason}",
                    endpoint=self.stream.endpoint,
                    trace=self.stream.partial(),
                )
            )


class SimTransport:
    """Streams chat completions from an in-process simulator.

    Like its driver, it serves one event loop at a time: used from a new loop after the
    old one ended (a second ``asyncio.run`` or ``run_virtual``), the driver starts again
    there; used from a second loop while the first still runs, :meth:`stream` raises
    :class:`~agentflow.ConfigError`.

    Args:
        driver: the simulator's engine driver (started on first use).
        clock: nanosecond clock for traces; the event loop's by default, which the
            driver's ground truth shares.
        session_header: the request header (as the router sends it, any case) whose
            value names the conversation, as the HTTP server reads it: the simulator
            then counts the session's tool rounds across its requests, so a compacted
            history does not reset them. ``None``: count the rounds a request shows.
    """

    def __init__(
        self,
        driver: EngineDriver,
        *,
        clock: Clock = loop_clock,
        session_header: str | None = SESSION_HEADER,
    ) -> None:
        self.driver = driver
        self._clock = clock
        self._session_header = session_header.lower() if session_header else None

    @property
    def endpoint(self) -> str:
        """``sim://PROFILE``."""
        return f"sim://{self.driver.engine.profile.name}"

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        """Stream one request to its end; see :class:`agentflow.typing.Transport`."""
        clock = self._clock
        loop = asyncio.get_running_loop()
        st = StreamState(self.endpoint, clock, sink)
        done: asyncio.Future[None] = loop.create_future()
        consumer = _Consumer(st, done)
        body: dict[str, Any] = request.body()
        session = self._session_of(request)
        if self.driver.closed:  # as a server that is gone: no response byte
            raise ConnectError(f"{self.endpoint}: the simulator was closed", endpoint=self.endpoint)
        try:
            consumer.request = handle = self.driver.submit(body, consumer, session_id=session)
        except DriverFailed as exc:  # as a server that crashed: no response byte
            raise ConnectError(f"{self.endpoint}: {exc}", endpoint=self.endpoint) from exc
        except RequestRejected as exc:
            too_long = context_length_error(exc.status, exc.body(), exc.message, self.endpoint)
            if too_long is not None:
                raise too_long from None
            raise BadRequestError(
                f"{self.endpoint} answered {exc.status}: {exc.message}",
                status=exc.status,
                body=exc.body(),
                endpoint=self.endpoint,
            ) from None
        st.headers_at(clock())
        try:
            await done
        except asyncio.CancelledError:
            handle.cancel()
            raise
        headers = {"x-agentflow-time-scale": f"{self.driver.time_scale:g}"}
        return st.finish(headers)

    async def models(self) -> dict[str, Any]:
        """The simulator's ``GET /v1/models`` answer: its model and ``max_model_len``
        (what :meth:`ContextBudget.from_server <agentflow.context.ContextBudget.from_server>`
        reads)."""
        driver = self.driver
        return models_document(driver.model, driver.engine.profile.max_model_len, 0)

    def _session_of(self, request: ChatRequest) -> str | None:
        name = self._session_header
        if name is None or not request.headers:
            return None
        return next((v for k, v in request.headers.items() if k.lower() == name), None)

    async def aclose(self) -> None:
        """Stop the driver."""
        await self.driver.aclose()

    def __repr__(self) -> str:
        return f"SimTransport({self.endpoint!r})"
