"""``agentflow sim`` / ``python -m agentflow.sim``: arguments, and a real child process."""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import subprocess
import sys

import aiohttp
import pytest

from agentflow import ConfigError, HTTPTransport, ServerError
from agentflow.sim.cli import add_sim_parser, server_from_args
from agentflow.transport import ChatRequest

from ..wait import GUARD_S
from .simhttp import user
from .simproc import dies_with_parent


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="agentflow")
    add_sim_parser(p.add_subparsers())
    return p.parse_args(["sim", *argv])


def test_parser_defaults_and_server_config() -> None:
    args = parse()
    assert (args.host, args.port, args.profile, args.time_scale) == (
        "127.0.0.1",
        8000,
        "cpu-tiny",
        1.0,
    )
    assert callable(args.func)
    args = parse(
        "--port", "0", "--profile", "qwen2.5-coder-32b", "--seed", "3", "--time-scale", "10",
        "--tokens-per-chunk", "2", "--tool-rounds", "5", "--answer-tokens", "10:20",
        "--profile-set", "max_num_seqs=64", "--profile-set", "prefill_tps=5e4",
        "--fault-rate-limit", "0.1", "--fault-reset", "0.05", "--retry-after", "3",
        "--stall-seconds", "2", "--served-model-name", "coder",
    )  # fmt: skip
    server = server_from_args(args)
    assert server.engine.profile.max_num_seqs == 64 and server.engine.profile.prefill_tps == 5e4
    assert server.engine.textgen.config.tool_rounds == 5
    assert server.engine.textgen.config.answer_tokens == (10, 20)
    assert server.driver.time_scale == 10 and server.driver.tokens_per_chunk == 2
    assert server.model == "coder" and server.engine.seed == 3
    cfg = server.faults.config
    assert (cfg.rate_limit, cfg.reset_mid_stream, cfg.retry_after_s, cfg.stall_s) == (
        0.1,
        0.05,
        3,
        2,
    )
    assert cfg.seed == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--profile", "nope"], "unknown simulator profile 'nope'"),
        (["--profile-set", "colour=red"], "FIELD one of"),
        (["--profile-set", "max_num_seqs=lots"], "wants a int"),
        (["--profile-set", "max_num_seqs=0"], "max_num_seqs must be an int ≥ 1"),
        (["--fault-rate-limit", "0.7", "--fault-cut", "0.7"], "add up to 1.4"),
        (["--profile-set", "prefill_per_ctx_token_s=inf"], "prefill_per_ctx_token_s must be"),
        (["--profile-set", "per_agent_tps=nan"], "per_agent_tps must be a finite number"),
        (["--profile-set", "decode_per_seq_s=nan"], "decode_per_seq_s must be a finite"),
        (
            ["--answer-tokens", "99999999999"],
            r"^--answer-tokens max 99999999999: more than the profile's window \(max_model_len "
            r"2048\), which no answer can exceed$",
        ),
        (["--answer-tokens", "8:9000", "--profile-set", "max_model_len=4096"], "4096"),
    ],
)
def test_bad_configuration_exits_with_a_message(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):  # the CLI prints it on one line, exit 2
        server_from_args(parse(*argv))


def test_an_infinite_step_cost_exits_2_before_serving() -> None:
    """It used to start, then never finish a request (the driver slept forever)."""
    cmd = [sys.executable, "-m", "agentflow.sim", "--port", "0", "--quiet",
           "--profile-set", "prefill_per_ctx_token_s=inf"]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=GUARD_S, **dies_with_parent()
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "prefill_per_ctx_token_s must be a finite number ≥ 0" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_small_window_without_answer_tokens_serves() -> None:
    """The default answers (up to 256 tokens) are no slip on a 128-token window: cut there."""
    server = server_from_args(parse("--profile-set", "max_model_len=128"))
    assert server.engine.profile.max_model_len == 128


def test_answer_tokens_beyond_the_window_exit_2_in_one_line() -> None:
    cmd = [sys.executable, "-m", "agentflow.sim", "--port", "0", "--answer-tokens", "1:99999"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=GUARD_S, **dies_with_parent()
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "python -m agentflow.sim: error: --answer-tokens max 99999: more than the profile's "
        "window (max_model_len 2048), which no answer can exceed"
    ]


def test_bad_flag_values_are_argparse_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, msg in (
        (["--time-scale", "0"], "must be a finite number > 0"),
        (["--time-scale", "inf"], "must be a finite number > 0"),
        (["--max-batch-ms", "inf"], "must be a finite number > 0"),
        (["--retry-after", "inf"], "must be a finite number ≥ 0"),
        (["--fault-cut", "2"], "a rate must be in [0, 1]"),
        (["--answer-tokens", "5:2"], "0 < MIN ≤ MAX"),
    ):
        with pytest.raises(SystemExit):
            parse(*argv)
        assert msg in capsys.readouterr().err


async def test_python_dash_m_serves_until_sigterm() -> None:
    cmd = [
        "-m", "agentflow.sim", "--port", "0", "--time-scale", "0.5",
        "--fault-server-error", "1.0", "--no-fault-header",
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *cmd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        **dies_with_parent(),  # killed with this process, however it ends
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        m = re.search(r"serving cpu-tiny at (http://127\.0\.0\.1:\d+/v1)", line)
        assert m is not None, line
        base = m.group(1)
        async with aiohttp.ClientSession() as s, s.get(base.removesuffix("/v1") + "/health") as r:
            assert r.status == 200 and r.headers["x-agentflow-time-scale"] == "0.5"
        async with HTTPTransport(base) as t:
            with pytest.raises(ServerError):  # every request faults (rate 1.0)
                await t.stream(ChatRequest(model="m", messages=user("x")))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
