"""What crosses a worker's pipe: the configuration it is sent with its sessions, and its
event batches (token events msgpack-encoded; with them, when tokens are read, what
changed of its sessions' open attempts, see ``_open_turns.py``)."""

from __future__ import annotations

import pickle
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import msgspec

from agentflow._errors import TransportError, WorkerError
from agentflow._events import (
    AttemptDiscardedEvent,
    ErrorEvent,
    Event,
    RetryEvent,
    SessionEndEvent,
    TokenEvent,
)

if TYPE_CHECKING:
    from agentflow._event_bus import EventBus
    from agentflow._fleet import Fleet
    from agentflow.store._durable import DurableRun

__all__ = ["decode", "encode", "worker_config"]

#: Every event type a worker may forward (the fleet's own start/end come from the parent).
_FORWARDABLE = (
    "token",
    "tool_call",
    "tool_result",
    "turn_end",
    "session_end",
    "attempt_discarded",
    "retry",
    "context_trimmed",
    "compaction",
    "budget",
    "cache_buster",
    "error",
)


def worker_config(fleet: Fleet, bus: EventBus, durable: DurableRun | None) -> dict[str, Any]:
    """What every worker is sent with its sessions: the fleet's settings, the events the
    parent's bus wants, which limits it leases, where it records (the broker's share of
    the slots is filled in per worker when it starts)."""
    wanted = {t for t in _FORWARDABLE if t != "token" and bus.wants(t)}
    if bus.wants_tokens:
        # (Each batch then also says what its sessions' open attempts streamed so far:
        # the parent retracts that if the worker is lost, see _open_turns.py.)
        wanted.add("token")
    wanted.add("session_end")  # the results travel in it
    return {
        "replicas": fleet.replicas,
        "policy": fleet.policy,
        "retry": fleet.retry,
        "router": fleet.router,
        "prefix_warmup": fleet.prefix_warmup,
        "warmup_timeout_s": fleet.warmup_timeout_s,
        "max_tool_concurrency": fleet.max_tool_concurrency,
        "freeze_gc": fleet.freeze_gc,
        "wanted": wanted,
        "slots": fleet.limits.max_in_flight is not None,
        "slot_batch": 1,
        "initial_slots": 0,
        "rates": fleet.limits.rpm is not None or fleet.limits.tpm is not None,
        "rpm": fleet.limits.rpm is not None,
        "tpm": fleet.limits.tpm is not None,
        "record": None if durable is None else (durable.run_id, durable.attempt),
    }


_tokens_encoder = msgspec.msgpack.Encoder()
_tokens_decoder = msgspec.msgpack.Decoder(list[TokenEvent])


def encode(batch: list[Event]) -> list[bytes | list[Event]]:
    """A batch as segments, in order: runs of token events as one msgpack blob each
    (a twentieth of pickle's cost per token), other events as they are (pickled with
    the message, an error that does not pickle replaced by its text)."""
    out: list[bytes | list[Event]] = []
    tokens: list[TokenEvent] = []
    others: list[Event] = []
    for event in batch:
        if isinstance(event, TokenEvent):
            if others:
                out.append(others)
                others = []
            tokens.append(event)
        else:
            if tokens:
                out.append(_tokens_encoder.encode(tokens))
                tokens = []
            others.append(_picklable(event))
    if tokens:
        out.append(_tokens_encoder.encode(tokens))
    if others:
        out.append(others)
    return out


def decode(segments: list[bytes | list[Event]]) -> list[Event]:
    events: list[Event] = []
    for seg in segments:
        if isinstance(seg, bytes):
            events.extend(_tokens_decoder.decode(seg))
        else:
            events.extend(seg)
    return events


def _picklable(event: Event) -> Event:
    """The event, with an error that would not survive pickling replaced by a
    :class:`WorkerError` carrying its text."""
    if isinstance(event, ErrorEvent | AttemptDiscardedEvent):
        err = _safe_error(event.error)
        return event if err is event.error else replace(event, error=err)
    if isinstance(event, SessionEndEvent) and event.result.error is not None:
        err = _safe_error(event.result.error)
        if err is not event.result.error:
            return replace(event, result=replace(event.result, error=err))
    if isinstance(event, RetryEvent):
        try:
            pickle.loads(pickle.dumps(event))
        except Exception:  # its error is a TransportError: carried as its text
            return replace(
                event, attempt=replace(event.attempt, error=_carried(event.attempt.error))
            )
    return event


def _safe_error(error: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return WorkerError(f"{type(error).__name__}: {error}", worker=None, exitcode=None)
    return error


def _carried(error: TransportError) -> TransportError:
    return TransportError(f"{type(error).__name__}: {error}", endpoint=error.endpoint)
