"""A transport inherited by a process forked from inside a running event loop
(``multiprocessing``'s default start method on Linux) works in the child, and leaves
the parent's connections alone.

The child inherits the parent's loop still reporting itself running: it was taken for
another thread's loop in use, and the child's own ``asyncio.run`` got a ``ConfigError``.
Dropping the parent's aiohttp connections by closing them unregistered their sockets
from the parent's epoll set too (shared across fork): the parent's next request on its
kept-alive connection stalled.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentflow import HTTPTransport
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import AiohttpTransport

from ..wait import GUARD_S
from .rawserver import TINY_REQUEST

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork: Linux")


@pytest.fixture
def server_url() -> Iterator[str]:
    """A keep-alive server on a loop of its own thread (it outlives the tests' loops)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = ScriptedServer([Reply.text("ok")] * 10)
    asyncio.run_coroutine_threadsafe(srv.__aenter__(), loop).result(GUARD_S)
    try:
        yield srv.base_url
    finally:
        asyncio.run_coroutine_threadsafe(srv.__aexit__(None, None, None), loop).result(GUARD_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(GUARD_S)
        loop.close()


def _child(t: Any, answers: Any) -> None:
    try:
        answers.put(asyncio.run(t.stream(TINY_REQUEST)).content)
    except BaseException as exc:  # reported to the parent, which asserts on it
        answers.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("cls", [HTTPTransport, AiohttpTransport])
def test_a_forked_child_uses_an_inherited_transport(cls: type, server_url: str) -> None:
    async def main() -> list[str]:
        t = cls(server_url)
        got = [(await t.stream(TINY_REQUEST)).content]  # a kept-alive connection now
        ctx = multiprocessing.get_context("fork")
        answers = ctx.Queue()
        child = ctx.Process(target=_child, args=(t, answers))
        child.start()  # forked inside this running loop
        loop = asyncio.get_running_loop()
        got.append(await loop.run_in_executor(None, answers.get, True, GUARD_S))
        await loop.run_in_executor(None, child.join, GUARD_S)
        # The parent's kept-alive connection still works (the child left it alone).
        again = await asyncio.wait_for(t.stream(TINY_REQUEST), GUARD_S)
        got.append(again.content)
        got.append(str(t.reconnects))
        await t.aclose()
        return got

    assert asyncio.run(main()) == ["ok", "ok", "ok", "0"]


def _child_without_books(t: Any, answers: Any) -> None:
    """As :func:`_child`, on an aiohttp whose connector keeps none of the books the
    transport clears (another version's)."""
    connector = t._session.connector
    for name in ("_conns", "_acquired", "_cleanup_closed_transports"):
        if hasattr(connector, name):
            object.__setattr__(connector, name, None)
    _child(t, answers)


def test_a_forked_child_on_another_aiohttp_degrades(server_url: str) -> None:
    """The child forgets the parent's connections through aiohttp's private books; where
    they are not (another aiohttp), it used to raise ``AttributeError``: now it leaves
    them, and still answers."""

    async def main() -> str:
        t = AiohttpTransport(server_url)
        await t.stream(TINY_REQUEST)
        ctx = multiprocessing.get_context("fork")
        answers = ctx.Queue()
        child = ctx.Process(target=_child_without_books, args=(t, answers))
        child.start()
        loop = asyncio.get_running_loop()
        got = await loop.run_in_executor(None, answers.get, True, GUARD_S)
        await loop.run_in_executor(None, child.join, GUARD_S)
        await t.aclose()
        return str(got)

    assert asyncio.run(main()) == "ok"
