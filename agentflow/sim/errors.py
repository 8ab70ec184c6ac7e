"""Requests the engine refuses, shaped so the HTTP layer can answer as vLLM does.

vLLM's OpenAI server answers a request that does not fit the model's window with
HTTP 400 and a body ``{"error": {"message": ..., "type": "BadRequestError",
"param": null, "code": 400}}``; the two messages below are its wording.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DriverFailed", "RequestRejected", "check_context_length"]


class DriverFailed(RuntimeError):
    """The simulator's step loop failed (its error is logged on ``agentflow.sim``): the
    driver takes no more requests."""


class RequestRejected(ValueError):
    """The engine will not run this request; ``status`` and :meth:`body` say how to answer.

    Args:
        message: the human-readable reason, as vLLM words it.
        status: the HTTP status (400).
        param: the request parameter at fault, if one is.
    """

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param

    @property
    def error_type(self) -> str:
        """vLLM's error ``type`` for the status."""
        return "BadRequestError" if self.status == 400 else "InternalServerError"

    def body(self) -> dict[str, Any]:
        """The JSON error body vLLM sends."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.status,
            }
        }


def check_context_length(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int:
    """The effective ``max_tokens`` of a request, or the vLLM-worded rejection.

    Args:
        prompt_tokens: tokens of the rendered prompt.
        max_tokens: the request's ``max_tokens``/``max_completion_tokens``, or ``None``
            (then everything the window leaves, as vLLM defaults it).
        max_model_len: the model's window.

    Raises:
        RequestRejected: the prompt leaves no room, or prompt + ``max_tokens`` exceeds
            the window; or the prompt is empty, or ``max_tokens`` < 1.
    """
    if prompt_tokens < 1:
        raise RequestRejected("The prompt must contain at least one token.", param="messages")
    if prompt_tokens >= max_model_len:
        raise RequestRejected(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the input "
            "messages."
        )
    if max_tokens is None:
        return max_model_len - prompt_tokens
    if max_tokens < 1:
        raise RequestRejected(
            f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens"
        )
    if prompt_tokens + max_tokens > max_model_len:
        raise RequestRejected(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {max_model_len} tokens and your request has "
            f"{prompt_tokens} input tokens ({max_tokens} > {max_model_len} - {prompt_tokens})."
        )
    return max_tokens
