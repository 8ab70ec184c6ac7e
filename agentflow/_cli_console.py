"""The ``rich`` console the ``agentflow`` commands print with (``demo``, ``bench``).

``rich`` meets a reader of standard output that has gone (``agentflow demo | head``)
with ``SystemExit(1)``: the command ends as a failure, with no message and without the
rest of its work. This console raises ``BrokenPipeError`` instead and prints nothing
more, so the error unwinds like any other and ``agentflow.cli.main`` ends the command
as a SIGPIPE death would — quietly, status 141 (``agentflow/_cli_signals.py``).
"""

from __future__ import annotations

import errno

from rich.console import Console

__all__ = ["CliConsole"]


class CliConsole(Console):
    """A :class:`rich.console.Console` whose output's reader going away raises
    ``BrokenPipeError`` (then prints nothing more), not ``SystemExit(1)``."""

    def on_broken_pipe(self) -> None:
        """Stop printing, and raise ``BrokenPipeError``."""
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of standard output has gone")
