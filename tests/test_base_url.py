"""One check of a base URL (agentflow/_base_url.py) for Endpoint — and so every transport
built on one — and for llamacpp's server_slots and oversubscription. Each used to check
its own way: the inputs below were taken by one and refused by another, or raised a bare
ValueError or AttributeError instead of a ConfigError naming the field."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentflow import ConfigError, Endpoint, HTTPTransport
from agentflow._base_url import check_base_url
from agentflow.llamacpp import oversubscription, server_slots
from agentflow.transport import AiohttpTransport

#: Each maker builds one thing from the URL, and the field its error names.
MAKERS: list[tuple[str, Callable[[Any], object]]] = [
    ("Endpoint.base_url", lambda url: Endpoint(base_url=url)),
    ("Endpoint.base_url", lambda url: HTTPTransport(url)),
    ("Endpoint.base_url", lambda url: AiohttpTransport(url)),
    ("server_slots: base_url", lambda url: server_slots(url)),
    ("oversubscription: base_url", lambda url: oversubscription(url, 8)),
]


async def _make(make: Callable[[Any], object], url: object) -> None:
    made = make(url)
    if isinstance(made, Awaitable):
        await made


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://:8080/v1", "with a host"),  # Endpoint took it: HTTPTransport connected to ""
        ("http://u:secret@/v1", "with a host"),
        ("http://127.0.0.1:0/v1", "port"),  # all took it; HTTPTransport went to port 80
        ("http://127.0.0.1:99999/v1", "port"),  # Endpoint and AiohttpTransport took these
        ("http://u:secret@127.0.0.1:+80/v1", "port"),
        ("http://127.0.0.1:80:90/v1", "port"),
        ("http://[::1/v1", "Invalid IPv6 URL"),  # a bare ValueError from Endpoint
        ("http://u:secret@127.0.0.1:8000/v1?key=SECRETQ", "query string or fragment"),
        ("http://127.0.0.1:8000/v1#SECRETQ", "query string or fragment"),  # llamacpp took it
        ("http://127.0.0.1:8000/v1 ", "without spaces or control characters"),  # all took it
        ("http://127.0.0.1:8000/v1\n", "without spaces or control characters"),
        ("http://127.0.0.1\t:8000/v1", "without spaces or control characters"),
        ("http://u:secret@127.0.0.1:8000/v 1", "without spaces or control characters"),
        ("ftp://u:secret@127.0.0.1:8000/v1", "such as http://127.0.0.1:8000/v1"),
        (5, "such as http://127.0.0.1:8000/v1"),  # an AttributeError from Endpoint
    ],
)
async def test_every_place_refuses_the_same_urls_alike(url: object, why: str) -> None:
    for field, make in MAKERS:
        with pytest.raises(ConfigError) as info:
            await _make(make, url)
        message = str(info.value)
        assert message.startswith(f"{field} must "), message
        assert why in message, message
        assert "secret" not in message.lower(), message  # neither userinfo nor query
        if "query" not in why:
            shown = repr(url).replace("u:secret@", "")
            assert message.endswith(f"got {shown}"), message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1",
        "HTTP://LOCALHOST/v1/",
        "https://127.0.0.1:/v1",  # an empty port: the scheme's
        "http://[::1]:8080/v1",
        "http://u:p@127.0.0.1:8080",
    ],
)
def test_every_place_takes_the_same_urls(url: str) -> None:
    """(server_slots and oversubscription take them through the same check_base_url.)"""
    for _, make in MAKERS[:3]:
        make(url)
    assert check_base_url(url, "server_slots: base_url").hostname
