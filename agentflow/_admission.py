"""Admission: how many model requests may be in flight at once.

The seam later scheduling policies and rate limits plug into: a session asks for a
slot before each model turn and gives it back when the stream ends (tool calls run
outside the slot, so a slow tool never holds server capacity).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentflow._errors import ConfigError

__all__ = ["ConcurrencyGate"]


class ConcurrencyGate:
    """At most ``limit`` holders at once; waiters are admitted first come, first served.

    Args:
        limit: the most model requests in flight at once (≥ 1).
    """

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"max_concurrency must be an int ≥ 1, got {limit!r}")
        self.limit = limit
        self._sem = asyncio.Semaphore(limit)
        #: Requests holding a slot now.
        self.in_flight = 0
        #: The most that ever held a slot at once.
        self.peak_in_flight = 0
        #: Sessions waiting for a slot now.
        self.waiting = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the body; released on exit, error or cancellation."""
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1
            self._sem.release()

    def __repr__(self) -> str:
        return (
            f"ConcurrencyGate(limit={self.limit}, in_flight={self.in_flight}, "
            f"waiting={self.waiting})"
        )
