"""Whether a :class:`~agentflow.Session` may start a run: not when it has run, nor while
a run has it (:func:`hold`; the run clears ``Session._running`` when it ends).

:meth:`Session.run` holds a session it runs alone; a fleet's run holds all of its
sessions when it starts (``_fleet_checks.py``), before any of them is queued, so a second
run of one (another ``Session.run``, another fleet) is refused at once, whichever comes
first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentflow._errors import ConfigError

if TYPE_CHECKING:
    from agentflow._session import Session

__all__ = ["hold", "refused"]


def refused(session: Session) -> ConfigError:
    """Why ``session`` cannot start a run: it has run, or a run has it now."""
    if session.result is None:
        # Two runs at once used to interleave their turns in one conversation (two
        # turns 0, each run's tool results after the other's calls).
        return ConfigError(
            f"session {session.session_id!r} is already running (in another Session.run "
            "or fleet run); a session runs once, in one run"
        )
    # A second run used to start again at turn 0 with a fresh max_turns budget:
    # two turns numbered 0 in one session's events, store and result.
    return ConfigError(
        f"session {session.session_id!r} has already run (status "
        f"{session.result.status!r}); a session runs once: to go on with the "
        "conversation, start a new one from its messages, e.g. "
        "agent.session(history + [{'role': 'user', 'content': ...}]) with history "
        "its messages after the agent's instructions"
    )


def hold(session: Session) -> None:
    """Hold ``session`` for a run starting now, or raise :func:`refused`'s error."""
    if session.result is not None or session._running:
        raise refused(session)
    session._running = True
