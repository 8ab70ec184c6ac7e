"""The scripted answers of :class:`~agentflow.testing.MockTransport` and
:class:`~agentflow.testing.ScriptedServer`: :class:`Reply` and its SSE frames.

A reply is the bytes a server would send, frame by frame; both the in-process mock and
the loopback server play it through the same decoder as a real response.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._mock import check_reply

__all__ = ["Reply", "sse_frames"]


def sse_frames(chunks: Iterable[Mapping[str, Any]], *, done: bool = True) -> list[bytes]:
    """``data: {json}\\n\\n`` frames for ``chunks``, then ``data: [DONE]`` if ``done``."""
    frames = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    if done:
        frames.append(b"data: [DONE]\n\n")
    return frames


def _usage(prompt: int, completion: int, cached: int | None) -> dict[str, Any]:
    """A usage object; ``cached=None`` leaves ``prompt_tokens_details`` out."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "model": "scripted",
        "choices": [],
    }
    if delta is not None or finish is not None:
        c["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        c["usage"] = usage
    return c


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One scripted response.

    Attributes:
        frames: the body, written one frame per write (``frame_delay_s`` apart).
        status: the HTTP status.
        headers: extra response headers.
        frame_delay_s: pause between frames, to make separate reads likely.
        cut: close the connection after the frames instead of ending the body.
        drop: close the connection at once, before any response byte (as a server
            that drops a kept-alive connection does). The transports resend the request
            (a :class:`~agentflow.ConnectError` if it keeps happening) only when the
            connection was a reused kept-alive one; on a new connection the server may
            have read the request, so it is a :class:`~agentflow.StreamInterrupted`.

    Raises:
        ConfigError: ``frames`` is not a list of bytes, ``status`` not an int from 100
            to 599, ``headers`` not a mapping of header names to ``str`` values (no line
            break), ``frame_delay_s`` not a number of seconds.

    Not hashable (``hash(reply)`` is a ``TypeError`` naming ``Reply``): it holds a list of
    frames and a dict of headers; replies compare with ``==``.
    """

    # Explicitly: the generated hash raised TypeError on the frames list, while checkers
    # took the class as hashable.
    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    frames: Sequence[bytes] = ()
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    frame_delay_s: float = 0.0
    cut: bool = False
    drop: bool = False

    def __post_init__(self) -> None:
        check_reply(self)  # a ConfigError naming the field, not a failed request

    @classmethod
    def text(
        cls,
        text: str,
        *,
        pieces: int | None = None,
        prompt_tokens: int = 10,
        cached_tokens: int | None = 0,
        **kw: Any,
    ) -> Reply:
        """A streamed answer: role chunk, ``text`` in word pieces — one per word, or
        ``pieces`` of them (at most one per word) —, finish, usage (``completion_tokens``:
        one per piece), ``[DONE]``.

        Raises:
            ConfigError: ``pieces`` is not an int ≥ 1 or ``None``.
        """
        check_count(pieces, "Reply.text pieces", none="one per word")
        words = text.split(" ") if text else []
        parts = [w if i == 0 else " " + w for i, w in enumerate(words)]
        if pieces is not None and parts:
            n = -(-len(parts) // pieces)  # words per piece: `pieces` pieces
            parts = ["".join(parts[i : i + n]) for i in range(0, len(parts), n)]
        usage = _usage(prompt_tokens, len(parts), cached_tokens)
        chunks = [_chunk({"role": "assistant", "content": ""})]
        chunks += [_chunk({"content": p}) for p in parts]
        chunks += [_chunk({}, "stop"), _chunk(usage=usage)]
        return cls(frames=sse_frames(chunks), **kw)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: Mapping[str, Any],
        *,
        call_id: str = "call_1",
        pieces: int = 3,
        prompt_tokens: int = 20,
        cached_tokens: int | None = None,
        **kw: Any,
    ) -> Reply:
        """A streamed tool call, its arguments split over at most ``pieces`` deltas;
        ``completion_tokens`` is one per output chunk (the call's first, then each
        delta), so chunk token counts are exact. ``cached_tokens=None`` leaves
        ``prompt_tokens_details`` out.

        Raises:
            ConfigError: ``pieces`` is not an int ≥ 1.
        """
        check_count(pieces, "Reply.tool_call pieces")
        args = json.dumps(arguments)
        step = max(1, -(-len(args) // pieces))
        chunks = [
            _chunk(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ],
                }
            )
        ]
        deltas = [
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[i : i + step]}}]})
            for i in range(0, len(args), step)
        ]
        chunks += deltas
        completion = 1 + len(deltas)
        usage = _usage(prompt_tokens, completion, cached_tokens)
        chunks += [_chunk({}, "tool_calls"), _chunk(usage=usage)]
        return cls(frames=sse_frames(chunks), **kw)

    @classmethod
    def stream(
        cls,
        content: Sequence[str] = (),
        *,
        reasoning: Sequence[str] = (),
        tool_calls: Sequence[tuple[str, Mapping[str, Any]]] = (),
        prompt_tokens: int = 10,
        completion_tokens: int | None = None,
        cached_tokens: int | None = 0,
        finish_reason: str | None = None,
        **kw: Any,
    ) -> Reply:
        """A streamed answer given delta by delta: ``reasoning`` deltas, then ``content``
        deltas, then ``tool_calls`` (``(name, arguments)`` pairs, ids ``call_1``,
        ``call_2``…, each call's arguments in one delta), the finish reason
        (``"tool_calls"`` if there are calls, else ``"stop"``), usage, ``[DONE]``.

        ``completion_tokens`` defaults to one per delta; ``cached_tokens=None`` leaves
        ``prompt_tokens_details`` out of the usage.

        Raises:
            ConfigError: ``content`` or ``reasoning`` is a ``str`` (a list of deltas is
                meant: a string would stream one character per delta).
        """
        for field_name, deltas in (("content", content), ("reasoning", reasoning)):
            if isinstance(deltas, str | bytes):
                raise ConfigError(
                    f"Reply.stream {field_name} must be a list of deltas (one str per "
                    f"chunk), got {type(deltas).__name__} {deltas!r:.40}: it would stream "
                    "one character per chunk"
                )
        chunks = [_chunk({"role": "assistant", "content": ""})]
        chunks += [_chunk({"reasoning_content": r}) for r in reasoning]
        chunks += [_chunk({"content": c}) for c in content]
        for i, (name, arguments) in enumerate(tool_calls):
            call = {
                "index": i,
                "id": f"call_{i + 1}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            chunks.append(_chunk({"tool_calls": [call]}))
        finish = finish_reason or ("tool_calls" if tool_calls else "stop")
        n = len(reasoning) + len(content) + len(tool_calls)
        completion = n if completion_tokens is None else completion_tokens
        usage = _usage(prompt_tokens, completion, cached_tokens)
        chunks += [_chunk({}, finish), _chunk(usage=usage)]
        return cls(frames=sse_frames(chunks), **kw)

    @classmethod
    def error(
        cls, status: int, message: str = "scripted error", headers: Mapping[str, str] | None = None
    ) -> Reply:
        """A non-2xx answer with an OpenAI-shaped error body."""
        body = json.dumps({"error": {"message": message, "type": "scripted", "code": status}})
        return cls(frames=[body.encode()], status=status, headers=dict(headers or {}))
