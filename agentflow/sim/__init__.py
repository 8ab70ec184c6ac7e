"""agentflow's embedded serving-engine simulator: the engine model.

A server, not a client: nothing here imports agentflow's client side, and the client
side imports nothing from here. The pieces, bottom up:

- :mod:`~agentflow.sim.profiles` — :class:`Profile`: limits and the step-time model of
  a deployment, and the registry (:func:`get_profile`).
- :mod:`~agentflow.sim.tokenizer` — a deterministic tokenizer and ChatML-like template.
- :mod:`~agentflow.sim.kv` — :class:`BlockManager`: KV blocks, the block-hash-chain
  prefix cache, reference counts, LRU eviction.
- :mod:`~agentflow.sim.arguments` — values that satisfy a JSON schema (tool arguments).
- :mod:`~agentflow.sim.textgen` — :class:`TextGenerator`: each request's output plan.
- :mod:`~agentflow.sim.errors` — :class:`RequestRejected` with vLLM's wording.
- :mod:`~agentflow.sim.records` — ground truth: :class:`RequestRecord`,
  :class:`StepResult`, :class:`EngineStats`.
- :mod:`~agentflow.sim.sequence` — :class:`EngineRequest` (a request in tokens) and
  the scheduler's per-request state.
- :mod:`~agentflow.sim.engine` — :class:`Engine`: the scheduler, :meth:`Engine.step`,
  and :meth:`Engine.decode_run` (many pure-decode steps at once, for virtual time).

No HTTP and no asyncio: the engine is a discrete-event core whose caller owns the clock.
"""

from __future__ import annotations

from agentflow.sim.arguments import SchemaError, generate_value
from agentflow.sim.engine import Engine, EngineRequest
from agentflow.sim.errors import RequestRejected, check_context_length
from agentflow.sim.kv import BlockManager, extend_block_hashes
from agentflow.sim.profiles import (
    PROFILES,
    Profile,
    UnknownProfileError,
    get_profile,
    profile_names,
)
from agentflow.sim.records import DecodeRun, EngineStats, RequestRecord, StepResult
from agentflow.sim.textgen import (
    FinishReason,
    OutputDelta,
    OutputPlan,
    PlannedToolCall,
    TextGenConfig,
    TextGenerator,
    ToolCallDelta,
    count_tool_rounds,
)
from agentflow.sim.tokenizer import Tokenizer

__all__ = [
    "PROFILES",
    "BlockManager",
    "DecodeRun",
    "Engine",
    "EngineRequest",
    "EngineStats",
    "FinishReason",
    "OutputDelta",
    "OutputPlan",
    "PlannedToolCall",
    "Profile",
    "RequestRecord",
    "RequestRejected",
    "SchemaError",
    "StepResult",
    "TextGenConfig",
    "TextGenerator",
    "Tokenizer",
    "ToolCallDelta",
    "UnknownProfileError",
    "check_context_length",
    "count_tool_rounds",
    "extend_block_hashes",
    "generate_value",
    "get_profile",
    "profile_names",
]
