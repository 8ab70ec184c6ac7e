"""Closing a store through a cancellation: a command's main task is cancelled by a
SIGTERM, maybe while it awaits a store's close. Stopping to wait there would leave the
writer thread closing the database in the background, racing the process's exit (the
``-wal`` and ``-shm`` files, the journal's segments left behind, the run locks given up
while the thread still writes), so the close is waited for first — within a bound — and
the cancellation raised after it."""

from __future__ import annotations

import asyncio
from typing import TypeVar

__all__ = ["wait_through_cancel"]

T = TypeVar("T")


async def wait_through_cancel(fut: asyncio.Future[T], timeout_s: float) -> T:
    """``fut``'s result (a thread's answer: :func:`agentflow._threads.thread_result`),
    waited for at most ``timeout_s`` — on the loop's clock, which a
    :class:`~agentflow.embedded.VirtualTimeLoop` keeps on real time while a thread's
    answer is awaited. Should the caller be cancelled meanwhile (once or more), it goes
    on waiting (no longer than that), then raises the :class:`asyncio.CancelledError`.

    Raises:
        TimeoutError: ``fut`` was not done within ``timeout_s`` (and nothing cancelled
            the caller).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    cancelled: asyncio.CancelledError | None = None
    while not fut.done() and (left := deadline - loop.time()) > 0:
        try:
            await asyncio.wait({fut}, timeout=left)  # (which never cancels fut)
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if fut.done() and not fut.cancelled():
            fut.exception()  # (retrieved: the cancellation is what is raised)
        raise cancelled
    if not fut.done():
        raise TimeoutError(f"not done within {timeout_s} s")
    return fut.result()
