"""Helpers for the simulator's serving-layer tests (driver, HTTP server, faults)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from agentflow.sim import Profile, get_profile

#: A test deployment whose steps take a few ms (3 ms alone, +20 µs per sequence), with
#: room for 128 sequences, so timing checks are meaningful and runs stay short.
STEPPY: Profile = dataclasses.replace(
    get_profile("cpu-tiny"),
    name="test-steppy",
    model="steppy",
    kv_capacity_tokens=1 << 20,
    max_num_seqs=128,
    max_model_len=4096,
    max_num_batched_tokens=8192,
    per_agent_tps=1 / 0.003,
    decode_per_seq_s=2e-5,
    decode_per_ctx_token_s=0.0,
)

#: A fast deployment (1 ms steps) for tests that only need streams to finish quickly.
QUICK: Profile = dataclasses.replace(
    STEPPY, name="test-quick", model="quick", per_agent_tps=1000.0, decode_per_seq_s=1e-6
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
            },
        },
    }
]


def user(text: str) -> list[dict[str, Any]]:
    """A one-message conversation."""
    return [{"role": "user", "content": text}]


def chat_body(
    text: str = "hello", *, stream: bool = True, usage: bool = True, **extra: Any
) -> dict[str, Any]:
    """A chat-completions body."""
    body: dict[str, Any] = {"model": "m", "messages": user(text), "stream": stream}
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


class Collect:
    """A :class:`~agentflow.sim.driver.StreamConsumer` that keeps every delivery."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.deliveries: list[tuple[float, list[bytes], bool]] = []
        self.done: asyncio.Future[None] = loop.create_future()
        self.aborted: str | None = None

    def on_payloads(self, payloads: list[bytes], last: bool) -> None:
        self.deliveries.append((self.loop.time(), list(payloads), last))
        if last:
            self.done.set_result(None)

    def on_abort(self, reason: str) -> None:
        self.aborted = reason
        if not self.done.done():
            self.done.set_exception(ConnectionAbortedError(reason))

    @property
    def payloads(self) -> list[bytes]:
        return [p for _, ps, _ in self.deliveries for p in ps]


def sse_events(raw: bytes) -> list[bytes]:
    """The ``data`` payloads of an SSE body."""
    return [e[6:] for e in raw.split(b"\n\n") if e.startswith(b"data: ")]


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A small text-format parser: ``{(name, sorted labels): value}``."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        if "{" in name_labels:
            name, _, rest = name_labels.partition("{")
            labels = []
            for part in _split_labels(rest.rstrip("}")):
                k, _, v = part.partition("=")
                labels.append((k, v.strip('"')))
            key = (name, tuple(sorted(labels)))
        else:
            key = (name_labels, ())
        out[key] = float(value)
    return out


def _split_labels(s: str) -> list[str]:
    parts: list[str] = []
    cur = ""
    quoted = False
    for ch in s:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def metric(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The value of one series (labels other than those given must be ``model_name``)."""
    for (n, lab), v in samples.items():
        if n != name:
            continue
        d = dict(lab)
        d.pop("model_name", None)
        if d == labels:
            return v
    raise KeyError(f"{name}{labels}")


def within(values: Sequence[float], limit: float) -> bool:
    """Whether every |value| is at most ``limit``."""
    return all(abs(v) <= limit for v in values)
