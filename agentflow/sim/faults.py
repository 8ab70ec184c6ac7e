"""Fault injection: the failures a real deployment shows, at seeded rates or on demand.

The fault kinds (the names are used by :class:`FaultConfig`, the CLI's ``--fault-*``
flags and the ``X-Agentflow-Fault`` request header):

==================== =========================================================================
``rate_limit``       HTTP 429 before the stream, with ``Retry-After: <retry_after_s>``
                     (whole seconds: a fraction rounds up)
``server_error``     HTTP 500 before the stream
``unavailable``      HTTP 503 before the stream (with ``Retry-After``)
``reset_mid_stream`` the connection is reset (TCP RST) after some output
``stall_mid_stream`` no bytes for ``stall_s`` seconds after some output, then the rest
``malformed_chunk``  a payload that is not valid JSON after some output, then the rest
``cut_stream``       the body ends cleanly after some output — no finish chunk, no ``[DONE]``
==================== =========================================================================

"After some output" means once ``after`` output tokens have gone out (at least one):
drawn uniformly from ``1 … expected − 1`` for seeded faults, so the fault always comes
mid-stream. A non-streaming request gets the nearest equivalent (the connection reset
or closed before any response, the response held back for ``stall_s``, a truncated
body).

Seeded rates are deterministic: the draw for a request is a function of the seed, the
request body's bytes and how many times that same body was seen before (so a retry of
a failed request draws again, and concurrent requests do not disturb each other's draws).

A request can force a fault, so tests and retry logic can be exercised exactly::

    X-Agentflow-Fault: reset_mid_stream
    X-Agentflow-Fault: stall_mid_stream; after=3; seconds=0.5
    X-Agentflow-Fault: rate_limit; retry_after=2

Parameters: ``after`` (output tokens before the fault, ≥ 0), ``seconds`` (stall
length), ``retry_after`` (seconds, for 429/503). ``none`` forces no fault.

What each fault *does* is here too: :func:`fault_answer` (the 429/500/503 answered
instead of the stream), :class:`StreamFault` (a mid-stream fault striking a streamed
response, through the :class:`StrikeTarget` methods of the stream writer,
:mod:`agentflow.sim.stream`), :func:`complete_with_fault` (the nearest equivalent for a
non-streaming request) and :func:`reset_connection` (a TCP RST).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import random
import socket
import struct
from collections import OrderedDict
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal, Protocol, get_args

from agentflow.sim.frames import malformed_payload

if TYPE_CHECKING:
    from agentflow.sim.request import SimRequest

__all__ = [
    "FAULT_HEADER",
    "FAULT_KINDS",
    "Fault",
    "FaultConfig",
    "FaultInjector",
    "FaultKind",
    "StreamFault",
    "StrikeTarget",
    "complete_with_fault",
    "fault_answer",
    "parse_fault_header",
    "reset_connection",
]

#: The request header that forces a fault.
FAULT_HEADER = "X-Agentflow-Fault"

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "unavailable",
    "reset_mid_stream",
    "stall_mid_stream",
    "malformed_chunk",
    "cut_stream",
]
#: Every fault kind, in the order rates are drawn.
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)

_STATUS: dict[str, int] = {"rate_limit": 429, "server_error": 500, "unavailable": 503}


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultConfig:
    """Seeded fault rates (each a probability per request) and the faults' parameters.

    Attributes:
        rate_limit: rate of 429 answers.
        server_error: rate of 500 answers.
        unavailable: rate of 503 answers.
        reset_mid_stream: rate of connections reset after some output.
        stall_mid_stream: rate of streams that stall for ``stall_s`` after some output.
        malformed_chunk: rate of streams with one malformed payload after some output.
        cut_stream: rate of streams cut (no finish, no ``[DONE]``) after some output.
        retry_after_s: the ``Retry-After`` of 429 and 503 answers, in seconds; sent as
            HTTP's delta-seconds, a whole number, so a fraction rounds up (2.5 → ``3``).
        stall_s: how long a stall lasts, in (loop) seconds.
        seed: fixes every draw.
        honour_header: obey the ``X-Agentflow-Fault`` request header.

    Raises:
        ValueError: a rate outside [0, 1], rates adding up to more than 1, or a
            negative or zero duration; the message names the field.
    """

    rate_limit: float = 0.0
    server_error: float = 0.0
    unavailable: float = 0.0
    reset_mid_stream: float = 0.0
    stall_mid_stream: float = 0.0
    malformed_chunk: float = 0.0
    cut_stream: float = 0.0
    retry_after_s: float = 1.0
    stall_s: float = 30.0
    seed: int = 0
    honour_header: bool = True

    def __post_init__(self) -> None:
        total = 0.0
        for kind in FAULT_KINDS:
            rate = getattr(self, kind)
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
                raise ValueError(f"FaultConfig.{kind} must be a rate in [0, 1], got {rate!r}")
            total += rate
        if total > 1 + 1e-9:
            raise ValueError(
                f"FaultConfig rates add up to {total:g}; a request gets at most one fault, "
                "so they must add up to at most 1"
            )
        if not (self.retry_after_s >= 0 and math.isfinite(self.retry_after_s)):
            raise ValueError(
                f"FaultConfig.retry_after_s must be a finite number ≥ 0, got {self.retry_after_s!r}"
            )
        if not self.stall_s > 0:
            raise ValueError(f"FaultConfig.stall_s must be > 0, got {self.stall_s!r}")

    @property
    def total_rate(self) -> float:
        """The probability that a request gets some fault."""
        return float(sum(getattr(self, k) for k in FAULT_KINDS))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Every field's name."""
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """The fault one request gets.

    Attributes:
        kind: which fault.
        after: output tokens before a mid-stream fault fires; ``None`` = the position
            ``position`` of the way through (see :meth:`after_tokens`).
        position: in [0, 1): where a seeded mid-stream fault falls.
        stall_s: the stall's length.
        retry_after_s: the ``Retry-After`` value of a 429/503.
        forced: it came from the request header.
    """

    kind: FaultKind
    after: int | None = None
    position: float = 0.0
    stall_s: float = 30.0
    retry_after_s: float = 1.0
    forced: bool = False

    @property
    def status(self) -> int | None:
        """The HTTP status of a fault answered instead of the stream, else ``None``."""
        return _STATUS.get(self.kind)

    @property
    def mid_stream(self) -> bool:
        """Whether it strikes after the response has begun."""
        return self.kind not in _STATUS

    def after_tokens(self, expected: int) -> int:
        """Output tokens that go out before the fault, for a request of ``expected`` tokens."""
        if self.after is not None:
            return self.after
        span = max(1, expected - 1)
        return 1 + min(span - 1, int(self.position * span))


def parse_fault_header(value: str, config: FaultConfig | None = None) -> Fault | None:
    """The fault an ``X-Agentflow-Fault`` header asks for (``None`` for ``none``).

    Raises:
        ValueError: an unknown kind or parameter; the message lists the valid ones.
    """
    cfg = config or FaultConfig()
    parts = [p.strip() for p in value.split(";")]
    kind = parts[0].lower().replace("-", "_")
    if kind == "none":
        return None
    if kind not in FAULT_KINDS:
        raise ValueError(
            f"unknown fault {parts[0]!r} in {FAULT_HEADER}; known: none, {', '.join(FAULT_KINDS)}"
        )
    after: int | None = None
    stall = cfg.stall_s
    retry = cfg.retry_after_s
    for p in parts[1:]:
        if not p:
            continue
        key, sep, raw = p.partition("=")
        key = key.strip().lower()
        try:
            if not sep:
                raise ValueError
            if key == "after":
                after = int(raw)
                if after < 0:
                    raise ValueError
            elif key in ("seconds", "stall", "stall_s"):
                stall = float(raw)
                if not stall > 0:  # inf: a stream that stalls until the client gives up
                    raise ValueError
            elif key in ("retry_after", "retry_after_s"):
                retry = float(raw)
                if not (retry >= 0 and math.isfinite(retry)):  # a header's number
                    raise ValueError
            else:
                raise KeyError(key)
        except KeyError:
            raise ValueError(
                f"unknown parameter {key!r} in {FAULT_HEADER}; known: after, seconds, retry_after"
            ) from None
        except ValueError:
            raise ValueError(f"bad value in {FAULT_HEADER} parameter {p!r}") from None
    return Fault(kind=kind, after=after, stall_s=stall, retry_after_s=retry, forced=True)


class FaultInjector:
    """Decides each request's fault from a :class:`FaultConfig`; counts what it injected.

    :meth:`decide` only decides; the server calls :meth:`count` once the fault is applied
    (its 429/500/503 sent, or the request it strikes accepted): a 400 counts none.

    Args:
        config: rates and parameters (no faults if ``None``).
        memory: distinct request bodies whose occurrence counts are remembered.
    """

    def __init__(self, config: FaultConfig | None = None, *, memory: int = 100_000) -> None:
        self.config = config or FaultConfig()
        self._seen: OrderedDict[bytes, int] = OrderedDict()
        self._memory = memory
        #: Faults injected so far, by kind (see :meth:`count`).
        self.counts: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)

    def count(self, fault: Fault) -> None:
        """Count ``fault`` as injected."""
        self.counts[fault.kind] += 1

    def decide(self, body: bytes, header: str | None = None) -> Fault | None:
        """The fault for one request, from its raw body and its fault header.

        Raises:
            ValueError: the header names no valid fault.
        """
        cfg = self.config
        if header is not None and cfg.honour_header:
            return parse_fault_header(header, cfg)
        total = cfg.total_rate
        if total <= 0:
            return None
        digest = hashlib.blake2b(body, digest_size=16).digest()
        n = self._seen.pop(digest, 0)
        self._seen[digest] = n + 1
        if len(self._seen) > self._memory:
            self._seen.popitem(last=False)
        rng = random.Random(f"{cfg.seed}|{digest.hex()}|{n}")
        u = rng.random()
        position = rng.random()
        acc = 0.0
        for kind in FAULT_KINDS:
            acc += getattr(cfg, kind)
            if u < acc:
                return Fault(
                    kind=kind,
                    position=position,
                    stall_s=cfg.stall_s,
                    retry_after_s=cfg.retry_after_s,
                )
        return None


# --- What the faults do -----------------------------------------------------------------

_ANSWERS = {
    429: "Rate limit exceeded; retry later (injected fault).",
    500: "Internal server error (injected fault).",
    503: "The server is overloaded; retry later (injected fault).",
}


def fault_answer(fault: Fault) -> tuple[int, str, dict[str, str]] | None:
    """The status, message and headers answered instead of the stream (429/500/503),
    or ``None`` for a fault that strikes later."""
    status = fault.status
    if status is None:
        return None
    headers = {}
    if status in (429, 503):
        # HTTP's delta-seconds: a whole number (``:g`` made 1234567 "1.23457e+06").
        headers["Retry-After"] = str(math.ceil(fault.retry_after_s))
    return status, _ANSWERS[status], headers


def reset_connection(transport: asyncio.BaseTransport | None) -> None:
    """Close a connection with a TCP RST (SO_LINGER 0), not a FIN."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()  # type: ignore[attr-defined]


class StrikeTarget(Protocol):
    """What a mid-stream fault needs of the stream writer it strikes."""

    def strike(self, how: str) -> None:
        """Write what was collected, then end the response: ``"reset"`` or ``"cut"``."""

    def stall(self, seconds: float) -> None:
        """Write what was collected, then hold every later frame for ``seconds``."""


class StreamFault:
    """One streamed response's mid-stream fault: fires once, after its output tokens.

    Args:
        fault: the fault (a mid-stream kind).
        request: the simulator's request (its token count and its cancellation).
    """

    __slots__ = ("_fired", "_prev_tokens", "_request", "_trigger", "fault")

    def __init__(self, fault: Fault, request: SimRequest) -> None:
        self.fault = fault
        self._request = request
        self._trigger = fault.after_tokens(request.expected_tokens)
        self._prev_tokens = 0
        self._fired = False

    def on_payloads(self, target: StrikeTarget, payloads: list[bytes], last: bool) -> bool:
        """Strike if due (once the tokens sent *before* this delivery reach the trigger,
        or on the last delivery); ``True`` when this delivery's payloads must not be written."""
        if self._fired:
            return False
        req = self._request
        before = self._prev_tokens
        self._prev_tokens = req.encoder.tokens_sent
        if before < self._trigger and not last:
            return False
        self._fired = True
        kind = self.fault.kind
        if kind in ("reset_mid_stream", "cut_stream"):
            # What was collected goes out first, then the reset or the cut.
            req.cancel()
            target.strike("reset" if kind == "reset_mid_stream" else "cut")
            return True
        if kind == "malformed_chunk":
            payloads.insert(0, malformed_payload(req.id))
        elif kind == "stall_mid_stream":
            target.stall(self.fault.stall_s)
        return False


async def complete_with_fault(
    fault: Fault, body: bytes, transport: asyncio.BaseTransport | None, closing: asyncio.Event
) -> bytes | None:
    """A non-streaming answer under a mid-stream fault, the nearest equivalent: ``None``
    when the connection was reset (answer nothing), else the body to send — held back
    ``stall_s`` (less if ``closing`` is set), or cut in half (malformed)."""
    if fault.kind in ("reset_mid_stream", "cut_stream"):
        reset_connection(transport)
        return None
    if fault.kind == "stall_mid_stream":
        with contextlib.suppress(TimeoutError):  # the stall ends early on stop()
            await asyncio.wait_for(closing.wait(), fault.stall_s)
    elif fault.kind == "malformed_chunk":
        return body[: len(body) // 2]
    return body
