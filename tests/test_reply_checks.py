"""The testing tools refuse a wrong reply with a :class:`ConfigError` naming it: a
:class:`Reply` whose frames are not bytes or whose status is not an HTTP status, when it
is made, and a :class:`MockTransport` handler that returns something else than a reply.
They used to fail the session with ``TypeError`` or ``AttributeError: 'drop'``, and
through a :class:`ScriptedServer` as "script exhausted" on the retry."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import Agent, ConfigError
from agentflow.testing import MockTransport, Reply

#: Wrong values, typed Any: the point is what happens when a caller passes them anyway.
TEXT: Any = "data: {}\n\n"
TEXTS: Any = ["data: [DONE]\n\n"]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"frames": TEXT}, r"Reply\.frames must be a list of bytes .*got str$"),
        ({"frames": b"data: {}\n\n"}, r"Reply\.frames must be a list of bytes .*got bytes$"),
        ({"frames": TEXTS}, r"Reply\.frames\[0\] must be bytes, got str 'data: \[DONE\]"),
        ({"frames": [b"ok", None]}, r"Reply\.frames\[1\] must be bytes, got NoneType"),
        ({"status": "x"}, r"Reply\.status must be an HTTP status, .*got 'x'$"),
        ({"status": 99}, r"Reply\.status must be .*100 to 599, got 99$"),
        ({"status": 600}, r"Reply\.status must be .*got 600$"),
        ({"status": True}, r"Reply\.status must be .*got True$"),
        ({"headers": ["X-A"]}, r"Reply\.headers must be a mapping .*got list$"),
        # a non-str value passed here, then failed in MockTransport with AttributeError,
        # and ScriptedServer dropped the 429 it was on without a word
        (
            {"headers": {"Retry-After": 1}},
            r"Reply\.headers\['Retry-After'\] must be a str, got int 1 \(write it as '1'\)$",
        ),
        ({"headers": {"X A": "1"}}, r"Reply\.headers: 'X A' is not a header name"),
        ({"headers": {5: "1"}}, r"Reply\.headers: 5 is not a header name"),
        (
            {"headers": {"X-A": "a\r\nX-B: b"}},
            r"Reply\.headers\['X-A'\] holds a control character \(U\+000D\), which a header",
        ),
        ({"frame_delay_s": -1}, r"Reply\.frame_delay_s must be .*got -1$"),
    ],
)
def test_a_wrong_reply_is_a_config_error(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Reply(**options)


def test_good_replies_are_made() -> None:
    Reply(frames=[b"data: {}\n\n", b"data: [DONE]\n\n"], status=503)
    Reply(frames=(b"x",), status=100, headers={"Retry-After": "1"}, frame_delay_s=0)
    Reply.text("hi")
    Reply.error(429, "slow down")


def _nothing(request: object) -> None:
    return None


def _hello(request: object) -> str:
    return "hello"


@pytest.mark.parametrize(("handler", "got"), [(_nothing, "NoneType None"), (_hello, "str 'hello'")])
async def test_a_handler_that_returns_no_reply_is_a_config_error(handler: Any, got: str) -> None:
    result = await Agent(name="a", model="m").run("x", MockTransport(handler))
    assert result.status == "error"
    assert isinstance(result.error, ConfigError), result.error
    assert str(result.error).startswith(f"MockTransport handler {handler.__qualname__!r} ")
    assert f"returned {got}" in str(result.error) and "not a Reply" in str(result.error)


@pytest.mark.parametrize("field", ["content", "reasoning"])
def test_stream_refuses_a_string_for_a_list_of_deltas(field: str) -> None:
    """``Reply.stream("Hello world")`` type-checks (a str is a sequence of str) and
    streamed one character per chunk, with one completion token each: wrong metrics,
    silently."""
    text: Any = "Hello world"
    given: dict[str, Any] = {field: text}
    with pytest.raises(ConfigError, match=rf"Reply\.stream {field} must be a list of deltas"):
        Reply.stream(**given)
    given = {field: ["Hello", " world"]}
    assert Reply.stream(**given).status == 200


@pytest.mark.parametrize(
    ("make", "says"),
    [
        # a ZeroDivisionError
        (lambda: Reply.tool_call("f", {"x": 1}, pieces=0), r"Reply\.tool_call pieces .* got 0$"),
        (lambda: Reply.tool_call("f", {"x": 1}, pieces=-2), r"Reply\.tool_call pieces .*got -2$"),
        # silently one piece
        (lambda: Reply.text("a b c", pieces=0), r"Reply\.text pieces must be an int ≥ 1 or None"),
        (lambda: Reply.text("a b c", pieces=-1), r"Reply\.text pieces .*got -1$"),
        (lambda: Reply.text("a b c", pieces=TEXT), r"Reply\.text pieces .*got 'data"),
    ],
    ids=["tool_call-0", "tool_call-neg", "text-0", "text-neg", "text-str"],
)
def test_pieces_must_be_a_count(make: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        make()


def test_pieces_none_and_counts_still_split() -> None:
    assert len(Reply.text("a b c", pieces=None).frames) == len(Reply.text("a b c").frames)
    assert len(Reply.text("a b c", pieces=1).frames) == len(Reply.text("abc").frames)
    assert len(Reply.tool_call("f", {"x": 1}, pieces=1).frames) == 5  # call, 1 delta, end
