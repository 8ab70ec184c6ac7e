"""Public frozen dataclasses holding a dict either hash by their immutable fields, as
Agent and Tool do (Endpoint, Compact: equal objects, equal hashes), or say plainly that
they are unhashable (Reply, RecordedRequest: ``__hash__`` is None, so checkers know and
the TypeError names the class). The generated hash raised ``TypeError: unhashable type:
'dict'`` (or ``'list'``) for all four, though checkers took them as hashable."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import Agent, Endpoint, Fleet, HTTPTransport
from agentflow.context import Compact
from agentflow.testing import RecordedRequest, Reply, ScriptedServer


def test_endpoint_hashes_by_url_and_name() -> None:
    one = Endpoint(base_url="http://h:8000/v1", headers={"x-a": "1"}, extra_body={"top_k": 5})
    same = Endpoint(base_url="http://h:8000/v1/", headers={"x-a": "1"}, extra_body={"top_k": 5})
    other = Endpoint(base_url="http://h:8000/v1", headers={"x-a": "2"})
    assert one == same and hash(one) == hash(same)
    assert one != other
    assert {one: "a", other: "b"}[same] == "a"
    assert len({one, same, other, Endpoint(base_url="http://h:8001/v1")}) == 3


def test_compact_hashes_by_its_fields() -> None:
    one = Compact(params={"temperature": 0.0}, keep_last=3)
    same = Compact(params={"temperature": 0.0}, keep_last=3)
    assert one == same and hash(one) == hash(same)
    assert len({one, same, Compact(), Compact(params={"temperature": 1.0})}) == 3


async def test_reply_and_recorded_request_say_they_are_unhashable() -> None:
    async with ScriptedServer([Reply.text("hi")]) as server:
        async with HTTPTransport(Endpoint(base_url=server.base_url)) as transport:
            await Fleet(transport).run([Agent(name="a", model="m").session("x")])
        (recorded,) = server.requests
    values: list[tuple[Any, str]] = [(Reply.text("x"), "Reply"), (recorded, "RecordedRequest")]
    for value, name in values:
        assert type(value).__hash__ is None
        with pytest.raises(TypeError, match=f"unhashable type: '{name}'"):
            hash(value)
    assert RecordedRequest.__hash__ is None and Reply.__hash__ is None
    assert Reply.text("x") == Reply.text("x")
