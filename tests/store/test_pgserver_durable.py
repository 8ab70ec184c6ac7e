"""`PostgresServer` keeps what it acknowledged as committed when one of its processes is
killed (``TEST_SETTINGS``: fsync off, commits still written at once). A backend's crash
makes the postmaster restart every backend and replay the write-ahead log: with
``synchronous_commit=off`` the commits of the last fraction of a second were not in it
yet, and were lost — 200 rows committed, 152 left — though the docstring and
``docs/store-postgres.md`` say a killed client or server loses nothing committed (the
crash tests stand on that)."""

from __future__ import annotations

import os
import signal
import sys
import time

import psycopg
import pytest

from agentflow.testing import PostgresServer
from tests.wait import GUARD_S

from .conftest import postgres_missing

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="kills a server process"),
    pytest.mark.skipif(bool(postgres_missing()), reason=postgres_missing()),
]


def _count_after_recovery(dsn: str) -> int:
    """The rows of ``t`` once the server takes connections again (crash recovery)."""
    deadline = time.monotonic() + GUARD_S  # (a hang guard, not a timing assertion)
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=5) as conn:
                row = conn.execute("SELECT count(*) FROM t").fetchone()
                assert row is not None
                return int(row[0])
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_crashed_backend_loses_nothing_committed() -> None:
    with PostgresServer() as pg:
        victim = psycopg.connect(pg.dsn)
        row = victim.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (i int)")
            for i in range(200):  # each acknowledged as committed
                conn.execute("INSERT INTO t VALUES (%s)", (i,))
        os.kill(row[0], signal.SIGKILL)  # the postmaster restarts every backend
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        victim.close()
        assert _count_after_recovery(pg.dsn) == 200
