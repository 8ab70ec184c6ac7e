"""A callback's ``event_types`` must name events: ``{"sesion_end"}`` silently delivered
nothing, a string ``"token_x"`` read every event type it contains (``"token"``), and a
number failed with a TypeError at every event. Each is now a ConfigError when the
callback is given (to a Fleet, ``Fleet.subscribe``, ``Session.run``), and the names
known are those of the ``Event`` union's members, the context events' included."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Event, Fleet
from agentflow._event_bus import event_type_names
from agentflow.testing import MockTransport, Reply, capture_events

AGENT = Agent(name="a", model="m")


def _transport() -> MockTransport:
    return MockTransport(lambda request: Reply.text("hi there"))


class Declares:
    """A callback that declares ``event_types``."""

    def __init__(self, types: Any) -> None:
        self.event_types = types
        self.got: list[str] = []

    def __call__(self, event: Event) -> None:
        self.got.append(event.type)


@pytest.mark.parametrize(
    ("types", "says"),
    [
        (
            {"sesion_end"},
            r"event_types names unknown event types 'sesion_end'; known: .*session_end",
        ),
        (
            frozenset({"turn_end", "turn_ends"}),
            r"event_types names unknown event types 'turn_ends';",
        ),
        (["turn_end", 5], r"event_types names unknown event types 5;"),
        ("token_x", r"event_types must be a set of event type names .*got str 'token_x'"),
        ("turn_end", r"event_types must be a set of event type names .*got str 'turn_end'"),
        (5, r"event_types must be a set of event type names .*got int 5"),
    ],
)
async def test_event_types_that_name_no_event_are_refused(types: Any, says: str) -> None:
    callback = Declares(types)
    with pytest.raises(ConfigError, match=r"^Fleet\.callbacks\[0\]\." + says):
        Fleet(_transport(), callbacks=[callback])
    with pytest.raises(ConfigError, match=r"^Fleet\.subscribe: callback\." + says):
        Fleet(_transport()).subscribe(callback)
    with pytest.raises(ConfigError, match=r"^Session\.run: callbacks\[0\]\." + says):
        await AGENT.session("x").run(_transport(), callbacks=[callback])
    assert callback.got == []


def test_capture_events_refuses_an_unknown_type() -> None:
    with pytest.raises(ConfigError, match=r"^capture_events\(\*types\) names .* 'sesion_end'"):
        capture_events("turn_end", "sesion_end")


def test_the_known_names_are_every_event_s_type() -> None:
    names = event_type_names()
    assert len(names) == len(typing.get_args(Event))
    assert {"token", "turn_end", "session_end", "context_trimmed", "cache_buster"} <= names


async def test_declared_names_are_delivered_exactly() -> None:
    """A list works as well as a set, and gets those events only."""
    callback = Declares(["session_end", "fleet_end"])
    events = capture_events("turn_end")
    await Fleet(_transport(), callbacks=[callback, events]).run([AGENT.session("x")])
    assert callback.got == ["session_end", "fleet_end"]
    assert events.types() == ["turn_end"]
