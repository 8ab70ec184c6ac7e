"""A run lock file that a store did not make is refused, never written.

The run lock (``<db>.af-run-<digest>.lock``) was opened following a symbolic link and
then truncated and given the pid: anyone who could write the store's directory could
plant a link there and have the next run of that run id overwrite a file of the user's
with a pid. A link, a file of several hard links, a FIFO, or another user's file there
is now a ``StoreError`` naming the path (another user's only where others can write the
directory), and what it names is left as it was. A real
fleet runs on a :class:`MockTransport` with a :class:`SQLiteStore`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agentflow import Agent, Fleet, StoreError
from agentflow.store import SQLiteStore, _journal
from agentflow.store._runlock import RunLocks
from agentflow.testing import MockTransport, Reply

from ..wait import GUARD_S

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no run lock here")

RUN_ID = "nightly-eval"
DATA = "IMPORTANT DATA\n"


async def run_once(db: Path) -> str:
    """One session of run ``RUN_ID`` in the store ``db``; its status."""
    agent = Agent(name="a", model="m", instructions="sys")
    async with SQLiteStore(db) as store:
        fleet = Fleet(MockTransport(lambda request: Reply.text("hi")), store=store)
        result = await asyncio.wait_for(fleet.run([agent.session("x")], run_id=RUN_ID), GUARD_S)
    return result.sessions[0].status


def lock_path(db: Path) -> Path:
    return RunLocks(db).path(RUN_ID)


async def test_a_symlink_planted_as_the_lock_is_refused_and_its_target_kept(
    tmp_path: Path,
) -> None:
    db, victim = tmp_path / "runs.db", tmp_path / "victim.txt"
    victim.write_text(DATA)
    lock_path(db).symlink_to(victim)
    with pytest.raises(StoreError, match="is a symbolic link") as caught:
        await run_once(db)
    assert str(lock_path(db)) in str(caught.value)
    assert victim.read_text() == DATA
    assert lock_path(db).is_symlink()


async def test_a_hard_link_planted_as_the_lock_is_refused_and_its_file_kept(
    tmp_path: Path,
) -> None:
    db, victim = tmp_path / "runs.db", tmp_path / "victim.txt"
    victim.write_text(DATA)
    os.link(victim, lock_path(db))
    with pytest.raises(StoreError, match="2 hard links"):
        await run_once(db)
    assert victim.read_text() == DATA


async def test_a_fifo_planted_as_the_lock_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    os.mkfifo(lock_path(db))
    with pytest.raises(StoreError, match="not a regular file"):
        await run_once(db)
    RunLocks(db).refuse_if_held(RUN_ID)  # a look only: no wait on the FIFO, no error


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
async def test_another_users_file_as_the_lock_in_a_shared_directory_is_refused_and_kept(
    tmp_path: Path,
) -> None:
    """Where others can make files (a sticky, world-writable directory, as /tmp), a lock
    file of another user's may be a plant: refused."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    db = shared / "runs.db"
    lock_path(db).write_text(DATA)
    os.chown(lock_path(db), 65534, 65534)
    with pytest.raises(StoreError, match="owned by another user"):
        await run_once(db)
    assert lock_path(db).read_text() == DATA


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
async def test_another_users_stale_lock_in_a_private_directory_is_taken(tmp_path: Path) -> None:
    """In a directory only its owner writes, a lock another user's killed run left is
    taken as before (root resuming a user's run; NFS squashing the owner): only the
    owner could have made it."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    db = private / "runs.db"
    lock_path(db).write_text("12345\n")
    os.chown(lock_path(db), 65534, 65534)
    assert await run_once(db) == "completed"


async def test_a_stale_lock_file_of_this_user_is_taken_as_before(tmp_path: Path) -> None:
    """A lock file a killed run left (its own, regular, one link) is no obstacle."""
    db = tmp_path / "runs.db"
    lock_path(db).write_text("12345\n")
    assert await run_once(db) == "completed"
    assert not lock_path(db).exists()  # removed as the run let go


def test_a_lock_let_go_between_finding_it_and_opening_it_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder lets go (removes the file) just after a second store found it there and
    before it opened it: the lock is free, and taken (it was a StoreError, "No such
    file", for a resume starting as the run before it ended)."""
    db = tmp_path / "runs.db"
    holder, second = RunLocks(db), RunLocks(db)
    holder.begin(RUN_ID)
    real_open = os.open

    def let_go_when_found(path: object, flags: int, *args: int) -> int:
        try:
            return real_open(path, flags, *args)  # type: ignore[arg-type]
        except FileExistsError:
            holder.release(RUN_ID)  # unlinks and closes, right then
            raise

    monkeypatch.setattr(os, "open", let_go_when_found)  # (the module reads os.open)
    second.begin(RUN_ID)
    monkeypatch.undo()
    assert lock_path(db).exists()
    second.release(RUN_ID)
