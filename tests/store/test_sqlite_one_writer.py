"""A SQLite store has one live writer per run: a second process resuming (or claiming)
a run that another live process writes gets a StoreError naming the run and the
holder's pid; once that process is gone (``kill -9`` included) the run is taken over at
once, and a clean end of an attempt lets the next one in."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentflow import Fleet, StoreError
from agentflow.embedded import SimTransport
from agentflow.store import LeaseOwner, RunStarted, SQLiteStore

from ..wait import GUARD_S
from .fleets import driver

#: The start of the children below: records run "r" (no sessions) in the store at
#: argv[1] and claims it as a fleet's first claim does, then runs ``then(store)``.
CLAIM = """
import asyncio, os, signal, sys, time
from agentflow.store import LeaseOwner, RunStarted, SQLiteStore

async def main():
    store = SQLiteStore(sys.argv[1])
    await store.open()
    store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
    await store.flush()
    await store.claim("r", [], LeaseOwner(), 60)
    await then(store)

"""

#: Claims run "r" (``CLAIM``), says "ready" and waits to be killed.
CHILD = CLAIM + textwrap.dedent(
    """
    async def then(store):
        print("ready", flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


async def _resume(db: Path) -> int:
    """``Fleet.resume`` of run "r" in this process; the attempt number it got."""
    store = SQLiteStore(db)
    transport = SimTransport(driver())
    try:
        result = await Fleet(transport, store=store).resume("r", agents=[])
        await store.flush()
        return len((await store.load("r")).attempts) - 1 if result.sessions == [] else -1
    finally:
        await store.aclose()
        await transport.aclose()


def test_a_second_live_writer_of_a_run_is_refused_until_the_first_is_gone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "one.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert line == "ready\n", proc.stderr.read()
        with pytest.raises(
            StoreError,
            match=rf"run 'r' is being written by another live process \(pid {proc.pid}\)",
        ):
            asyncio.run(asyncio.wait_for(_resume(db), GUARD_S))

        async def claim() -> list[str]:
            store = SQLiteStore(db)
            try:
                return await store.claim("r", [], LeaseOwner(), 60)
            finally:
                await store.aclose()

        with pytest.raises(StoreError, match="PostgresStore"):
            asyncio.run(claim())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=GUARD_S)
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    # The killed writer's lock went with it: the run resumes at once, and again after
    # that attempt ended cleanly.
    assert asyncio.run(asyncio.wait_for(_resume(db), GUARD_S)) == 1
    assert asyncio.run(asyncio.wait_for(_resume(db), GUARD_S)) == 2


def test_two_stores_in_one_process_are_two_writers_too(tmp_path: Path) -> None:
    db = tmp_path / "two.db"

    async def main() -> None:
        first, second = SQLiteStore(db), SQLiteStore(db)
        try:
            await first.open()
            first.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
            owner = LeaseOwner()
            await first.claim("r", [], owner, 60)
            with pytest.raises(StoreError, match=f"pid {os.getpid()}"):
                await second.start_attempt("r", 2, 0)
            await first.release("r", owner)  # the attempt ended: the run is free
            assert await second.start_attempt("r", 2, 0) == 1
        finally:
            await first.aclose()
            await second.aclose()

    asyncio.run(main())


def test_a_second_attempt_through_the_store_is_refused_and_the_first_keeps_the_lock(
    tmp_path: Path,
) -> None:
    """A second lease owner claiming a run that another attempt through the same store
    writes is refused (both would run every session: a lease of this process counted as
    free); the first's lock stays until it lets go, and then the run is free again."""
    db = tmp_path / "owners.db"

    async def main() -> None:
        first, second = SQLiteStore(db), SQLiteStore(db)
        try:
            await first.open()
            first.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
            a, b = LeaseOwner(), LeaseOwner()
            await first.claim("r", [], a, 60)
            with pytest.raises(StoreError, match="another attempt through this store"):
                await first.claim("r", [], b, 60)
            with pytest.raises(StoreError, match="another attempt through this store"):
                await first.start_attempt("r", 2, 0)
            await first.release("r", b)  # an owner that was refused: no effect
            with pytest.raises(StoreError, match=f"pid {os.getpid()}"):
                await second.start_attempt("r", 2, 0)
            await first.release("r", a)
            assert await second.start_attempt("r", 2, 0) == 1
        finally:
            await first.aclose()
            await second.aclose()

    asyncio.run(main())


def test_without_flock_the_store_imports_and_takes_no_run_lock(tmp_path: Path) -> None:
    """Where ``fcntl`` does not exist (Windows), ``agentflow.store`` still imports and a
    run is written without a run lock (checked in a fresh interpreter that hides it)."""
    code = f"""
import asyncio, sys
sys.modules["fcntl"] = None
from agentflow.store import SQLiteStore
from agentflow.store._protocol import LeaseOwner

async def main():
    first, second = SQLiteStore({str(tmp_path / "w.db")!r}), SQLiteStore({str(tmp_path / "w.db")!r})
    await first.open()
    await first.claim("r", [], LeaseOwner(), 60)
    await second.open()
    await second.claim("r", [], LeaseOwner(), 60)
    await first.aclose(); await second.aclose()
    print("ok")

asyncio.run(main())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert not list(tmp_path.glob("*.lock"))


def test_an_owner_that_was_refused_does_not_keep_the_lock_later(tmp_path: Path) -> None:
    """A claim refused (another store writes the run) leaves its owner holding nothing, so
    once that store has the run and its real owner lets go, the run is free again."""
    db = tmp_path / "refused.db"

    async def main() -> None:
        first, second, third = SQLiteStore(db), SQLiteStore(db), SQLiteStore(db)
        try:
            await first.open()
            first.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
            a, refused, b = LeaseOwner(), LeaseOwner(), LeaseOwner()
            await first.claim("r", [], a, 60)
            with pytest.raises(StoreError, match=f"pid {os.getpid()}"):
                await second.claim("r", [], refused, 60)
            await first.release("r", a)
            await second.claim("r", [], b, 60)
            await second.release("r", b)  # its only owner that holds anything let go
            assert await third.start_attempt("r", 2, 0) == 1
        finally:
            for store in (first, second, third):
                await store.aclose()

    asyncio.run(main())


#: Claims run "r" (``CLAIM``), forks a child that sleeps (as a ``multiprocessing`` fork
#: worker would live on), says "ready <child pid>" and kills itself.
FORKING_CHILD = CLAIM + textwrap.dedent(
    """
    async def then(store):
        pid = os.fork()
        if pid == 0:  # off the parent's pipes, which the test reads to their end
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            time.sleep(600)
            os._exit(0)
        print("ready", pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
    """
)


def test_a_forked_child_does_not_keep_its_parents_run_lock(tmp_path: Path) -> None:
    """The writer forks a child and is killed: the child, still alive, does not hold the
    run's lock, so the run resumes at once."""
    db = tmp_path / "fork.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", FORKING_CHILD, str(db)],
        capture_output=True, text=True, env=env, timeout=GUARD_S,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    word, pid = done.stdout.split()
    assert word == "ready"
    try:
        os.kill(int(pid), 0)  # the forked child lives on
        assert asyncio.run(asyncio.wait_for(_resume(db), GUARD_S)) == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
