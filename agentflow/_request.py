"""What one chat-completions request says (:class:`ChatRequest`).

A plain data class importing only :mod:`agentflow._redact` (for its ``repr``), beside
:mod:`agentflow._trace` (what comes back), so that :mod:`agentflow.typing` can name both
without importing anything above it. Public as ``agentflow.transport.ChatRequest``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentflow._redact import MASK, is_credential_name, redact, redact_data

__all__ = ["ChatRequest", "shown_headers"]


def shown_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` as a ``repr`` may show them, as :class:`~agentflow.transport.Endpoint`'s
    does: a credential header's value (:func:`~agentflow._redact.is_credential_name`)
    masked whole, every other value :func:`~agentflow.redact`-ed."""
    return {k: MASK if is_credential_name(k) else redact(v) for k, v in headers.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """One chat-completions request, as the transport sends it.

    Args:
        model: the model name the server serves.
        messages: OpenAI-format messages.
        tools: OpenAI-format tool definitions, or empty.
        params: sampling and other body fields (``temperature``, ``max_tokens``, …).
        headers: extra headers for this request only.
        extra_body: extra body fields for this request only (merged last).

    Its ``repr`` masks the values of credential headers (``api-key``, ``x-auth-token``)
    and every registered secret (:func:`~agentflow.register_secret`) anywhere in it.
    """

    model: str
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"ChatRequest(model={redact(self.model)!r}, "
            f"messages={redact_data(list(self.messages))!r}, "
            f"tools={redact_data(list(self.tools))!r}, "
            f"params={redact_data(dict(self.params))!r}, "
            f"headers={shown_headers(self.headers)!r}, "
            f"extra_body={redact_data(dict(self.extra_body))!r})"
        )

    def body(self, endpoint_extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JSON body: always streaming, always asking for usage in the last chunk."""
        body: dict[str, Any] = {"model": self.model, "messages": list(self.messages)}
        if self.tools:
            body["tools"] = list(self.tools)
        body.update(self.params)
        if endpoint_extra:
            body.update(endpoint_extra)
        body.update(self.extra_body)
        body["stream"] = True
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True
        body["stream_options"] = options
        return body
