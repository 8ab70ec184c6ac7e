"""A resumed attempt works out its recorded peak in flight — a sort of every turn of the
run — once, for the result it returns: its end, which only needs the sessions' statuses,
used to build the whole result again (500k turns: seconds more at every resume)."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentflow.store._durable as durable
from agentflow.embedded import run_virtual
from agentflow.store._peak import recorded_peak
from agentflow.store._records import FINAL_STATUSES

from .fleets import agents, resume, run_cut


def test_a_resumed_attempt_sorts_the_runs_turns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    assert run_virtual(run_cut(db, agents(), 8, 30)) is None
    calls: list[int] = []

    def counted(sessions: object) -> int:
        peak = recorded_peak(sessions)  # type: ignore[arg-type]
        calls.append(peak)
        return peak

    monkeypatch.setattr(durable, "recorded_peak", counted)
    result = run_virtual(resume(db, agents()))
    assert all(s.status in FINAL_STATUSES for s in result.sessions)
    assert len(calls) == 1
    assert result.peak_in_flight >= calls[0] > 0
