"""How long the transports wait for the body of an error answer (a non-2xx status).

Once the status line and headers of a 429 or a 503 have arrived, the status and its
``Retry-After`` are known: the body only adds the server's message. A body cut short (a
``Content-Length`` larger than what came, a reset, a chunk that never ends) or one that
stalls — no byte of it for :func:`error_body_s` — ends there, as does one still coming
when the stream's ``Timeouts.total`` or ``first_token`` limit runs out
(:func:`error_body_until`); the status error is then raised with whatever of it
arrived. A body that keeps coming is read to its end (or to 64 KiB, the most kept).

It used to fail the attempt as a ``StreamInterrupted`` or, after the idle limit (300 s),
a ``StreamTimeout``: the status and ``Retry-After`` lost, and the failure charged to the
replica (a 429 is not its fault).
"""

from __future__ import annotations

import asyncio

from agentflow.transport._request import Timeouts

__all__ = ["ERROR_BODY_S", "error_body_s", "error_body_until"]

#: The longest wait for the next piece of an error body once its head has arrived
#: (seconds): the bound is a gap, restarted by each piece, not a total.
ERROR_BODY_S = 10.0


def error_body_s(timeouts: Timeouts | None) -> float:
    """The longest wait for the next piece of an error body: :data:`ERROR_BODY_S`, or the
    idle limit when that is shorter."""
    idle = timeouts.idle if timeouts is not None else None
    return ERROR_BODY_S if idle is None else min(idle, ERROR_BODY_S)


def error_body_until(limit_s: float, until: float | None) -> float:
    """When (loop time) to stop waiting for an error body's next piece, waited for from
    now: after ``limit_s``, or at ``until`` (the stream's first-token or total deadline,
    :meth:`~agentflow.transport._deadline.Deadlines.until`) when that is sooner."""
    end = asyncio.get_running_loop().time() + limit_s
    return end if until is None else min(end, until)
