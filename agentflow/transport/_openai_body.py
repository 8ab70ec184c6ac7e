"""The body of an error answer on :class:`OpenAITransport`, read by the SDK itself.

The SDK reads a non-2xx body whole before it raises its ``APIStatusError``. A body cut
short (a reset, fewer bytes than its ``Content-Length``) then escaped as a bare httpx
error — a ``StreamInterrupted`` here — and one that stalled held the attempt until the
idle limit: either way the 429's or 503's status and ``Retry-After`` were lost, and the
failure charged to the replica. A response hook on the client's ``httpx2.AsyncClient``
(added once, and a no-op for requests not streamed by an ``OpenAITransport``) notes the
status and headers of an error answer and bounds each wait for its body's next piece to
:func:`error_body_s` (the stream's ``total`` limit bounds the whole); when
the body fails, the transport raises the status error with what arrived of it, as
``HTTPTransport`` and ``AiohttpTransport`` do.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from agentflow.transport._shared import MAX_ERROR_BODY

if TYPE_CHECKING:
    import httpx2

__all__ = ["ErrorHead", "hook_error_bodies", "unwatch", "watch"]


class ErrorHead:
    """What arrived of the last error answer to one request: its status and headers,
    and the first bytes of its body (``cut``: reading the body failed or ran out).

    It is the head of one ``stream()`` call: only requests sent by the task that called
    :func:`watch`, before :func:`unwatch`, are noted on it. A task started meanwhile (from
    a sink, say) inherits the context variable that holds it, but not the head: its own
    requests are the SDK's, as outside a transport."""

    __slots__ = ("active", "cut", "headers", "limit_s", "parts", "size", "status", "task")

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        #: The task whose requests are noted here, until :func:`unwatch`.
        self.task = _current_task()
        self.active = True
        self.status = 0
        self.headers: Any = None
        self.parts: list[bytes] = []
        self.size = 0
        self.cut = False

    def body(self) -> bytes:
        """The body as far as it came, at most 64 KiB."""
        return b"".join(self.parts)[:MAX_ERROR_BODY]


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


_HEAD: ContextVar[ErrorHead | None] = ContextVar("agentflow_openai_error_head", default=None)


def watch(limit_s: float) -> tuple[ErrorHead, Token[ErrorHead | None]]:
    """From now on, until :func:`unwatch` with the token: the error answers of the
    requests this task sends are noted on the :class:`ErrorHead` returned, their bodies
    bounded to ``limit_s`` seconds."""
    head = ErrorHead(limit_s)
    return head, _HEAD.set(head)


def unwatch(head: ErrorHead, token: Token[ErrorHead | None]) -> None:
    """Stop what :func:`watch` started (in every context that copied it, too)."""
    head.active = False
    _HEAD.reset(token)


def hook_error_bodies(client: object) -> None:
    """Add the response hook to the SDK client's ``httpx2.AsyncClient``, once. A client
    on the legacy ``httpx`` (or without one) is left alone: its error bodies are read as
    before."""
    import httpx2

    http = getattr(client, "_client", None)
    if isinstance(http, httpx2.AsyncClient):
        hooks = http.event_hooks["response"]
        if _on_response not in hooks:
            hooks.append(_on_response)


async def _on_response(response: httpx2.Response) -> None:
    head = _HEAD.get()
    if head is None or not head.active or head.task is not _current_task():
        return  # not a request of an OpenAITransport's stream()
    if response.status_code < 400:  # (an SDK retry that was answered)
        head.status = 0
        return
    head.status = response.status_code
    head.headers = response.headers
    head.parts = []
    head.size = 0
    head.cut = False
    response.stream = _bounded()(response.stream, head)


@functools.cache
def _bounded() -> Any:
    """The byte stream that bounds an error body (made once httpx2 is loaded)."""
    import httpx2

    class _Bounded(httpx2.AsyncByteStream):
        def __init__(self, inner: httpx2.AsyncByteStream, head: ErrorHead) -> None:
            self._inner = inner
            self._head = head

        async def __aiter__(self) -> AsyncIterator[bytes]:
            head = self._head
            parts = self._inner.__aiter__()
            try:
                while True:
                    try:
                        # The wait for each piece (the stream's own total limit bounds
                        # the whole): a body that keeps coming is read, a stalled one cut.
                        async with asyncio.timeout(head.limit_s):
                            part = await parts.__anext__()
                    except StopAsyncIteration:
                        return
                    except TimeoutError:
                        raise httpx2.ReadTimeout(
                            f"the error body stalled for {head.limit_s:g} s"
                        ) from None
                    head.parts.append(part)
                    head.size += len(part)
                    if head.size >= MAX_ERROR_BODY:  # the most kept: the rest is not read
                        raise httpx2.ReadError("the error body is over 64 KiB")
                    yield part
            except BaseException:
                head.cut = True  # (a reset, a stall, or a limit of the stream's)
                raise

        async def aclose(self) -> None:
            await self._inner.aclose()

    return _Bounded
