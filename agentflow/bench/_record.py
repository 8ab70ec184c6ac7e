"""Recording: any agentflow run — a live :class:`~agentflow.Fleet` run (its
``SessionEndEvent`` s, sub-agents included), a :class:`~agentflow.FleetResult`, or a
run in the durable store — exported to agentflow's trace format (``docs/traces.md``).

Per finished model turn, one :class:`TraceRecord`:

- ``timestamp``: when the turn became ready to send (the request's arrival at the
  client: its send time less its queue wait), in seconds from the run's first one;
- ``duration_s``: from then to the response's last byte;
- ``tool_s`` (the turn appended tool results) or ``think_s`` (it did not): the gap
  between the previous response's end and this turn's arrival — so a replay waits
  exactly what the recorded session waited;
- ``messages``: what the turn appended to the conversation (tool results, user
  messages); the first turn's include the task; ``system`` on the first turn;
- ``prompt_tokens`` / ``output_tokens`` from the server's usage, and
  ``input_tokens`` (this turn's prompt less the previous turn's prompt and output)
  where usage gives it.

``with_text=False`` records lengths only (no prompt text leaves the machine): the
first turn's ``input_tokens`` is then its whole prompt (system prompt included).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from agentflow._events import Event, SessionEndEvent
from agentflow.bench._trace_format import TraceMessage, TraceRecord

if TYPE_CHECKING:
    from agentflow._fleet import FleetResult
    from agentflow._session_types import SessionResult, TurnRecord
    from agentflow.store import Store

__all__ = ["TraceRecorder", "record_result", "record_store"]


class TraceRecorder:
    """A fleet callback that keeps every session that ends (sub-agents too) and turns
    them into trace records (:meth:`records`).

        recorder = TraceRecorder()
        await Fleet(transport, callbacks=[recorder]).run(sessions)
        write_trace(recorder.records(), "run.jsonl")

    Args:
        with_text: record the messages (else lengths only).
    """

    #: Only these events reach it: with it subscribed, the bus still builds no token
    #: event per streamed delta (``--record`` must not slow the client down).
    event_types: ClassVar[frozenset[str]] = frozenset({"session_end"})

    def __init__(self, *, with_text: bool = True) -> None:
        self.with_text = with_text
        #: The sessions that ended, in the order they ended.
        self.sessions: list[SessionResult] = []

    def __call__(self, event: Event) -> None:
        """Keep a ``SessionEndEvent``'s result."""
        if isinstance(event, SessionEndEvent):
            self.sessions.append(event.result)

    def records(self) -> list[TraceRecord]:
        """The trace of the sessions so far (see :func:`record_result`)."""
        return record_result(self.sessions, with_text=self.with_text)


def record_result(
    result: FleetResult | Iterable[SessionResult], *, with_text: bool = True
) -> list[TraceRecord]:
    """A finished run's trace: one record per finished turn, sessions in order of
    arrival (then by id), times from the run's first arrival (see the module's docstring).
    A session id met again (a bench's later levels and repeats reuse ids) is recorded
    as ``ID#2``, ``ID#3`` … so that every recorded session replays as its own.

    Args:
        result: a :class:`~agentflow.FleetResult`, or session results (e.g. a
            :class:`TraceRecorder`'s, which include sub-agents).
        with_text: record the appended messages and system prompts; ``False``:
            lengths only.
    """
    from agentflow._fleet import FleetResult

    sessions = list(result.sessions if isinstance(result, FleetResult) else result)
    timed = [(s, [_times(t) for t in s.turns]) for s in sessions if s.turns]
    if not timed:
        return []
    origin = min(times[0][0] for _, times in timed)
    timed.sort(key=lambda item: (item[1][0][0], item[0].session_id))
    out: list[TraceRecord] = []
    seen: dict[str, int] = {}
    for s, times in timed:
        # One id twice (a bench's levels or repeats reuse ids): later ones get "#2", "#3"…
        n = seen[s.session_id] = seen.get(s.session_id, 0) + 1
        sid = s.session_id if n == 1 else f"{s.session_id}#{n}"
        out.extend(_session_records(s, sid, times, origin, with_text))
    return out


def _times(turn: TurnRecord) -> tuple[int, int]:
    """(ready, end) of a turn on the run's clock, in ns."""
    ready = turn.trace.sent_ns - round(turn.metrics.queue_wait_s * 1e9)
    return ready, turn.trace.end_ns


def _session_records(
    s: SessionResult, sid: str, times: list[tuple[int, int]], origin: int, with_text: bool
) -> list[TraceRecord]:
    appended = _appended(s.messages, len(s.turns))
    system = None
    if s.messages and s.messages[0].get("role") == "system":
        system = _content(s.messages[0]) or None
    agent = s.metadata.get("bench_agent") if isinstance(s.metadata, dict) else None
    label = agent if isinstance(agent, str) else s.agent
    out: list[TraceRecord] = []
    for k, turn in enumerate(s.turns):
        ready, end = times[k]
        m = turn.metrics
        msgs = appended[k] if appended is not None else None
        tool_s = think_s = None
        if k:
            wait = max(0, ready - times[k - 1][1]) / 1e9
            if msgs is not None and any(x.role == "tool" for x in msgs):
                tool_s = wait
            else:
                think_s = wait
        input_tokens = _input_tokens(s.turns, k)
        if not with_text and k == 0:
            input_tokens = m.prompt_tokens or input_tokens
        if input_tokens is None and (not with_text or msgs is None):
            input_tokens = 1  # nothing known: the smallest request
        out.append(
            TraceRecord(
                session_id=sid,
                timestamp=(ready - origin) / 1e9,
                turn=k,
                messages=tuple(msgs) if with_text and msgs is not None else None,
                input_tokens=input_tokens,
                output_tokens=m.output_tokens or None,
                duration_s=max(0, end - ready) / 1e9,
                prompt_tokens=m.prompt_tokens,
                system=system if with_text and k == 0 else None,
                agent=label,
                tool_s=tool_s,
                think_s=think_s,
            )
        )
    return out


def _input_tokens(turns: list[TurnRecord], k: int) -> int | None:
    """Tokens turn ``k`` appended, from usage: its prompt less the previous turn's
    prompt and output (``None`` for the first turn, or without usage)."""
    if k == 0:
        return None
    now, prev = turns[k].metrics, turns[k - 1].metrics
    if now.prompt_tokens is None or prev.prompt_tokens is None:
        return None
    delta = now.prompt_tokens - prev.prompt_tokens - prev.output_tokens
    return delta if delta >= 1 else None


def _appended(messages: list[dict[str, Any]], n_turns: int) -> list[list[TraceMessage]] | None:
    """The messages each turn appended: those between the previous assistant message
    (or the system prompt) and the turn's own. ``None`` when the conversation does not
    line up with the turns (a context policy rewrote it)."""
    out: list[list[TraceMessage]] = []
    current: list[TraceMessage] = []
    tool_names: dict[str, str] = {}  # call id → tool name, from the assistant's calls
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "system" and i == 0:
            continue
        if role == "assistant":
            out.append(current)
            current = []
            if len(out) == n_turns:
                break
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(call.get("id"), str):
                    tool_names[call["id"]] = str(fn.get("name", ""))
            continue
        name = msg.get("name") or tool_names.get(str(msg.get("tool_call_id")))
        current.append(
            TraceMessage(
                role=str(role), content=_content(msg), name=name if isinstance(name, str) else None
            )
        )
    return out if len(out) == n_turns else None


def _content(msg: dict[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


async def record_store(store: Store, run_id: str, *, with_text: bool = True) -> list[TraceRecord]:
    """A run in the durable store (finished or partial) as a trace: every stored turn,
    on the run's first attempt's clock (see :func:`record_result`).

    Raises:
        RunNotFound: no such run.
    """
    from agentflow.store._export import load_result

    return record_result(await load_result(store, run_id), with_text=with_text)
