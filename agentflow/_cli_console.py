"""The ``rich`` console the ``agentflow`` commands print with (``demo``, ``bench``).

``rich`` meets a reader of standard output that has gone (``agentflow demo | head``)
with ``SystemExit(1)``: the command ends as a failure, with no message and without the
rest of its work. This console prints nothing more instead, and then either

- raises ``BrokenPipeError``, so the error unwinds like any other and
  ``agentflow.cli.main`` ends the command as a SIGPIPE death would — quietly, status 141
  (``agentflow/_cli_signals.py``); or,
- for a command that was asked to write files (``finish=True``: ``bench --report``,
  ``demo --report``), lets it go on to write them — its printing, and all that follows,
  goes to ``os.devnull`` — and ``agentflow.cli.main`` ends it with 141 once it is done.
  A reader that stopped at the first lines (``agentflow bench --report r.json | head -1``)
  does not cost the run's measurements.
"""

from __future__ import annotations

import errno
from typing import Any

from rich.console import Console

from agentflow._cli_signals import drop_stdout, stdout_gone

__all__ = ["CliConsole"]


class CliConsole(Console):
    """A :class:`rich.console.Console` whose output's reader going away stops its printing
    and raises ``BrokenPipeError`` — or, with ``finish=True``, when that output is
    standard output, lets the command finish (see the module)."""

    def __init__(self, *args: Any, finish: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finish = finish

    def on_broken_pipe(self) -> None:
        """Stop printing; then drop standard output (``finish``) or raise ``BrokenPipeError``."""
        self.quiet = True
        if self.finish and stdout_gone():
            drop_stdout()
            return
        raise BrokenPipeError(errno.EPIPE, "the reader of standard output has gone")
