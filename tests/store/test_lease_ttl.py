"""A lease's length is checked where it is given — Fleet(lease_ttl_s=...), a store's
claim and renew, SQLiteStore(lease_ttl_s=...): a finite number of seconds from 1 ms on,
else a ConfigError naming it. inf or nan used to fail on the writer thread with a bare
OverflowError/ValueError, and a ttl under 1 ns was stored as 0 ns: a lease already
expired when taken, which a second owner then got too."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from agentflow import ConfigError
from agentflow._fleet_checks import check_scale_out
from agentflow.store import LeaseOwner, PostgresStore, SQLiteStore, Store

BAD = [float("inf"), float("nan"), 1e-10, 0.0, -1.0, 1e10, "60", True]


def _check(store: Store, ttl: Any) -> None:
    async def main() -> None:
        await store.open()
        try:
            with pytest.raises(ConfigError, match=r"claim: ttl_s .*" + re.escape(repr(ttl))):
                await asyncio.wait_for(store.claim("r", ["s"], LeaseOwner(), ttl), 60)
            with pytest.raises(ConfigError, match=r"renew: ttl_s .*" + re.escape(repr(ttl))):
                await asyncio.wait_for(store.renew("r", LeaseOwner(), ttl), 60)
            assert await store.claim("r", ["s"], LeaseOwner(), 0.001) == []  # no such run
        finally:
            await store.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("ttl", BAD, ids=repr)
def test_sqlite_store_refuses_a_lease_ttl_that_cannot_work(tmp_path: Path, ttl: Any) -> None:
    _check(SQLiteStore(tmp_path / "runs.db"), ttl)
    with pytest.raises(ConfigError, match=r"SQLiteStore.lease_ttl_s .*" + re.escape(repr(ttl))):
        SQLiteStore(tmp_path / "other.db", lease_ttl_s=ttl)


@pytest.mark.parametrize("ttl", BAD, ids=repr)
def test_postgres_store_refuses_a_lease_ttl_that_cannot_work(postgres_db: str, ttl: Any) -> None:
    _check(PostgresStore(postgres_db), ttl)


@pytest.mark.parametrize("ttl", BAD, ids=repr)
def test_a_fleet_refuses_a_lease_ttl_that_cannot_work(ttl: Any) -> None:
    with pytest.raises(ConfigError, match=r"lease_ttl_s .*" + re.escape(repr(ttl))):
        check_scale_out(
            lease_ttl_s=ttl,
            workers=None,
            stop_timeout_s=1,
            heartbeat_timeout_s=None,
            backend="processes",
        )
