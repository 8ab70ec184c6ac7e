"""How :class:`~agentflow.store.PostgresStore` connects: its settings checked, the DSN
without its secrets, and the connection made with the store's timeouts."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError
from agentflow._redact import register_secret, register_url

if TYPE_CHECKING:
    import psycopg

__all__ = ["MAX_TIMEOUT_S", "SECRET_KEYS", "Secret", "check_settings", "connect", "split_dsn"]

#: The DSN's keys whose values are secrets: the password, and the passphrase of the
#: client's SSL key.
SECRET_KEYS = ("password", "sslpassword")

#: The longest timeout: PostgreSQL's ``statement_timeout`` is an int of milliseconds.
MAX_TIMEOUT_S = (2**31 - 1) / 1000


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
    register_url(dsn, owner=owner)
    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # its message may quote the DSN, password included
        raise ConfigError("PostgresStore.dsn is not a libpq connection string") from None
    hidden: dict[str, Secret] = {}
    for key in SECRET_KEYS:
        value = params.pop(key, None)
        if value is not None:
            register_secret(str(value), owner=owner)
            hidden[key] = Secret(str(value))
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None}), hidden


def _seconds(name: str, value: object, low: float, high: float) -> float:
    """``value``, a finite real number of seconds in [low, high]; else a ConfigError."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise ConfigError(
            f"PostgresStore.{name} must be a finite number of seconds in [{low:g}, {high:g}],"
            f" got {value!r}"
        )
    return float(value)


def check_settings(
    schema: object,
    batch_interval_s: object,
    max_batch: object,
    connect_timeout_s: object,
    statement_timeout_s: object,
) -> None:
    """Refuse a setting that could not work (a ConfigError naming it and its value):
    numbers are finite reals; the timeouts at least 1 ms (a statement timeout under 1 ms
    would be sent as 0, which PostgreSQL reads as *no* timeout) and at most
    :data:`MAX_TIMEOUT_S`."""
    if not isinstance(schema, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", schema):
        raise ConfigError(f"PostgresStore.schema must be an SQL identifier, got {schema!r}")
    _seconds("batch_interval_s", batch_interval_s, 0, 10)
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ConfigError(f"PostgresStore.max_batch must be an int ≥ 1, got {max_batch!r}")
    _seconds("connect_timeout_s", connect_timeout_s, 0.001, MAX_TIMEOUT_S)
    _seconds("statement_timeout_s", statement_timeout_s, 0.001, MAX_TIMEOUT_S)


def connect(
    dsn: str, hidden: dict[str, Secret], connect_timeout_s: float, statement_timeout_s: float
) -> psycopg.Connection[tuple[Any, ...]]:
    """A new autocommit connection to ``dsn`` (with its ``hidden`` secrets), its
    statement timeout ``statement_timeout_s``.

    The timeout is set with ``SET`` once connected, not passed as ``options``: that
    would replace the DSN's own ``options`` (server settings, or a proxy's routing),
    ``PGOPTIONS`` and a service file's. The application name is ``agentflow`` unless
    the DSN (or ``PGAPPNAME``) names one.
    """
    import psycopg

    secrets: dict[str, Any] = {k: v.value for k, v in hidden.items()}
    conn = psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=max(1, round(connect_timeout_s)),
        fallback_application_name="agentflow",
        **secrets,
    )
    try:
        conn.execute(f"SET statement_timeout = {int(statement_timeout_s * 1000)}")
    except BaseException:
        conn.close()
        raise
    return conn
