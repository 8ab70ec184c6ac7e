"""What a resumed attempt takes from the run's earlier attempts: their retries and the
time they ran (killed ones included), whether every session the run was created with is
recorded yet, and whether this attempt's clock is virtual (its time line then continues
where theirs ended). :class:`~agentflow.store._durable.DurableRun` reads them."""

from __future__ import annotations

import asyncio
from collections import Counter

from agentflow._errors import StoreError
from agentflow.store._protocol import Store
from agentflow.store._records import StoredRun
from agentflow.typing import Clock

__all__ = ["active_wall_s", "check_all_sessions", "stored_retries", "virtual_clock"]


async def check_all_sessions(store: Store, run: StoredRun) -> None:
    """Refuse to resume ``run`` while fewer of its sessions are recorded than it was
    created with (the store's optional ``declared_sessions``: ``PostgresStore``, whose
    ``create_run`` commits the run's row at once and its sessions in the batches that
    follow). A resume in that gap — another worker's ``Fleet.run`` just created the run —
    found no session left to run, returned an empty result and marked the run
    ``finished`` while that worker still ran it.

    Raises:
        StoreError: some sessions are not recorded (yet).
    """
    declared = getattr(store, "declared_sessions", None)
    if declared is None:
        return
    n = await declared(run.run_id)
    if len(run.sessions) < n:
        raise StoreError(
            f"run {run.run_id!r}: {len(run.sessions)} of its {n} sessions are recorded: the "
            "worker that created it is still writing them — resume it again in a moment — "
            "or was stopped before it could (the others were never recorded: run them "
            "again as a new run); nothing was resumed"
        )


def virtual_clock(clock: Clock) -> bool:
    """Whether ``clock`` reads the running loop's virtual time (a ``VirtualTimeLoop``:
    the loop with a ``clock_ns``, as ``loop_clock`` or ``loop.clock_ns`` read it)."""
    loop_ns = getattr(asyncio.get_running_loop(), "clock_ns", None)
    return callable(loop_ns) and abs(clock() - int(loop_ns())) < 1_000


def stored_retries(run: StoredRun) -> int:
    """The retries of the run's attempts so far: what one that ended cleanly recorded
    at its end (every retry, those of turns that finally failed included); for one that
    was killed, the failed attempts of the turns it recorded."""
    in_turns: Counter[int] = Counter()
    for s in run.sessions:
        for t in s.turns:
            in_turns[t.attempt] += t.failed_attempts
    total = 0
    for a in run.attempts:
        n = in_turns.pop(a.attempt, 0)
        total += max(n, a.retries) if a.status is not None else n
    return total + sum(in_turns.values())


def active_wall_s(run: StoredRun) -> float:
    """Time the earlier attempts ran, on their fleet's clock: to their recorded end, or
    — for one that was killed — to the end of the last turn it recorded."""
    last_end: dict[int, int] = {}
    for s in run.sessions:
        for t in s.turns:
            last_end[t.attempt] = max(last_end.get(t.attempt, 0), t.trace.end_ns)
    total = 0
    for a in run.attempts:
        if a.wall_s is not None:
            total += int(a.wall_s * 1e9)
        elif a.attempt in last_end:
            total += max(0, last_end[a.attempt] - a.clock_ns)
    return total / 1e9
