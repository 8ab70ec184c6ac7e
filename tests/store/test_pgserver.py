"""`PostgresServer` (agentflow/_pgserver.py) and the `postgres_*` fixtures: a real
PostgreSQL server that the store's PostgreSQL tests stand on.

It serves concurrent connections and ``FOR UPDATE SKIP LOCKED`` (the workers' session
leases), runs unprivileged, and leaves nothing behind: not when stopped, not when it fails
to start, and not when the process that started it is SIGKILLed.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from agentflow import ConfigError
from agentflow._pgserver import find_postgres, remove_stale
from agentflow.testing import PostgresServer
from tests.procutil import GUARD_S, alive, children, listening, wait_for

from .conftest import postgres_missing

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
needs_postgres = pytest.mark.skipif(bool(postgres_missing()), reason=postgres_missing())


def segments() -> set[tuple[int, int]]:
    """The System V shared memory segments: (key, shmid)."""
    rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {(int(r.split()[0]), int(r.split()[1])) for r in rows}


@pytest.fixture
def base() -> Iterator[Path]:
    """An empty directory for servers' directories that the server's user can traverse."""
    d = Path(tempfile.mkdtemp(prefix="pgbase-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@needs_postgres
def test_the_server_runs_unprivileged(postgres_server: PostgresServer) -> None:
    assert postgres_server.pid is not None
    status = Path(f"/proc/{postgres_server.pid}/status").read_text()
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    # PostgreSQL refuses to run as root: as root it runs as 'postgres', else as the caller.
    expected = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert int(uid) == expected != 0


async def test_two_connections_write_and_read(postgres_db: str) -> None:
    a = await psycopg.AsyncConnection.connect(postgres_db)
    b = await psycopg.AsyncConnection.connect(postgres_db)
    async with a, b:
        await a.execute("CREATE TABLE turns (id serial PRIMARY KEY, writer text, n int)")
        await a.commit()

        async def write(conn: psycopg.AsyncConnection[tuple[object, ...]], writer: str) -> None:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO turns (writer, n) VALUES (%s, %s)",
                    [(writer, n) for n in range(50)],
                )

        await asyncio.wait_for(asyncio.gather(write(a, "a"), write(b, "b")), GUARD_S)
        count = "SELECT writer, count(*), sum(n) FROM turns GROUP BY writer ORDER BY writer"
        # Each sees its own uncommitted rows, not the other's.
        assert await (await a.execute(count)).fetchall() == [("a", 50, 1225)]
        assert await (await b.execute(count)).fetchall() == [("b", 50, 1225)]
        await asyncio.gather(a.commit(), b.commit())
        for conn in (a, b):
            assert await (await conn.execute(count)).fetchall() == [
                ("a", 50, 1225),
                ("b", 50, 1225),
            ]
            await conn.rollback()


CLAIM = (
    "SELECT session_id FROM leases WHERE owner IS NULL ORDER BY session_id "
    "LIMIT 1 FOR UPDATE SKIP LOCKED"
)


async def test_skip_locked_gives_each_session_to_one_worker(postgres_db: str) -> None:
    conns = [await psycopg.AsyncConnection.connect(postgres_db) for _ in range(4)]
    try:
        a, b = conns[:2]
        await a.execute("CREATE TABLE leases (session_id int PRIMARY KEY, owner text)")
        await a.execute("INSERT INTO leases SELECT g, NULL FROM generate_series(1, 40) g")
        await a.commit()
        # A holds session 1's row: B is not blocked by it, it gets the next one.
        assert await (await a.execute(CLAIM)).fetchone() == (1,)
        assert await (await asyncio.wait_for(b.execute(CLAIM), GUARD_S)).fetchone() == (2,)
        await a.rollback()  # A's lock goes: session 1 is free again
        assert await (await a.execute(CLAIM)).fetchone() == (1,)
        await asyncio.gather(a.rollback(), b.rollback())

        async def worker(i: int, conn: psycopg.AsyncConnection[tuple[object, ...]]) -> list[int]:
            claimed: list[int] = []
            while True:
                row = await (await conn.execute(CLAIM)).fetchone()
                if row is None:
                    await conn.rollback()
                    return claimed
                await conn.execute(
                    "UPDATE leases SET owner = %s WHERE session_id = %s", (f"w{i}", row[0])
                )
                await conn.commit()
                claimed.append(int(str(row[0])))

        claims = await asyncio.wait_for(
            asyncio.gather(*(worker(i, c) for i, c in enumerate(conns))), GUARD_S
        )
        every = [s for c in claims for s in c]
        assert sorted(every) == list(range(1, 41))  # each session claimed exactly once
        owners = await (
            await a.execute("SELECT owner, count(*) FROM leases GROUP BY owner")
        ).fetchall()
        assert {str(o): int(str(n)) for o, n in owners} == {
            f"w{i}": len(c) for i, c in enumerate(claims) if c
        }
    finally:
        for conn in conns:
            await conn.close()


@needs_postgres
def test_stop_leaves_nothing_behind(base: Path) -> None:
    server = PostgresServer(base_dir=base).start()
    pid, port, directory = server.pid, server.port, server.dir
    assert pid is not None and directory is not None and directory.parent == base
    conn = psycopg.connect(server.dsn)  # a client still connected at stop
    try:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        helpers = children(pid)  # checkpointer, walwriter, ..., this client's backend
        assert len(helpers) >= 3
        server.stop()
    finally:
        conn.close()
    assert not Path(f"/proc/{pid}").exists()  # reaped, not a zombie
    wait_for(lambda: not any(map(alive, helpers)), f"PostgreSQL's processes {helpers} to exit")
    assert not listening(port)
    assert list(base.iterdir()) == []
    assert server.pid is None and server.dir is None


@needs_postgres
def test_a_server_that_cannot_start_says_why(base: Path) -> None:
    server = PostgresServer(base_dir=base, settings={"shared_buffers": "plenty"})
    with pytest.raises(RuntimeError, match="PostgreSQL exited at start") as caught:
        server.start()
    assert 'invalid value for parameter "shared_buffers": "plenty"' in str(caught.value)
    assert list(base.iterdir()) == [] and server.pid is None


@needs_postgres
def test_a_killed_runner_leaves_no_server(base: Path) -> None:
    script = f"""
        import time
        from agentflow.testing import PostgresServer
        server = PostgresServer(base_dir={str(base)!r}).start()
        print(server.pid, server.port, server.dir, flush=True)
        time.sleep(600)
    """
    runner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stdout is not None
        ready, _, _ = select.select([runner.stdout], [], [], GUARD_S * 2)
        line = runner.stdout.readline() if ready else ""  # printed whole, with a flush
        assert line, runner.communicate(timeout=GUARD_S)[1]
        pid, port, directory = int(line.split()[0]), int(line.split()[1]), Path(line.split()[2])
        key, shmid = map(
            int, (directory / "data/postmaster.pid").read_text().splitlines()[6].split()
        )
        assert listening(port) and (key, shmid) in segments()
        helpers = children(pid)
        assert len(helpers) >= 3
        runner.kill()
        assert runner.wait(GUARD_S) == -signal.SIGKILL
        wait_for(lambda: not alive(pid), f"the postmaster {pid} to die with its parent")
        wait_for(lambda: not any(map(alive, helpers)), f"PostgreSQL's processes {helpers} to exit")
        assert not listening(port)
        # Nobody was left to remove the directory: the next start in `base` does.
        assert directory.exists()
        assert remove_stale(base) == [directory]
        assert not directory.exists() and (key, shmid) not in segments()
    finally:
        if runner.returncode is None:
            runner.kill()
        runner.communicate(timeout=GUARD_S)


def test_a_live_owners_directory_is_kept(tmp_path: Path) -> None:
    mine = tmp_path / "agentflow-pg-mine"
    mine.mkdir()
    stat = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    (mine / "owner").write_text(f"{os.getpid()} {stat[19]}\n")
    reused = tmp_path / "agentflow-pg-reused"  # its owner's pid now names another process
    reused.mkdir()
    (reused / "owner").write_text(f"{os.getpid()} 1\n")
    assert remove_stale(tmp_path) == [reused]
    assert mine.exists()


def test_missing_binaries_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="bindir: no initdb and postgres in"):
        PostgresServer(bindir=tmp_path, base_dir=tmp_path).start()
    assert list(tmp_path.iterdir()) == []  # refused before any directory was made


def test_find_postgres_prefers_path_then_the_newest_debian_version(tmp_path: Path) -> None:
    def install(d: Path) -> Path:
        d.mkdir(parents=True)
        for name in ("initdb", "postgres"):
            (d / name).write_text("#!/bin/sh\n")
            (d / name).chmod(0o755)
        return d

    debian = tmp_path / "lib"
    assert find_postgres(path="", debian_root=debian) is None
    install(debian / "9" / "bin")
    newest = install(debian / "16" / "bin")
    (debian / "17" / "bin").mkdir(parents=True)  # a client-only install: no server binaries
    assert find_postgres(path="", debian_root=debian) == newest
    on_path = install(tmp_path / "local")
    assert find_postgres(path=str(on_path), debian_root=debian) == on_path
