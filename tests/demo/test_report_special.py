"""``demo --report`` onto what is not a regular file: a symbolic link keeps pointing at
the report, a device node stays a device (as root, ``--report /dev/null`` used to replace
``/dev/null`` with a regular file), and a pipe (``--report >(jq .)``) gets the report
(the rename onto it failed with a traceback after the whole run, losing the report).

The run is the demo's, in-process, on virtual time; the writer is shared with ``bench
--report`` (agentflow/_files.py).
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agentflow._files import write_text_file
from agentflow.demo import run as demo_run
from agentflow.demo._config import DemoConfig

from ..wait import GUARD_S

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/fd, mknod")


def _demo(path: Path) -> dict[str, Any]:
    config = DemoConfig(agents=2, turns=(1, 1), virtual=True, live=False, report=path)
    return demo_run.run_demo(config, console=Console(file=io.StringIO()))


def test_a_link_stays_a_link_and_its_target_gets_the_report(tmp_path: Path) -> None:
    target = tmp_path / "reports" / "run.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    _demo(link)
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())["run"]
    assert [p.name for p in target.parent.iterdir()] == ["run.json"]  # no temporary left


def test_a_dangling_link_s_target_is_made(tmp_path: Path) -> None:
    link = tmp_path / "latest.json"
    link.symlink_to(tmp_path / "new" / "run.json")
    write_text_file(link, "{}\n")
    assert link.is_symlink() and (tmp_path / "new" / "run.json").read_text() == "{}\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_node_stays_a_device(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    _demo(null)
    assert stat.S_ISCHR(null.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary left


def test_a_pipe_gets_the_report(tmp_path: Path) -> None:
    r, w = os.pipe()
    chunks: list[bytes] = []

    def read() -> None:
        while chunk := os.read(r, 65536):
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        report = _demo(Path(f"/proc/self/fd/{w}"))  # what `--report >(jq .)` gives
    finally:
        os.close(w)  # the reader sees the end
        reader.join(GUARD_S)
        os.close(r)
    assert not reader.is_alive()
    assert json.loads(b"".join(chunks)) == json.loads(json.dumps(report))
