"""The virtual-time loop: timers fire in order at their virtual times, instantly in wall time."""

from __future__ import annotations

import asyncio

import pytest

from agentflow.embedded import VirtualTimeLoop, run_virtual


def test_sleeps_take_virtual_time_only() -> None:
    """An hour of sleeps in five tasks runs in well under a second and ends at t = 3600."""

    async def main() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()

        async def worker(i: int) -> float:
            await asyncio.sleep(900.0 * i)
            return loop.time()

        woke = await asyncio.gather(*(worker(i) for i in range(5)))
        return list(woke), loop.time()

    woke, end = run_virtual(main())  # an hour of sleeps, at once (a real loop would hang)
    assert woke == [0.0, 900.0, 1800.0, 2700.0, 3600.0]
    assert end == 3600.0


def test_timeouts_fire_at_their_virtual_deadline() -> None:
    """asyncio.timeout works unchanged: a 1000 s sleep under a 100 s timeout ends at t = 100."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(100):
                await asyncio.sleep(1000)
        return loop.time()

    assert run_virtual(main()) == 100.0


def test_threads_still_complete() -> None:
    """Work handed to a thread completes; with nothing else scheduled the loop waits for it."""

    async def main() -> int:
        return await asyncio.to_thread(lambda: 41 + 1)

    assert run_virtual(main()) == 42


def test_clock_ns_follows_the_loop() -> None:
    """`clock_ns` is the loop's virtual time in integer nanoseconds (agentflow's clock)."""
    loop = VirtualTimeLoop(start=2.5)
    try:
        assert loop.clock_ns() == 2_500_000_000
        loop.run_until_complete(asyncio.sleep(0.5))
        assert loop.clock_ns() == 3_000_000_000
    finally:
        loop.close()


def test_run_virtual_cleans_up_as_asyncio_run_does() -> None:
    """A task still pending when main returns is cancelled, its finally runs (no
    'Task was destroyed but it is pending!')."""
    import asyncio

    ran: list[str] = []

    async def background() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ran.append("finally")

    async def main() -> str:
        asyncio.get_running_loop().create_task(background())
        await asyncio.sleep(0)
        return "done"

    assert run_virtual(main()) == "done"
    assert ran == ["finally"]
    assert run_virtual(main) == "done"  # a coroutine function works too
