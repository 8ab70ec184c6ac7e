"""What the store's tests share: one throwaway PostgreSQL server for the whole session.

``postgres_dsn`` (the server's ``postgres`` database) and ``postgres_db`` (a new, empty
database per test) skip, saying why, where PostgreSQL is not installed;
``scripts/setup`` installs it on Debian when it runs as root. ``make_store`` runs a test
once on each store.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentflow._pgserver import find_postgres
from agentflow.store import PostgresStore, SQLiteStore, Store
from agentflow.testing import PostgresServer

_databases = itertools.count(1)


def postgres_missing() -> str:
    """Why no PostgreSQL server can be started here, or ``""``."""
    if find_postgres() is None:
        return (
            "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin): "
            "run scripts/setup as root, or apt-get install postgresql"
        )
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no 'postgres' user to run PostgreSQL as"
    return ""


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session, stopped (and its directory removed) at the end."""
    if reason := postgres_missing():
        pytest.skip(reason)
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The session server's DSN (its ``postgres`` database, shared by every test)."""
    return postgres_server.dsn


@pytest.fixture
def postgres_db(postgres_server: PostgresServer) -> str:
    """The DSN of a new, empty database on the session server, for one test."""
    return postgres_server.create_database(f"test_{next(_databases)}")


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """A function making a new store on one database: SQLite's file, or a new
    PostgreSQL database (skipped where PostgreSQL is missing)."""
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "runs.db")
    dsn: str = request.getfixturevalue("postgres_db")
    return lambda: PostgresStore(dsn)
