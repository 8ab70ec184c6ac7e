"""Shared by the store tests: agents with deterministic tools, fleets on the simulator
(in-process, virtual time), and a store's contents in a comparable form."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from agentflow import Agent, Event, Fleet, FleetResult
from agentflow.embedded import SimTransport, loop_clock
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.store import SQLiteStore, Store, StoredRun
from agentflow.typing import Transport


def lookup(key: str, count: int = 1) -> str:
    """Look a key up.

    Args:
        key: what to look up.
        count: how many values.
    """
    return f"{count} value(s) of {key!r}"


def agents(n: int = 3) -> list[Agent]:
    """``n`` agents with one tool and a shared prefix."""
    return [
        Agent(
            name=f"agent-{i}",
            model="sim",
            instructions="You look things up. " * 10,
            tools=[lookup],
            params={"max_tokens": 32},
            max_turns=8,
        )
        for i in range(n)
    ]


def driver(seed: int = 3, rounds: int = 3) -> EngineDriver:
    """The simulator's engine, in-process: 1–2 tool calls a turn, short answers."""
    engine = Engine(
        "deepseek-v4.1-flash-gb300",
        seed=seed,
        textgen=TextGenConfig(
            tool_rounds=rounds, answer_tokens=(8, 24), tool_calls_per_turn=(1, 2)
        ),
    )
    return EngineDriver(engine)


def contents(path: Path, run_id: str) -> dict[str, Any]:
    """What a run's rows say, without times and attempts: per session its status, final
    output and turns' messages, and every tool result by call id."""
    conn = sqlite3.connect(path)
    try:
        sessions = {
            sid: (st, final, n)
            for sid, st, final, n in conn.execute(
                "SELECT session_id, status, final_output, turns FROM sessions WHERE run_id=?",
                (run_id,),
            )
        }
        turns = sorted(
            conn.execute(
                "SELECT session_id, turn, message, rewrite FROM turns WHERE run_id=?", (run_id,)
            )
        )
        tools = sorted(
            conn.execute(
                "SELECT session_id, call_id, turn, name, arguments, output, is_error "
                "FROM tool_calls WHERE run_id=?",
                (run_id,),
            )
        )
    finally:
        conn.close()
    return {"sessions": sessions, "turns": turns, "tools": tools}


async def load_run(store: Path | Store, run_id: str = "run-1") -> StoredRun:
    """Run ``run_id`` as ``store`` (a path: an :class:`SQLiteStore` there) holds it; the
    store is opened and closed here."""
    store = SQLiteStore(store) if isinstance(store, Path) else store
    try:
        await store.open()
        return await store.load(run_id)
    finally:
        await store.aclose()


async def stored(
    path: Path | Store,
    transports: Transport | Sequence[Transport],
    go: Callable[[Fleet], Awaitable[FleetResult]],
    *,
    cut: Callable[[Event], bool] | None = None,
    events: list[Event] | None = None,
    **fleet: Any,
) -> FleetResult | None:
    """``go(fleet)`` (its ``run`` or ``resume``) on a fleet of ``transports`` (closed
    after) recording into a ``SQLiteStore`` at ``path`` (or into ``path``, a store:
    closed after too), with the fleet's keyword arguments ``fleet`` and the loop's
    clock; every event is appended to ``events``. Cancelled at the first event ``cut``
    is true of: ``None`` is returned then."""
    store = SQLiteStore(path) if isinstance(path, Path) else path
    task: asyncio.Task[FleetResult] | None = None

    def watch(event: Event) -> None:
        if events is not None:
            events.append(event)
        if cut is not None and cut(event) and task is not None:
            task.cancel()

    fleet.setdefault("clock", loop_clock)
    members = list(transports) if isinstance(transports, Sequence) else [transports]
    try:
        task = asyncio.ensure_future(go(Fleet(transports, store=store, callbacks=[watch], **fleet)))
        try:
            return await task
        except asyncio.CancelledError:
            if cut is None:
                raise
            return None
    finally:
        await store.aclose()
        for transport in members:
            await transport.aclose()


def after_turn_ends(n: int | None) -> Callable[[Event], bool] | None:
    """A ``cut`` for :func:`stored`: true at the ``n``-th turn end (``None``: never)."""
    if n is None:
        return None
    ended = 0

    def cut(event: Event) -> bool:
        nonlocal ended
        ended += event.type == "turn_end"
        return event.type == "turn_end" and ended == n

    return cut


async def run_cut(
    path: Path, members: list[Agent], sessions: int, stop_after: int | None
) -> FleetResult | None:
    """Run ``sessions`` sessions of ``members`` (round robin) as run ``run-1`` in a
    SQLite store on the simulator; with ``stop_after``, cancel the run after that many
    turn ends and return ``None``."""
    n = len(members)
    todo = [members[i % n].session(f"task {i}", session_id=f"s{i:02d}") for i in range(sessions)]
    return await stored(
        path,
        SimTransport(driver()),
        lambda fleet: fleet.run(todo, run_id="run-1"),
        cut=after_turn_ends(stop_after),
        max_concurrency=4,
    )


async def resume(
    path: Path, members: list[Agent], events: list[Event] | None = None
) -> FleetResult:
    """Resume run ``run-1`` of the SQLite store at ``path`` on a fresh simulator."""
    result = await stored(
        path,
        SimTransport(driver()),
        lambda fleet: fleet.resume("run-1", agents=members),
        events=events,
        max_concurrency=4,
    )
    assert result is not None
    return result


async def run_ids(store: Store) -> list[str]:
    """The ids of the runs ``store`` holds (opened, then closed)."""
    try:
        await store.open()
        return [r.run_id for r in await store.runs()]
    finally:
        await store.aclose()


def only_run_id(db: Path) -> str:
    """The id of the one run the store at ``db`` holds."""
    conn = sqlite3.connect(db)
    try:
        ((run_id,),) = conn.execute("SELECT run_id FROM runs")
    finally:
        conn.close()
    return str(run_id)


async def end_with_tool_results_held(
    dsn: str, store: Store, ttl_s: float
) -> tuple[Any, SimTransport]:
    """Run two sessions (``s0``, ``s1``, run ``r``) recorded in the PostgreSQL ``store``
    while the server refuses every batch with a tool result — a table lock taken at the
    first turn's end, behind which the store's statements time out (give it a short
    ``statement_timeout_s``): the run ends in a ``StoreError``, its records held, its
    release refused. The lock's connection (``ROLLBACK`` it to let the records in) and
    the transport, for the caller to close."""
    import psycopg

    from agentflow import StoreError

    blocker = await asyncio.to_thread(lambda: psycopg.connect(dsn))
    locked: list[bool] = []

    def lock(event: Event) -> None:
        if event.type == "turn_end" and not locked:
            locked.append(True)
            blocker.execute("BEGIN")
            blocker.execute("LOCK TABLE agentflow.tool_calls IN EXCLUSIVE MODE")

    transport = SimTransport(driver())
    team = agents(2)
    sessions = [team[i].session(f"task {i}", session_id=f"s{i}") for i in range(2)]
    fleet = Fleet(transport, clock=loop_clock, store=store, callbacks=[lock], lease_ttl_s=ttl_s)
    try:
        await fleet.run(sessions, run_id="r")
    except StoreError:
        return blocker, transport
    blocker.close()
    await transport.aclose()
    raise AssertionError("the run ended without the StoreError of its held records")
