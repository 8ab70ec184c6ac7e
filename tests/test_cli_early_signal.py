"""Ctrl-C or SIGTERM in an ``agentflow`` command's first moments — while ``main`` builds
its parser, which imports every command's module — ends it as anywhere else: 130 / 143,
nothing on stderr. It used to come before ``main`` handled either: a 24–37-line
``KeyboardInterrupt`` traceback and status -2, or a plain SIGTERM death (-15).

The signal is sent by the process itself as the parser is built (as ``agentflow bench``
adds its subcommand), not after a delay: the same place on every run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .wait import GUARD_S

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# `agentflow ARGV...`, sending itself the signal named first as its parser is built.
_SIGNAL_WHILE_PARSING = """
import os, signal, sys
import agentflow.bench.cli as bench_cli
from agentflow.cli import main

sig = getattr(signal, sys.argv[1])
add = bench_cli.add_parser

def signalled(sub):
    os.kill(os.getpid(), sig)
    return add(sub)

bench_cli.add_parser = signalled
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
@pytest.mark.parametrize("argv", [["trace", "show", "agentic-small"], ["plan", "--help"]])
def test_a_signal_while_the_parser_is_built(argv: list[str], sig: signal.Signals) -> None:
    cmd = [sys.executable, "-c", _SIGNAL_WHILE_PARSING, sig.name, *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=GUARD_S)
    assert (done.returncode, done.stderr) == (128 + sig, "")
    assert done.stdout == ""  # the command never ran


def test_importing_the_command_module_is_light() -> None:
    """``agentflow.cli`` itself imports no command's module (those are what take time):
    before ``main`` runs, a signal has no handler to meet."""
    code = "import sys, agentflow.cli; print(sorted(m for m in sys.modules if 'agentflow' in m))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=GUARD_S
    )
    loaded = done.stdout
    for heavy in ("agentflow._cli_chat", "agentflow._agent", "agentflow.transport'"):
        assert heavy not in loaded, loaded
