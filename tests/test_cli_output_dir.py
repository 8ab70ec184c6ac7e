"""An output file in a directory that takes no new entries (``run.json`` the user owns,
in a directory they cannot write; an immutable one; ``/proc``): the file is written
through a temporary file next to it, so the commands used to pass their check (which
only appended to the file), run the whole run, and then end in a traceback with the
output never written. The check now makes a file in the directory too (one line naming
the flag, exit 2, before any work), and a write that fails anyway is one line naming the
path (exit 1), not a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentflow._cliargs import check_output_file
from agentflow._errors import ConfigError
from agentflow._files import OutputFileError, write_text_file

from .test_cli_errors import assert_one_line
from .wait import GUARD_S

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")


def _chattr(flag: str, path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", flag, str(path)], capture_output=True, timeout=GUARD_S)
    return done.returncode == 0


@pytest.fixture
def closed_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory holding a writable ``run.json`` that takes no new entries: made
    read-only (``chmod``) for a user, immutable (``chattr +i``) for root, whom ``chmod``
    does not stop."""
    d = tmp_path / "closed"
    d.mkdir()
    (d / "run.json").write_text("{}\n")
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    if not _chattr("+i", d):
        pytest.skip("running as root, and `chattr +i` is not available on this filesystem")
    try:
        yield d
    finally:
        _chattr("-i", d)


def test_the_check_makes_a_file_in_the_directory(closed_dir: Path) -> None:
    out = closed_dir / "run.json"
    with pytest.raises(ConfigError, match=f"--report {out}: cannot write: no new file"):
        check_output_file(out, "--report")
    assert out.read_text() == "{}\n"  # the file itself is writable: left as it was
    assert sorted(p.name for p in closed_dir.iterdir()) == ["run.json"]


def test_a_write_that_fails_names_the_path(closed_dir: Path) -> None:
    out = closed_dir / "run.json"
    with pytest.raises(OutputFileError, match=f"cannot write {out}: ") as info:
        write_text_file(out, "new\n")
    assert isinstance(info.value, OSError) and info.value.filename == str(out)
    assert out.read_text() == "{}\n"


def _agentflow(*argv: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", *argv],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=GUARD_S,
    )  # fmt: skip
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["demo", "--virtual", "--agents", "2", "--turns", "1:1", "--no-live"], "--report"),
        (["bench", "--profile", "cpu-tiny", "--rate", "4"], "--report"),
        (["report", "nowhere.json"], "--html"),
    ],
)
def test_commands_refuse_it_before_any_work(
    command: list[str], flag: str, closed_dir: Path
) -> None:
    out = closed_dir / "run.json"
    code, err = _agentflow(*command, flag, str(out))
    assert code == 2, err
    assert_one_line(err, f"agentflow {command[0]}", f"{flag} {out}", "cannot write")


def test_a_failed_write_at_the_end_is_one_line(
    closed_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The directory closed after the check (here: the check skipped): one line, exit 1."""
    from agentflow import cli
    from agentflow.bench import _trace_cli

    src = tmp_path / "in.jsonl"
    src.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n')
    monkeypatch.setattr(_trace_cli, "check_output_file", lambda path, flag: None)
    out = closed_dir / "run.json"
    code = cli.main(["trace", "convert", str(src), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert_one_line(err, "agentflow trace", f"cannot write {out}")
    assert out.read_text() == "{}\n"
