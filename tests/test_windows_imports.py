"""agentflow's portable modules import where POSIX-only names are missing (Windows).

``transport/_kstamp.py`` called ``socket.CMSG_SPACE`` at import and ``_process.py`` had
``signal.SIGKILL`` as a default argument: on Windows neither exists, so
``agentflow.transport``, ``agentflow.testing`` and ``agentflow.llamacpp`` could not be
imported. Each check removes the names in a fresh interpreter, then imports.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.procutil import run_python

WINDOWS_LIKE = """
import signal, socket
for name in ("CMSG_SPACE", "CMSG_LEN"):
    delattr(socket, name)
del signal.SIGKILL
"""


def run(code: str) -> str:
    proc = run_python(WINDOWS_LIKE + textwrap.dedent(code))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize(
    "module", ["agentflow.transport", "agentflow.testing", "agentflow.llamacpp"]
)
def test_imports(module: str) -> None:
    run(f"import {module}")


def test_no_kernel_stamps_and_a_sigterm_death_signal() -> None:
    out = run(
        """
        from agentflow._process import ChildServer
        from agentflow.transport import _kstamp
        print(_kstamp.SUPPORTED, ChildServer(["true"], port=1, name="x").death_signal.name)
        """
    )
    assert out.split() == ["False", "SIGTERM"]


def test_the_death_signal_is_still_sigkill_where_there_is_one() -> None:
    import signal

    from agentflow._process import ChildServer

    assert ChildServer(["true"], port=1, name="x").death_signal is signal.SIGKILL
