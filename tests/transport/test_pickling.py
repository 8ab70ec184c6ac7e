"""A transport pickles after it has run, as before (``Fleet(workers=N)`` sends each worker
a copy): the copy goes without the pool, sessions and event loop of the process that used
it, and makes its own where it runs.

Kept, they made every used transport unpicklable (``cannot pickle '_contextvars.Context'
object``): a fleet run in-process and then with workers was refused, naming the very
transport the refusal told the user to use.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import ssl

import pytest

from agentflow import ConnectError, HTTPTransport
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import AiohttpTransport

from ..wait import GUARD_S
from .rawserver import TINY_REQUEST


@pytest.mark.parametrize("cls", [HTTPTransport, AiohttpTransport])
def test_a_used_transport_pickles_and_its_copy_streams(cls: type) -> None:
    async def main() -> list[str]:
        async with ScriptedServer([Reply.text("ok")] * 4) as srv:
            t = cls(srv.base_url)
            got = [(await asyncio.wait_for(t.stream(TINY_REQUEST), GUARD_S)).content]
            copy = pickle.loads(pickle.dumps(t))  # holds a kept-alive connection now
            assert (copy.endpoint, copy.config) == (t.endpoint, t.config)
            got.append((await asyncio.wait_for(copy.stream(TINY_REQUEST), GUARD_S)).content)
            # The original keeps its own connection: not closed by the copy's.
            got.append((await asyncio.wait_for(t.stream(TINY_REQUEST), GUARD_S)).content)
            got.append(str(t.reconnects))
            await copy.aclose()
            await t.aclose()
            pickle.dumps(t)  # and after aclose
            return got

    assert asyncio.run(main()) == ["ok", "ok", "ok", "0"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_https_transport_pickles_after_making_its_default_context() -> None:
    """The system's default TLS context, made at the first request, does not pickle: a
    copy makes its own. A context of the user's is theirs to make picklable."""
    t = HTTPTransport(f"https://127.0.0.1:{_closed_port()}", connect_retries=0)

    async def main() -> None:
        with pytest.raises(ConnectError):  # the pool (and its default context) made first
            await asyncio.wait_for(t.stream(TINY_REQUEST), GUARD_S)
        await t.aclose()

    asyncio.run(main())
    assert pickle.loads(pickle.dumps(t)).endpoint == t.endpoint
    given = HTTPTransport("https://127.0.0.1:9", ssl=ssl.create_default_context())
    with pytest.raises(TypeError, match="SSLContext"):
        pickle.dumps(given)
