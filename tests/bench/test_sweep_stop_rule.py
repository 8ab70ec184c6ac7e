"""When a sweep stops as "failed": every session of the level failed — none completed and
none was still running at the level's end. One error beside sessions cut at the end (long
sessions the server was serving) stopped the sweep as if the server served none."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from agentflow.bench._level_entry import every_session_failed


def _runs(*statuses: str) -> list[Any]:
    sessions = [SimpleNamespace(status=s, ok=s == "completed") for s in statuses]
    return [SimpleNamespace(result=SimpleNamespace(sessions=sessions))]


def test_only_a_level_whose_every_session_failed_stops_a_sweep() -> None:
    assert every_session_failed(_runs("error", "error", "max_turns"))
    assert not every_session_failed(_runs("error", *["cancelled"] * 50))  # still serving
    assert not every_session_failed(_runs("error", "completed"))
    assert not every_session_failed(_runs())  # nothing started
    assert not every_session_failed([SimpleNamespace(result=None)])  # type: ignore[list-item]
