"""A stopped simulator server does not start again, and a start that fails leaves no
listening socket behind."""

from __future__ import annotations

import asyncio
import socket

import pytest

from agentflow.sim.server import SimServer

from .simhttp import QUICK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def test_start_after_stop_is_refused_before_binding() -> None:
    sim = SimServer(QUICK, port=free_port())
    await sim.start()
    assert await listening(sim.port)
    await sim.stop()
    with pytest.raises(RuntimeError, match="SimServer was stopped"):
        await sim.start()
    assert not await listening(sim.port)
    await sim.stop()


async def test_a_driver_that_fails_to_start_leaves_nothing_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = SimServer(QUICK, port=free_port())

    def refuse() -> None:
        raise RuntimeError("driver refused")

    monkeypatch.setattr(sim.driver, "start", refuse)
    with pytest.raises(RuntimeError, match="driver refused"):
        await sim.start()
    assert not await listening(sim.port)
    monkeypatch.undo()
    await sim.start()  # and a later start binds
    assert await listening(sim.port)
    await sim.stop()
