"""``SQLiteStore``'s path and ``batch_interval_s`` are checked when it is made:
``SQLiteStore(None)`` and ``batch_interval_s="0.01"`` were bare TypeErrors; each is now a
ConfigError naming the argument and the value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentflow import ConfigError
from agentflow.store import SQLiteStore


def bad(value: Any) -> Any:
    """``value``, typed Any: the point is what happens when a caller passes it anyway."""
    return value


@pytest.mark.parametrize(
    ("path", "says"),
    [
        (None, r"got NoneType None$"),
        (5, r"got int 5$"),
        ("", r"got str ''$"),
        (b"runs.db", r"got bytes b'runs\.db'$"),
    ],
)
def test_a_path_that_is_not_one_is_refused(path: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=r"^SQLiteStore\.path must be a file path .*" + says):
        SQLiteStore(bad(path))


@pytest.mark.parametrize(
    ("value", "shown"),
    [("0.01", "'0.01'"), (True, "True"), (-1, "-1"), (11, "11"), (float("nan"), "nan")],
)
def test_a_batch_interval_that_is_not_seconds_is_refused(
    tmp_path: Path, value: Any, shown: str
) -> None:
    with pytest.raises(
        ConfigError, match=rf"^SQLiteStore\.batch_interval_s must be .* in \[0, 10\], got {shown}$"
    ):
        SQLiteStore(tmp_path / "runs.db", batch_interval_s=bad(value))
    assert not (tmp_path / "runs.db").exists()


def test_good_values_still_pass(tmp_path: Path) -> None:
    assert SQLiteStore(str(tmp_path / "a.db"), batch_interval_s=0).batch_interval_s == 0
    assert SQLiteStore(tmp_path / "b.db", batch_interval_s=10).batch_interval_s == 10
