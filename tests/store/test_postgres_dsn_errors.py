"""A DSN libpq cannot parse is a ConfigError that says what is wrong with it — the key
or URI query parameter it does not know, the missing ``=`` — where it only said that the
DSN was not a connection string; and never with the DSN's password in it."""

from __future__ import annotations

import pytest

from agentflow import ConfigError
from agentflow._redact import redact
from agentflow.store import PostgresStore

pytest.importorskip("psycopg")


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("host=db.invalid bogus=1 user=w password=Sekret-41", 'invalid connection option "bogus"'),
        (
            "postgresql://w:Sekret-41@db.invalid/runs?colour=1",
            'invalid URI query parameter: "colour"',
        ),
        ("postgresq://w:Sekret-41@db.invalid/runs", 'missing "=" after "…"'),
        ("host=db.invalid password='Sekret-41", "unterminated quoted string"),
        ("postgresq://db.invalid/runs?password=Sekret-41", "invalid connection option"),
        ("x password=Sekret-41 sslpassword='Sekret-41 y' z", 'missing "=" after "…"'),
    ],
)
def test_a_dsn_libpq_cannot_parse_says_why_without_its_password(dsn: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"PostgresStore\.dsn is not a libpq") as caught:
        PostgresStore(dsn)
    message = str(caught.value)
    assert says in message
    assert "Sekret" not in message


@pytest.mark.parametrize(
    "dsn",
    [
        "host=db password:Sekret-41 dbname=x",  # ':' for '='
        "host=db password=correct Sekret-41",  # an unquoted password with a space
        "postgresql://u@db/runs?password=Sekret%zz41",  # a bad percent-escape
        "postgresql://u@db/runs?sslpassword=Sekret%zz41",
        "Sekret-41",  # the password alone
        "host=h user=bob password=correct Sekret=battery",  # its second word, read as a key
        "postgresql://bob@h/db?password=s3cr&Sekret=x",  # an '&' in it, likewise
        "host=Sekret.example password=correct Sekret=battery",  # the word also before it
    ],
)
def test_no_part_of_the_dsn_a_parse_error_quotes_is_shown(dsn: str) -> None:
    # (libpq quotes the token it could not parse: here a password, never registered with
    # the redaction — the DSN could not be parsed. Only a key name it quotes is kept.)
    with pytest.raises(ConfigError, match=r"PostgresStore\.dsn is not a libpq") as caught:
        PostgresStore(dsn)
    assert '"…"' in str(caught.value)
    for shown in (str(caught.value), repr(caught.value)):
        assert "Sekret" not in shown
    # nor in the exception it chains: a traceback would print it
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_only_a_quoted_key_name_or_separator_is_kept() -> None:
    from agentflow.store._pg_conn import _unquoted_secrets

    said = ValueError("""missing "=" after "x password = 'Sek ret' y" in connection info""")
    assert _unquoted_secrets(said, "") == 'missing "=" after "…" in connection info'
    said = ValueError('unexpected character "=" at position 3 in URI (expected ":" or "/")')
    assert _unquoted_secrets(said, "") == (
        'unexpected character "…" at position 3 in URI (expected ":" or "/")'
    )
    said = ValueError('invalid connection option "passwd"')
    assert _unquoted_secrets(said, "") == 'invalid connection option "passwd"'
    # a key name after a password is masked: a password's second word reads as one
    said = ValueError('invalid connection option "horse"')
    dsn = "password=correct horse=battery"
    assert _unquoted_secrets(said, dsn) == 'invalid connection option "…"'
    said = ValueError('invalid connection option "bogus"')
    assert _unquoted_secrets(said, "bogus=1 password=x") == 'invalid connection option "bogus"'


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://w:Sekret/Tail@db.invalid/runs",  # read as host w, port Sekret
        "postgresql://w:4141/Tail@db.invalid:5432/runs",  # port 4141, database Tail@…
        "postgresql://w:Sekret@Tail@db.invalid/runs",  # host Tail@db.invalid
        "postgres://w/x:Sekret@db.invalid/runs",  # a '/' in the user name
    ],
)
def test_a_url_whose_password_holds_a_slash_or_an_at_is_refused_without_it(dsn: str) -> None:
    # libpq ends a URL's user:password@ at the first '@' or '/': the rest of the password
    # became the host, the port or the database name, shown by dsn, repr and every error.
    with pytest.raises(ConfigError, match="percent-encode") as caught:
        PostgresStore(dsn)
    message = str(caught.value)
    for part in ("Sekret", "Tail", "4141"):
        assert part not in message


def test_a_percent_encoded_password_with_a_slash_and_an_at_is_taken() -> None:
    store = PostgresStore("postgresql://w:Sekret%2FTail%40x@db.invalid:5432/runs")
    assert store.dsn == "user=w dbname=runs host=db.invalid port=5432"
    assert "Sekret" not in repr(store)


def test_a_database_name_with_an_at_is_taken() -> None:
    # libpq reads postgresql://u@h/my@db as the database my@db; it was refused, the message
    # speaking only of the user name and password.
    store = PostgresStore("postgresql://w@db.invalid:5432/my@db")
    assert store.dsn == "user=w dbname=my@db host=db.invalid port=5432"
    assert (
        PostgresStore("postgresql://w@db.invalid/my%40db:x").dsn
        == "user=w dbname=my@db:x host=db.invalid"
    )


def test_a_refused_database_name_is_named_with_its_escape() -> None:
    with pytest.raises(ConfigError, match="percent-encode") as caught:
        PostgresStore("postgresql://w@db.invalid/my@db:x")
    assert "'@' as %40 in a database name" in str(caught.value)


def test_a_password_split_at_a_slash_with_a_port_is_refused() -> None:
    # No user@ before the host: libpq reads postgresql://bob:4141/Sekret@db.invalid as host
    # bob, port 4141, database Sekret@db.invalid -- the password in dsn and the repr.
    with pytest.raises(ConfigError, match="percent-encode") as caught:
        PostgresStore("postgresql://bob:4141/Sekret@db.invalid")
    assert "Sekret" not in str(caught.value)
    assert (
        PostgresStore("postgresql://u@db.invalid/my@db").dsn
        == "user=u dbname=my@db host=db.invalid"
    )


@pytest.mark.parametrize(
    ("dsn", "read"),
    [
        ("postgresql://db.invalid/my@db", "dbname=my@db host=db.invalid"),
        ("postgresql:///my@db?host=/var/run/postgresql", "dbname=my@db host=/var/run/postgresql"),
    ],
)
def test_a_database_name_with_an_at_and_no_user_nor_port_is_taken(dsn: str, read: str) -> None:
    """Refused once no ``user@`` came first: a split password leaves ``user:`` in the host
    part, which these have not (the socket-only form has no host at all)."""
    assert PostgresStore(dsn).dsn == read


def test_the_refusal_shows_where_the_escapes_go() -> None:
    """Its example of a URL's user name and password was masked as one (``USER:PASSWORD@``
    cut out of ``postgresql://USER:PASSWORD@HOST/DB``)."""
    with pytest.raises(ConfigError) as caught:
        PostgresStore("postgresql://db.invalid:5432/my@db")
    assert "the USER:PASSWORD before '@HOST'" in str(caught.value)


def test_a_user_name_alone_is_not_masked_as_a_secret() -> None:
    """A URL's user name with no password was registered as a credential (as an HTTP URL's
    token is): while the store lived, the word "worker" was masked in every message —
    "another worker" read "another ***"."""
    store = PostgresStore("postgresql://worker@db.invalid/runs")
    assert redact("taken by another worker") == "taken by another worker"
    with_password = PostgresStore("postgresql://w:Sekret-pass@db.invalid/runs")
    assert redact("it was Sekret-pass") == "it was ***"
    del store, with_password
