"""OpenAITransport's error-body hook notes only the requests of its own ``stream()``.

The hook found its :class:`ErrorHead` through a context variable, which a task started
during ``stream()`` (from a sink, say) inherits: that task's own later requests on the
same client had their error bodies bounded and cut (a 400 whose body pauses became an
``APITimeoutError``), and could set the status on the parent's head.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai

from agentflow.embedded import run_virtual

from .rawserver import SSE_OK, TINY_REQUEST, make_transport, raw_server

BODY = b'{"error":{"message":"a bad request, said slowly"}}'
HEAD_400 = b"HTTP/1.1 400 X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(
    BODY
)


def test_a_task_started_from_a_sink_does_not_inherit_the_error_head() -> None:
    n = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal n
        n += 1
        if n == 1:  # the transport's stream
            writer.write(SSE_OK)
            await writer.drain()
            writer.close()
            return
        # The child's own request: a whole 400, its body paused longer than ERROR_BODY_S.
        writer.write(HEAD_400 + BODY[:10])
        await writer.drain()
        await asyncio.sleep(12)
        writer.write(BODY[10:])
        await writer.drain()
        writer.close()

    async def main() -> BaseException | None:
        async with raw_server(answer) as srv:
            t = make_transport("openai", srv.base_url)
            go = asyncio.Event()
            tasks: list[asyncio.Task[BaseException | None]] = []

            async def child() -> BaseException | None:
                await go.wait()  # after the parent's stream() has returned
                try:
                    await t._client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "x"}]
                    )
                except Exception as exc:
                    return exc
                return None

            class Sink:
                def on_delta(self, kind: str, text: str, t_ns: int) -> None:
                    if not tasks:
                        tasks.append(asyncio.get_running_loop().create_task(child()))

            sink: Any = Sink()
            try:
                await t.stream(TINY_REQUEST, sink)
                go.set()
                return await asyncio.wait_for(tasks[0], 60)
            finally:
                await t.aclose()

    err = run_virtual(main())
    # The SDK's own reading: the whole body, its BadRequestError; not a body cut at 10 s.
    assert isinstance(err, openai.BadRequestError), repr(err)
    assert "said slowly" in str(err)
