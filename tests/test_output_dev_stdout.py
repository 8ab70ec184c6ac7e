"""``--report /dev/stdout`` with standard output redirected to a file (``> out.txt``):
``/dev/stdout`` resolved to that regular file, which was then written through a
temporary file and a rename — replacing it, and losing everything the command had
printed. Such a path is now appended to, as the open file it names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procutil import GUARD_S

SCRIPT = """
import sys
from agentflow._files import open_text_output
print("the summary", flush=True)
with open_text_output(sys.argv[1]) as f:
    f.write('{"report": 1}\\n')
print("after it", flush=True)
"""


def test_a_report_to_dev_stdout_keeps_what_was_printed(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    for name in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        with out.open("w") as stdout:
            subprocess.run(
                [sys.executable, "-c", SCRIPT, name], stdout=stdout, timeout=GUARD_S, check=True
            )
        assert out.read_text().splitlines() == ["the summary", '{"report": 1}', "after it"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


TWICE = """
import os, signal, sys, time
import agentflow.demo.run as run
summary = run._print_summary
def interrupted(*args, **kwargs):  # a SIGTERM while the summary is printed
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    return summary(*args, **kwargs)
run._print_summary = interrupted
from agentflow.cli import main
sys.exit(main(["demo", "--virtual", "--agents", "2", "--no-live", "--report", sys.argv[1]]))
"""


def test_a_signal_during_the_summary_writes_a_descriptors_report_once(tmp_path: Path) -> None:
    """A file's report is written again, marked with the signal, replacing the first; to
    a descriptor a second write added a second report after the summary (not JSON)."""
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        code = subprocess.run(
            [sys.executable, "-c", TWICE, "/dev/stdout"], stdout=stdout, timeout=GUARD_S * 2
        ).returncode
    assert code == 143
    assert out.read_text().count('"schema_version"') == 1


def test_a_read_only_descriptor_is_refused_before_the_run(tmp_path: Path) -> None:
    from agentflow._cliargs import check_output_file
    from agentflow._errors import ConfigError
    from agentflow._files import replaced_on_write

    given = tmp_path / "in.txt"
    given.write_text("input")
    fd = os.open(given, os.O_RDONLY)
    try:
        with pytest.raises(ConfigError, match=f"descriptor {fd} is open for reading only"):
            check_output_file(Path(f"/dev/fd/{fd}"), "--report")
        assert not replaced_on_write(f"/dev/fd/{fd}")
    finally:
        os.close(fd)
    assert given.read_text() == "input"
    assert replaced_on_write(given) and replaced_on_write(tmp_path / "new.json")
    assert not replaced_on_write("/dev/null")
