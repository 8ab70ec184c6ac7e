"""A worker SIGKILLed while one of its sessions streams a turn: the tokens it had
forwarded were delivered, so the parent retracts them with an ``AttemptDiscardedEvent``
— before the turn streams again on a new worker (a store re-runs the session), or before
the session's ``ErrorEvent`` (no store: the session fails, that event names the turn).
A callback that keeps each turn's text and clears it on a discard (docs/guide.md) then
holds exactly the final answer."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import pickle
import signal
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from agentflow import (
    Agent,
    AttemptDiscardedEvent,
    ErrorEvent,
    Event,
    Fleet,
    HTTPTransport,
    RetryPolicy,
)
from agentflow._event_bus import EventBus
from agentflow._workers._broker import WorkerHandle
from agentflow._workers._open_turns import OpenTurns
from agentflow._workers._rerun import Reruns
from agentflow._workers._results import fail_missing
from agentflow._workers._wire import decode, worker_config
from agentflow._workers._worker import WorkerRun
from agentflow.sim.server import SimServer
from agentflow.sim.textgen import TextGenConfig
from agentflow.store import SQLiteStore
from agentflow.testing import Reply, ScriptedServer
from tests.sim.simhttp import QUICK
from tests.wait import GUARD_S

if TYPE_CHECKING:
    from agentflow._workers._parent import Launcher

# 300 tokens at 100 tok/s: the kill, at its 5th token, lands seconds before the turn ends.
SLOW = dataclasses.replace(QUICK, per_agent_tps=100.0)
ANSWER = TextGenConfig(tool_rounds=0, answer_tokens=(300, 300))


async def _run_with_a_kill(store: SQLiteStore | None) -> tuple[list[Event], object]:
    events: list[Event] = []
    killed: list[int] = []

    def kill_mid_turn(event: Event) -> None:
        events.append(event)
        if event.type != "token" or event.session_id != "s1" or killed:
            return
        if sum(1 for e in events if e.type == "token" and e.session_id == "s1") == 5:
            name = "agentflow-worker-1"  # s1 is dealt to worker 1 (round-robin)
            (pid,) = (p.pid for p in multiprocessing.active_children() if p.name == name)
            assert pid is not None
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

    async with SimServer(SLOW, textgen=ANSWER) as sim, HTTPTransport(sim.base_url) as http:
        agent = Agent(name="a", model="quick", params={"max_tokens": 300})
        fleet = Fleet(http, max_concurrency=4, workers=2, store=store, callbacks=[kill_mid_turn])
        result = await fleet.run([agent.session(f"T{i}", session_id=f"s{i}") for i in range(4)])
    assert killed, "worker 1 was not killed"
    return events, result


def _kept_text(events: list[Event]) -> dict[tuple[str, int], str]:
    """Each turn's text as the guide says to gather it: cleared on a discard."""
    text: dict[tuple[str, int], list[str]] = defaultdict(list)
    for e in events:
        if e.type == "token":
            text[e.session_id, e.turn].append(e.text)
        elif isinstance(e, AttemptDiscardedEvent):
            text[e.session_id, e.turn].clear()
    return {k: "".join(v) for k, v in text.items()}


async def test_a_rerun_from_the_store_retracts_the_lost_turn_first(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "lost.db")
    try:
        events, result = await _run_with_a_kill(store)
    finally:
        await store.aclose()
    assert not result.failed, [s.error for s in result.failed]  # type: ignore[attr-defined]
    s1 = [e for e in events if getattr(e, "session_id", None) == "s1"]
    discards = [e for e in s1 if isinstance(e, AttemptDiscardedEvent)]
    assert len(discards) == 1
    (d,) = discards
    # The discard comes after the lost attempt's tokens (the 5th, and any forwarded with
    # it) and counts them, before the new attempt's.
    at = s1.index(d)
    assert at >= 5 and [e.type for e in s1[:at]] == ["token"] * at
    assert (d.turn, d.attempt, d.retried, d.deltas) == (0, 0, True, at)
    assert d.chars == d.content_chars > 0
    assert s1[at + 1].type == "token"
    kept = _kept_text(events)
    for s in result.sessions:  # type: ignore[attr-defined]
        assert kept[s.session_id, 0] == s.final_output


async def test_a_lost_session_without_a_store_retracts_before_its_error() -> None:
    events, result = await _run_with_a_kill(None)
    (s1,) = [s for s in result.sessions if s.session_id == "s1"]  # type: ignore[attr-defined]
    assert s1.status == "error"
    mine = [e for e in events if getattr(e, "session_id", None) == "s1"]
    kinds = [e.type for e in mine]
    n = kinds.index("attempt_discarded")
    assert n >= 5 and kinds[:n] == ["token"] * n
    assert kinds[n:] == ["attempt_discarded", "error", "session_end"]
    discard, error = mine[n], mine[n + 1]
    assert isinstance(discard, AttemptDiscardedEvent) and isinstance(error, ErrorEvent)
    assert (discard.turn, discard.retried, discard.deltas) == (0, False, n)
    assert discard.error is error.error
    assert error.turn == 0
    assert _kept_text(events).get(("s1", 0), "") == ""


class _ReadsTokens:
    """A callback that reads token events only (not ``turn_end``, not discards)."""

    event_types = frozenset({"token"})

    def __call__(self, event: Event) -> None:
        pass


async def test_a_worker_sends_its_open_attempts_per_batch_not_the_turn_ends() -> None:
    """Only ``token`` is read: the worker used to forward every ``turn_end`` (trace,
    metrics, prompt) and ``attempt_discarded`` anyway, for the parent to see where turns
    end, and the parent inspected every forwarded event. Now each batch says what changed
    of the sessions' open attempts; what the parent keeps of it after each batch counts
    exactly the tokens forwarded so far of the attempt streaming — here a first attempt
    cut after two tokens, its retry, and the turn's end."""
    partial = Reply.text("one two three four")
    cut = dataclasses.replace(partial, frames=partial.frames[:3], cut=True)  # role, 2 words
    whole = Reply.text("five six seven", frame_delay_s=0.01)
    async with ScriptedServer([cut, whole]) as srv, HTTPTransport(srv.base_url) as http:
        fleet = Fleet(http, retry=RetryPolicy(max_attempts=2, backoff_s=0.0))
        config = worker_config(fleet, EventBus([_ReadsTokens()]), None)
        assert config["wanted"] == {"token", "session_end"}
        config["initial_slots"] = 4  # (what the broker would lease it)
        session = Agent(name="a", model="m").session("hi", session_id="s1")
        sent: list[tuple[Any, ...]] = []
        run = WorkerRun(config, [pickle.dumps(session)], sent.append)
        await asyncio.wait_for(run.main(lambda loop, on: None, sigterm=False), GUARD_S)
    srv.assert_complete()
    latest: dict[str, Any] = {}  # what the parent keeps (OpenTurns.update)
    forwarded = 0
    for msg in (m for m in sent if m[0] == "events"):
        events = decode(msg[1])
        assert {e.type for e in events} <= {"token", "session_end"}
        forwarded += sum(1 for e in events if e.type == "token")
        latest.update(msg[3] or {})
        # What a loss now would retract: the tokens forwarded of the attempt streaming
        # (agent, turn, attempt, deltas, chars, content_chars), or nothing.
        state = latest.get("s1")
        if state is not None and state[2] == 0:
            assert state[:4] == ("a", 0, 0, forwarded) and forwarded <= 2
        elif state is not None:
            assert state[:4] == ("a", 0, 1, forwarded - 2)
        else:
            assert forwarded in (0, 2, 5)  # before, between the attempts, after the turn
        if state is not None:
            assert state[4] == state[5] > 0  # its characters: all answer text
    assert forwarded == 5 and latest["s1"] is None  # the turn ended: nothing to retract


class _RayLauncher:
    """What :class:`Reruns` asks of a Ray launcher: lost sessions run again."""

    rerun_lost = True

    def ended(self, w: WorkerHandle, how: str = "ended") -> tuple[str, int | None]:
        return f"ray actor {w.index} died", None


class _RayRun(Reruns):
    """A sharded run on Ray with no store, as far as re-running a lost actor's sessions."""

    def __init__(self) -> None:
        self.sessions = [Agent(name="a", model="m").session("t", session_id="s1")]
        self.results, self.reruns, self.blobs = [None], [0], [b""]
        self.emitted: list[Event] = []
        self.bus = cast("EventBus", SimpleNamespace(emit=self.emitted.append))
        self.launcher = cast("Launcher", _RayLauncher())
        self.durable, self.cancelling, self.open_turns = None, False, OpenTurns()
        self.spawned: list[list[int]] = []

    def spawn(self, shard: list[int]) -> WorkerHandle:
        self.spawned.append(shard)
        return WorkerHandle(index=1, sessions=shard, send=lambda msg: None)


def test_on_ray_without_a_store_only_the_unfinished_turn_is_discarded() -> None:
    """The lost actor had streamed turn 0 (ended) and 3 tokens of turn 1: its session
    starts again from turn 0 on a new actor. Only turn 1's tokens are discarded — turn 0
    streams again with no discard before it, as docs/events.md and docs/scale-out.md say
    (they said the lost worker's turn was discarded before it "streams again", with
    "from its start on Ray", as if nothing else came again)."""
    run = _RayRun()
    assert run.open_turns is not None
    run.open_turns.update({"s1": ("a", 0, 0, 5, 20, 20)})
    run.open_turns.update({"s1": None})  # turn 0 ended
    run.open_turns.update({"s1": ("a", 1, 0, 3, 9, 9)})
    assert not run.rerun(WorkerHandle(index=0, sessions=[0], send=lambda msg: None))
    assert run.spawned == [[0]]  # from its start: no store
    (discard,) = run.emitted
    assert isinstance(discard, AttemptDiscardedEvent)
    assert (discard.turn, discard.attempt, discard.deltas, discard.retried) == (1, 0, 3, True)
    docs = Path(__file__).parents[2] / "docs"
    events = " ".join((docs / "events.md").read_text().split())
    assert "On Ray without a store, a lost actor's sessions start again from their first" in events
    assert "only the turn that was unfinished is discarded" in events
    scale_out = " ".join((docs / "scale-out.md").read_text().split())
    assert "their events come a second time, with no `AttemptDiscardedEvent` before" in scale_out


class _ProcessLauncher:
    def ended(self, w: WorkerHandle, how: str = "ended") -> tuple[str, int | None]:
        return f"worker {w.index} (pid 1) was killed by SIGKILL", -9


def _lost_error_turn(open_turns: OpenTurns | None) -> int | None:
    """The turn of the ErrorEvent session s1 fails with, its worker lost."""
    s = Agent(name="a", model="m").session("t", session_id="s1")
    emitted: list[Event] = []
    bus = cast("EventBus", SimpleNamespace(emit=emitted.append))
    worker = WorkerHandle(index=0, sessions=[0], send=lambda msg: None)
    launcher = cast("Launcher", _ProcessLauncher())
    fail_missing([s], [None], [worker], bus, "error", launcher, open_turns=open_turns)
    (error,) = [e for e in emitted if isinstance(e, ErrorEvent)]
    return error.turn


def test_a_lost_sessions_error_names_its_turn_only_when_tokens_are_read() -> None:
    """Lost mid turn 1, s1's ErrorEvent names turn 1 when token events are read (its
    worker said what it streamed), and no turn otherwise, nor when it was lost between
    turns: the ErrorEvent reference says so (it said the turn being worked on)."""
    streaming = OpenTurns()
    streaming.update({"s1": ("a", 1, 0, 3, 9, 9)})
    between = OpenTurns()
    between.update({"s1": ("a", 0, 0, 3, 9, 9)})
    between.update({"s1": None})  # turn 0 ended: its tool runs
    assert _lost_error_turn(streaming) == 1
    assert _lost_error_turn(None) is None  # nobody reads tokens
    assert _lost_error_turn(between) is None
    doc = " ".join((Path(__file__).parents[2] / "docs" / "events.md").read_text().split())
    assert "known only when token events are read, and `None` otherwise" in doc
    assert "known only when token events are read" in " ".join((ErrorEvent.__doc__ or "").split())


def test_a_retried_discard_of_a_lost_worker_has_no_retry_event_and_says_so() -> None:
    """A lost worker's discard is ``retried`` (its turn streams again on a new worker)
    though no RetryEvent follows: ``retried`` was documented as "whether a RetryEvent
    follows"."""
    run = _RayRun()
    assert run.open_turns is not None
    run.open_turns.update({"s1": ("a", 0, 0, 3, 9, 9)})
    run.rerun(WorkerHandle(index=0, sessions=[0], send=lambda msg: None))
    assert [(e.type, getattr(e, "retried", None)) for e in run.emitted] == [
        ("attempt_discarded", True)
    ]  # and nothing else: the new worker's tokens follow
    doc = " ".join((Path(__file__).parents[2] / "docs" / "events.md").read_text().split())
    assert "| `retried` | `bool` | whether a `RetryEvent` follows |" not in doc
    assert "no `RetryEvent`: the new worker's tokens of the turn follow" in doc
    docstring = " ".join((AttemptDiscardedEvent.__doc__ or "").split())
    assert "none does: the new worker's tokens of the turn follow" in docstring


async def test_a_turn_end_that_fills_a_batch_closes_its_attempt_in_that_batch() -> None:
    """The worker's watch reads each event before the forwarder, so the batch a turn's end
    fills says that attempt is over: the parent, losing the worker just after, does not
    retract a turn whose end it delivered."""
    from agentflow._event_bus import EventBus
    from agentflow._events import TurnEndEvent
    from agentflow._turn_events import WATCH, TurnEvents
    from agentflow._workers import _worker
    from agentflow._workers._open_turns import OpenTurns

    class _Run:
        def __init__(self) -> None:
            self.sent: list[tuple[object, ...]] = []

        def send(self, message: tuple[object, ...]) -> None:
            self.sent.append(message)

        def counts(self) -> dict[str, object]:
            return {}

    run = _Run()
    forwarder = _worker._Forwarder(run, {"token", "turn_end", "session_end"})  # type: ignore[arg-type]
    assert forwarder.attempts is not None
    bus = EventBus(_worker.event_callbacks(forwarder))  # as WorkerRun subscribes them
    WATCH.set(forwarder.attempts)
    sink = TurnEvents(bus, "a", "s", 0).sink
    assert sink is not None
    for i in range(_worker._BATCH_EVENTS - 1):
        sink.on_delta("content", "x", i)
    bus.emit(TurnEndEvent(agent="a", session_id="s", turn=0, metrics=None, trace=None))  # type: ignore[arg-type]
    parent = OpenTurns()
    (batch,) = run.sent  # the turn's end filled it
    if batch[3] is not None:  # (None: no attempt open to tell of)
        parent.update(batch[3])  # type: ignore[arg-type]
    assert parent.discard("s", RuntimeError("lost"), retried=False) is None
