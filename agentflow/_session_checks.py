"""What a :class:`~agentflow.Session` is checked for: what it is given, when it is made
(its ``agent``, ``session_id`` and ``task``: :func:`check_agent`,
:func:`check_session_id`, :func:`task_messages`), and whether it may start a run — not
when it has run, nor while a run has it (:func:`hold`; the run clears
``Session._running`` when it ends).

:meth:`Session.run` holds a session it runs alone; a fleet's run holds all of its
sessions when it starts (``_fleet_checks.py``), before any of them is queued, so a second
run of one (another ``Session.run``, another fleet) is refused at once, whichever comes
first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError
from agentflow._sendable import check_sendable

if TYPE_CHECKING:
    from agentflow._session import Session

__all__ = [
    "PARAMS_RESERVED",
    "SESSION_OWNS",
    "check_agent",
    "check_header_text",
    "check_session_id",
    "hold",
    "is_header_name",
    "refused",
    "session_metadata",
    "task_messages",
]

#: Body fields every request's session sets: neither ``Agent.params`` nor
#: ``Endpoint.extra_body`` may set them (merged last, they would replace the session's
#: without a word). ``Agent.params`` may not set ``stream_options`` either; an endpoint's
#: are merged with the session's ``include_usage`` (vLLM's ``continuous_usage_stats``).
SESSION_OWNS = frozenset({"model", "messages", "tools", "stream", "n"})
#: What ``params`` (an agent's, a ``Compact``'s) may not set: those and ``stream_options``.
PARAMS_RESERVED = SESSION_OWNS | {"stream_options"}

#: What a header value cannot hold (the session id is the router's ``X-Session-ID``): a
#: control character other than a tab (RFC 9110, section 5.5).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


#: An HTTP field name: an RFC 9110 token.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def is_header_name(text: object) -> bool:
    """Whether ``text`` can name an HTTP header (a ``str``, an RFC 9110 token: no space,
    no ``:``); the router's ``session_header`` and ``agentflow sim --session-header``."""
    return isinstance(text, str) and _HEADER_NAME.fullmatch(text) is not None


def check_agent(agent: object) -> None:
    """Raise :class:`ConfigError` unless ``agent`` is an :class:`~agentflow.Agent` (a
    name, ``Session("coder", task)``, failed with an AttributeError on its ``name``)."""
    from agentflow._agent import Agent  # (it imports this module)

    if not isinstance(agent, Agent):
        raise ConfigError(
            "Session needs an Agent (agent.session(task) makes one), got "
            f"{type(agent).__name__} {agent!r:.60}"
        )


def check_session_id(session_id: object) -> None:
    """Raise :class:`ConfigError` unless ``session_id`` is text a request can carry, in
    its body and in the router's ``X-Session-ID`` header: a ``str`` with no lone
    surrogate and no control character but a tab. (An int from a database row failed
    every turn with a bare ``TypeError``; a lone surrogate with a
    ``UnicodeEncodeError``.)"""
    if not isinstance(session_id, str):
        raise ConfigError(
            f"session_id must be a str, got {type(session_id).__name__} {session_id!r}"
        )
    check_header_text(session_id, f"session_id {session_id!r}")


def check_header_text(
    text: str, where: str, reason: str = "which the X-Session-ID header cannot carry"
) -> None:
    """Raise :class:`ConfigError` (its message starting with ``where``) if ``text``
    cannot go into a request's body and its ``X-Session-ID`` header: a lone surrogate,
    or a control character other than a tab. ``Agent.name`` is checked so too: it
    starts every session id the agent makes. The message never shows ``text`` (a
    header's value may be a credential); ``reason`` follows the control character's
    code point in it."""
    check_sendable(text, where)
    if (bad := _CONTROL.search(text)) is not None:
        raise ConfigError(f"{where} holds a control character (U+{ord(bad.group()):04X}), {reason}")


def check_headers(headers: object, where: str, reason: str, *, show: bool = False) -> None:
    """Raise :class:`ConfigError` naming ``where`` (``Endpoint.headers``,
    ``Reply.headers``) unless ``headers`` is a mapping of header names (RFC 9110 tokens)
    to ``str`` values a header can carry (:func:`check_header_text`, with ``reason``).
    ``show``: a value that is not a ``str`` is shown (never where it may be a credential)."""
    if not isinstance(headers, Mapping):
        raise ConfigError(
            f"{where} must be a mapping of header names to values (a dict), "
            f"got {type(headers).__name__}"
        )
    for name, value in headers.items():
        if not is_header_name(name):
            raise ConfigError(
                f"{where}: {name!r:.60} is not a header name (an RFC 9110 token: "
                "letters, digits and !#$%&'*+-.^_`|~; no space or ':')"
            )
        if not isinstance(value, str):
            shown = f" {value!r:.60}" if show else ""
            if show and isinstance(value, int | float):
                shown += f" (write it as {str(value)!r})"
            raise ConfigError(f"{where}[{name!r}] must be a str, got {type(value).__name__}{shown}")
        check_header_text(value, f"{where}[{name!r}]", reason)


def task_messages(task: object, where: str) -> list[dict[str, Any]]:
    """``task`` as a session's first messages, each a copy: a ``str`` is one user
    message; else ``task`` is an iterable of messages, each a mapping whose
    ``tool_calls``, when set, is a list of mappings, each with its ``function`` a
    mapping — what the session reads of a history (its prompt estimate, its context
    links). Anything else is a :class:`ConfigError` naming the item, at
    :meth:`Agent.session`, not a bare ``AttributeError`` at every turn."""
    if isinstance(task, str):
        return [{"role": "user", "content": task}]
    if isinstance(task, bytes | bytearray | Mapping) or not isinstance(task, Iterable):
        raise ConfigError(
            f"{where} must be a str or a list of messages (mappings), got {type(task).__name__}"
        )
    messages = []
    for i, m in enumerate(task):
        if not isinstance(m, Mapping):
            raise ConfigError(
                f"{where}[{i}] must be a message (a mapping such as {{'role': 'user', "
                f"'content': ...}}), got {type(m).__name__} {m!r:.60}"
            )
        message = dict(m)
        _check_tool_calls(message.get("tool_calls"), f"{where}[{i}]['tool_calls']")
        messages.append(message)
    return messages


def session_metadata(metadata: object, where: str) -> dict[str, Any]:
    """A copy of a session's ``metadata`` (``None``: empty): a mapping, else a
    :class:`ConfigError` naming it (``dict()`` of anything else was a bare ``TypeError``)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ConfigError(f"{where} must be a mapping (a dict), got {type(metadata).__name__}")
    return dict(metadata)


def _check_tool_calls(calls: object, where: str) -> None:
    if calls is None:
        return
    if not isinstance(calls, list | tuple):
        raise ConfigError(f"{where} must be a list of tool calls, got {type(calls).__name__}")
    for k, call in enumerate(calls):
        if not isinstance(call, Mapping):
            raise ConfigError(
                f"{where}[{k}] must be a tool call (a mapping with 'id', 'type' and "
                f"'function'), got {type(call).__name__}"
            )
        function = call.get("function", {})
        if not isinstance(function, Mapping):
            raise ConfigError(
                f"{where}[{k}]['function'] must be a mapping with 'name' and 'arguments', "
                f"got {type(function).__name__}"
            )


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
