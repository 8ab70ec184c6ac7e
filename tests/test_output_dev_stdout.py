"""``--report /dev/stdout`` with standard output redirected to a file (``> out.txt``):
``/dev/stdout`` resolved to that regular file, which was then written through a
temporary file and a rename — replacing it, and losing everything the command had
printed. Such a path is now appended to, as the open file it names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
