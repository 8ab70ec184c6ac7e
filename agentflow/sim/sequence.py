"""Requests in token terms, and the per-request state the scheduler keeps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentflow.sim.plan import FinishReason, OutputPlan
from agentflow.sim.records import RequestRecord

__all__ = ["ENDED", "RUNNING", "WAITING", "EngineRequest", "SeqState"]

# SeqState.state: in the waiting queue, in the batch, or finished/aborted. An aborted
# sequence stays where it was until the scheduler drops it (see Engine.abort).
WAITING = 0
RUNNING = 1
ENDED = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRequest:
    """A request in token terms.

    Attributes:
        prompt_ids: the prompt's token ids.
        output_ids: the tokens the model will emit if nothing stops it (at least one).
        finish_reason: the finish reason if all of ``output_ids`` come out.
        max_tokens: the output limit; ``None`` is whatever the window leaves.
        plan: the output plan behind ``output_ids``, kept on the record for the HTTP layer.
    """

    prompt_ids: Sequence[int]
    output_ids: Sequence[int]
    finish_reason: Literal["stop", "tool_calls"] = "stop"
    max_tokens: int | None = None
    plan: OutputPlan | None = None

    @classmethod
    def from_plan(
        cls, prompt_ids: Sequence[int], plan: OutputPlan, *, max_tokens: int | None = None
    ) -> EngineRequest:
        """A request whose output is ``plan``."""
        return cls(
            prompt_ids=prompt_ids,
            output_ids=plan.token_ids,
            finish_reason=plan.finish_reason,
            max_tokens=max_tokens,
            plan=plan,
        )


class SeqState:
    """A request's scheduling state inside the engine (not part of the public API).

    ``tokens`` holds the prompt and the planned output up to the request's limit;
    only the first ``num_tokens`` exist so far (the prompt plus the outputs sampled).
    ``blocks`` are the KV blocks held (see :class:`~agentflow.sim.kv.BlockManager`),
    ``hashes`` the block-chain keys computed so far, ``registered`` how many leading
    blocks have been offered to the prefix cache. ``state`` is :data:`WAITING`,
    :data:`RUNNING` or :data:`ENDED` (finished or aborted).
    """

    __slots__ = (
        "blocks",
        "end_reason",
        "hashes",
        "limit",
        "num_computed",
        "num_output",
        "num_tokens",
        "prompt_len",
        "record",
        "registered",
        "rid",
        "state",
        "tokens",
    )

    def __init__(
        self,
        rid: int,
        tokens: list[int],
        prompt_len: int,
        limit: int,
        end_reason: FinishReason,
        record: RequestRecord,
    ) -> None:
        self.rid = rid
        self.tokens = tokens
        self.prompt_len = prompt_len
        self.limit = limit
        self.end_reason = end_reason
        self.record = record
        # Tokens that exist so far: the prompt plus the outputs sampled.
        self.num_tokens = prompt_len
        self.num_output = 0
        self.num_computed = 0
        self.blocks: list[int] = []
        self.hashes: list[int] = []
        # Leading blocks offered to the prefix cache.
        self.registered = 0
        self.state = WAITING
