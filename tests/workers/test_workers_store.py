"""``Fleet(workers=2, store=SQLiteStore(...))`` against the HTTP simulator on loopback: the
parent owns the store and writes what the workers' sessions record — the same rows as one
process records; a run cancelled partway, or whose parent was SIGKILLed, resumes on two
workers to the transcripts of an uninterrupted run, with no finished turn sent again and
none recorded twice; a SIGKILLed worker's sessions continue on a new worker from the
store."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pytest

from agentflow import (
    Agent,
    Event,
    Fleet,
    FleetEndEvent,
    FleetResult,
    FleetStartEvent,
    HTTPTransport,
    WorkerError,
)
from agentflow.store import SQLiteStore
from agentflow.testing import MockTransport, Reply, capture_events
from tests.sched.conftest import RecordingSim
from tests.store.fleets import contents
from tests.workers.test_workers import gone as _gone
from tests.workers.test_workers import workers_now
from tests.workers.tools import PLAIN, TOOL, workload

RUN = "run-w"


def sent_turns(sim: RecordingSim) -> Counter[tuple[str, int]]:
    """Chat requests the server received, per (session, messages in the request): one
    key per turn of a session (each turn's request is longer than the last)."""
    return Counter(
        (x.headers["X-Session-ID"], len(x.body["messages"]))
        for x in sim.seen
        if "X-Session-ID" in x.headers
    )


async def one_process_run(path: Path, run_id: str) -> FleetResult:
    """``workload(20)`` in one process on the simulator (seed 7), recorded as ``run_id``
    in a SQLite store at ``path``: what a worker run with a lost worker is compared with."""
    store = SQLiteStore(path)
    try:
        async with RecordingSim(seed=7) as sim, HTTPTransport(sim.base_url) as http:
            return await Fleet(http, max_concurrency=2, store=store).run(
                workload(20), run_id=run_id
            )
    finally:
        await store.aclose()


async def test_workers_record_what_one_process_records(tmp_path: Path) -> None:
    """Same seed, same sessions: the store of a two-worker run holds the same sessions,
    turns (assistant messages) and tool results as the store of a one-process run; both
    runs are finished, and the workers' run recorded each turn once."""
    stores = {}
    for name, workers in (("one", None), ("two", 2)):
        path = tmp_path / f"{name}.db"
        store = SQLiteStore(path)
        try:
            async with RecordingSim(seed=5) as sim, HTTPTransport(sim.base_url) as http:
                fleet = Fleet(http, max_concurrency=4, workers=workers, store=store)
                result = await fleet.run(workload(12), run_id=RUN)
            assert result.run_id == RUN
            assert not result.failed, [s.error for s in result.failed]
            assert await store.conflicts(RUN) == []
            (summary,) = [r for r in await store.runs() if r.run_id == RUN]
            assert summary.status == "finished"
        finally:
            await store.aclose()
        stores[name] = contents(path, RUN)
    one, two = stores["one"], stores["two"]
    assert len(one["sessions"]) == 12
    assert len(one["turns"]) == 18  # 6 plain sessions × 1 turn, 6 tool sessions × 2
    assert len(one["tools"]) == 6
    assert two == one


async def test_a_resumed_run_s_events_on_workers_describe_the_whole_run(tmp_path: Path) -> None:
    """A run with one failed session of four, resumed on two workers: the start event
    counts the run's four sessions, the end event carries the result ``resume`` returns
    (the run's id, every session, no start)."""
    store = SQLiteStore(tmp_path / "runs.db")
    try:

        def fails_one(req: Any) -> Reply:
            return Reply.error(400) if "question 1" in str(req.messages) else Reply.text("x")

        first = await Fleet(MockTransport(fails_one), store=store).run(workload(4), run_id=RUN)
        assert [s.status for s in first.sessions].count("error") == 1
        events = capture_events("fleet_start", "fleet_end")
        async with RecordingSim(seed=3) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, workers=2, store=store, callbacks=[events])
            result = await fleet.resume(RUN, agents=[PLAIN, TOOL])
    finally:
        await store.aclose()
    (start,) = events.of_type("fleet_start")
    assert isinstance(start, FleetStartEvent) and start.sessions == 4
    (end,) = events.of_type("fleet_end")
    assert isinstance(end, FleetEndEvent)
    assert end.result is result
    assert end.result.run_id == RUN and end.result.start_ns is None
    assert [s.session_id for s in end.result.sessions] == [f"s{i}" for i in range(4)]
    assert not end.result.failed


async def cut(
    path: Path, stop_after: int, backend: Literal["processes", "ray"] = "processes"
) -> tuple[Counter[tuple[str, int]], int]:
    """Run ``workload(16)`` on two workers (processes, or Ray actors) in a store,
    cancelled after ``stop_after`` turn ends; what the server was sent, and how many
    turns the store holds."""
    store = SQLiteStore(path)
    ended = 0
    first = asyncio.Event()

    def count(event: Event) -> None:
        nonlocal ended
        if event.type == "turn_end":
            ended += 1
            if ended >= stop_after:
                first.set()

    try:
        async with RecordingSim(seed=9) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(
                http, max_concurrency=2, workers=2, backend=backend, store=store, callbacks=[count]
            )
            task = asyncio.create_task(fleet.run(workload(16), run_id=RUN))
            await asyncio.wait_for(first.wait(), 120)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        run = await store.load(RUN)
    finally:
        await store.aclose()
    return sent_turns(sim), sum(len(s.turns) for s in run.sessions)


async def test_a_cancelled_run_resumes_on_workers_as_if_uninterrupted(tmp_path: Path) -> None:
    """Cancel a two-worker run after 5 turn ends, resume it with ``workers=2``: every
    session ends as in an uninterrupted one-process run (same messages and final
    output); the resumed run sent the server no turn the store already held; the store
    has each turn once, none refused as a duplicate; the run is finished."""
    async with RecordingSim(seed=9) as sim, HTTPTransport(sim.base_url) as http:
        whole = await Fleet(http, max_concurrency=2).run(workload(16))
    path = tmp_path / "cut.db"
    _, recorded = await cut(path, 5)
    assert 5 <= recorded < 24  # partway: some turns recorded, not all
    store = SQLiteStore(path)
    before = await store.load(RUN)
    done_before = {(s.session_id, i) for s in before.sessions for i in range(len(s.turns))}
    try:
        async with RecordingSim(seed=9) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, max_concurrency=2, workers=2, store=store)
            resumed: FleetResult = await fleet.resume(RUN, agents=[PLAIN, TOOL])
        after = await store.load(RUN)
        assert await store.conflicts(RUN) == []
    finally:
        await store.aclose()
    check_resumed(whole, resumed, sim, done_before)
    assert sum(len(s.turns) for s in after.sessions) == sum(len(s.turns) for s in whole.sessions)
    assert {s.status for s in after.sessions} == {"completed"}
    assert not multiprocessing.active_children()


def check_resumed(
    whole: FleetResult, resumed: FleetResult, sim: RecordingSim, done: set[tuple[str, int]]
) -> None:
    """A resumed ``workload(16)`` run ended as the uninterrupted ``whole`` did, and the
    server ``sim`` saw none of the turns ``done`` (recorded before the resume) and each
    other turn once."""
    assert not resumed.failed, [s.error for s in resumed.failed]
    assert [s.session_id for s in resumed.sessions] == [f"s{i}" for i in range(16)]
    for a, b in zip(whole.sessions, resumed.sessions, strict=True):
        assert (a.status, a.final_output, a.messages) == (b.status, b.final_output, b.messages)
        assert len(a.turns) == len(b.turns)
    # Turn i of a session is sent with a known number of messages: the resumed run sent
    # none of the turns recorded before it (a finished turn is not redone).
    by_len = {
        (s.session_id, _request_len(s.messages, i)): i
        for s in whole.sessions
        for i in range(len(s.turns))
    }
    sent = sent_turns(sim)
    resent = [(sid, by_len[(sid, n)]) for sid, n in sent if (sid, by_len[(sid, n)]) in done]
    assert resent == []
    assert all(c == 1 for c in sent.values())
    # ...and exactly the turns it did not hold: each once.
    assert sum(sent.values()) == 24 - len(done)


def _request_len(messages: list[dict[str, object]], turn: int) -> int:
    """How many messages turn ``turn``'s request carried: everything before that turn's
    assistant message (the ``turn``-th assistant message)."""
    seen = -1
    for n, m in enumerate(messages):
        if m["role"] == "assistant":
            seen += 1
            if seen == turn:
                return n
    raise AssertionError(f"no turn {turn}")


async def test_a_killed_parent_resumes_on_workers_as_if_uninterrupted(tmp_path: Path) -> None:
    """SIGKILL the parent of a two-worker run (a child process) after 6 turns: its
    workers die with it; resumed here with ``workers=2``, every session ends as in an
    uninterrupted run, the resumed run sent the server none of the turns the store held
    and each of the others once, and no turn is recorded twice."""
    async with RecordingSim(seed=9) as sim, HTTPTransport(sim.base_url) as http:
        whole = await Fleet(http, max_concurrency=2).run(workload(16))
    path = tmp_path / "killed.db"
    async with RecordingSim(seed=9) as sim:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.workers.store_child",
            sim.base_url,
            str(path),
            RUN,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        try:
            int(await asyncio.wait_for(proc.stdout.readline(), 60))
            turns = 0
            while turns < 6:
                line = await asyncio.wait_for(proc.stdout.readline(), 60)
                assert line.strip() == b"turn", line
                turns += 1
            workers = _children(proc.pid)
            assert len(workers) == 2
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL
    for _ in range(100):  # they die with their parent (PR_SET_PDEATHSIG)
        if all(_gone(p) for p in workers):
            break
        await asyncio.sleep(0.05)
    assert all(_gone(p) for p in workers)
    store = SQLiteStore(path)
    try:
        before = await store.load(RUN)
        done_before = {(s.session_id, i) for s in before.sessions for i in range(len(s.turns))}
        assert 0 < len(done_before) < 24
        async with RecordingSim(seed=9) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, max_concurrency=2, workers=2, store=store)
            resumed = await fleet.resume(RUN, agents=[PLAIN, TOOL])
        after = await store.load(RUN)
        assert await store.conflicts(RUN) == []
    finally:
        await store.aclose()
    assert not resumed.failed, [s.error for s in resumed.failed]
    for a, b in zip(whole.sessions, resumed.sessions, strict=True):
        assert (a.status, a.final_output, a.messages) == (b.status, b.final_output, b.messages)
    assert sum(len(s.turns) for s in after.sessions) == 24
    assert [a.attempt for a in after.attempts] == [0, 1]
    by_len = {
        (s.session_id, _request_len(s.messages, i)): i
        for s in whole.sessions
        for i in range(len(s.turns))
    }
    sent = sent_turns(sim)
    assert not [k for k in sent if (k[0], by_len[k]) in done_before]
    assert all(c == 1 for c in sent.values())
    assert sum(sent.values()) == 24 - len(done_before)


def _children(pid: int) -> list[int]:
    """Pids of ``pid``'s live worker processes (``spawn``-started children; not
    multiprocessing's resource tracker), from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and b"spawn_main" in cmdline:
            out.append(int(entry))
    return out


async def test_a_killed_worker_s_sessions_continue_from_the_store(tmp_path: Path) -> None:
    """With a store, SIGKILL the worker of a tool session right after that session's
    first turn ended (its record reached the parent before the event): the run
    completes every session, with the transcripts of one process; a new worker continued
    the killed session after its recorded first turn (the server saw that turn once);
    the store holds the rows a one-process run records, each turn once."""
    one_path = tmp_path / "one.db"
    one = await one_process_run(one_path, RUN)
    victims: list[tuple[str, int]] = []

    def kill_one(event: Event) -> None:
        # s<k> runs on worker k % 2 (dealt round-robin); s<odd> call a tool first.
        if event.type == "turn_end" and event.turn == 0 and not victims:
            k = int(event.session_id[1:])
            if k % 2 == 1:
                name = "agentflow-worker-1"
                (pid,) = (p.pid for p in multiprocessing.active_children() if p.name == name)
                assert pid is not None
                victims.append((event.session_id, pid))
                os.kill(pid, signal.SIGKILL)

    path = tmp_path / "killed.db"
    store = SQLiteStore(path)
    try:
        async with RecordingSim(seed=7) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, max_concurrency=2, workers=2, store=store, callbacks=[kill_one])
            result = await fleet.run(workload(20), run_id=RUN)
        assert await store.conflicts(RUN) == []
    finally:
        await store.aclose()
    assert victims, "no tool session ended a first turn on worker 1"
    assert not result.failed, [s.error for s in result.failed]
    for a, b in zip(one.sessions, result.sessions, strict=True):
        assert (a.status, a.final_output, a.messages) == (b.status, b.final_output, b.messages)
    ((victim, pid),) = victims
    per_turn = Counter(
        len(x.body["messages"]) for x in sim.seen if x.headers.get("X-Session-ID") == victim
    )
    assert per_turn[2] == 1  # its recorded first turn: not sent again
    assert sum(c for n, c in per_turn.items() if n > 2) >= 1
    assert contents(path, RUN) == contents(tmp_path / "one.db", RUN)
    assert _gone(pid)
    assert not multiprocessing.active_children()


async def test_sessions_a_crashed_worker_never_ran_are_recorded_as_errors(tmp_path: Path) -> None:
    """A worker that crashes on its own (it cannot import its sessions' tool: a module
    only the parent has) ends its sessions on the parent with a WorkerError: the store
    records each as ``error`` with that error's text, as one process records a session
    that fails — not ``pending`` with no error."""
    module = types.ModuleType("agentflow_test_store_parent_only")
    exec('def probe(key: str) -> str:\n    """Parent-only."""\n    return key\n', module.__dict__)
    sys.modules[module.__name__] = module
    store = SQLiteStore(tmp_path / "crash.db")
    try:
        agent = Agent(name="notebook", model="m", tools=[module.probe])
        sessions = [agent.session(f"q{i}", session_id=f"n{i}") for i in range(2)]
        async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
            result = await Fleet(http, workers=2, store=store).run(sessions, run_id=RUN)
        assert [s.status for s in result.sessions] == ["error", "error"]
        run = await store.load(RUN)
        for stored, ended in zip(run.sessions, result.sessions, strict=True):
            assert isinstance(ended.error, WorkerError)
            assert stored.status == "error"
            assert stored.error is not None
            assert "No module named 'agentflow_test_store_parent_only'" in stored.error
    finally:
        del sys.modules[module.__name__]
        await store.aclose()
    assert not workers_now()


def test_an_end_a_worker_recorded_is_not_overwritten_when_it_dies_before_its_event() -> None:
    """A worker records a session's end (the record reaches the parent and is written),
    then dies before that session's end event does: the parent ends the session without
    a result, but does not record an error over the end the worker recorded (a completed
    session's stored end was overwritten, its final output lost, and a resume ran it
    again). The race is a matter of milliseconds, so fail_missing is called directly,
    with a recorder that notes what it is asked to write."""
    from agentflow._event_bus import EventBus
    from agentflow._workers._broker import WorkerHandle
    from agentflow._workers._results import fail_missing

    class Dead:
        exitcode, pid = -9, 1

    class Launcher:
        def ended(self, w: WorkerHandle, how: str = "ended") -> tuple[str, int | None]:
            return f"worker {w.index} {how}", -9

    class Noted:
        def __init__(self) -> None:
            self.ended: list[str] = []

        def session_ended(self, session: Any, result: Any) -> None:
            self.ended.append(session.session_id)

    agent = Agent(name="a", model="m")
    sessions = [agent.session("x", session_id=f"s{i}") for i in range(2)]
    worker = WorkerHandle(0, [0, 1], send=lambda msg: None, process=Dead())
    noted = Noted()
    results: list[Any] = [None, None]
    launcher: Any = Launcher()
    recorder: Any = noted
    fail_missing(sessions, results, [worker], EventBus(), "error", launcher, recorder, {"s0"})
    assert noted.ended == ["s1"]  # s0's end, recorded by its worker, stands
    assert [r.status for r in results] == ["error", "error"]
