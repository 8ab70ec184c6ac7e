"""``SQLiteStore.busy_timeout_s`` is a finite number of seconds SQLite can hold: from 1 ms
to ``MAX_BUSY_TIMEOUT_S`` (SQLite takes it as a C ``int`` of milliseconds). It used to
be checked only > 0: ``inf`` was taken, then ``open()`` failed with a StoreError about an
``OverflowError`` not naming the setting; ``1e10`` opened, then ``aclose()`` raised a bare
``OverflowError``; ``1e7`` opened with SQLite's busy timeout overflowed to 0 (no wait)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentflow import ConfigError
from agentflow.store import SQLiteStore

#: ``agentflow.store._sqlite.MAX_BUSY_TIMEOUT_S``: a C ``int`` of milliseconds.
MAX_BUSY_TIMEOUT_S = (2**31 - 1) // 1000


@pytest.mark.parametrize(
    "value", [float("inf"), float("nan"), 1e30, 1e10, 1e7, 0, -5.0, 1e-4, True]
)
def test_an_out_of_range_busy_timeout_is_refused_naming_it(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match=r"SQLiteStore\.busy_timeout_s"):
        SQLiteStore(tmp_path / "runs.db", busy_timeout_s=value)  # type: ignore[arg-type]
    assert not (tmp_path / "runs.db").exists()


async def test_the_longest_busy_timeout_reaches_sqlite_whole(tmp_path: Path) -> None:
    from agentflow.store import _sqlite

    assert _sqlite.MAX_BUSY_TIMEOUT_S == MAX_BUSY_TIMEOUT_S
    store = SQLiteStore(tmp_path / "runs.db", busy_timeout_s=MAX_BUSY_TIMEOUT_S)
    try:
        await store.open()
        (ms,) = await store._call(lambda conn: conn.execute("PRAGMA busy_timeout").fetchone())
        assert ms == MAX_BUSY_TIMEOUT_S * 1000
    finally:
        await store.aclose()
