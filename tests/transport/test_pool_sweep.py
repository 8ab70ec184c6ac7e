"""The idle-connection sweep on a virtual-time loop: a connection idle since 0.001 s (or
0.1 s) was never expired — ``since > (since + 15) - 15`` in floating point — and the sweep
came back at the same instant for ever, the loop at 100% CPU and the run never ending
(real HTTP on virtual time, a tool sleeping 20 virtual seconds, hung)."""

from __future__ import annotations

import asyncio

import pytest

from agentflow.embedded import run_virtual
from agentflow.transport._pool import ConnectionPool, PooledConnection

#: More sweeps than one idle connection can need: past it, the sweep is spinning.
SPINNING = 1_000


class IdleConn(PooledConnection):
    """A connection with no socket: open until the pool closes it."""

    __slots__ = ("closed",)

    def __init__(self, pool: ConnectionPool[IdleConn]) -> None:
        super().__init__(pool)
        self.closed = False

    @property
    def is_open(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("idle_at", [0.0, 0.001, 0.1, 0.3, 1e6 + 0.1])
def test_an_idle_connection_expires_once_its_keepalive_has_passed(idle_at: float) -> None:
    async def main() -> tuple[int, bool, bool]:
        await asyncio.sleep(idle_at)
        pool = ConnectionPool(IdleConn, "127.0.0.1", 1, endpoint="x", keepalive_s=15.0)
        sweeps = 0
        sweep = pool._sweep

        def counted() -> None:
            nonlocal sweeps
            sweeps += 1
            if sweeps > SPINNING:  # (an Exception in a callback is only logged)
                raise SystemExit("the sweep is spinning at one instant")
            sweep()

        pool._sweep = counted  # type: ignore[method-assign]
        conn = IdleConn(pool)
        pool.release(conn)
        await asyncio.sleep(14.9)
        kept = not conn.closed
        await asyncio.sleep(0.2)
        return sweeps, kept, conn.closed

    sweeps, kept, closed = run_virtual(main())
    assert kept and closed and sweeps == 1
