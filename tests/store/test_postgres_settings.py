"""PostgresStore's settings: a value that could not work is a ConfigError naming it when
the store is made, not a failure later on the writer thread (or, worse, a timeout that
is silently none at all)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow import ConfigError, StoreError
from agentflow.store import PostgresStore

pytest.importorskip("psycopg")

DSN = "postgresql://worker@db.invalid/runs"


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("statement_timeout_s", 0.0005),  # was sent as statement_timeout=0: no timeout at all
        ("statement_timeout_s", float("inf")),
        ("statement_timeout_s", float("nan")),
        ("statement_timeout_s", 1e7),  # 10^10 ms: more than PostgreSQL's int
        ("connect_timeout_s", float("inf")),
        ("connect_timeout_s", 0),
        ("connect_timeout_s", 1.5),  # libpq waits at least 2 s: it was silently 2
        ("batch_interval_s", "0.1"),
        ("batch_interval_s", float("nan")),
        ("max_batch", True),
        ("schema", None),
    ],
)
def test_a_setting_that_cannot_work_is_a_config_error_naming_it(setting: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=setting) as caught:
        PostgresStore(DSN, **{setting: value})
    assert repr(value) in str(caught.value)


def test_the_smallest_and_largest_timeouts_are_accepted() -> None:
    PostgresStore(DSN, statement_timeout_s=0.001, connect_timeout_s=2)
    PostgresStore(DSN, statement_timeout_s=2147483.647, connect_timeout_s=2147483.647)


def test_an_open_that_fails_for_another_reason_says_why_in_a_store_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A failure on the writer thread that is not psycopg's (a bug, a setting the server
    # refuses in a way nobody foresaw) used to leave open() saying only "the store is
    # closed", or raise the bare error: it is a StoreError that keeps the reason.
    def broken(self: PostgresStore) -> object:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(PostgresStore, "_connect", broken)

    async def main() -> None:
        store = PostgresStore(DSN)
        with pytest.raises(StoreError, match="OverflowError: cannot convert float infinity"):
            await asyncio.wait_for(store.open(), 60)
        with pytest.raises(StoreError, match="cannot convert float infinity"):
            await store.flush()

    asyncio.run(main())


def test_the_ssl_key_passphrase_is_a_secret_like_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ``sslpassword`` (the passphrase of the client's SSL key) used to stay in store.dsn,
    # and so in repr() and every error message naming the store.
    import psycopg

    from agentflow._redact import redact

    store = PostgresStore(
        "host=db.invalid dbname=runs user=w password=s3cretpw sslkey=/k.pem"
        " sslpassword=KeyPassphrase99"
    )
    for shown in (store.dsn, repr(store), store._where):
        assert "KeyPassphrase99" not in shown
        assert "s3cretpw" not in shown
    assert "sslkey" in store.dsn
    assert "KeyPassphrase99" not in redact("failed: sslpassword=KeyPassphrase99")

    seen: dict[str, Any] = {}

    def connect(dsn: str, **kwargs: Any) -> object:  # libpq still gets it, to connect
        seen.update(kwargs, dsn=dsn)
        raise psycopg.OperationalError("refused")

    monkeypatch.setattr(psycopg, "connect", connect)

    async def main() -> None:
        with pytest.raises(StoreError, match="refused") as caught:
            await asyncio.wait_for(store.open(), 60)
        assert "KeyPassphrase99" not in str(caught.value)

    asyncio.run(main())
    assert seen["sslpassword"] == "KeyPassphrase99"
    assert seen["password"] == "s3cretpw"
    assert "KeyPassphrase99" not in seen["dsn"]
