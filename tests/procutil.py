"""Looking at processes and ports from a test (Linux ``/proc``), and waiting on them.

Every wait polls a condition under a generous, finite guard; none asserts how long
anything took.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

# Re-exported: the process tests wait with the same guard as every other test.
from tests.wait import GUARD_S as GUARD_S
from tests.wait import wait_for as wait_for


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie — dead, not yet reaped — is not).

    A killed orphan may stay a zombie here: not every container's PID 1 reaps.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def one_child(pid: int) -> int:
    """The one child of ``pid``, once it has one."""
    found: list[int] = []

    def has_child() -> bool:
        found[:] = children(pid)
        return len(found) == 1

    wait_for(has_child, f"process {pid} to start a child")
    return found[0]


def flag_value(pid: int, flag: str) -> str:
    """The argument after ``flag`` on process ``pid``'s command line, once it has one: a
    child found right after its fork still shows its parent's command line until it execs."""
    argv: list[str] = []

    def has_flag() -> bool:
        argv[:] = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        return flag in argv[:-1]

    wait_for(has_flag, f"process {pid} to show {flag} on its command line")
    return argv[argv.index(flag) + 1]


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return True
    except OSError:
        return False


def healthy(port: int) -> bool:
    """Whether ``GET /health`` on 127.0.0.1:``port`` answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def finished_requests(port: int) -> int:
    """Requests the simulator on ``port`` has finished (``vllm:request_success_total``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:request_success_total")
        )
    )


def serving_llamacpp(
    *flags: str, stderr: int = subprocess.PIPE
) -> tuple[subprocess.Popen[str], str]:
    """Start ``agentflow llamacpp --port 0 --n-ctx 2048 *flags`` (its stdout a pipe, its
    stderr ``stderr``) and read its serving line, printed once the server's /health
    answers: the process and that line. The caller ends the process."""
    from tests.wait import read_line

    proc = subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", "llamacpp", "--port", "0", "--n-ctx", "2048",
         *flags],
        stdout=subprocess.PIPE, stderr=stderr, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        return proc, read_line(proc.stdout, "the serving line")
    except BaseException:
        proc.kill()
        proc.communicate(timeout=GUARD_S)
        raise


def run_python(code: str, *, without: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a child (``code`` dedented), where importing each module of
    ``without`` fails as if it were not installed; its output, under the guard."""
    blocked = "".join(f"sys.modules[{m!r}] = None\n" for m in without)
    prelude = f"import sys\n{blocked}" if blocked else ""
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )
