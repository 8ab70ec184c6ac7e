"""``agentflow chat`` prints a clean answer when an attempt breaks mid-stream.

The real command runs in a child Python against a :class:`ScriptedServer` whose first
answer is cut after "The answer is" (the connection dropped) and whose second is whole.
Once with stdout a pipe (only the final answer is written), once with stdout a
pseudo-terminal (the answer streams; the broken attempt is marked as discarded and the
retry starts on a line of its own). The 60 s bounds are hang guards.
"""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
from pathlib import Path

import pytest

from agentflow.testing import Reply, ScriptedServer

from .wait import GUARD_S

ROOT = Path(__file__).resolve().parents[1]
ANSWER = "The answer is forty two."


def replies() -> list[Reply]:
    """The first attempt: role chunk, "The", " answer", " is", then the connection drops."""
    whole = Reply.text(ANSWER)
    return [Reply(frames=whole.frames[:4], cut=True), whole]


def command(base_url: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentflow.cli",
        "chat",
        "--base-url",
        base_url,
        "--model",
        "m",
        "What is the answer?",
    ]


ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


async def finish(proc: asyncio.subprocess.Process, *io: asyncio.Future[bytes]) -> list[bytes]:
    """Wait (with a hang guard) for the child's output and exit."""
    try:
        out = await asyncio.wait_for(asyncio.gather(*io), 60)
        await asyncio.wait_for(proc.wait(), 60)
        return out
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def chat_piped(base_url: str) -> tuple[int | None, bytes, bytes]:
    """Run ``agentflow chat`` against ``base_url`` with stdout and stderr pipes: its exit
    code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        *command(base_url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, err = await finish(
        proc,
        asyncio.ensure_future(proc.stdout.read()),
        asyncio.ensure_future(proc.stderr.read()),
    )
    return proc.returncode, out, err


async def test_piped_output_is_exactly_the_answer() -> None:
    """With stdout a pipe the discarded attempt never reaches it: stdout is the answer
    and a newline; stderr says which attempt failed and that it was retried."""
    async with ScriptedServer(replies()) as srv:
        code, out, err = await chat_piped(srv.base_url)
        srv.assert_complete()
    assert code == 0, err.decode()
    assert out.decode() == ANSWER + "\n"
    assert "attempt 1 failed (StreamInterrupted" in err.decode()
    assert len(srv.requests) == 2


def read_all(fd: int) -> bytes:
    """Everything written to a pty until its last writer closes it."""
    return read_until(fd, None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pty semantics of Linux")
async def test_a_terminal_sees_the_discarded_text_marked_and_the_retry_on_its_own_line() -> None:
    """On a terminal the first attempt's text was already shown; the CLI ends that line,
    marks it discarded, and streams the retry's answer on the next line — so the last
    line is exactly the answer, never "The answer isThe answer is forty two."."""
    main_fd, child_fd = pty.openpty()
    try:
        async with ScriptedServer(replies()) as srv:
            proc = await asyncio.create_subprocess_exec(
                *command(srv.base_url), stdout=child_fd, stderr=asyncio.subprocess.PIPE, env=ENV
            )
            os.close(child_fd)
            child_fd = -1
            assert proc.stderr is not None
            out, err = await finish(
                proc,
                asyncio.ensure_future(asyncio.to_thread(read_all, main_fd)),
                asyncio.ensure_future(proc.stderr.read()),
            )
            srv.assert_complete()
    finally:
        os.close(main_fd)
        if child_fd >= 0:
            os.close(child_fd)
    assert proc.returncode == 0, err.decode()
    text = out.decode().replace("\r\n", "\n")
    assert text == (
        "The answer is\n[discarded: that attempt failed; the answer restarts below]\n"
        + ANSWER
        + "\n"
    )
    assert "attempt 1 failed (StreamInterrupted" in err.decode()


async def test_the_idle_timeout_flag_reaches_the_transport() -> None:
    """``--idle-timeout`` limits each attempt: a server that goes quiet after the first
    word fails every attempt on that limit (not the 300 s default), and chat says so."""
    stalled = Reply(frames=Reply.text(ANSWER).frames, frame_delay_s=GUARD_S)
    async with ScriptedServer([stalled] * 4) as srv:
        proc = await asyncio.create_subprocess_exec(
            *command(srv.base_url), "--idle-timeout", "0.2",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=ENV,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        _, err = await finish(
            proc,
            asyncio.ensure_future(proc.stdout.read()),
            asyncio.ensure_future(proc.stderr.read()),
        )
    text = err.decode()
    assert proc.returncode != 0
    assert "StreamTimeout" in text and "0.2" in text, text[-2000:]


def read_until(fd: int, marker: bytes | None) -> bytes:
    """What is written to a pty up to and including the read that shows ``marker``
    (everything, if its writer closes it first; ``None``: everything)."""
    got = b""
    while marker is None or marker not in got:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        got += chunk
    return got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pty semantics of Linux")
async def test_ctrl_c_mid_answer_ends_the_line_and_says_so() -> None:
    """Ctrl-C while the answer streams to a terminal: the CLI ends the half-written line
    and says it was interrupted on stderr, then exits 130 (it used to leave the cursor
    mid-line with no word). The server sends "The" at once and holds the rest back for
    the hang guard; SIGINT goes once "The" is on the terminal."""
    whole = Reply.text(ANSWER)
    held = Reply(
        frames=[whole.frames[0] + whole.frames[1], *whole.frames[2:]], frame_delay_s=GUARD_S
    )
    main_fd, child_fd = pty.openpty()
    try:
        async with ScriptedServer([held]) as srv:
            proc = await asyncio.create_subprocess_exec(
                *command(srv.base_url), stdout=child_fd, stderr=asyncio.subprocess.PIPE, env=ENV
            )
            os.close(child_fd)
            child_fd = -1
            assert proc.stderr is not None
            try:
                first = await asyncio.wait_for(asyncio.to_thread(read_until, main_fd, b"The"), 60)
                assert b"The" in first, first
                proc.send_signal(signal.SIGINT)
            except BaseException:
                proc.kill()
                raise
            rest, err = await finish(
                proc,
                asyncio.ensure_future(asyncio.to_thread(read_all, main_fd)),
                asyncio.ensure_future(proc.stderr.read()),
            )
    finally:
        os.close(main_fd)
        if child_fd >= 0:
            os.close(child_fd)
    assert proc.returncode == 128 + signal.SIGINT, err.decode()
    assert (first + rest).decode().replace("\r\n", "\n") == "The\n"
    assert err.decode() == "agentflow chat: interrupted\n"
