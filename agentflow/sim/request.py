"""One request in the simulator's driver: :class:`SimRequest`, its handle, and the
:class:`StreamConsumer` its payloads go to.

The consumer contract (what an in-process transport implements)::

    class Sink:                                    # a StreamConsumer
        def on_payloads(self, payloads: list[bytes], last: bool) -> None:
            t_ns = clock_ns()                      # loop time = end of the step
            for p in payloads:
                builder.feed(p, t_ns)              # TraceBuilder.feed(payload, t_ns)
            if last: done.set_result(None)         # [DONE] was the last payload
        def on_abort(self, reason: str) -> None:
            done.set_exception(...)                # the driver ended the request itself

    request = driver.submit(body, Sink())          # raises RequestRejected (400)
    ...
    request.cancel()                               # client gone: aborts it in the engine
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from agentflow.sim.frames import ChunkEncoder
from agentflow.sim.records import RequestRecord

if TYPE_CHECKING:
    from agentflow.sim.api import ChatParams
    from agentflow.sim.driver import EngineDriver

__all__ = ["SimRequest", "StreamConsumer"]


class StreamConsumer(Protocol):
    """Receives one request's payloads from :class:`EngineDriver`.

    Both methods are called from the driver's task, at the loop time the payloads
    become visible (the end of the engine step that produced them), and must not block.
    """

    def on_payloads(self, payloads: list[bytes], last: bool) -> None:
        """New payloads, in order; ``last`` is true on the call that ends the stream.

        A streaming request's payloads are chat-completion chunks (the bytes after
        ``data: ``), the last one ``[DONE]``; a non-streaming request gets one call with
        ``last=True`` and the whole ``chat.completion`` body. No call follows the last.
        """

    def on_abort(self, reason: str) -> None:
        """The driver ended the request without finishing it (it was stopped).

        Not called after :meth:`SimRequest.cancel`; no call follows this one.
        """


class SimRequest:
    """One request submitted to an :class:`EngineDriver`; :meth:`cancel` when the client goes.

    Attributes:
        rid: the engine's request id.
        id: the response id, ``chatcmpl-<rid>``.
        model: the model name the response reports.
        created: the response's ``created`` Unix time.
        stream: whether it streams.
        record: the live ground-truth record (updated in place as the request runs).
    """

    __slots__ = (
        "_advance",
        "_driver",
        "_emit",
        "consumer",
        "created",
        "encoder",
        "id",
        "model",
        "record",
        "rid",
        "stream",
    )

    def __init__(
        self,
        driver: EngineDriver,
        rid: int,
        record: RequestRecord,
        encoder: ChunkEncoder,
        consumer: StreamConsumer,
        *,
        model: str,
        created: int,
        stream: bool,
    ) -> None:
        self._driver = driver
        self.rid = rid
        self.id = encoder.request_id
        self.record = record
        self.encoder = encoder
        self.consumer = consumer
        # Bound once: the step loop calls these for every request in every step.
        self._advance = encoder.advance
        self._emit = consumer.on_payloads
        self.model = model
        self.created = created
        self.stream = stream

    @classmethod
    def open(
        cls,
        driver: EngineDriver,
        rid: int,
        record: RequestRecord,
        params: ChatParams,
        consumer: StreamConsumer,
    ) -> SimRequest:
        """The handle of a request the engine has just accepted: its chunk encoder set up
        from the checked body and the driver's ``model`` and ``tokens_per_chunk``."""
        assert record.plan is not None
        model = params.model or driver.model
        created = int(time.time())
        encoder = ChunkEncoder(
            request_id=f"chatcmpl-{rid}",
            model=model,
            created=created,
            plan=record.plan,
            stream=params.stream,
            include_usage=params.include_usage,
            tokens_per_chunk=driver.tokens_per_chunk,
        )
        return cls(
            driver,
            rid,
            record,
            encoder,
            consumer,
            model=model,
            created=created,
            stream=params.stream,
        )

    @property
    def done(self) -> bool:
        """Whether it finished or was cancelled or aborted."""
        return self.record.finish_reason is not None

    def cancel(self) -> bool:
        """Abort it in the engine and stop its deliveries; ``False`` if it had already ended."""
        return self._driver.cancel(self.rid)

    @property
    def expected_tokens(self) -> int:
        """Output tokens it will produce if not cancelled (its plan, cut at ``max_tokens``)."""
        plan = self.record.plan
        n = len(plan) if plan is not None else self.record.max_tokens
        return min(n, self.record.max_tokens)

    def __repr__(self) -> str:
        return f"SimRequest({self.id!r}, tokens={self.record.completion_tokens})"
