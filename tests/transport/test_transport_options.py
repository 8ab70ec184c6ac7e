"""An :class:`HTTPTransport`'s and an :class:`Endpoint`'s options are checked when they
are made: a wrong one is a :class:`ConfigError` naming it and the value, not a failure of
every session (after its whole answer was read) or a setting silently ignored."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import Agent, ConfigError, Endpoint, HTTPTransport
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


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"api_key": 5}, r"Endpoint\.api_key must be a str or None, got int$"),
        (
            {"api_key": "sk-12345\r\nX-Evil: 1"},
            r"Endpoint\.api_key holds a control character \(U\+000D\)",
        ),
        ({"headers": ["X-A"]}, r"Endpoint\.headers must be a mapping .*got list$"),
        ({"headers": {"X-Retry": 3}}, r"Endpoint\.headers\['X-Retry'\] must be a str, got int$"),
        (
            {"headers": {"X-A": "a\r\nX-B: 1"}},
            r"Endpoint\.headers\['X-A'\] holds a control character \(U\+000D\)",
        ),
        (
            {"headers": {"X-A": "a\x00"}},
            r"Endpoint\.headers\['X-A'\] holds a control character \(U\+0000\)",
        ),
        ({"headers": {"X-A": "caf\udce9"}}, r"Endpoint\.headers\['X-A'\] holds a lone surrogate"),
        ({"headers": {"X A": "1"}}, r"Endpoint\.headers: 'X A' is not a header name"),
        ({"headers": {"X-A:": "1"}}, r"Endpoint\.headers: 'X-A:' is not a header name"),
        ({"headers": {5: "1"}}, r"Endpoint\.headers: 5 is not a header name"),
        ({"extra_body": "x"}, r"Endpoint\.extra_body must be a mapping .*got str$"),
        ({"extra_body": {"k": object()}}, r"Endpoint\.extra_body cannot be sent as JSON"),
        ({"extra_body": {"k": "caf\udce9"}}, r"Endpoint\.extra_body\['k'\] holds a lone surrogate"),
        # merged last, these replaced the session's own: every request sent no messages
        ({"extra_body": {"messages": []}}, r"Endpoint\.extra_body may not set \['messages'\]"),
        ({"extra_body": {"model": "other", "n": 3}}, r"may not set \['model', 'n'\]"),
        ({"name": 5}, r"Endpoint\.name must be a str, got int$"),
    ],
)
def test_a_wrong_endpoint_option_is_a_config_error(options: dict[str, Any], says: str) -> None:
    """Each failed every session (a ``TypeError``, ``AttributeError`` or ``ValueError``
    per request, a bad header name as a 400 from the server); ``api_key=5`` raised a
    bare ``TypeError``. A value, which may be a credential, is never shown."""
    with pytest.raises(ConfigError, match=says) as info:
        Endpoint(base_url=URL, **options)
    assert "12345" not in str(info.value)


async def test_good_endpoint_options_are_sent() -> None:
    """A tab, non-ASCII text, an empty key: taken, and sent as before."""
    endpoint_options: dict[str, Any] = {
        "api_key": "",
        "headers": {"X-A": "caf\u00e9\tb", "x-tenant_id.2": "t"},
        "extra_body": {"top_k": 5, "x": [None, 1.5], "stream_options": {"extra": True}},
    }
    async with ScriptedServer([Reply.text("hi")]) as srv:
        endpoint = Endpoint(base_url=srv.base_url, **endpoint_options)
        async with HTTPTransport(endpoint) as t:
            assert (await Agent(name="a", model="m").run("x", t)).ok
        (req,) = srv.requests
    assert req.headers["x-tenant_id.2"] == "t" and "Authorization" not in req.headers
    assert req.body["top_k"] == 5 and req.body["x"] == [None, 1.5]
    # the endpoint's stream_options are merged with the session's own
    assert req.body["stream_options"] == {"extra": True, "include_usage": True}


@pytest.mark.parametrize("field", ["model", "messages", "tools", "stream", "n", "stream_options"])
def test_endpoint_and_agent_refuse_the_same_session_owned_fields(field: str) -> None:
    """One set of body fields the session owns, refused by both (an agent's
    ``stream_options`` too; an endpoint's are merged with the session's)."""
    with pytest.raises(ConfigError, match=rf"params may not set \['{field}'\]"):
        Agent(name="a", model="m", params={field: 1})
    if field == "stream_options":
        Endpoint(base_url=URL, extra_body={field: {"continuous_usage_stats": True}})
    else:
        with pytest.raises(ConfigError, match=rf"extra_body may not set \['{field}'\]"):
            Endpoint(base_url=URL, extra_body={field: 1})
