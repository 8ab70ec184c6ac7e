"""How long the transports wait for the body of an error answer (a non-2xx status).

Once the status line and headers of a 429 or a 503 have arrived, the status and its
``Retry-After`` are known: the body only adds the server's message. A body cut short (a
``Content-Length`` larger than what came, a reset, a chunk that never ends) or one that
stalls is then read for at most :func:`error_body_s`, and the status error is raised with
whatever of it arrived. It used to fail the attempt as a ``StreamInterrupted`` or, after
the idle limit (300 s), a ``StreamTimeout``: the status and ``Retry-After`` lost, and the
failure charged to the replica (a 429 is not its fault).
"""

from __future__ import annotations

from agentflow.transport._request import Timeouts

__all__ = ["ERROR_BODY_S", "error_body_s"]

#: The longest wait for the rest of an error body once its head has arrived (seconds).
ERROR_BODY_S = 10.0


def error_body_s(timeouts: Timeouts | None) -> float:
    """The time an error body may take after its head: :data:`ERROR_BODY_S`, or the idle
    limit when that is shorter."""
    idle = timeouts.idle if timeouts is not None else None
    return ERROR_BODY_S if idle is None else min(idle, ERROR_BODY_S)
