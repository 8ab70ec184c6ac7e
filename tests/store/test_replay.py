"""``Tool(replay_on_resume=True)``: a tool whose effect lives in memory gets it back on
resume — its recorded calls run again, in order, before the session continues — while
every other recorded call still never runs twice."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from agentflow import Agent, FleetResult, StoreError, Tool
from agentflow.embedded import run_virtual

from .fleets import agents, resume, run_cut

N = 18


class Notebook:
    """An in-memory effect: every note taken, as a multiset (sessions interleave)."""

    def __init__(self) -> None:
        self.notes: Counter[tuple[str, int]] = Counter()

    def tool(self, *, replay: bool) -> Tool:
        def lookup(key: str, count: int = 1) -> str:
            """Look a key up (and note it).

            Args:
                key: what to look up.
                count: how many values.
            """
            self.notes[key, count] += 1
            return f"{count} value(s) of {key!r}"

        return Tool.from_function(lookup, in_thread=False, replay_on_resume=replay)


def team(book: Notebook, *, replay: bool = True) -> list[Agent]:
    return [dataclasses.replace(a, tools=(book.tool(replay=replay),)) for a in agents()]


def test_replayed_calls_rebuild_the_in_memory_state(tmp_path: Path) -> None:
    whole = Notebook()
    assert isinstance(
        run_virtual(run_cut(tmp_path / "whole.db", team(whole), N, None)), FleetResult
    )
    first = Notebook()
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 25)) is None
    assert 0 < first.notes.total() < whole.notes.total()
    # A new process: the notebook starts empty; the resumed run replays what was recorded.
    again = Notebook()
    result = run_virtual(resume(tmp_path / "cut.db", team(again)))
    assert all(s.status == "completed" for s in result.sessions)
    assert again.notes == whole.notes


def test_without_the_flag_recorded_calls_do_not_run_again(tmp_path: Path) -> None:
    first = Notebook()
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first, replay=False), N, 25)) is None
    whole = Notebook()
    run_virtual(run_cut(tmp_path / "whole.db", team(whole, replay=False), N, None))
    again = Notebook()
    run_virtual(resume(tmp_path / "cut.db", team(again, replay=False)))
    # The resumed process ran only the calls not recorded before the cut (at most once
    # each, the recorded results standing): together with the first process's, the
    # uninterrupted run's, and the resumed one alone lacks the earlier ones.
    assert first.notes + again.notes == whole.notes
    assert again.notes.total() < whole.notes.total()


def test_a_replay_that_fails_where_the_recorded_call_succeeded_is_a_store_error(
    tmp_path: Path,
) -> None:
    first = Notebook()
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 25)) is None

    def lookup(key: str, count: int = 1) -> str:
        """Look a key up (and note it).

        Args:
            key: what to look up.
            count: how many values.
        """
        raise RuntimeError("the disk is gone")

    broken = Tool.from_function(lookup, in_thread=False, replay_on_resume=True)
    members = [dataclasses.replace(a, tools=(broken,)) for a in agents()]
    result = run_virtual(resume(tmp_path / "cut.db", members))
    failed = [s for s in result.sessions if s.status == "error"]
    assert failed and all(isinstance(s.error, StoreError) for s in failed)
    assert all("replaying tool 'lookup'" in str(s.error) for s in failed)


@pytest.mark.parametrize("flag", [True, False])
def test_the_flag_is_not_part_of_the_agents_fingerprint(flag: bool) -> None:
    """Turning replay on for a run recorded without it is allowed: the flag changes what
    resuming does, not what the model saw."""
    from agentflow.store._codec import fingerprint

    book = Notebook()
    assert fingerprint(team(book, replay=flag)[0]) == fingerprint(team(book, replay=not flag)[0])
