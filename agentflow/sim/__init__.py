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
- :mod:`~agentflow.sim.plan` — :class:`OutputPlan`: a request's whole output, and the
  streaming delta of any run of its tokens.
- :mod:`~agentflow.sim.errors` — :class:`RequestRejected` with vLLM's wording.
- :mod:`~agentflow.sim.records` — ground truth: :class:`RequestRecord`,
  :class:`StepResult`, :class:`EngineStats`.
- :mod:`~agentflow.sim.sequence` — :class:`EngineRequest` (a request in tokens) and
  the scheduler's per-request state.
- :mod:`~agentflow.sim.engine` — :class:`Engine`: its state, clock and requests.
- :mod:`~agentflow.sim.scheduler` — the engine's step loop: the scheduler,
  :meth:`Engine.step`, and :meth:`Engine.decode_run` (many pure-decode steps at once, for
  virtual time).

No HTTP and no asyncio: the engine is a discrete-event core whose caller owns the clock.

The serving layer on top of it:

- :mod:`~agentflow.sim.api` — request bodies decoded into msgspec Structs and checked
  (:func:`parse_chat_body` → :class:`ChatParams`; a bad field is a 400 naming it).
- :mod:`~agentflow.sim.answers` — the JSON answers' shapes (vLLM's error body,
  ``/v1/models``, a request's ground truth).
- :mod:`~agentflow.sim.frames` — :class:`ChunkEncoder`: a request's output as vLLM-shaped
  ``chat.completion.chunk`` payloads (or the non-streamed body).
- :mod:`~agentflow.sim.request` — :class:`SimRequest` (a submitted request's handle) and
  the :class:`StreamConsumer` its payloads go to.
- :mod:`~agentflow.sim.driver` — :class:`EngineDriver`: the step loop as an asyncio task in
  loop time (real or virtual), :meth:`EngineDriver.submit` with a :class:`StreamConsumer`.
- :mod:`~agentflow.sim.driver_loop` — the driver's step loop (paced to each step's end in
  loop time) and the delivery of each step's payloads.
- :mod:`~agentflow.sim.faults` — :class:`FaultConfig`, :class:`FaultInjector`: seeded
  faults, and what each one does to an answer or a stream.
- :mod:`~agentflow.sim.stream` — the SSE stream writer: one chunked frame per step.
- :mod:`~agentflow.sim.metrics` — ``/metrics`` in Prometheus text with vLLM's names.
- :mod:`~agentflow.sim.server` — :class:`SimServer`: the OpenAI-compatible HTTP server.
- :mod:`~agentflow.sim.httperrors` — its error answers in vLLM's JSON shape (a JSON 500
  for any exception a handler lets escape).
- :mod:`~agentflow.sim.cli` — ``agentflow sim`` and ``python -m agentflow.sim``.
"""

from __future__ import annotations

from agentflow.sim.api import ChatParams, parse_chat_body
from agentflow.sim.arguments import SchemaError, generate_value
from agentflow.sim.driver import EngineDriver
from agentflow.sim.engine import Engine, EngineRequest
from agentflow.sim.errors import RequestRejected, check_context_length
from agentflow.sim.faults import FAULT_KINDS, Fault, FaultConfig, FaultInjector
from agentflow.sim.frames import ChunkEncoder
from agentflow.sim.kv import BlockManager, extend_block_hashes
from agentflow.sim.plan import (
    FinishReason,
    OutputDelta,
    OutputPlan,
    PlannedToolCall,
    ToolCallDelta,
)
from agentflow.sim.profiles import (
    PROFILES,
    Profile,
    UnknownProfileError,
    get_profile,
    profile_names,
)
from agentflow.sim.records import DecodeRun, DriverStats, EngineStats, RequestRecord, StepResult
from agentflow.sim.request import SimRequest, StreamConsumer
from agentflow.sim.server import SimServer
from agentflow.sim.sessions import SESSION_HEADER, SessionRounds
from agentflow.sim.textgen import TextGenConfig, TextGenerator, count_tool_rounds
from agentflow.sim.tokenizer import Tokenizer

__all__ = [
    "FAULT_KINDS",
    "PROFILES",
    "SESSION_HEADER",
    "BlockManager",
    "ChatParams",
    "ChunkEncoder",
    "DecodeRun",
    "DriverStats",
    "Engine",
    "EngineDriver",
    "EngineRequest",
    "EngineStats",
    "Fault",
    "FaultConfig",
    "FaultInjector",
    "FinishReason",
    "OutputDelta",
    "OutputPlan",
    "PlannedToolCall",
    "Profile",
    "RequestRecord",
    "RequestRejected",
    "SchemaError",
    "SessionRounds",
    "SimRequest",
    "SimServer",
    "StepResult",
    "StreamConsumer",
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
    "parse_chat_body",
    "profile_names",
]
