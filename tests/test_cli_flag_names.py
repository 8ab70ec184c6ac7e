"""A bad value of a command-line flag is one line naming the flag (exit 2), never the
library field it goes to (``params['max_tokens']``, ``TextGenConfig.tool_rounds``) — and
is refused by the parser, before anything is made (so the tests only parse).
``sim --session-header`` takes an HTTP header name only (``''`` still means none, as its
help says)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

import pytest

import agentflow.cli
from agentflow.cli import _parser

from .test_cli_errors import assert_one_line
from .test_cli_help import _walk


def parse(argv: list[str]) -> tuple[int, str]:
    """Only the parsing of ``agentflow ARGV`` (a value the parser let through starts no
    server here): its exit status and its stderr."""
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    return int(exited.value.code or 0), err.getvalue()


@pytest.mark.parametrize(
    ("argv", "flag", "says"),
    [
        (
            ["chat", "--model", "m", "--max-tokens", "0", "hi"],
            "--max-tokens",
            "must be an int ≥ 1, got 0",
        ),
        (
            ["chat", "--model", "m", "--max-tokens", "two", "hi"],
            "--max-tokens",
            "not a whole number",
        ),
        (["chat", "--model", "", "hi"], "--model", "must not be empty"),
        (["sim", "--tokens-per-chunk", "0"], "--tokens-per-chunk", "must be an int ≥ 1, got 0"),
        (["sim", "--tool-rounds", "-1"], "--tool-rounds", "must be an int ≥ 0, got -1"),
        (["sim", "--session-header", "a b"], "--session-header", "not an HTTP header name"),
        (["sim", "--session-header", "X-Session:"], "--session-header", "not an HTTP header name"),
    ],
)
def test_a_bad_flag_value_names_the_flag(argv: list[str], flag: str, says: str) -> None:
    code, err = parse(argv)
    assert code == 2
    assert_one_line(err, f"agentflow {argv[0]}", f"argument {flag}: {says}")


def test_good_values_still_parse() -> None:
    args = _parser().parse_args(["sim", "--tool-rounds", "0", "--session-header", ""])
    assert (args.tool_rounds, args.session_header) == (0, "")
    args = _parser().parse_args(["sim", "--session-header", "X-Conversation_ID.1"])
    assert args.session_header == "X-Conversation_ID.1"
    assert _parser().parse_args(["chat", "--model", "m", "--max-tokens", "1", "hi"]).max_tokens == 1


def test_the_module_docstring_lists_every_command() -> None:
    doc = agentflow.cli.__doc__ or ""
    commands = [
        name.split()[1] for name in dict(_walk(_parser(), "agentflow")) if name.count(" ") == 1
    ]
    assert commands
    for command in commands:
        assert f"``agentflow {command}``" in doc, command
