"""agentflow.stats' public names refuse bad input with a ConfigError naming the value
(or the file, line and column), never a builtin error from deep inside: an
AttributeError, a TypeError from sorting, ddsketch's ValueError, a KeyError, or — for
nearest_rank — a rank past the last value."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from agentflow import ConfigError
from agentflow.stats import (
    SLO,
    FleetStats,
    Sketch,
    TurnCSVWriter,
    nearest_rank,
    read_turn_csv,
    turn_row,
    write_turn_csv,
)
from tests.stats.traces import fixed_run


@pytest.mark.parametrize(
    ("slos", "match"),
    [
        (["x"], "slos must hold SLO objects, got 'x'"),
        ([1], "slos must hold SLO objects, got 1"),
        (5, "slos must be an iterable of SLO, got 5"),
        (SLO(ttft_s=1.0), "use \\[slo\\]"),
    ],
)
def test_fleet_stats_slos(slos: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FleetStats(slos=slos)  # type: ignore[arg-type]


def test_csv_writer_slos_checked_before_the_file_is_made(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    with pytest.raises(ConfigError, match="slos must hold SLO objects"):
        TurnCSVWriter(path, slos=[None])  # type: ignore[list-item]
    assert not path.exists()


@pytest.mark.parametrize(
    ("quantiles", "match"),
    [
        (["a"], "a quantile is a number in \\[0, 1\\], got 'a'"),
        ([0.5, None], "got None"),
        (7, "quantiles must be an iterable of numbers, got 7"),
    ],
)
def test_fleet_stats_quantiles(quantiles: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FleetStats(quantiles=quantiles)  # type: ignore[arg-type]


@pytest.mark.parametrize("alpha", [-1, 0, 1, 1.5, math.nan, "0.01", True])
def test_sketch_relative_accuracy(alpha: object) -> None:
    with pytest.raises(ConfigError, match="Sketch relative_accuracy must be a number in"):
        Sketch(relative_accuracy=alpha)  # type: ignore[arg-type]


@pytest.mark.parametrize("q", [2, -0.1, math.nan, "0.5"])
def test_sketch_quantile(q: object) -> None:
    sketch = Sketch()
    sketch.add(1.0)
    with pytest.raises(ConfigError, match="a quantile is a number in"):
        sketch.quantile(q)  # type: ignore[arg-type]


def test_sketch_merge_of_different_accuracy() -> None:
    with pytest.raises(ConfigError, match="cannot merge sketches"):
        Sketch(0.01).merge(Sketch(0.02))


def test_nearest_rank_refuses_a_quantile_outside_0_1() -> None:
    """2 among 10 values was rank 19: an index past the end of the list."""
    assert nearest_rank(1, 10) == 9 and nearest_rank(0, 10) == 0
    for q in (2, -0.5, math.nan):
        with pytest.raises(ConfigError, match="a quantile is a number in"):
            nearest_rank(q, 10)


def test_read_turn_csv_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"turn CSV file '.*nope\.csv': No such file"):
        read_turn_csv(tmp_path / "nope.csv")
    with pytest.raises(ConfigError, match="turn CSV file"):
        read_turn_csv(tmp_path)  # a directory


def test_read_turn_csv_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match=r"other\.csv': not a turn CSV .*no column 'agent'"):
        read_turn_csv(path)


def test_read_turn_csv_bad_cell_names_line_and_column() -> None:
    buf = io.StringIO()
    write_turn_csv(
        [turn_row(e.agent, e.session_id, e.turn, e.metrics, e.trace) for e in fixed_run()], buf
    )
    lines = buf.getvalue().splitlines()
    assert len(read_turn_csv(io.StringIO(buf.getvalue()))) == len(lines) - 1
    header = lines[0].split(",")
    cells = lines[2].split(",")
    cells[header.index("turn")] = "three"
    lines[2] = ",".join(cells)
    with pytest.raises(ConfigError, match="turn CSV:3: column 'turn': 'three' is not int"):
        read_turn_csv(io.StringIO("\n".join(lines) + "\n"))
