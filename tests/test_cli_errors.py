"""Bad arguments to the `agentflow` commands: one line naming the value, exit status 2,
and nothing started — checked before any run, never a traceback."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from agentflow import ConfigError, Timeouts, _cliargs
from agentflow._cli_timeouts import _timeouts
from agentflow._cliargs import check_listen, check_output_dir, check_output_file
from agentflow.cli import _parser, main
from agentflow.sim.profiles import UnknownProfileError, get_profile

from .procutil import GUARD_S


def run(*argv: str) -> tuple[int, str]:
    """``agentflow ARGV`` in this process: its exit status and what it wrote to stderr."""
    err = io.StringIO()
    with redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's own errors
            code = int(exc.code or 0)
    return code, err.getvalue()


def assert_one_line(text: str, prog: str, *names: str) -> None:
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert lines[0].startswith(f"{prog}: error: "), text
    assert "Traceback" not in text
    for name in names:
        assert name in lines[0], (name, text)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A raw TCP server on loopback that accepts nothing: a busy port, or a server that
    would see any connection a command made."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        s.setblocking(False)
        yield s


def assert_no_connection(s: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        s.accept()


@pytest.fixture
def not_a_dir(tmp_path: Path) -> Path:
    """A path under a regular file: no one, root included, can create it."""
    f = tmp_path / "file"
    f.write_text("x")
    return f


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["sim", "--port", "99999"], ["--port", "99999"]),
        (["sim", "--port", "-1"], ["--port", "-1"]),
        (["sim", "--port", "http"], ["--port", "'http'"]),
        (["sim", "--host", "999.1.1.1", "--port", "0"], ["--host", "'999.1.1.1'"]),
        (["sim", "--host", "::zz", "--port", "0"], ["--host", "'::zz'"]),
        (["sim", "--port", "0", "--profile", "nope"], ["'nope'"]),
        (["sim", "--port", "0", "--profile-set", "max_num_seqs=lots"], ["max_num_seqs", "lots"]),
        (["llamacpp", "--port", "70000"], ["--port", "70000"]),
        (["llamacpp", "--n-ctx", "-5"], ["--n-ctx", "-5"]),
        (["llamacpp", "--n-ctx", "100000000000"], ["--n-ctx", "100000000000"]),
        (["llamacpp", "--n-parallel", "100000"], ["--n-parallel", "100000"]),
        (["demo", "--time-scale", "inf"], ["--time-scale", "inf"]),
        (["demo", "--virtual", "--store", "/"], ["--store", "is a directory"]),
        (["chat", "--model", "m", "--max-tokens", "0", "hi"], ["--max-tokens", "0"]),
        (["chat", "--model", "m", "--temperature", "-1", "hi"], ["--temperature", "-1"]),
        (["chat", "--model", "m", "--temperature", "hot", "hi"], ["--temperature", "'hot'"]),
        (["demo", "--profile", "nope"], ["'nope'"]),
        (["demo", "--turns", "x"], ["--turns", "'x'"]),
        (["demo", "--agents", "0"], ["--agents", "0"]),
        (["demo", "--idle-timeout", "0"], ["--idle-timeout", "0"]),
        (["demo", "--connect-timeout", "soon"], ["--connect-timeout", "'soon'"]),
        (["demo", "--virtual", "--total-timeout", "5"], ["timeout", "--virtual"]),
        (["demo", "--base-url", "ftp://x"], ["'ftp://x'"]),
    ],
)
def test_a_bad_value_is_one_line_naming_it(argv: list[str], names: list[str]) -> None:
    code, err = run(*argv)
    assert code == 2
    assert_one_line(err, f"agentflow {argv[0]}", *names)


@pytest.mark.parametrize("value", ["nan", "inf", "NaN", "1e999"])
def test_chat_refuses_a_temperature_json_cannot_carry(listener: socket.socket, value: str) -> None:
    """``float()`` takes nan and inf, and they went out as ``"temperature": null``: now
    refused like any bad argument, before the server is contacted."""
    base = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    guard = ("--first-token-timeout", "0.5")  # were it sent: the listener never answers
    code, err = run(
        "chat", "--base-url", base, "--model", "m", *guard, "--temperature", value, "hi"
    )
    assert code == 2
    assert_one_line(err, "agentflow chat", "--temperature", f"finite number ≥ 0, got {value}")
    assert_no_connection(listener)


def test_a_port_in_use(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    code, err = run("sim", "--port", str(port))
    assert code == 2
    assert_one_line(err, "agentflow sim", f"--port {port} on 127.0.0.1 is in use")
    code, err = run("llamacpp", "--port", str(port))
    assert code == 2
    assert_one_line(err, "agentflow llamacpp", f"--port {port} on 127.0.0.1 is in use")
    assert_no_connection(listener)


def test_demo_checks_its_report_path_before_the_run(
    listener: socket.socket, not_a_dir: Path
) -> None:
    """The server is never contacted: the run does not start."""
    port = listener.getsockname()[1]
    bad = not_a_dir / "run.json"
    base = f"http://127.0.0.1:{port}/v1"
    code, err = run("demo", "--base-url", base, "--model", "m", "--no-live", "--report", str(bad))
    assert code == 2
    assert_one_line(err, "agentflow demo", f"--report {bad}", f"{not_a_dir} is not a directory")
    assert_no_connection(listener)


def test_report_checks_its_output_paths_before_drawing(tmp_path: Path, not_a_dir: Path) -> None:
    missing = tmp_path / "nowhere.json"  # would fail later, when read: the paths fail first
    for flag, value in (
        ("--html", not_a_dir / "x.html"),
        ("--png-dir", not_a_dir / "figs"),
        ("--html", tmp_path),  # a directory
    ):
        code, err = run("report", str(missing), flag, str(value))
        assert code == 2
        assert_one_line(err, "agentflow report", f"{flag} {value}")
    code, err = run("report", str(missing), "--html", str(tmp_path / "ok.html"))
    assert code == 2  # then the missing run file, still one line
    assert_one_line(err, "agentflow report", str(missing))
    assert not (tmp_path / "ok.html").exists()  # the check leaves no file behind


def test_no_traceback_from_the_installed_entry_point(not_a_dir: Path) -> None:
    """The same through a real process: stderr is the one line, nothing else."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "report", "r.json", "--html",
         str(not_a_dir / "x.html")],
        capture_output=True, text=True, timeout=GUARD_S, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "agentflow report", "--html")
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.sim", "--port", "99999"],
        capture_output=True, text=True, timeout=GUARD_S, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "python -m agentflow.sim", "--port", "99999")


def test_unknown_profile_error_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        get_profile("nope")
    assert isinstance(err.value, UnknownProfileError) and isinstance(err.value, KeyError)
    assert "'nope'" in str(err.value) and "cpu-tiny" in str(err.value)


# ---- the checks themselves -------------------------------------------------------------


def test_check_listen_accepts_a_free_port_and_one_in_time_wait() -> None:
    """A port another socket *listens* on is in use; one whose last connection is in
    TIME_WAIT is not (servers bind with SO_REUSEADDR, as the check does)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    with pytest.raises(ConfigError, match=f"--port {port} on 127.0.0.1 is in use"):
        check_listen("127.0.0.1", port)
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its port keeps a TIME_WAIT socket
    client.recv(1)
    client.close()
    server.close()
    check_listen("127.0.0.1", port)
    check_listen("localhost", 0)


def test_check_listen_names_an_address_that_is_not_this_machines() -> None:
    nonlocal_bind = Path("/proc/sys/net/ipv4/ip_nonlocal_bind")
    if nonlocal_bind.exists() and nonlocal_bind.read_text().strip() != "0":
        pytest.skip("this machine lets any address be bound (ip_nonlocal_bind)")
    with pytest.raises(
        ConfigError, match=re.escape("--host '192.0.2.1' is not an address of this")
    ):
        check_listen("192.0.2.1", 0)  # TEST-NET-1: never assigned to a machine


def test_check_listen_skips_an_address_the_machine_cannot_have(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``localhost`` on a machine without IPv6: ::1 cannot be bound, 127.0.0.1 can. The
    servers skip such an address (asyncio's create_server does), so the check must too;
    it fails only when no address binds."""
    nonlocal_bind = Path("/proc/sys/net/ipv6/ip_nonlocal_bind")
    if nonlocal_bind.exists() and nonlocal_bind.read_text().strip() != "0":
        pytest.skip("this machine lets any IPv6 address be bound (ip_nonlocal_bind)")
    v6 = (socket.AF_INET6, socket.SOCK_STREAM, 6, ("2001:db8::1", 0, 0, 0))  # documentation
    v4 = (socket.AF_INET, socket.SOCK_STREAM, 6, ("127.0.0.1", 0))
    answers = {"both": [v6, v4], "v6": [v6]}
    monkeypatch.setattr(_cliargs, "_resolve", lambda host, port, flag: answers[host])
    check_listen("both", 0)
    with pytest.raises(ConfigError, match="--host 'v6'"):
        check_listen("v6", 0)


def test_check_output_file_leaves_an_existing_file_as_it_was(tmp_path: Path) -> None:
    f = tmp_path / "run.json"
    f.write_text('{"kept": true}')
    check_output_file(f, "--report")
    assert json.loads(f.read_text()) == {"kept": True}
    fresh = tmp_path / "a" / "b" / "run.json"
    check_output_file(fresh, "--report")
    assert fresh.parent.is_dir() and not fresh.exists()
    check_output_dir(tmp_path / "figs", "--png-dir")
    assert list((tmp_path / "figs").iterdir()) == []


def test_check_output_refuses_a_read_only_directory(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write in a read-only directory")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match=f"--report {ro / 'r.json'}: cannot write"):
            check_output_file(ro / "r.json", "--report")
        with pytest.raises(ConfigError, match="--png-dir"):
            check_output_dir(ro, "--png-dir")
    finally:
        ro.chmod(0o700)


def test_timeout_flags_map_onto_the_transports_timeouts() -> None:
    def parse(*argv: str) -> argparse.Namespace:
        return _parser().parse_args(["demo", *argv])

    assert _timeouts(parse()) is None  # no flag: the transport's defaults
    t = _timeouts(
        parse("--connect-timeout", "2.5", "--idle-timeout", "7", "--total-timeout", "none")
    )
    assert t == Timeouts(connect=2.5, idle=7.0, total=None)
    assert _timeouts(parse("--first-token-timeout", "30")) == Timeouts(first_token=30.0)
