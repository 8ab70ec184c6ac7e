"""Worker processes for ``Fleet(workers=N)``: started with ``spawn``, one duplex pipe each,
read by a thread per worker; the launcher :func:`~agentflow._workers._parent.run_sharded`
drives (``_ray.py`` is the same on Ray actors)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
from collections.abc import Callable
from typing import Any

from agentflow._logging import get_logger
from agentflow._workers._broker import WorkerHandle
from agentflow._workers._worker import worker_entry

__all__ = ["ProcessLauncher"]

_log = get_logger("agentflow.workers")

#: How long a worker's reader waits, once its pipe has ended, for the process's exit
#: code (it is exiting: its pipe closed as it did, or it was killed).
_EXIT_WAIT_S = 2.0


class ProcessLauncher:
    """Worker processes started with ``spawn``, one duplex pipe each."""

    #: A dead worker's sessions fail with a WorkerError — without a store; with one,
    #: they continue from their recorded turns on a new worker (see run_sharded).
    rerun_lost = False

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._pipes: dict[int, _Pipe] = {}  # per worker index

    def launch(self, index: int, sessions: list[int]) -> WorkerHandle:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=worker_entry,
            args=(child_conn, os.getpid()),
            name=f"agentflow-worker-{index}",
            daemon=True,
        )
        proc.start()
        child_conn.close()
        pipe = self._pipes[index] = _Pipe(parent_conn)
        return WorkerHandle(
            index,
            sessions,
            send=pipe.send,
            process=proc,
            conn=parent_conn,
        )

    async def start(self, w: WorkerHandle, config: dict[str, Any], blobs: list[bytes]) -> None:
        # Sent from a thread: a large start blocks until the worker has imported (for
        # good if it hangs first: then the watchdog's start-up bound kills it).
        loop = asyncio.get_running_loop()
        w.opened = loop.time()  # the start-up bound counts from before the send
        await loop.run_in_executor(None, self._pipes[w.index].open, ("start", config, blobs))

    def listen(
        self,
        w: WorkerHandle,
        on_message: Callable[[WorkerHandle, Any], None],
        on_exit: Callable[[WorkerHandle, bool], None],
    ) -> None:
        w.reader = threading.Thread(
            target=_read_parent_side,
            args=(w, asyncio.get_running_loop(), on_message, on_exit),
            name=f"agentflow-worker-{w.index}-reader",
            daemon=True,
        )
        w.reader.start()

    def ended(self, w: WorkerHandle, how: str = "ended") -> tuple[str, int | None]:
        code = w.process.exitcode
        return f"worker {w.index} (pid {w.process.pid}) {how} (exit code {code})", code

    async def reap(self, workers: list[WorkerHandle], timeout_s: float) -> None:
        await _reap(workers, timeout_s)

    def kill(self, w: WorkerHandle) -> None:
        with contextlib.suppress(OSError, ValueError):
            w.process.kill()  # SIGKILL; its reader then reads the pipe's end


class _Pipe:
    """The parent's end of a worker's pipe. Its start message goes first, from a thread
    (:meth:`open`): a large one blocks until the worker reads it — for good if the
    worker hangs before (its import of the main module, say). What the loop sends
    meanwhile (:meth:`send`: a reclaim, a cancel, the reap's exit) waits and follows
    it, so the loop never blocks behind it, nor interleaves with it."""

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()
        self._waiting: list[tuple[Any, ...]] | None = []  # None once the start is sent

    def send(self, msg: tuple[Any, ...]) -> None:
        with self._lock:
            if self._waiting is not None:
                self._waiting.append(msg)
                return
        self.conn.send(msg)

    def open(self, msg: tuple[Any, ...]) -> None:
        """Send the start message ``msg``, then what waited for it. A worker that is
        gone already (or killed meanwhile) is found by its reader (its sessions fail)."""
        try:
            self.conn.send(msg)
            sent = True
        except (OSError, ValueError, TypeError):  # TypeError: the reap closed this end
            sent = False
        with self._lock:
            waiting, self._waiting = self._waiting or [], None
            for m in waiting if sent else ():
                with contextlib.suppress(OSError, ValueError, TypeError):
                    self.conn.send(m)


async def _reap(workers: list[WorkerHandle], timeout_s: float) -> None:
    """Every worker process ends: joined, else terminated, else killed — all of them
    against one deadline each time (one by one, blocked workers took twice
    ``stop_timeout_s`` each); killed at once should the reap itself be cancelled."""
    loop = asyncio.get_running_loop()
    try:
        for w in workers:
            with contextlib.suppress(OSError, ValueError):
                w.send(("exit",))  # (after its start message, if that is still going)
        for stop, wait_s in (("", timeout_s), ("terminate", 2.0), ("kill", 2.0)):
            left = [w for w in workers if w.process.exitcode is None]
            if not left:
                break
            for w in left if stop else ():
                with contextlib.suppress(OSError, ValueError):
                    getattr(w.process, stop)()
            deadline = loop.time() + wait_s
            # exitcode polls waitpid(WNOHANG): no thread per worker blocks in a join
            while any(w.process.exitcode is None for w in left) and loop.time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    finally:
        # Cancelled (or failed) while it waited: none is left running (each one's reader
        # then finds its pipe's end and joins it).
        for w in workers:
            if w.process.exitcode is None:
                with contextlib.suppress(OSError, ValueError):
                    w.process.kill()
        for w in workers:
            w.conn.close()
    readers = [w.reader for w in workers if w.reader is not None]
    await asyncio.gather(*(loop.run_in_executor(None, r.join, 2.0) for r in readers))


def _read_parent_side(
    w: WorkerHandle,
    loop: asyncio.AbstractEventLoop,
    on_message: Callable[[WorkerHandle, Any], None],
    on_exit: Callable[[WorkerHandle, bool], None],
) -> None:
    """Hand each of ``w``'s messages to ``on_message`` on the run's loop, then
    ``on_exit``: lost when its pipe ended (it exited or was killed); not lost, with
    ``w.crash`` saying why, when a message did not load here."""
    try:
        bad = _read_messages(w, loop, on_message)
    except RuntimeError:  # the run's loop is closed: the run is over
        return
    if bad is not None:  # it runs on, sending requests past the slots given back for it
        _log.error("worker.bad_message", worker=w.index, error=bad)
        with contextlib.suppress(Exception):
            w.process.kill()
    # Its exit code, for its sessions' WorkerError: its pipe ends as it exits, a moment
    # before the kernel has its status (waited for here, not on the loop).
    with contextlib.suppress(Exception):
        w.process.join(_EXIT_WAIT_S)

    def ended() -> None:
        if bad is not None:
            w.crash = f"sent a message the parent could not read: {bad}"
        on_exit(w, bad is None)

    with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
        loop.call_soon_threadsafe(ended)


def _read_messages(
    w: WorkerHandle,
    loop: asyncio.AbstractEventLoop,
    on_message: Callable[[WorkerHandle, Any], None],
) -> str | None:
    """Read ``w``'s pipe until it ends (``None``) or a message does not load (the
    error's ``repr``); a ``RuntimeError`` once the run's loop is closed. Reading and
    loading are apart: an error from the pipe is its end, but one from a message's
    pickle — a ``ValueError`` as well as any other — is that message's, and the worker
    still runs."""
    conn = w.conn
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):  # it exited, or the reap closed this end
            return None
        except Exception as exc:  # closed by the reap in the middle of a read
            return None if conn.closed else repr(exc)
        try:
            msg = pickle.loads(data)
        except Exception as exc:
            return repr(exc)
        loop.call_soon_threadsafe(on_message, w, msg)
