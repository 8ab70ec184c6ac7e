"""A server's "prompt too long" answer, recognised: :class:`~agentflow.ContextLengthExceeded`.

Servers refuse a request longer than their window with a 4xx whose only machine-readable
part is, mostly, its English message. The wordings read here (each a real server's):

- vLLM's OpenAI server: ``This model's maximum context length is N tokens. However, you
  requested M tokens (P in the messages, O in the completion).``; newer: ``… However, you
  requested O output tokens and your prompt contains [at least] P input tokens, for a total
  of [at least] M tokens.``; ``… However, your request has P input tokens.``;
  ``'max_tokens' or 'max_completion_tokens' is too large: O. This model's maximum context
  length is N tokens and your request has P input tokens (O > N - P).``; its engine's
  ``The decoder prompt (length P) is longer than the maximum model length of N.``
  (agentflow's simulator answers with the vLLM wordings.)
- OpenAI: ``This model's maximum context length is N tokens. However, your messages
  resulted in P tokens.`` (code ``context_length_exceeded``).
- SGLang: ``The input (P tokens) is longer than the model's context length (N tokens).``
- llama.cpp: type ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx`` in
  the error object (message ``request (P tokens) exceeds the available context size
  (N tokens), try increasing it``).

A 4xx is mapped only when both the window and a token count can be read; otherwise it
stays a plain :class:`~agentflow.BadRequestError`.
"""

from __future__ import annotations

import re
from typing import Any

from agentflow._errors import ContextLengthExceeded

__all__ = ["context_length_error", "parse_context_length"]

_N = r"(\d[\d,]*)"

#: The window, in the servers' wordings.
_LIMIT = (
    re.compile(rf"maximum context length is {_N} tokens", re.I),
    re.compile(rf"maximum model length of {_N}", re.I),
    re.compile(rf"model's context length \({_N} tokens\)", re.I),
    re.compile(rf"available context size \({_N} tokens\)", re.I),
)
#: The whole request (prompt + requested output).
_TOTAL = (
    re.compile(rf"for a total of (?:at least )?{_N} tokens", re.I),
    re.compile(rf"you requested {_N} tokens", re.I),
)
#: The prompt alone.
_PROMPT = (
    re.compile(rf"\({_N} in the messages", re.I),
    re.compile(rf"prompt contains (?:at least )?{_N} input tokens", re.I),
    re.compile(rf"your request has {_N} input tokens", re.I),
    re.compile(rf"your messages resulted in {_N} tokens", re.I),
    re.compile(rf"decoder prompt \(length {_N}\)", re.I),
    re.compile(rf"the input \({_N} tokens\)", re.I),
    re.compile(rf"request \({_N} tokens\) exceeds", re.I),
)
#: The requested output.
_OUTPUT = (
    re.compile(rf"{_N} in the completion", re.I),
    re.compile(rf"you requested {_N} output tokens", re.I),
    re.compile(rf"'max_tokens' or 'max_completion_tokens' is too large: {_N}", re.I),
)


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for p in patterns:
        m = p.search(text)
        if m is not None:
            return int(m.group(1).replace(",", ""))
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def parse_context_length(body: Any, message: str) -> tuple[int, int, int | None, int | None] | None:
    """``(tokens, limit, prompt_tokens, output_tokens)`` of a "too long" error, else ``None``.

    ``body`` is the parsed error body (llama.cpp's numbers are fields of its error
    object), ``message`` its human-readable message.
    """
    err = body.get("error", body) if isinstance(body, dict) else None
    limit = prompt = output = total = None
    if isinstance(err, dict) and err.get("type") == "exceed_context_size_error":
        limit, prompt = _int(err.get("n_ctx")), _int(err.get("n_prompt_tokens"))
    if limit is None:
        limit = _first(_LIMIT, message)
    if limit is None:
        return None
    prompt = prompt or _first(_PROMPT, message)
    output = _first(_OUTPUT, message)
    total = _first(_TOTAL, message)
    if total is None and prompt is not None:
        total = prompt + output if output is not None else prompt
    if total is None:
        return None
    return total, limit, prompt, output


def context_length_error(
    status: int, body: Any, message: str, endpoint: str, *, lead: str | None = None
) -> ContextLengthExceeded | None:
    """The :class:`~agentflow.ContextLengthExceeded` for a 4xx that says the prompt is too
    long (its numbers read from ``body`` and ``message``), else ``None``. Its message
    starts with ``lead`` (default: ``"<endpoint> answered <status>"``)."""
    if not 400 <= status < 500 or status == 429:
        return None
    parsed = parse_context_length(body, message)
    if parsed is None:
        return None
    tokens, limit, prompt, output = parsed
    return ContextLengthExceeded(
        f"{lead or f'{endpoint} answered {status}'}: the request needs {tokens:,} tokens, "
        "more than the "
        f"server's {limit:,}-token context window (its message: {message})",
        status=status,
        tokens=tokens,
        limit=limit,
        prompt_tokens=prompt,
        output_tokens=output,
        body=body,
        endpoint=endpoint,
    )
