"""Await several coroutines together, all or none: :func:`gather_or_cancel`.

``asyncio.gather`` raises the first failure and leaves the others running — a sibling
tool call would go on after its session ended, an admission would go on claiming a
lease after its attempt gave up. ``asyncio.TaskGroup`` cancels them but wraps the
failure in an ``ExceptionGroup``; here the caller gets the failure itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["gather_or_cancel"]

T = TypeVar("T")


async def gather_or_cancel(*aws: Awaitable[T]) -> list[T]:
    """Every result of ``aws``, in order. Should one fail, or the caller be cancelled,
    the others are cancelled and waited for before that exception is raised."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
