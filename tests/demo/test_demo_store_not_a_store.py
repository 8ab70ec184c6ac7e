"""``demo --store notadb.txt`` (a file that is no SQLite database) used to announce
"recording run … in notadb.txt (resume it with …)" and then fail with ``StoreError: … file
is not a database``, exit 1: the store is now opened before the run is announced, and a
file that is no store is a bad ``--store`` — one line naming it, exit 2. (``resume``
reads the store first, as ``report --store`` does: a ``StoreError``, exit 1,
tests/store/test_other_stores_untouched.py.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ..test_cli_errors import assert_one_line, run


@pytest.fixture
def not_a_db(tmp_path: Path) -> Path:
    path = tmp_path / "notadb.txt"
    path.write_text("these are notes, not a database\n" * 20)
    return path


def test_demo_refuses_a_file_that_is_no_database(not_a_db: Path) -> None:
    before = not_a_db.read_bytes()
    code, err = run(
        "demo", "--virtual", "--agents", "2", "--turns", "1:1", "--no-live",
        "--store", str(not_a_db),
    )  # fmt: skip
    assert code == 2, err
    assert_one_line(err, "agentflow demo", f"--store {not_a_db}", "not a database")
    assert "recording run" not in err
    assert not_a_db.read_bytes() == before


def test_demo_refuses_another_applications_database(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    code, err = run(
        "demo", "--virtual", "--agents", "2", "--turns", "1:1", "--no-live", "--store", str(other)
    )
    assert code == 2, err
    assert_one_line(err, "agentflow demo", f"--store {other}")
