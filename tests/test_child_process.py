"""`ChildServer` (agentflow/_process.py): a child server never outlives its parent.

The parent may stop it, exit with it still running, be interrupted while it starts, or be
killed with SIGKILL; in each case the child (and anything it started) stops serving.
Real processes and ports throughout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import FrameType

import pytest

from agentflow import ConfigError
from agentflow._process import ChildServer, free_port, kill_children
from tests.wait import read_line

from .procutil import GUARD_S, alive, children, healthy, listening, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; PR_SET_PDEATHSIG")


def sim_cmd(port: int) -> list[str]:
    return [sys.executable, "-m", "agentflow.sim", "--port", str(port), "--quiet"]


def run_parent(script: str) -> subprocess.Popen[str]:
    """A Python parent process running ``script`` (which prints one line when ready)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdin=subprocess.PIPE,  # never the test runner's own (which may be /dev/null)
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ready_line(parent: subprocess.Popen[str]) -> list[str]:
    assert parent.stdout is not None
    line = read_line(parent.stdout, "the parent's ready line")
    assert line, parent.stderr.read() if parent.stderr else ""
    return line.split()


def gone(pid: int, port: int) -> None:
    wait_for(lambda: not alive(pid), f"child {pid} to exit")
    wait_for(lambda: not listening(port), f"port {port} to close")


def test_a_child_dies_when_its_parent_is_killed() -> None:
    parent = run_parent(
        """
        import sys, time
        from agentflow._process import ChildServer, free_port, kill_children
        port = free_port()
        cmd = [sys.executable, "-m", "agentflow.sim", "--port", str(port), "--quiet"]
        child = ChildServer(cmd, port=port, name="sim")
        child.start()
        print(child.pid, port, child.dies_with_parent, flush=True)
        time.sleep(600)
        """
    )
    try:
        pid, port, armed = ready_line(parent)
        assert armed == "True"  # started from the main thread on Linux
        wait_for(lambda: healthy(int(port)), "/health to answer")
        parent.kill()
        assert parent.wait(GUARD_S) == -signal.SIGKILL
        gone(int(pid), int(port))
    finally:
        if parent.returncode is None:
            parent.kill()
        parent.communicate(timeout=GUARD_S)


def test_a_parent_that_exits_without_stopping_its_child_stops_it_at_exit() -> None:
    parent = run_parent(
        """
        import sys
        from agentflow._process import ChildServer, free_port, kill_children
        port = free_port()
        cmd = [sys.executable, "-m", "agentflow.sim", "--port", str(port), "--quiet"]
        child = ChildServer(cmd, port=port, name="sim")
        child.start()
        print(child.pid, port, flush=True)
        sys.stdin.readline()  # until the test has seen it serve
        """
    )
    try:
        pid, port = ready_line(parent)
        wait_for(lambda: healthy(int(port)), "/health to answer")
        parent.communicate("\n", timeout=GUARD_S)  # the parent returns; atexit stops the child
        assert parent.returncode == 0
        assert not alive(int(pid)) and not listening(int(port))  # reaped before the exit
    finally:
        if parent.returncode is None:
            parent.kill()
        parent.communicate(timeout=GUARD_S)  # reaps it and closes its pipes


def test_a_child_started_from_another_thread_outlives_that_thread() -> None:
    """The kernel's parent-death signal follows the forking *thread*: from a worker thread
    it is not armed (the child would die with the thread); stop() still stops the child."""
    port = free_port()
    child = ChildServer(sim_cmd(port), port=port, name="sim", startup_timeout_s=GUARD_S)
    worker = threading.Thread(target=child.start)
    worker.start()
    worker.join(GUARD_S)
    try:
        assert not worker.is_alive()
        assert child.dies_with_parent is False
        pid = child.pid
        assert pid is not None and healthy(port)  # the thread is gone; the child serves on
    finally:
        child.stop()
    gone(pid, port)


def health_server(path: Path, on_sigterm: str) -> Path:
    """A script at ``path`` serving ``GET`` with a 200 on the port given as its argument,
    with ``on_sigterm`` (Python source) as its SIGTERM handler."""
    path.write_text(
        textwrap.dedent(
            f"""
            import http.server, signal, sys
            signal.signal(signal.SIGTERM, {on_sigterm})

            class Health(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    self.send_response(200)
                    self.end_headers()

                def log_message(self, *args):
                    pass

            http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
            """
        )
    )
    return path


def test_stop_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    script = health_server(tmp_path / "stubborn.py", "signal.SIG_IGN")
    port = free_port()
    child = ChildServer(
        [sys.executable, str(script), str(port)], port=port, name="stubborn", stop_timeout_s=0.5
    )
    child.start()
    pid = child.pid
    assert pid is not None and healthy(port)
    child.stop()  # SIGTERM is ignored; SIGKILL follows
    assert not alive(pid) and not listening(port)


def test_an_interrupt_while_stopping_kills_the_child(tmp_path: Path) -> None:
    """A second Ctrl-C while stop() waits for a slow child to end: the child is killed
    before the interrupt goes on (it was left running, and forgotten by the exit hook)."""
    script = health_server(
        tmp_path / "slow_to_stop.py", 'lambda *_: print("got SIGTERM", flush=True)'
    )
    port = free_port()
    child = ChildServer(
        [sys.executable, str(script), str(port)],
        port=port,
        name="slow",
        startup_timeout_s=GUARD_S,
        stop_timeout_s=GUARD_S * 10,  # only the interrupt ends the wait
    )
    child.start()
    pid = child.pid
    assert pid is not None

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if "got SIGTERM" not in child.log_tail():  # stop() has not signalled it yet
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        with pytest.raises(KeyboardInterrupt):
            child.stop()
        assert not alive(pid) and not listening(port)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if alive(pid):  # the old behaviour: clean up after the failed assertion
            os.killpg(pid, signal.SIGKILL)


def test_stop_stops_the_whole_process_group() -> None:
    """A child that started its own child (here a shell running the server): stopping the
    group stops both; signalling the shell alone would orphan the server."""
    port = free_port()
    cmd = ["sh", "-c", " ".join(sim_cmd(port)) + " & wait"]
    child = ChildServer(cmd, port=port, name="sh", startup_timeout_s=GUARD_S)
    child.start()
    try:
        assert child.pid is not None
        (server,) = children(child.pid)
        wait_for(lambda: healthy(port), "/health to answer")
    finally:
        child.stop()
    gone(server, port)


def test_an_interrupt_while_starting_stops_the_child() -> None:
    """Ctrl-C (or SIGTERM in the CLI) during the wait for health leaves no child behind."""
    port = free_port()
    never_healthy = [sys.executable, "-c", "import time; time.sleep(600)"]
    child = ChildServer(never_healthy, port=port, name="sleeper", startup_timeout_s=GUARD_S)
    started: list[int] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if child.pid is None:  # not forked yet: try again a little later
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        started.append(child.pid)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            child.start()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    (pid,) = started
    assert not alive(pid)
    assert child.pid is None


def test_a_port_in_use_is_refused_before_anything_starts() -> None:
    """Else the health check could be answered by whatever holds the port."""
    port = free_port()
    with ChildServer(sim_cmd(port), port=port, name="first", startup_timeout_s=GUARD_S):
        busy = ChildServer(sim_cmd(port), port=port, name="second")
        with pytest.raises(ConfigError, match=rf"second: port {port} on 127\.0\.0\.1 is in use"):
            busy.start()
        assert busy.pid is None
    assert not listening(port)


def test_kill_children_kills_every_running_child(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only this test's children: the session's shared llama.cpp server is a ChildServer too.
    monkeypatch.setattr("agentflow._process._running", set())
    ports = [free_port(), free_port()]
    servers = [ChildServer(sim_cmd(p), port=p, name=f"sim{p}") for p in ports]
    pids = []
    for s in servers:
        s.start()
        pids.append(s.pid)
    kill_children()
    for pid, port in zip(pids, ports, strict=True):
        assert pid is not None
        gone(pid, port)
    assert all(s.pid is None for s in servers)


def test_the_health_probe_ignores_http_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's ``http_proxy`` (here a closed port) does not hide a healthy child: the
    probe talks to loopback directly."""
    import http.server

    from agentflow._process import _healthy

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    closed = free_port()
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    try:
        assert _healthy(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_a_child_that_exits_at_start_is_a_server_start_error() -> None:
    """Its exit status and its last output lines, in one defined error (the CLI prints it
    as one error, not a traceback); still a RuntimeError for older callers."""
    from agentflow import ServerStartError

    cmd = [sys.executable, "-c", "import sys; print('no model here'); sys.exit(3)"]
    child = ChildServer(cmd, port=free_port(), name="toy server", startup_timeout_s=60)
    with pytest.raises(ServerStartError) as caught:
        child.start()
    err = caught.value
    assert isinstance(err, RuntimeError)
    assert (err.server, err.exitcode) == ("toy server", 3)
    assert "toy server exited at start" in str(err) and "no model here" in str(err)


# (Python 3.12+ warns of fork() in a process with threads: the child's output drainer.)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_process_sees_the_child_running() -> None:
    """In a process forked from the one that started the child, ``pid`` polled the child:
    that process cannot wait for it (ECHILD), so Popen recorded an exit status of 0, and
    ``pid`` read ``None`` (``returncode`` 0) while the server ran; ``wait()`` returned 0
    at once, and left them so."""
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    child = ChildServer(cmd, port=port, name="http", ready=lambda: True)
    child.start()
    try:
        read, write = os.pipe()
        forked = os.fork()
        if forked == 0:  # the forked process: report what it sees, and leave at once
            waited = child.wait(0.01)  # cannot wait either: it read 0 at once, and after it
            os.write(write, f"{child.pid} {child.returncode} {waited}".encode())  # pid None
            os._exit(0)
        os.close(write)
        os.waitpid(forked, 0)
        with os.fdopen(read) as seen:
            assert seen.read() == f"{child.pid} None None"
        assert child.pid is not None and alive(child.pid)
    finally:
        child.stop()
