"""What a session is given — an agent's instructions and params, a task — is checked
when it is made: a text holding a lone surrogate (what ``os.fsdecode`` makes of an
undecodable file name), or a value JSON has no form for, is a ``ConfigError`` naming
the field. It used to be an encoding error at the session's first request, and with a
store, a session start left out of the store and a ``StoreError`` at the run's end."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import msgspec
import pytest

from agentflow import Agent, ConfigError, Fleet, HTTPTransport, _sendable
from agentflow._sendable import check_sendable
from agentflow.testing import Reply, ScriptedServer

AGENT = Agent(name="a", model="m")


def test_a_task_text_with_a_lone_surrogate_is_refused_naming_where() -> None:
    name = os.fsdecode(b"caf\xe9.txt")  # a Latin-1 file name on a UTF-8 system
    with pytest.raises(ConfigError) as err:
        AGENT.session(f"read {name}", session_id="s1")
    assert str(err.value).startswith(
        "session 's1': task holds a lone surrogate, U+DCE9 at index 8, which a request "
        "cannot carry (JSON in UTF-8)"
    )


def test_a_message_list_task_names_the_message_and_field() -> None:
    task: list[dict[str, Any]] = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok \ud83d\ude00"}]},
    ]
    with pytest.raises(ConfigError, match=r"task\[1\]\['content'\]\[0\]\['text'\] holds a lone "
                       r"surrogate, U\+D83D at index 3"):  # fmt: skip
        AGENT.session(task)


def test_instructions_and_params_are_checked_when_the_agent_is_made() -> None:
    with pytest.raises(ConfigError, match=r"Agent 'b': instructions holds a lone surrogate"):
        Agent(name="b", model="m", instructions="be brief \udc80")
    with pytest.raises(ConfigError, match=r"Agent 'b': params cannot be sent as JSON: "):
        Agent(name="b", model="m", params={"temperature": object()})
    with pytest.raises(ConfigError, match=r"Agent 'b': params\['stop'\]\[1\] holds"):
        Agent(name="b", model="m", params={"stop": ["\n", "\udfff"]})


def test_text_a_request_can_carry_passes() -> None:
    check_sendable(["héllo, 世界 \U0001f600", {"k": (1, 2.5, None)}], "x")
    session = AGENT.session([{"role": "user", "content": "世界"}])
    assert session.messages == [{"role": "user", "content": "世界"}]


async def test_the_fleet_never_sees_a_refused_task() -> None:
    """The other sessions of a batch built in one go run as usual: the error comes while
    the list is built, before any request (over real HTTP)."""
    tasks = ["fine", "caf\udce9", "also fine"]
    sessions = []
    refused = []
    for t in tasks:
        try:
            sessions.append(AGENT.session(t))
        except ConfigError as exc:
            refused.append(str(exc))
    assert len(refused) == 1 and "U+DCE9 at index 3" in refused[0]
    async with (
        ScriptedServer([Reply.text("ok"), Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await Fleet(http).run(sessions)
        srv.assert_complete()
    assert [s.status for s in result.sessions] == ["completed", "completed"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_float_json_has_no_form_for_is_refused_naming_where(bad: float) -> None:
    """NaN and ±inf used to pass the check: the encoder writes them as ``null``, so
    ``params={"temperature": nan}`` was sent as ``"temperature": null``."""
    with pytest.raises(ConfigError) as err:
        Agent(name="b", model="m", params={"temperature": bad})
    assert str(err.value).startswith(
        f"Agent 'b': params['temperature'] is {bad!r}, a float JSON has no form for"
    )
    with pytest.raises(ConfigError, match=r"params\['logit_bias'\]\['7'\] is nan"):
        Agent(name="b", model="m", params={"logit_bias": {"5": 1.0, "7": float("nan")}})
    task = [{"role": "user", "content": [{"type": "text", "text": "x", "weight": bad}]}]
    with pytest.raises(ConfigError, match=r"task\[0\]\['content'\]\[0\]\['weight'\] is "):
        AGENT.session(task, session_id="s1")


@dataclasses.dataclass
class Options:
    temperature: float


class Sampling(msgspec.Struct):
    top_p: float


@pytest.mark.parametrize(
    ("value", "at"),
    [
        ({math.inf}, r"\['x'\]\[0\] is inf"),
        (frozenset({math.nan}), r"\['x'\]\[0\] is nan"),
        (Options(temperature=math.nan), r"\['x'\]\['temperature'\] is nan"),
        ([1.0, Sampling(top_p=-math.inf)], r"\['x'\]\[1\]\['top_p'\] is -inf"),
    ],
)
def test_a_non_finite_float_in_a_set_or_an_object_is_refused_too(value: Any, at: str) -> None:
    """The encoder writes sets as lists and dataclasses and structs as objects, a NaN in
    them as null, but the check walked only mappings, lists and tuples:
    ``params={"x": {inf}}`` was sent as ``"x": [null]``."""
    with pytest.raises(ConfigError, match=r"^Agent 'b': params" + at + ", a float JSON"):
        Agent(name="b", model="m", params={"x": value})


def test_a_task_with_a_null_but_no_non_finite_float_is_not_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every task with a tool call holds a null: each was walked in Python (a path
    string built at every node: 10 times the encoding for 20,000 messages). Now only a
    value whose encoding holds a float that may be NaN or ±inf is; the bytes of a
    ``bytes`` value that look like one are walked and pass."""
    walked: list[Any] = []
    real = _sendable._non_finite

    def spy(value: Any) -> Any:
        walked.append(value)
        return real(value)

    monkeypatch.setattr(_sendable, "_non_finite", spy)
    tool_turn: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": []}
    task = [{"role": "user", "content": "x" * 200} for _ in range(1000)] + [tool_turn]
    AGENT.session(task, session_id="s1")
    check_sendable({"stop": None, "x": [1e308, -1e308, 2.5]}, "x")
    assert walked == []
    check_sendable({"stop": None, "blob": b"\xcb\x7f\xf0\x00"}, "x")
    assert walked  # walked, and nothing found


def test_finite_floats_and_nulls_pass() -> None:
    check_sendable({"temperature": 0.5, "stop": None, "x": [1e308, -0.0, None]}, "x")
    tool_turn: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": []}
    AGENT.session([{"role": "user", "content": "hi"}, tool_turn])


def test_an_int_past_64_bits_beside_a_null_is_checked_not_raised() -> None:
    """JSON writes an int past 64 bits; MessagePack, which the look for a NaN uses
    first, cannot: that raised a bare OverflowError from Agent(...). The walk decides."""
    check_sendable({"stop": None, "seed": 2**70}, "x")
    with pytest.raises(ConfigError, match=r"^x\['t'\] is nan"):
        check_sendable({"stop": None, "seed": 2**70, "t": math.nan}, "x")


def test_a_raw_json_value_passes_the_look_for_a_nan() -> None:
    """``msgspec.Raw`` (JSON already) is sent as it is; the walk for where a NaN is went
    through ``msgspec.to_builtins``, which refuses it: a bare TypeError."""
    raw = msgspec.Raw(b'{"type": "json_object"}')
    check_sendable({"stop": None, "seed": 2**70, "response_format": raw}, "x")
    with pytest.raises(ConfigError, match=r"^x\['t'\] is nan"):
        check_sendable({"response_format": raw, "t": math.nan}, "x")
