"""`agentflow llamacpp`: SIGTERM stops its llama.cpp child; ``kill -9`` leaves none either.
And a busy server (a stream in flight) exits on SIGTERM by itself, not by SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from agentflow.llamacpp import LlamaCppServer
from tests.procutil import GUARD_S, alive, healthy, listening, one_child, wait_for
from tests.wait import read_line

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; PR_SET_PDEATHSIG"),
]


@pytest.fixture
def serving() -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """`agentflow llamacpp --port 0`, serving: the process, its child's pid, the port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", "llamacpp", "--port", "0", "--n-ctx", "2048"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = read_line(proc.stdout, "the serving line")  # printed once /health answers
        assert "serving" in line, line + proc.stdout.read()
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        yield proc, one_child(proc.pid), port
    finally:
        if proc.returncode is None:
            proc.kill()
        proc.communicate(timeout=GUARD_S)


def child_gone(pid: int, port: int) -> None:
    wait_for(lambda: not alive(pid), f"llama.cpp child {pid} to exit")
    wait_for(lambda: not listening(port), f"port {port} to close")


def test_sigterm_stops_the_llamacpp_child(serving: tuple[subprocess.Popen[str], int, int]) -> None:
    proc, child, port = serving
    wait_for(lambda: healthy(port), "/health to answer")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(GUARD_S * 2) == 0  # SIGTERM is how a server is told to stop
    child_gone(child, port)


def test_kill_9_leaves_no_llamacpp_child(serving: tuple[subprocess.Popen[str], int, int]) -> None:
    proc, child, port = serving
    proc.kill()
    assert proc.wait(GUARD_S) == -signal.SIGKILL
    child_gone(child, port)


def test_a_busy_server_exits_on_sigterm() -> None:
    """stop() while a long completion streams: the child exits by itself on SIGTERM (exit
    status 0). It used to wait for the request in flight, and was SIGKILLed (-9) after
    ChildServer's 10 s; so were `agentflow llamacpp` on SIGTERM or Ctrl-C, and fixtures."""
    server = LlamaCppServer(n_parallel=1, n_ctx=8192).start()
    streaming, done = threading.Event(), threading.Event()
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": 8000,
        "ignore_eos": True,
        "stream": True,
    }
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )

    def stream() -> None:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with direct.open(request, timeout=GUARD_S) as answer:
                for line in answer:
                    streaming.set()
                    if b"[DONE]" in line:
                        done.set()
        except OSError:
            pass  # the server went away mid-stream

    assert server._child is not None
    proc = server._child._proc
    assert proc is not None
    threading.Thread(target=stream, daemon=True).start()
    try:
        assert streaming.wait(GUARD_S), "no token streamed"
    finally:
        server.stop()
    assert not done.is_set()  # it was stopped mid-stream, not after
    assert proc.returncode == 0  # exited on SIGTERM by itself, not SIGKILLed (-9)


def test_a_second_start_is_refused_and_stop_stops_the_first() -> None:
    """start() on a running server used to replace its child with a new one (which failed:
    the port was in use), so stop() never stopped the first: it ran until the interpreter
    exited. Now the second start() is a ConfigError and stop() stops the one child."""
    from agentflow import ConfigError

    server = LlamaCppServer(n_parallel=1, n_ctx=2048).start()
    try:
        pid = server._child.pid if server._child is not None else None
        assert pid is not None
        with pytest.raises(ConfigError, match=r"LlamaCppServer\.start: already running at"):
            server.start()
        assert healthy(server.port)
    finally:
        server.stop()
    child_gone(pid, server.port)
