"""An :class:`HTTPTransport`'s and an :class:`Endpoint`'s options are checked when they
are made: a wrong one is a :class:`ConfigError` naming it and the value, not a failure of
every session (after its whole answer was read) or a setting silently ignored."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import Agent, ConfigError, HTTPTransport
from agentflow.testing import Reply, ScriptedServer

URL = "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("15", "'15'"),  # failed each session once its answer was read (the pool's timer)
        (-1, "-1"),  # closed every connection as soon as it went idle: no keep-alive
        (float("nan"), "nan"),  # likewise
        (0, "0"),
        (float("inf"), "inf"),
        (True, "True"),
        (None, "None"),
    ],
)
def test_a_wrong_keepalive_is_a_config_error(value: Any, shown: str) -> None:
    with pytest.raises(ConfigError, match=rf"HTTPTransport keepalive_s must be .*got {shown}$"):
        HTTPTransport(URL, keepalive_s=value)


async def test_a_good_keepalive_keeps_connections_alive() -> None:
    async with (
        ScriptedServer([Reply.text("hi")] * 2) as srv,
        HTTPTransport(srv.base_url, keepalive_s=15) as t,
    ):
        for _ in range(2):
            assert (await Agent(name="a", model="m").run("x", t)).ok
        assert t._pool is not None and t._pool.opened == 1
