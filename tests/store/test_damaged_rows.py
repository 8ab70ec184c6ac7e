"""A row whose JSON column is damaged, or was written by another program, makes a load
(and so ``agentflow report --store``, ``agentflow resume``, ``Fleet.resume``) fail with a
:class:`StoreError` naming the run, the session, the turn and the column: a bare
msgspec error used to escape, naming none of them (the CLI printed a traceback)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.cli import main
from agentflow.embedded import run_virtual
from agentflow.store import SQLiteStore

from .fleets import agents, run_cut


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("damaged") / "base.db"
    assert run_virtual(run_cut(base, agents(), 3, None)) is not None
    return base


#: (table.column, the row's WHERE, the damaged value, where the error says it is)
CASES = [
    ("turns.trace", "session_id='s01' AND turn=1", '{"content": 5}', "session 's01', turn 1"),
    ("turns.message", "session_id='s01' AND turn=1", '{"role": "assist', "session 's01', turn 1"),
    ("turns.prompt", "session_id='s02' AND turn=0", "[1, 2]", "session 's02', turn 0"),
    ("turns.failures", "session_id='s00' AND turn=0", "5", "session 's00', turn 0"),
    ("turns.rewrite", "session_id='s00' AND turn=0", "{", "session 's00', turn 0"),
    ("sessions.task", "session_id='s02'", "[", "session 's02'"),
    ("sessions.metadata", "session_id='s00'", "nope", "session 's00'"),
    ("agents.config", "name='agent-1'", "{]", "agent 'agent-1'"),
    ("runs.config", "run_id='run-1'", "{", ""),
]


def _damage(recorded: Path, tmp_path: Path, column: str, row: str, value: str) -> Path:
    db = tmp_path / "damaged.db"
    shutil.copy(recorded, db)
    table, name = column.split(".")
    conn = sqlite3.connect(db)
    assert conn.execute(f"UPDATE {table} SET {name}=? WHERE {row}", (value,)).rowcount == 1
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize(("column", "row", "value", "place"), CASES)
async def test_a_damaged_json_column_is_a_store_error_naming_it(
    recorded: Path, tmp_path: Path, column: str, row: str, value: str, place: str
) -> None:
    db = _damage(recorded, tmp_path, column, row, value)
    async with SQLiteStore(db, journal=False) as store:
        with pytest.raises(StoreError, match=f"run 'run-1'.*{place}: column {column} cannot"):
            await store.load("run-1")
        if column.startswith(("turns.", "sessions.")):  # a load of others does not read it
            await store.load("run-1", ["s99"])


async def test_a_damaged_policy_state_is_named(recorded: Path, tmp_path: Path) -> None:
    db = tmp_path / "damaged.db"
    shutil.copy(recorded, db)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO policy_state VALUES ('run-1', 'calibrator:x', '{\"a\"', 1)")
    conn.commit()
    conn.close()
    async with SQLiteStore(db, journal=False) as store:
        with pytest.raises(
            StoreError, match=r"policy state 'calibrator:x': column policy_state\.state cannot"
        ):
            await store.load("run-1")


def test_report_says_which_row_and_column_without_a_traceback(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _damage(recorded, tmp_path, *CASES[0][:3])
    assert main(["report", "--store", str(db), "run-1", "--json", str(tmp_path / "o.json")]) == 1
    err = capsys.readouterr().err
    assert "StoreError" in err and "turn 1: column turns.trace cannot be read" in err
    assert "Traceback" not in err
