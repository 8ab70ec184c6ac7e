"""A resumed session's context budget goes on from where the recorded conversation
stands, as the uninterrupted session's would: its next forecast is anchored on the
server's count of the last recorded prompt (the store has it: the turn's usage), so a
session near its limit that finishes uninterrupted finishes resumed too; and its pinned
prefix is the system prompt it began with, not a system-role summary after it."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentflow import Agent, ContextOverflow, Event, FleetResult, Tool
from agentflow._context_chain import Binding, Link, LinkSession
from agentflow.context import (
    Compact,
    CompactionEvent,
    ContextBudget,
    ContextChain,
    Fail,
    SessionBudget,
)
from agentflow.embedded import SimTransport, run_virtual
from agentflow.typing import Complete

from .fleets import driver, stored

ROUNDS = 5
#: Per turn: the forecast's tokens, margin, bound and whether it was anchored.
Row = tuple[int, int, int, bool]


def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file's path.
    """
    words = ("cache", "entry", "lookup", "evict", "policy", "size", "hit", "miss")
    return " ".join(words[(len(path) + 3 * i) % len(words)] for i in range(300))


class Forecasts(Link["_Watch"]):
    """A link after the budget that notes the budget's forecast of every turn."""

    def __init__(self) -> None:
        self.rows: dict[int, Row] = {}

    def session_for(self, at: Binding) -> _Watch:
        return _Watch(at, self)


class _Watch(LinkSession):
    def __init__(self, at: Binding, link: Forecasts) -> None:
        super().__init__(at)
        self.link = link
        self.budget: SessionBudget | None = None

    def join(self, sessions: Sequence[object]) -> None:
        self.budget = next(s for s in sessions if isinstance(s, SessionBudget))

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> None:
        assert self.budget is not None and self.budget.forecast is not None
        f = self.budget.forecast
        self.link.rows[turn] = (f.tokens, f.margin, f.bound, f.anchored)


def reader(limit: int, watch: Forecasts) -> Agent:
    """An agent whose prompts may be ``limit`` tokens at most; ``watch`` notes them."""
    budget = ContextBudget(window=limit + 32, reserve_output=32, margin=0, overflow=[Fail()])
    return Agent(
        name="reader",
        model="sim",
        instructions="You read files and say what they hold. " * 4,
        tools=[Tool.from_function(read_file, in_thread=False)],
        params={"max_tokens": 32},
        max_turns=20,
        context=[budget, watch],
    )


async def _run(
    path: Path,
    agent: Agent,
    *,
    rounds: int = ROUNDS,
    cut: Callable[[Event], bool] | None = None,
    events: list[Event] | None = None,
) -> FleetResult | None:
    """Session ``s0`` of ``agent`` as run ``r`` on the simulator, in virtual time, its
    events in ``events``; cancelled at the first event ``cut`` is true of (``None`` is
    returned then)."""
    session = agent.session("Read them.", session_id="s0")
    return await stored(
        path,
        SimTransport(driver(rounds=rounds)),
        lambda fleet: fleet.run([session], run_id="r"),
        cut=cut,
        events=events,
    )


async def _resume(
    path: Path, agent: Agent, *, rounds: int = ROUNDS, events: list[Event] | None = None
) -> FleetResult:
    result = await stored(
        path,
        SimTransport(driver(rounds=rounds)),
        lambda fleet: fleet.resume("r", agents=[agent]),
        events=events,
    )
    assert result is not None
    return result


def _turn_end(turn: int) -> Callable[[Event], bool]:
    return lambda e: e.type == "turn_end" and e.turn == turn


def test_a_resumed_session_near_its_limit_finishes_as_the_uninterrupted_one(
    tmp_path: Path,
) -> None:
    roomy = Forecasts()
    done = run_virtual(_run(tmp_path / "roomy.db", reader(1_000_000, roomy)))
    assert done is not None and done.sessions[0].status == "completed"
    last = len(done.sessions[0].turns) - 1
    assert last >= 3 and all(roomy.rows[t][3] for t in range(1, last + 1))
    # The limit is the last prompt's forecast: uninterrupted, every turn just fits.
    limit = roomy.rows[last][2]
    whole = Forecasts()
    done = run_virtual(_run(tmp_path / "whole.db", reader(limit, whole)))
    assert done is not None and done.sessions[0].status == "completed"
    assert whole.rows == roomy.rows
    # Cut before the last turn, resumed: that turn is forecast as it was uninterrupted,
    # anchored on the server's count of the turn before (it used to be unanchored, with
    # the whole prompt's error margin, and the session ended in ContextOverflow).
    path = tmp_path / "cut.db"
    assert run_virtual(_run(path, reader(limit, Forecasts()), cut=_turn_end(last - 1))) is None
    resumed = Forecasts()
    result = run_virtual(_resume(path, reader(limit, resumed)))
    session = result.sessions[0]
    assert session.status == "completed", session.error
    assert resumed.rows == {last: whole.rows[last]}


def test_a_session_resumed_with_nothing_learnt_forecasts_its_whole_prompt(
    tmp_path: Path,
) -> None:
    """The calibrator's state is recorded when a session or the run ends: a run killed
    before either (here: its rows deleted after the cut) resumes with a calibrator that
    has seen no turn. Its first forecast is anchored on the server's count of the last
    recorded prompt plus the growth since: it was the growth alone, so a prompt over the
    window went out (and the session ended as if it had fitted)."""
    roomy = Forecasts()
    done = run_virtual(_run(tmp_path / "roomy.db", reader(1_000_000, roomy)))
    assert done is not None
    turns = done.sessions[0].turns
    last = len(turns) - 1
    path = tmp_path / "cut.db"
    cut = _turn_end(last - 1)
    assert run_virtual(_run(path, reader(1_000_000, Forecasts()), cut=cut)) is None
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        assert conn.execute("DELETE FROM policy_state").rowcount > 0
    resumed = Forecasts()
    result = run_virtual(_resume(path, reader(1_000_000, resumed)))
    tokens, _, bound, anchored = resumed.rows[last]
    before = turns[last - 1].trace.usage
    sent = result.sessions[0].turns[last].trace.usage
    assert before is not None and sent is not None and anchored
    assert before.prompt_tokens is not None and sent.prompt_tokens is not None
    assert before.prompt_tokens < tokens <= bound
    assert bound >= sent.prompt_tokens  # what the server counted is within the bound
    # And a window that the whole prompt does not fit is refused before it is sent.
    limit = before.prompt_tokens
    path = tmp_path / "cut-small.db"
    assert run_virtual(_run(path, reader(1_000_000, Forecasts()), cut=cut)) is None
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM policy_state")
    result = run_virtual(_resume(path, reader(limit, Forecasts())))
    assert result.sessions[0].status == "error"
    assert isinstance(result.sessions[0].error, ContextOverflow)


def compacting(watch: Forecasts) -> Agent:
    """An agent whose history is compacted into a system-role summary, again and again."""
    compact = Compact(max_summary_tokens=48, role="system", keep_last=1)
    budget = ContextBudget(window=1500, reserve_output=32, overflow=[compact, Fail()])
    return dataclasses.replace(
        reader(1_000_000, watch), context=ContextChain([budget, watch]), max_turns=40
    )


def _summaries(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(m["role"] == "system" for m in messages[1:])


def test_a_resumed_session_replaces_its_system_role_summary(tmp_path: Path) -> None:
    """Cut after a compaction into a system-role summary, then resumed: the next
    compaction replaces that summary, as uninterrupted (the summary used to join the
    pinned prefix after the resume — a leading system message — and stay there for good,
    the next summary stacked after it)."""
    events: list[Event] = []
    done = run_virtual(
        _run(tmp_path / "whole.db", compacting(Forecasts()), rounds=14, events=events)
    )
    assert done is not None and done.sessions[0].status == "completed"
    assert sum(isinstance(e, CompactionEvent) for e in events) >= 3
    assert _summaries(done.sessions[0].messages) == 1

    path = tmp_path / "cut.db"
    first: list[CompactionEvent] = []

    def after_first_compaction(event: Event) -> bool:
        if isinstance(event, CompactionEvent):
            first.append(event)
        return bool(first) and _turn_end(first[0].turn + 1)(event)

    cut = _run(path, compacting(Forecasts()), rounds=14, cut=after_first_compaction)
    assert run_virtual(cut) is None
    again: list[Event] = []
    result = run_virtual(_resume(path, compacting(Forecasts()), rounds=14, events=again))
    session = result.sessions[0]
    assert session.status == "completed", session.error
    assert sum(isinstance(e, CompactionEvent) for e in again) >= 2
    assert session.messages[0]["content"].startswith("You read files")
    assert _summaries(session.messages) == 1  # it used to be 2: one pinned for good
