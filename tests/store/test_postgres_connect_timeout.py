"""``PostgresStore(connect_timeout_s=...)`` is what libpq is given, as libpq takes it:
whole seconds, rounded up (never a shorter bound than asked: 2.2 s used to be 2 s), and
no less than libpq's own 2 s floor — a shorter value is a ConfigError naming the setting
(0.5 s was accepted and silently meant 2 s)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow import ConfigError, StoreError
from agentflow.store import PostgresStore

psycopg = pytest.importorskip("psycopg")

DSN = "postgresql://worker@db.invalid/runs"


@pytest.mark.parametrize("value", [0.001, 0.5, 1, 1.999])
def test_a_connect_timeout_under_libpqs_two_seconds_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match=r"connect_timeout_s must be at least 2 s") as caught:
        PostgresStore(DSN, connect_timeout_s=value)
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize(("value", "given"), [(2, 2), (2.2, 3), (2.5, 3), (30, 30), (59.01, 60)])
def test_libpq_is_given_whole_seconds_rounded_up(
    value: float, given: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def connect(dsn: str, **kwargs: Any) -> object:
        seen.update(kwargs)
        raise psycopg.OperationalError("refused")

    monkeypatch.setattr(psycopg, "connect", connect)

    async def main() -> None:
        store = PostgresStore(DSN, connect_timeout_s=value)
        with pytest.raises(StoreError, match="refused"):
            await asyncio.wait_for(store.open(), 60)
        await store.aclose()

    asyncio.run(main())
    assert seen["connect_timeout"] == given
