"""One way to set each thing (issue 17, part 2).

- The fleet's bound on requests in flight is ``Fleet(max_concurrency=)``. The old
  ``Fleet(limits=Limits(max_in_flight=))`` still sets it, with a DeprecationWarning; the two
  given with different values are a ConfigError naming both (the second used to win
  silently).
- ``Session.run``'s public signature is ``(transport, *, callbacks, retry, clock)``; the
  fleet's wiring is private (``_bus``, ``_runner``, ``_tool_limit``, ``_turn_log``), its
  old names deprecated.

Runs go through real loopback servers (ScriptedServer) or MockTransport's decoder.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

from agentflow import Agent, ConfigError, Fleet, HTTPTransport, Limits, Session
from agentflow.testing import MockTransport, Reply, ScriptedServer

PLAIN = Agent(name="plain", model="m", instructions="Answer briefly.", params={"max_tokens": 8})


def _transport() -> MockTransport:
    return MockTransport(lambda _: Reply.text("done"))


def test_max_concurrency_is_the_one_way_and_fills_the_limits() -> None:
    """No warning for the one way; the limits carry the same bound, other rates kept."""
    fleet = Fleet(_transport(), max_concurrency=5, limits=Limits(rpm=600.0))
    assert fleet.max_concurrency == 5
    assert fleet.limits.max_in_flight == 5 and fleet.limits.rpm == 600.0
    default = Fleet(_transport())
    assert default.max_concurrency == default.limits.max_in_flight == 64


def test_conflicting_bounds_are_a_config_error_naming_both() -> None:
    with pytest.raises(ConfigError) as caught:
        Fleet(_transport(), max_concurrency=4, limits=Limits(max_in_flight=8))
    message = str(caught.value)
    assert "Fleet(max_concurrency=4)" in message
    assert "Fleet(limits=Limits(max_in_flight=8))" in message


def test_limits_max_in_flight_on_a_fleet_is_deprecated_but_still_applies() -> None:
    """The old way warns (pointing at the caller) and sets both attributes alike: before,
    ``fleet.max_concurrency`` said 64 while the limits bounded the fleet at 8."""
    with pytest.warns(DeprecationWarning, match=r"use Fleet\(max_concurrency=8\)") as caught:
        fleet = Fleet(_transport(), limits=Limits(max_in_flight=8))
    assert caught[0].filename == __file__
    assert fleet.max_concurrency == fleet.limits.max_in_flight == 8
    with pytest.warns(DeprecationWarning, match="max_in_flight=3"):  # same value: still old
        same = Fleet(_transport(), max_concurrency=3, limits=Limits(max_in_flight=3))
    assert same.max_concurrency == 3


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_a_bad_max_concurrency_names_the_field(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_concurrency must be an int ≥ 1"):
        Fleet(_transport(), max_concurrency=bad)  # type: ignore[arg-type]


async def test_the_deprecated_bound_still_bounds_a_real_run() -> None:
    """Over real HTTP, each response streaming 10 frames 5 ms apart: the old
    ``Limits(max_in_flight=2)`` still keeps the server at 2 requests at once."""
    slow = Reply(frames=Reply.text(" ".join(["w"] * 8)).frames, frame_delay_s=0.005)
    async with ScriptedServer([slow] * 12) as srv, HTTPTransport(srv.base_url) as http:
        with pytest.warns(DeprecationWarning, match="max_in_flight=2"):
            fleet = Fleet(http, limits=Limits(max_in_flight=2))
        result = await fleet.run(PLAIN.session(f"q{i}") for i in range(12))
    assert not result.failed and len(srv.requests) == 12
    assert srv.peak_in_flight == 2


def test_session_run_public_signature() -> None:
    """What a user passes to Session.run; the fleet's wiring is underscored."""
    params = inspect.signature(Session.run).parameters
    public = [n for n, p in params.items() if not n.startswith("_") and p.kind is not p.VAR_KEYWORD]
    assert public == ["self", "transport", "callbacks", "retry", "clock"]
    assert {"_bus", "_runner", "_tool_limit", "_turn_log"} <= set(params)


async def test_session_run_old_wiring_names_still_work_with_a_warning() -> None:
    """``tool_limit=`` (old, public) is taken as ``_tool_limit=``: the session runs to its
    answer, with one DeprecationWarning naming the private spelling."""
    session = PLAIN.session("old")
    with pytest.warns(DeprecationWarning, match=r"Session.run\(tool_limit=\) is deprecated"):
        result = await session.run(_transport(), tool_limit=asyncio.Semaphore(1))
    assert result.ok and result.final_output == "done"


async def test_session_run_rejects_unknown_and_doubled_wiring() -> None:
    session = PLAIN.session("bad")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        await session.run(_transport(), bogus=1)
    with pytest.raises(ConfigError, match="both tool_limit= and _tool_limit="):
        await session.run(
            _transport(), tool_limit=asyncio.Semaphore(1), _tool_limit=asyncio.Semaphore(1)
        )


async def test_session_run_alone_and_in_a_fleet_warn_nothing() -> None:
    """The fleet passes the private names: a fleet run emits no DeprecationWarning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alone = await PLAIN.session("alone").run(_transport())
        fleet = await Fleet(_transport(), max_concurrency=2).run(
            PLAIN.session(f"f{i}") for i in range(3)
        )
    assert alone.ok and not fleet.failed and len(fleet.sessions) == 3
