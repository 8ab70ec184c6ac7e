"""The parent's heartbeat watchdog (``Fleet(heartbeat_timeout_s=...)``): a worker whose
event loop is blocked sends nothing, and is killed, so that it is handled as one that
died."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agentflow._logging import get_logger
from agentflow._workers._broker import WorkerHandle

if TYPE_CHECKING:
    from agentflow._workers._parent import Launcher

__all__ = ["START_TIMEOUT_S", "watchdog"]

_log = get_logger("agentflow.workers")

#: With the heartbeat on: how long a started worker may take to send its first message
#: (it imports its sessions' tools meanwhile) before it is declared hung.
START_TIMEOUT_S = 300.0


async def watchdog(workers: list[WorkerHandle], launcher: Launcher, timeout_s: float) -> None:
    """Kill a worker that has sent nothing for ``timeout_s`` (its loop is blocked:
    a running worker reports every 0.25 s); its listener then finds it gone, and
    it is handled as a worker that died. While it starts (nothing heard yet) the
    bound is :data:`START_TIMEOUT_S` from when it was sent its sessions instead
    (a worker process's: from when the send began — one stuck before it reads them,
    whose start send never ends, is killed too);
    none once it ended (``done``). ``workers`` is the run's list: the workers started
    later (replacements) are watched too."""
    loop = asyncio.get_running_loop()
    every = min(1.0, timeout_s / 4)
    last = loop.time()
    while True:
        await asyncio.sleep(every)
        await asyncio.sleep(0)  # messages already handed to the loop count first
        now = loop.time()
        if now - last > every + timeout_s / 2:
            # This loop itself was held up (a slow callback here): what the workers
            # sent meanwhile may not be read yet, so none is judged on it.
            for w in workers:
                if w.heard is not None:
                    w.heard = now
                elif w.opened is not None:
                    w.opened = now
        last = now
        for w in list(workers):
            if w.hung or not w.alive or w.done is None or w.done.done():
                continue
            if w.heard is not None:
                if now - w.heard <= timeout_s:
                    continue
                w.hung = f"sent no heartbeat for {timeout_s:g} s and was killed"
                w.hung_why = (
                    "its event loop was blocked (a call that does not return, or a deadlock)"
                )
            else:  # starting: bounded by the start-up's own, longer, timeout
                bound = max(START_TIMEOUT_S, timeout_s)
                if w.opened is None or now - w.opened <= bound:
                    continue
                w.hung = f"sent nothing within {bound:g} s of its start and was killed"
                w.hung_why = "it hung while it loaded its sessions or tools"
            _log.error("workers.hung", worker=w.index, why=f"{w.hung}: {w.hung_why}")
            launcher.kill(w)
