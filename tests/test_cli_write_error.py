"""A write that fails while a command writes its output file (the disk full, the file
over the size limit): one line naming the path, exit 1, the old file left as it was and
no temporary file beside it. Only making the file and putting it in place used to be
an :class:`~agentflow._files.OutputFileError`; an ``OSError`` from a write or the close
(``ENOSPC``, ``EFBIG``) escaped as a traceback.

``/dev/full`` stands in for a full disk (a device: written directly), and
``RLIMIT_FSIZE`` for a regular file that cannot grow (written through a temporary file);
Python ignores ``SIGXFSZ``, so the write fails with ``EFBIG``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentflow._files import OutputFileError, write_text_file

from .test_cli_errors import assert_one_line, run
from .wait import GUARD_S

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")

ROOT = Path(__file__).resolve().parents[1]
CONVERT = ["trace", "convert", "agentic-small", "--format", "agentflow", "-o"]


def test_a_write_to_a_full_device_names_the_path() -> None:
    with pytest.raises(OutputFileError, match="cannot write /dev/full: No space left"):
        write_text_file(Path("/dev/full"), "x" * 100_000)


def test_trace_convert_to_a_full_device_is_one_line() -> None:
    code, err = run(*CONVERT, "/dev/full")
    assert code == 1, err
    assert_one_line(err, "agentflow trace", "cannot write /dev/full", "No space left")


def test_a_descriptor_on_a_full_device_is_one_line() -> None:
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        code, err = run(*CONVERT, f"/dev/fd/{fd}")
    finally:
        os.close(fd)
    assert code == 1, err
    assert_one_line(err, "agentflow trace", f"cannot write /dev/fd/{fd}", "No space left")


# `agentflow ARGV[2:]` with its files limited to ARGV[1] bytes.
_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from agentflow.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    ("argv", "limit"),
    [
        (CONVERT, 512),  # (the trace: 1.4 kB)
        (["demo", "--virtual", "--no-live", "--agents", "2", "--turns", "1:1", "--report"], 8192),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else str(v),
)
def test_a_file_over_the_size_limit_is_one_line(
    tmp_path: Path, argv: list[str], limit: int
) -> None:
    out = tmp_path / "out.json"
    out.write_text("old\n")
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(limit), *argv, str(out)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=GUARD_S,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert_one_line(done.stderr, f"agentflow {argv[0]}", f"cannot write {out}", "too large")
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file
