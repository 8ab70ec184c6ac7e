"""The simulator's tokenizer and chat template.

Not a real BPE: a regular expression cuts text into pieces (a word of at most
:data:`MAX_LETTERS` letters with its leading space, up to three digits, a run of
punctuation, whitespace), which comes to about four characters per token on English
prose, and each piece's id is a hash of its UTF-8 bytes (BLAKE2b), so ids are the same
in every process and on every run (Python's salted ``hash()`` is never used).

The chat template is ChatML-like and segment-wise: each message's header and body are
tokenized separately and concatenated, so an append-only conversation's token list is
always a prefix-extension of the previous turn's, the generation prompt
(``<|im_start|>assistant\\n``) is the header of the assistant message that will follow,
and ``<|im_end|>`` doubles as end-of-sequence — exactly what the prefix cache needs to
hit across turns, as it does on a real server.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

__all__ = [
    "IM_END",
    "IM_START",
    "MAX_LETTERS",
    "VOCAB_SIZE",
    "Tokenizer",
    "assistant_body",
    "render_tool_call",
]

#: Ids below this are reserved for special tokens.
N_SPECIAL = 16
#: Token ids are in ``range(VOCAB_SIZE)``.
VOCAB_SIZE = 1 << 20
#: ``<|im_start|>``: opens a message.
IM_START = 1
#: ``<|im_end|>``: closes a message; also the end-of-sequence token the engine emits last.
IM_END = 2
#: The longest run of letters one token holds (longer words take several tokens).
MAX_LETTERS = 5

SPECIAL_TEXT: dict[int, str] = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}

_PIECE = re.compile(
    "|".join(
        (
            r"'(?:[sdmt]|ll|ve|re)(?![^\W\d_])",  # English contractions
            rf" ?[^\W\d_]{{1,{MAX_LETTERS}}}",  # letters, with a leading space
            r" ?\d{1,3}",  # digits, three at most
            r" ?[^\s\w]{1,4}",  # punctuation and symbols
            r"_{1,4}",
            r"\n+",
            r"[^\S\n]{1,8}",  # other whitespace
        )
    )
)

_ids: dict[str, int] = {}
_MAX_CACHED_PIECES = 1 << 20


def piece_id(piece: str) -> int:
    """The stable id of one piece of text (the same in every process)."""
    tid = _ids.get(piece)
    if tid is None:
        digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
        tid = N_SPECIAL + int.from_bytes(digest, "little") % (VOCAB_SIZE - N_SPECIAL)
        if len(_ids) >= _MAX_CACHED_PIECES:
            _ids.clear()
        _ids[piece] = tid
    return tid


def _split(text: str) -> list[str]:
    # The alternatives cover every character, so the pieces always concatenate to text.
    pieces: list[str] = _PIECE.findall(text)
    return pieces


@lru_cache(maxsize=2048)
def _encode_cached(text: str) -> tuple[int, ...]:
    get = _ids.get
    return tuple([get(p) or piece_id(p) for p in _PIECE.findall(text)])


def render_tool_call(name: str, arguments: str) -> str:
    """The text of one tool call inside an assistant message (Qwen/Hermes style).

    Args:
        name: the function name.
        arguments: the arguments' JSON text, verbatim.
    """
    quoted = json.dumps(name, ensure_ascii=False)
    return f'<tool_call>\n{{"name": {quoted}, "arguments": {arguments}}}\n</tool_call>'


def assistant_body(content: str | None, tool_calls: Iterable[tuple[str, str]] = ()) -> str:
    """The text of an assistant message body: its content, then each tool call.

    The simulator's output for a turn is exactly this text, so when the client sends
    the turn back the prompt re-tokenizes to the tokens the engine produced.

    Args:
        content: the message content (``None`` is empty).
        tool_calls: ``(name, arguments_json)`` for each call, in order.
    """
    parts = [content or ""]
    parts.extend(
        ("\n" if i or content else "") + render_tool_call(n, a)
        for i, (n, a) in enumerate(tool_calls)
    )
    return "".join(parts)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, Mapping):
                if part.get("type") == "text" or "text" in part:
                    out.append(str(part.get("text", "")))
                else:
                    out.append(f"<{part.get('type', 'part')}>")
            else:
                out.append(str(part))
        return "".join(out)
    return json.dumps(content, ensure_ascii=False)


def _tool_calls_of(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    calls = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        args = fn.get("arguments", "{}")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        calls.append((str(fn.get("name", "")), args))
    return calls


def _tools_text(tools: Sequence[Mapping[str, Any]]) -> str:
    # Serialised in the order the client gave: reordering keys changes the prompt, and
    # with it every prefix-cache hit after the change, as on a real server.
    lines = [json.dumps(t, ensure_ascii=False) for t in tools]
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "<tools>\n" + "\n".join(lines) + "\n</tools>"
    )


class Tokenizer:
    """Deterministic text → token ids, and OpenAI messages → one prompt token list.

    Stateless apart from caches; one instance may be shared freely.
    """

    def pieces(self, text: str) -> list[str]:
        """The text of each token of ``text``, in order (they concatenate to ``text``)."""
        return _split(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (segments seen recently are served from a cache)."""
        if not text:
            return []
        return list(_encode_cached(text))

    def count(self, text: str) -> int:
        """How many tokens ``text`` is."""
        return len(_encode_cached(text)) if text else 0

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """The prompt tokens of a chat request, as the chat template lays it out.

        Each message is ``<|im_start|>`` + ``role\\n`` + body + ``<|im_end|>`` + ``\\n``;
        the body of an assistant message is :func:`assistant_body` of its content and
        tool calls; the tools' JSON (in the order and key order given) goes into the
        first system message, or a system message of its own before the first message.

        Args:
            messages: OpenAI chat messages (``role``, ``content`` as text or parts,
                ``tool_calls``).
            tools: OpenAI ``tools`` of the request, if any.
            add_generation_prompt: end with ``<|im_start|>assistant\\n``.
        """
        out: list[int] = []
        enc = _encode_cached
        msgs = list(messages)
        tools_text = _tools_text(tools) if tools else ""
        if tools_text and not (msgs and msgs[0].get("role") in ("system", "developer")):
            msgs.insert(0, {"role": "system", "content": None})
        for i, msg in enumerate(msgs):
            role = str(msg.get("role", "user"))
            body = _content_text(msg.get("content"))
            if role == "assistant" and msg.get("tool_calls"):
                body = assistant_body(body, _tool_calls_of(msg))
            if i == 0 and tools_text:
                body = f"{body}\n\n{tools_text}" if body else tools_text
            out.append(IM_START)
            out.extend(enc(role + "\n"))
            if body:
                out.extend(enc(body))
            out.append(IM_END)
            out.extend(enc("\n"))
        if add_generation_prompt:
            out.append(IM_START)
            out.extend(enc("assistant\n"))
        return out
