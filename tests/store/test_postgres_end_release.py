"""An attempt that ends while records it wrote wait to be committed (the server refuses
their batch) keeps its sessions' leases — its release is refused — and they stay renewed
past its end, until the held records are committed and the leases given back. They used
to stop being renewed as the attempt ended: another worker took the sessions over once
they expired, saw none of those records, and ran their tool calls again."""

from __future__ import annotations

import asyncio

import psycopg

from agentflow.embedded import run_virtual
from agentflow.store import LeaseOwner, PostgresStore

from ..wait import wait_for
from .fleets import end_with_tool_results_held

TTL_S = 1.5


def _leases(dsn: str) -> tuple[int, dict[str, tuple[str | None, int | None]]]:
    """The server's clock (ns) and each session's (lease owner, expiry)."""
    with psycopg.connect(dsn) as conn:
        now = conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1e9)::bigint")
        row = now.fetchone()
        assert row is not None
        rows = conn.execute(
            "SELECT session_id, lease_owner, lease_expires_ns FROM agentflow.sessions"
        ).fetchall()
    return int(row[0]), {str(sid): (owner, expires) for sid, owner, expires in rows}


def test_leases_kept_at_an_attempts_end_stay_renewed_until_released(postgres_db: str) -> None:
    async def main() -> None:
        a = PostgresStore(postgres_db, statement_timeout_s=0.2)
        b = PostgresStore(postgres_db)
        blocker, transport = await end_with_tool_results_held(postgres_db, a, TTL_S)
        at_end, leases = await asyncio.to_thread(_leases, postgres_db)
        owners = {owner for owner, _ in leases.values()}
        assert len(owners) == 1 and None not in owners  # kept: the records wait
        expiry = max(e for _, e in leases.values() if e is not None)

        def past_first_expiry() -> bool:
            return _leases(postgres_db)[0] > expiry

        await asyncio.to_thread(wait_for, past_first_expiry, "the leases' first expiry")
        now, leases = await asyncio.to_thread(_leases, postgres_db)
        assert all(o in owners and e is not None and e > now for o, e in leases.values())
        assert await b.claim("r", ["s0", "s1"], LeaseOwner(), 60) == []  # still a's

        blocker.execute("ROLLBACK")  # the server takes the held records now

        def released() -> bool:
            return all(o is None for o, _ in _leases(postgres_db)[1].values())

        await asyncio.to_thread(wait_for, released, "the kept leases' release")
        run = await b.load("r")
        assert all(s.status == "completed" for s in run.sessions)
        assert await b.conflicts("r") == []
        blocker.close()
        await a.aclose()
        await b.aclose()
        await transport.aclose()
        assert at_end <= now

    run_virtual(main())
