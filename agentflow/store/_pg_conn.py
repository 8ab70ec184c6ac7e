"""How :class:`~agentflow.store.PostgresStore` connects: its settings checked, the DSN
without its secrets, the connection made with the store's timeouts and TCP keepalives,
and the :class:`Watchdog` that cuts a connection whose server stopped answering."""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._logging import get_logger
from agentflow._redact import redact, register_secret, register_url
from agentflow._seconds import check_seconds

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MAX_TIMEOUT_S",
    "MIN_CONNECT_TIMEOUT_S",
    "SECRET_KEYS",
    "WATCHDOG_MARGIN_S",
    "Secret",
    "Watchdog",
    "check_settings",
    "connect",
    "split_dsn",
]

_log = get_logger("agentflow.store")
T = TypeVar("T")

#: The DSN's keys whose values are secrets: the password, and the passphrase of the
#: client's SSL key.
SECRET_KEYS = ("password", "sslpassword")

#: The longest timeout: PostgreSQL's ``statement_timeout`` is an int of milliseconds.
MAX_TIMEOUT_S = (2**31 - 1) / 1000


#: The shortest ``connect_timeout_s``: libpq waits at least 2 s (it reads 1 as 2).
MIN_CONNECT_TIMEOUT_S = 2.0

#: How long past ``statement_timeout_s`` a call or commit may go unanswered before the
#: :class:`Watchdog` cuts its connection: the server cancels a statement at
#: ``statement_timeout_s``, so one that has not answered by then cannot be reached.
WATCHDOG_MARGIN_S = 10.0


class Secret:
    """A value that never shows in a ``repr`` (the DSN's password, kept to connect)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "***"


def split_dsn(dsn: object, owner: object) -> tuple[str, dict[str, Secret]]:
    """The DSN without its secrets (:data:`SECRET_KEYS`), and those secrets
    (``{"password": …}``), each registered with agentflow's redaction (for ``owner``'s
    lifetime).

    Raises:
        ConfigError: psycopg is not installed, or the DSN cannot be parsed.
    """
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
    except ImportError:
        raise ConfigError("PostgresStore needs psycopg 3: pip install 'agentflow[pg]'") from None
    if not isinstance(dsn, str):
        raise ConfigError(f"PostgresStore.dsn must be a string, got {type(dsn).__name__}")
    if _url_password(dsn):  # (a user name alone is no credential here, as it is in an
        register_url(dsn, owner=owner)  # HTTP URL's token: "worker" was masked everywhere)
    why: str | None = None
    try:
        params = conninfo_to_dict(dsn)
    except Exception as exc:  # its message may quote the DSN, password included
        why = _unquoted_secrets(exc, dsn)
    if why is not None:  # raised here, the error keeps no context that quotes the DSN
        raise ConfigError(f"PostgresStore.dsn is not a libpq connection string: {why}")
    _refuse_split_userinfo(dsn, params)
    hidden: dict[str, Secret] = {}
    for key in SECRET_KEYS:
        value = params.pop(key, None)
        if value is not None:
            register_secret(str(value), owner=owner)
            hidden[key] = Secret(str(value))
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None}), hidden


def _url_password(dsn: str) -> bool:
    """Whether ``dsn`` is a URL with a password in its userinfo."""
    if _URL.match(dsn) is None or "@" not in dsn:
        return False
    try:
        return bool(urlsplit(dsn).password)
    except ValueError:
        return True  # unparsable: register what register_url finds, to be safe


#: A URL DSN's scheme (libpq's two).
_URL = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)


def _refuse_split_userinfo(dsn: str, params: dict[str, Any]) -> None:
    """Refuse a URL DSN whose user name or password holds an unescaped ``/`` or ``@``:
    libpq ends the ``user:password@`` part at the first ``@`` or ``/``, and reads the rest
    of the password as the host, the port or the database name
    (``postgresql://bob:abc/xyz@h/db``: host ``bob``, port ``abc``, database
    ``xyz@h/db``) — which ``dsn``, the ``repr`` and every error then showed, nothing of
    it registered as a secret. Such a URL has a port that is not a number, an ``@`` in its
    host, or a database name with an ``@`` and a ``/`` or ``:`` (the ``HOST:PORT/DB``
    that followed the password), or with an ``@`` where no ``user@`` came before a
    ``HOST:PORT`` (``postgresql://bob:4141/Sekret@h``: host ``bob``, port ``4141``,
    database ``Sekret@h``; ``postgresql://h:5432/my@db`` reads the same, and is refused
    too: write ``my%40db``). A database name with an ``@`` alone after a ``user@``, or
    after a host with no port, is taken (``postgresql://u@h/my@db``,
    ``postgresql://h/my@db``: libpq's database ``my@db``); so is, undetected, a password
    ``4141/x`` in a URL with neither port nor database name. The message quotes none of
    the DSN."""
    start = _URL.match(dsn)
    if start is None:
        return
    rest = dsn[start.end() :]
    cut = next((i for i, c in enumerate(rest) if c in "@/"), len(rest))
    userinfo = rest[cut : cut + 1] == "@"  # (libpq's user:password@, up to the first)
    if userinfo:
        rest = rest[cut + 1 :]
    hosts, _, path = rest.partition("?")[0].partition("/")
    ports = str(params.get("port") or "").split(",")
    # (A split password leaves its user name before a ':' in the host part: a URL with
    # no user, no port and an '@' in its database name is libpq's database name.)
    split_path = "@" in path and ((not userinfo and ":" in hosts) or any(c in path for c in ":/"))
    if "@" in hosts or split_path or not all(p.strip().isdigit() for p in ports if p):
        raise ConfigError(
            "PostgresStore.dsn: libpq reads part of this URL's user name or password as its "
            "host, port or database name (a port that is not a number, an '@' in the host, "
            "a database name with an '@' and a ':' or '/', or with an '@' after a HOST:PORT "
            "and no user): percent-encode '/' as %2F and '@' as %40 in the user name and "
            "password (the USER:PASSWORD before '@HOST'), and '@' as %40 in a database name "
            "that holds one, or give the password in ~/.pgpass or PGPASSWORD"
        )


#: What libpq quotes of a DSN it could not parse: a key name after these words (kept),
#: anything else (masked).
_QUOTED = re.compile(r'"[^"]*"')
_KEY_NAMED_BY = ("invalid connection option ", "invalid URI query parameter: ")
#: The separators libpq quotes in its own words (``missing "=" after``…).
_SEPARATORS = frozenset({'"="', '"]"', '":"', '"/"'})


def _unquoted_secrets(exc: Exception, dsn: str) -> str:
    """What libpq says is wrong with a DSN (an unknown key or query parameter, a
    missing ``=``, an unterminated quote…), without any of the DSN's text: libpq quotes
    the token it could not parse — a password's value, a password that follows a value
    with a space, a bad percent-escape in a query's ``password=``… — none of them
    registered with the redaction, the DSN never parsed. Only a quoted key name (``invalid
    connection option "…"``, ``invalid URI query parameter: "…"``) and libpq's own quoted
    separators are kept; every other quoted part becomes ``"…"`` — a key name too when the
    word occurs anywhere after a password in ``dsn``: an unquoted password with a space,
    or a ``&``, reads to libpq as a key (``password=correct horse=battery``: "horse")."""
    password = dsn.lower().find("password")
    text = " ".join(str(exc).split())

    def keep_or_mask(match: re.Match[str]) -> str:
        before = text[: match.start()]
        if before.endswith(_KEY_NAMED_BY):
            if password < 0 or dsn.find(match.group()[1:-1], password) < 0:
                return match.group()  # (not a word anywhere past the password)
            return '"…"'
        if match.group() in _SEPARATORS and not before.endswith("unexpected character "):
            return match.group()
        return '"…"'

    return redact(_QUOTED.sub(keep_or_mask, text)) or type(exc).__name__


def check_settings(
    schema: object,
    batch_interval_s: object,
    max_batch: object,
    connect_timeout_s: object,
    statement_timeout_s: object,
    max_held: object = 1,
) -> None:
    """Refuse a setting that could not work (a ConfigError naming it and its value):
    numbers are finite reals; the timeouts at most :data:`MAX_TIMEOUT_S`, the statement
    timeout at least 1 ms (under 1 ms it would be sent as 0, which PostgreSQL reads as
    *no* timeout), the connect timeout at least :data:`MIN_CONNECT_TIMEOUT_S` (libpq's
    own floor: a shorter one was silently 2 s); counts are ints ≥ 1."""
    if not isinstance(schema, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", schema):
        raise ConfigError(f"PostgresStore.schema must be an SQL identifier, got {schema!r}")
    check_seconds(batch_interval_s, "PostgresStore.batch_interval_s", 0, 10)
    check_count(max_batch, "PostgresStore.max_batch")
    check_count(max_held, "PostgresStore.max_held")
    connect_s = check_seconds(
        connect_timeout_s, "PostgresStore.connect_timeout_s", 0.001, MAX_TIMEOUT_S
    )
    if connect_s < MIN_CONNECT_TIMEOUT_S:
        raise ConfigError(
            f"PostgresStore.connect_timeout_s must be at least {MIN_CONNECT_TIMEOUT_S:g} s, "
            f"got {connect_timeout_s!r}: libpq waits at least 2 s for a host (it takes "
            "whole seconds, and reads 1 as 2)"
        )
    check_seconds(statement_timeout_s, "PostgresStore.statement_timeout_s", 0.001, MAX_TIMEOUT_S)


def connect(
    dsn: str, hidden: dict[str, Secret], connect_timeout_s: float, statement_timeout_s: float
) -> psycopg.Connection[tuple[Any, ...]]:
    """A new autocommit connection to ``dsn`` (with its ``hidden`` secrets), its
    statement timeout ``statement_timeout_s``. libpq takes ``connect_timeout_s`` in
    whole seconds (rounded up here: never shorter than asked) and bounds each host (each
    address) the DSN names by it: with several, connecting may take that long per host.

    The timeout is set with ``SET`` once connected, not passed as ``options``: that
    would replace the DSN's own ``options`` (server settings, or a proxy's routing),
    ``PGOPTIONS`` and a service file's. The application name is ``agentflow`` unless
    the DSN (or ``PGAPPNAME``) names one.
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    # A peer that vanished (a partition, a machine gone) is noticed by the kernel in about
    # statement_timeout_s: unacknowledged data (tcp_user_timeout), or an idle connection's
    # unanswered keepalives. What the DSN sets itself stays. (libpq: TCP only.)
    every = max(1, round(statement_timeout_s / 4))
    tcp: dict[str, Any] = {
        "keepalives": 1,
        "keepalives_idle": every,
        "keepalives_interval": every,
        "keepalives_count": 3,
        "tcp_user_timeout": int(statement_timeout_s * 1000),
    }
    given = conninfo_to_dict(dsn)
    extra: dict[str, Any] = {k: v for k, v in tcp.items() if k not in given}
    extra.update((k, v.value) for k, v in hidden.items())
    conn = psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=math.ceil(connect_timeout_s),  # (libpq's: whole seconds, per host)
        fallback_application_name="agentflow",
        **extra,
    )
    try:
        conn.execute(f"SET statement_timeout = {int(statement_timeout_s * 1000)}")
    except BaseException:
        conn.close()
        raise
    return conn


class Watchdog:
    """Cuts the connection of a call or commit that has waited longer than ``limit_s``.

    The writer thread says when it starts using a connection (:meth:`watch`, again
    for each new one) and when it is done (:meth:`idle`). Should the server stop
    answering — a network partition that drops packets silently, a host gone — a
    libpq call would wait forever: the server's ``statement_timeout`` never fires where
    the server cannot be reached, and the kernel may take much longer to give up. This
    thread then shuts the connection's socket down, so the blocked call fails at once
    and the store's reconnect-and-hold path takes over (the call gets a
    :class:`StoreError`, a batch waits for the next commit). It sleeps while nothing
    is watched, and wakes about once per ``limit_s`` while the store is busy.
    """

    def __init__(self, limit_s: float, where: str) -> None:
        self.limit_s = limit_s
        self._where = where
        self._cond = threading.Condition(threading.Lock())
        self._conn: Any = None
        self._since = 0.0
        self._parked = False
        self._stopped = False
        self._generation = 0  # (of the thread that runs: one started after a stop ends it)
        self._thread: threading.Thread | None = None
        #: Connections cut so far.
        self.cuts = 0

    def start(self) -> None:
        """Start the watchdog's thread, if none runs: again after :meth:`stop` (a
        store's next writer thread after its first connection failed)."""
        with self._cond:
            if self._thread is None or self._stopped:
                self._stopped = False
                self._generation += 1  # (a stopped thread still waking up then ends)
                self._thread = threading.Thread(
                    target=self._run,
                    args=(self._generation,),
                    name="agentflow-store:pg-watchdog",
                    daemon=True,
                )
                self._thread.start()

    def watch(self, conn: Any) -> None:
        """``conn`` is used from now on (the deadline starts again)."""
        with self._cond:
            self._conn, self._since = conn, time.monotonic()
            if self._parked:
                self._cond.notify()

    def idle(self) -> None:
        """No connection is in use."""
        with self._cond:
            self._conn = None

    @contextlib.contextmanager
    def watching(self, conn: Any) -> Iterator[None]:
        """:meth:`watch` ``conn`` in the block, then :meth:`idle`."""
        self.watch(conn)
        try:
            yield
        finally:
            self.idle()

    def wrap(self, fn: Callable[[Any], T]) -> Callable[[Any], T]:
        """``fn(conn)``, watched."""

        def watched(conn: Any) -> T:
            with self.watching(conn):
                return fn(conn)

        return watched

    def stop(self) -> None:
        """End the watchdog's thread."""
        with self._cond:
            self._stopped, self._conn = True, None
            self._cond.notify_all()

    def _run(self, generation: int) -> None:
        with self._cond:
            while not self._stopped and self._generation == generation:
                if self._conn is None:
                    self._parked = True
                    self._cond.wait(3600.0)
                    self._parked = False
                    continue
                left = self._since + self.limit_s - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                conn, self._conn = self._conn, None
                if cut(conn):
                    self.cuts += 1
                    _log.error("store.connection_cut", store=self._where, waited_s=self.limit_s)


def cut(conn: Any) -> bool:
    """Shut ``conn``'s socket down, so that a libpq call waiting on it fails at once;
    whether it was open."""
    try:
        if conn.closed:
            return False
        fd = os.dup(conn.fileno())
    except Exception:  # closed meanwhile
        return False
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return False
    with sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    return True
