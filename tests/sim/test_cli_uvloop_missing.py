"""``agentflow sim --uvloop`` without uvloop names the extra that brings it.

It said only "--uvloop needs the uvloop package": the ``fast`` extra, the way to install
it with agentflow, went unnamed. uvloop is made unimportable in a child process.
"""

from __future__ import annotations

import pytest

from tests.procutil import run_python


@pytest.mark.parametrize(
    ("entry", "prog"),
    [
        ("from agentflow.sim.cli import main; sys.exit(main(ARGV))", "python -m agentflow.sim"),
        ("from agentflow.cli import main; sys.exit(main(['sim', *ARGV]))", "agentflow sim"),
    ],
)
def test_exits_2_naming_the_fast_extra(entry: str, prog: str) -> None:
    proc = run_python("ARGV = ['--port', '0', '--uvloop']\n" + entry, without=("uvloop",))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"{prog}: error: --uvloop needs uvloop, which is not installed: "
        "pip install 'agentflow[fast]'"
    )
