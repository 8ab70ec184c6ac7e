"""``agentflow llamacpp --threads``: the CPU threads of the llama.cpp server it starts,
checked as ``LlamaCppServer(threads=…)`` checks them (a whole number ≥ 1: llama.cpp aborts
with a backtrace on 0), and passed on to the server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentflow.cli import _parser

from .procutil import GUARD_S, flag_value, one_child, serving_llamacpp
from .test_cli_errors import assert_one_line, run
from .test_cli_help import _walk


def test_threads_is_parsed_and_defaults_to_the_server_s_two() -> None:
    assert _parser().parse_args(["llamacpp", "--threads", "3"]).threads == 3
    assert _parser().parse_args(["llamacpp"]).threads == 2  # LlamaCppServer's default


def test_threads_is_in_the_help() -> None:
    text = " ".join(dict(_walk(_parser(), "agentflow"))["agentflow llamacpp"].format_help().split())
    assert "--threads N" in text and "≥ 1" in text and "default 2" in text


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "must be an int ≥ 1, got 0"),
        ("-2", "must be an int ≥ 1, got -2"),
        ("two", "not a whole number: 'two'"),
        ("1.5", "not a whole number: '1.5'"),
    ],
)
def test_a_bad_thread_count_is_one_line(value: str, says: str) -> None:
    code, err = run("llamacpp", "--threads", value)
    assert code == 2
    assert_one_line(err, "agentflow llamacpp", "--threads", says)


@pytest.mark.llamacpp
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_the_server_runs_on_the_threads_given() -> None:
    proc, line = serving_llamacpp("--threads", "1", stderr=subprocess.STDOUT)
    try:
        assert "on 1 thread:" in line, line
        assert flag_value(one_child(proc.pid), "--threads") == "1"
    finally:
        proc.terminate()
        proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 0
