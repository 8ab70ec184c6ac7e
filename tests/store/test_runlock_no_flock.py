"""A filesystem that refuses ``flock`` (``ENOLCK``) is a StoreError naming the lock file.

Only ``BlockingIOError`` (another holder) was turned into a ``StoreError``: on NFS without
lockd (some FUSE or SMB mounts too) ``flock`` fails with ``ENOLCK``, and the run failed
with a bare ``OSError: [Errno 37] No locks available`` that named no file — with
``journal=False`` as well. The run lock's
``flock`` is made to fail so; a real fleet runs on a :class:`MockTransport`.
"""

from __future__ import annotations

import asyncio
import errno
import types
from pathlib import Path

import pytest

from agentflow import Agent, Fleet, StoreError
from agentflow.store import SQLiteStore, _journal, _runlock
from agentflow.store._runlock import RunLocks
from agentflow.testing import MockTransport, Reply

from ..wait import GUARD_S

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no run lock here")

RUN_ID = "nightly-eval"


@pytest.fixture
def no_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run lock's ``flock`` fails as on NFS without lockd (the journal's is real)."""
    import fcntl

    def flock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    fake = types.SimpleNamespace(flock=flock, LOCK_EX=fcntl.LOCK_EX, LOCK_SH=fcntl.LOCK_SH,
                                 LOCK_NB=fcntl.LOCK_NB)  # fmt: skip
    monkeypatch.setattr(_runlock, "fcntl", fake)


@pytest.mark.usefixtures("no_locks")
@pytest.mark.parametrize("journal", [True, False])
async def test_the_run_is_refused_naming_the_lock_file(tmp_path: Path, journal: bool) -> None:
    db = tmp_path / "runs.db"
    agent = Agent(name="a", model="m")
    async with SQLiteStore(db, journal=journal) as store:
        fleet = Fleet(MockTransport(lambda request: Reply.text("hi")), store=store)
        with pytest.raises(StoreError) as info:
            await asyncio.wait_for(fleet.run([agent.session("x")], run_id=RUN_ID), GUARD_S)
    lock = RunLocks(db).path(RUN_ID)
    assert str(info.value) == (
        f"{db}: cannot lock the run lock {lock}: No locks available — a filesystem without "
        "flock (NFS without lockd, some FUSE or SMB mounts)? A SQLite store needs one that "
        "locks: put it on a local disk, or use PostgresStore"
    )


@pytest.mark.usefixtures("no_locks")
def test_the_look_before_a_resume_says_the_same(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    locks = RunLocks(db)
    locks.path(RUN_ID).write_text("123\n")  # a lock file a run left
    with pytest.raises(StoreError, match=r"cannot lock the run lock .*: No locks available"):
        locks.refuse_if_held(RUN_ID)


def test_a_refused_flock_leaves_the_file_another_store_locked_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between this store making the lock file and its ``flock``, another opened and
    locked it; this one's ``flock`` is then refused (a transient ``ENOLCK``). Removing
    the file it made let a third store make a new one and lock the run beside the
    holder: two writers of one run."""
    import fcntl

    db = tmp_path / "runs.db"
    first, holder, third = RunLocks(db), RunLocks(db), RunLocks(db)
    armed = [True]

    def flock(fd: int, operation: int) -> None:
        if armed[0] and operation & fcntl.LOCK_EX:
            armed[0] = False
            holder.begin(RUN_ID)  # opens the file the first made, and locks it
            raise OSError(errno.ENOLCK, "No locks available")
        fcntl.flock(fd, operation)

    fake = types.SimpleNamespace(flock=flock, LOCK_EX=fcntl.LOCK_EX, LOCK_SH=fcntl.LOCK_SH,
                                 LOCK_NB=fcntl.LOCK_NB)  # fmt: skip
    monkeypatch.setattr(_runlock, "fcntl", fake)
    with pytest.raises(StoreError, match="cannot lock the run lock"):
        first.begin(RUN_ID)
    assert first.path(RUN_ID).exists()
    with pytest.raises(StoreError):  # held by ``holder``: not a second writer
        third.begin(RUN_ID)
    holder.release_all()
