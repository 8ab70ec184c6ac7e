"""What an :class:`Endpoint` accepts as its base URL."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentflow import ConfigError, Endpoint, HTTPTransport
from agentflow.transport import AiohttpTransport


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1?api-version=2024-02-01",
        "http://127.0.0.1:8000/v1?key=SECRETQ",
        "http://u:p4ssw0rd@127.0.0.1:8000/v1?key=SECRETQ",
        "http://127.0.0.1:8000/v1#SECRETQ",
        "http://127.0.0.1:8000/v1?",
    ],
)
def test_a_query_or_fragment_in_base_url_is_refused(url: str) -> None:
    """It was accepted, and the request went to ``POST /v1?api-version=…/chat/completions``;
    the query (where some providers put keys) was in every error message. The refusal says
    where it goes instead and repeats neither the query nor the credentials."""
    makers: list[Callable[[], object]] = [
        lambda: Endpoint(base_url=url),
        lambda: HTTPTransport(url),
        lambda: AiohttpTransport(url),
    ]
    for make in makers:
        with pytest.raises(ConfigError, match="query string or fragment") as info:
            make()
        message = str(info.value)
        assert "headers" in message and "extra_body" in message
        assert "SECRETQ" not in message and "2024-02-01" not in message
        assert "p4ssw0rd" not in message and "127.0.0.1:8000/v1" in message


def test_a_plain_base_url_is_taken() -> None:
    ep = Endpoint(base_url="http://127.0.0.1:8000/v1/")
    assert ep.chat_url == "http://127.0.0.1:8000/v1/chat/completions"
