"""A store this agentflow refuses is left as it was: a store of another schema version
is refused before anything is written to it (it used to get this version's tables, and
WAL mode, first), and the commands that only read a store refuse an empty file rather
than make it a new store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.cli import main
from agentflow.store import SQLiteStore
from agentflow.store._schema import SCHEMA, SCHEMA_VERSION


def _v9(path: Path) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '9')")
    conn.commit()
    conn.close()
    return path.read_bytes()


def _files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir())


async def test_a_store_of_another_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "v9.db"
    before = _v9(path)
    with pytest.raises(StoreError, match="schema version 9, this agentflow reads version 2"):
        async with SQLiteStore(path, journal=False):
            pass
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["v9.db"]  # not put in WAL mode either


@pytest.mark.parametrize("command", ["report", "resume"])
def test_reading_commands_write_nothing_into_stores_they_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    empty, v9 = tmp_path / "empty.db", tmp_path / "v9.db"
    empty.write_bytes(b"")
    before = _v9(v9)

    def run(path: Path) -> int:
        if command == "report":
            return main(["report", "--store", str(path), "run-1"])
        return main(["resume", "run-1", "--store", str(path), "--no-live"])

    assert run(empty) == 2
    assert "is empty" in capsys.readouterr().err
    assert run(v9) == 1
    assert "schema version 9" in capsys.readouterr().err
    assert empty.read_bytes() == b"" and v9.read_bytes() == before
    assert _files(tmp_path) == ["empty.db", "v9.db"]


def _foreign(path: Path) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('alice')")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("meta", [False, True])
async def test_another_applications_database_is_refused_untouched(
    tmp_path: Path, meta: bool
) -> None:
    """It used to be put in WAL mode and given agentflow's tables and schema version,
    and only then did the read find no run in it."""
    path = tmp_path / "app.sqlite"
    if meta:  # its own table named meta, of other columns
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE meta (name TEXT)")
        conn.commit()
        conn.close()
    before = _foreign(path)
    with pytest.raises(StoreError, match="not an agentflow store"):
        async with SQLiteStore(path, journal=False):
            pass
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["app.sqlite"]  # not put in WAL mode either


@pytest.mark.parametrize("command", ["report", "resume", "trace export"])
def test_reading_commands_refuse_another_applications_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = tmp_path / "app.sqlite"
    before = _foreign(path)
    if command == "report":
        argv = ["report", "--store", str(path), "run-1"]
    elif command == "resume":
        argv = ["resume", "run-1", "--store", str(path), "--no-live"]
    else:
        argv = ["trace", "export", "--store", str(path), "-o", str(tmp_path / "t.jsonl"), "run-1"]
    assert main(argv) == 1
    assert "not an agentflow store" in capsys.readouterr().err
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["app.sqlite"]


async def test_a_store_whose_making_was_cut_short_is_made(tmp_path: Path) -> None:
    """Only agentflow's tables and no schema version (an earlier agentflow killed while
    it made the store): a new store, not another application's database."""
    path = tmp_path / "cut.db"
    conn = sqlite3.connect(path)
    for statement in SCHEMA.split("CREATE")[1:3]:  # meta and runs
        conn.execute("CREATE" + statement)
    conn.commit()
    conn.close()
    async with SQLiteStore(path, journal=False) as store:
        assert await store.runs() == []
    conn = sqlite3.connect(path)
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert row == (str(SCHEMA_VERSION),)
    conn.close()
