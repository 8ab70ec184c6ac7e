"""A DSN libpq cannot parse is a ConfigError that says what is wrong with it — the key
or URI query parameter it does not know, the missing ``=`` — where it only said that the
DSN was not a connection string; and never with the DSN's password in it."""

from __future__ import annotations

import pytest

from agentflow import ConfigError
from agentflow.store import PostgresStore

pytest.importorskip("psycopg")


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("host=db.invalid user=w password=Sekret-41 bogus=1", 'invalid connection option "bogus"'),
        (
            "postgresql://w:Sekret-41@db.invalid/runs?colour=1",
            'invalid URI query parameter: "colour"',
        ),
        ("postgresq://w:Sekret-41@db.invalid/runs", 'missing "="'),
        ("host=db.invalid password='Sekret-41", "unterminated quoted string"),
        ("postgresq://db.invalid/runs?password=Sekret-41", "invalid connection option"),
        ("x password=Sekret-41 sslpassword='Sekret-41 y' z", 'missing "=" after "x"'),
    ],
)
def test_a_dsn_libpq_cannot_parse_says_why_without_its_password(dsn: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"PostgresStore\.dsn is not a libpq") as caught:
        PostgresStore(dsn)
    message = str(caught.value)
    assert says in message
    assert "Sekret" not in message


def test_a_secret_a_parse_error_quotes_is_masked() -> None:
    # (libpq quotes what follows a token it could not parse: a password that follows one
    # was never registered with the redaction — the DSN could not be parsed.)
    from agentflow.store._pg_conn import _unquoted_secrets

    quoted = ValueError("""missing "=" after "x password = 'Sek ret' sslpassword=Sekret&y" in""")
    assert _unquoted_secrets(quoted) == (
        """missing "=" after "x password = *** sslpassword=***&y" in"""
    )
