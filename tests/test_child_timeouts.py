"""The timeouts of the servers run as child processes — ``LlamaCppServer``, ``ChildServer``,
``PostgresServer`` — are checked when they are made, before anything is started, and the
error names the field: ``nan`` or ``-5`` used to start the child and then fail with
``ServerStartError``, ``"10"`` with a bare ``TypeError``."""

from __future__ import annotations

import sys

import pytest

from agentflow import ConfigError
from agentflow._pgserver import PostgresServer
from agentflow._process import ChildServer, free_port
from agentflow.llamacpp import LlamaCppServer

BAD = [float("nan"), float("inf"), -5.0, 0, "10", True, None]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_llamacpp_server_startup_timeout(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"LlamaCppServer\.startup_timeout_s must be"):
        LlamaCppServer(startup_timeout_s=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["startup_timeout_s", "stop_timeout_s"])
@pytest.mark.parametrize("bad", [float("nan"), -5.0, "10"], ids=repr)
def test_child_server_timeouts(field: str, bad: object) -> None:
    cmd = [sys.executable, "-c", "pass"]
    with pytest.raises(ConfigError, match=rf"ChildServer\.{field} must be"):
        ChildServer(cmd, port=free_port(), name="toy", **{field: bad})  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["startup_timeout_s", "stop_timeout_s"])
def test_postgres_server_timeouts(field: str) -> None:
    with pytest.raises(ConfigError, match=rf"PostgresServer\.{field} must be"):
        PostgresServer(**{field: float("nan")})  # type: ignore[arg-type]


def test_good_timeouts_are_floats() -> None:
    assert LlamaCppServer(startup_timeout_s=10).startup_timeout_s == 10.0
    child = ChildServer(["true"], port=free_port(), name="toy", stop_timeout_s=0)
    assert (child.startup_timeout_s, child.stop_timeout_s) == (120.0, 0.0)
