"""How PostgresStore connects: what the DSN (and libpq's environment) asks of the
connection is kept, and the store's own statement timeout is added to it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow.store import PostgresStore


def _settings(dsn: str, **kwargs: Any) -> tuple[str, ...]:
    async def main() -> tuple[str, ...]:
        store = PostgresStore(dsn, **kwargs)
        await asyncio.wait_for(store.open(), 60)
        try:
            return await store._call(
                lambda c: tuple(
                    str(c.execute(f"SHOW {name}").fetchone()[0])
                    for name in (
                        "lock_timeout",
                        "work_mem",
                        "application_name",
                        "statement_timeout",
                    )
                )
            )
        finally:
            await store.aclose()

    return asyncio.run(main())


def test_the_dsns_options_and_application_name_are_kept(postgres_db: str) -> None:
    # They used to be replaced: the store passed options='-c statement_timeout=…' and
    # application_name='agentflow' as keywords, which override the DSN's own.
    dsn = postgres_db + (
        "?options=-c%20lock_timeout%3D1234%20-c%20work_mem%3D7MB&application_name=mine"
    )
    lock, work_mem, name, timeout = _settings(dsn, statement_timeout_s=42)
    assert (lock, work_mem, name) == ("1234ms", "7MB", "mine")
    assert timeout == "42s"


def test_pgoptions_is_kept_and_the_name_defaults_to_agentflow(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=5MB")
    _, work_mem, name, timeout = _settings(postgres_db, statement_timeout_s=1.5)
    assert (work_mem, name, timeout) == ("5MB", "agentflow", "1500ms")
