"""The JSON answers of the simulator's server, in vLLM's shapes.

vLLM's error body (:func:`error_body`), the ``/v1/models`` document
(:func:`models_document`) and one request's ground truth (:func:`record_json`).
"""

from __future__ import annotations

from typing import Any

from agentflow.sim.records import RequestRecord

__all__ = ["error_body", "models_document", "record_json"]

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's JSON error body."""
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "BadRequestError" if status < 500 else "ServerError"),
            "param": param,
            "code": status,
        }
    }


def models_document(model: str, max_model_len: int, created: int) -> dict[str, Any]:
    """The ``GET /v1/models`` answer, vLLM's shape: one model with its ``max_model_len``."""
    entry = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "agentflow-sim",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [],
    }
    return {"object": "list", "data": [entry]}


def record_json(
    record: RequestRecord, *, time_scale: float, loop_origin_s: float | None = None
) -> dict[str, Any]:
    """A request's ground truth as JSON (times in engine seconds).

    ``loop_origin_s`` is the server loop's time at engine time 0: on a normal loop that
    is ``time.monotonic()``, so a client on the same host can place every engine time
    on its own monotonic clock as ``loop_origin_s + t × time_scale``.
    """
    return {
        "id": f"chatcmpl-{record.request_id}",
        "request_id": record.request_id,
        "time_scale": time_scale,
        "loop_origin_s": loop_origin_s,
        "finished": record.finished,
        "finish_reason": record.finish_reason,
        "prompt_tokens": record.prompt_tokens,
        "cached_tokens": record.cached_tokens,
        "completion_tokens": record.completion_tokens,
        "max_tokens": record.max_tokens,
        "arrival_s": record.arrival_s,
        "admitted_s": record.admitted_s,
        "prefill_start_s": record.prefill_start_s,
        "prefill_end_s": record.prefill_end_s,
        "finished_s": record.finished_s,
        "queue_s": record.queue_s,
        "prefill_s": record.prefill_s,
        "ttft_s": record.ttft_s,
        "tpot_s": record.tpot_s,
        "e2e_s": record.e2e_s,
        "num_preemptions": record.num_preemptions,
        "preempted_at_s": record.preempted_at_s,
        "recomputed_tokens": record.recomputed_tokens,
        "token_times_s": record.token_times_s,
        "timings": record.timings(),
    }
