"""The ``--*-timeout`` flags that ``agentflow demo`` and ``agentflow chat`` share: each
model request's :class:`~agentflow.Timeouts`, in seconds or ``none``."""

from __future__ import annotations

import argparse
import math

from agentflow.transport import Timeouts

__all__: list[str] = []


_TIMEOUT_HELP = {
    "connect": "to open a connection",
    "first_token": "from sending a request to its first output",
    "idle": "the longest wait for an SSE data event (comments and keep-alives do not count)",
    "total": "for a whole request",
}


def _seconds(text: str) -> float:
    """A time limit in seconds, > 0; ``none`` (or ``off``) is no limit (``inf``)."""
    if text.strip().lower() in ("none", "off"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (or 'none'), got {text}")
    return value


def _add_timeout_arguments(p: argparse.ArgumentParser) -> None:
    """``--connect-timeout``, ``--first-token-timeout``, ``--idle-timeout`` and
    ``--total-timeout``: the transport's :class:`Timeouts`, per model request."""
    defaults = Timeouts()
    g = p.add_argument_group("time limits of each model request (seconds, or 'none')")
    for name, text in _TIMEOUT_HELP.items():
        default = getattr(defaults, name)
        g.add_argument(
            f"--{name.replace('_', '-')}-timeout",
            dest=f"{name}_timeout",
            type=_seconds,
            default=None,
            metavar="S",
            help=f"{text} (default: {'none' if default is None else f'{default:g}'})",
        )


def _timeouts(args: argparse.Namespace) -> Timeouts | None:
    """The :class:`Timeouts` the ``--*-timeout`` flags ask for; ``None`` if none was given."""
    given = {
        name: getattr(args, f"{name}_timeout")
        for name in _TIMEOUT_HELP
        if getattr(args, f"{name}_timeout", None) is not None
    }
    if not given:
        return None
    return Timeouts(**{k: (None if math.isinf(v) else v) for k, v in given.items()})
