"""Context accounting: token counts, calibration against the server, prefix fingerprints
and budgets (issue #4). See ``docs/context.md``.

- :func:`encoding`, :class:`TiktokenCounter` — tiktoken encodings that work offline
  (the BPE files ship with agentflow); :class:`HFTokenizerCounter` — a Hugging Face
  ``tokenizer.json``; :class:`ServerCounter` — the server's own ``POST /tokenize``.
- :class:`MessageCounter` — chat messages counted as templates render them, cached per
  message; :class:`PromptCounter` — one session's prompt, counted incrementally.
- :class:`Calibrator` — learns per model how the server's ``prompt_tokens`` relate to
  the local estimate, and corrects it; per content kind (:func:`content_kind`,
  :class:`PromptShape`, :class:`KindTally`), with an error margin learnt from its own
  errors (:class:`TokenEstimate`).
- :class:`PrefixIndex` — fleet-wide block hashes of every prompt sent; its
  :class:`PrefixSession` gives each turn's most cacheable prompt tokens.
- :class:`CacheBusterCheck` — warns (:class:`CacheBusterWarning`) when prefixes that should
  match differ by a timestamp, UUID, nonce, counter, reordered JSON keys or reordered
  tools — every bust, once per cause, with the loss the server's usage shows;
  :func:`prefix_reuse` — reported cached tokens against the cacheable maximum
  (``docs/prefix-reuse.md``).
- :func:`server_window` — the window a server really has (vLLM's ``max_model_len``,
  llama.cpp's ``n_ctx``), which :meth:`ContextBudget.from_server` builds a budget on.
- :class:`ContextBudget` — every session's prompt inside its window (calibrated estimates,
  a pinned prefix, overflow policies :class:`Fail`, :class:`DropOldest`,
  :class:`TruncateToolOutputs`, :class:`Compact`); :class:`FleetBudget` — fleet-wide token
  and cost budgets; their events :class:`ContextTrimmedEvent`, :class:`CompactionEvent`,
  :class:`BudgetEvent` (``docs/context.md``, "Budgets and overflow policies").
- :class:`ContextChain` — an agent's context as links run in order,
  ``Agent(context=[FleetBudget(...), ContextBudget(...), CacheBusterCheck(...)])``; each has
  the one signature :class:`agentflow.typing.ContextLink` (``docs/context.md``, "The
  context chain").
"""

from agentflow._context_chain import ContextChain
from agentflow._public import publish as _publish
from agentflow.context._budget import ContextBudget, PrefixSource, PrefixTracker
from agentflow.context._cachebuster import (
    CacheBusterCheck,
    CacheBusterKind,
    CacheBusterScope,
    CacheBusterWarning,
)
from agentflow.context._calibration import CalibrationStats, Calibrator, TokenEstimate
from agentflow.context._compact import DEFAULT_SUMMARY_PROMPT, Compact, render_transcript
from agentflow.context._counting import HFTokenizerCounter, TiktokenCounter, TokenCounter
from agentflow.context._encodings import (
    ENCODING_NAMES,
    ENCODINGS_DIR,
    encoding,
    encoding_name_for_model,
)
from agentflow.context._events import BudgetEvent, CompactionEvent, ContextTrimmedEvent
from agentflow.context._fingerprint import DEFAULT_CAPACITY_TOKENS, PrefixIndex, PrefixSession
from agentflow.context._fleet_budget import FleetBudget, Prices, Spend
from agentflow.context._history import check_pairing, pinned_length, split_units
from agentflow.context._kinds import (
    KINDS,
    ContentKind,
    KindTally,
    PromptShape,
    content_kind,
    message_kind,
)
from agentflow.context._messages import MessageCounter
from agentflow.context._overflow import (
    DropOldest,
    Fail,
    OverflowPolicy,
    OverflowView,
    TokenEstimator,
    TruncateToolOutputs,
    overflow_error,
    policy_name,
)
from agentflow.context._prompt import ChangeCheck, PromptCounter
from agentflow.context._reuse import PrefixReuse, PrefixReuseReport, prefix_reuse
from agentflow.context._server_counter import ServerCounter, TokenizeDialect
from agentflow.context._server_window import (
    DEFAULT_WINDOW_TIMEOUT_S,
    ModelsSource,
    ServerWindow,
    server_window,
)
from agentflow.context._session_budget import SessionBudget
from agentflow.context._windows import KNOWN_WINDOWS, window_for

__all__ = [
    "DEFAULT_CAPACITY_TOKENS",
    "DEFAULT_SUMMARY_PROMPT",
    "DEFAULT_WINDOW_TIMEOUT_S",
    "ENCODINGS_DIR",
    "ENCODING_NAMES",
    "KINDS",
    "KNOWN_WINDOWS",
    "BudgetEvent",
    "CacheBusterCheck",
    "CacheBusterKind",
    "CacheBusterScope",
    "CacheBusterWarning",
    "CalibrationStats",
    "Calibrator",
    "ChangeCheck",
    "Compact",
    "CompactionEvent",
    "ContentKind",
    "ContextBudget",
    "ContextChain",
    "ContextTrimmedEvent",
    "DropOldest",
    "Fail",
    "FleetBudget",
    "HFTokenizerCounter",
    "KindTally",
    "MessageCounter",
    "ModelsSource",
    "OverflowPolicy",
    "OverflowView",
    "PrefixIndex",
    "PrefixReuse",
    "PrefixReuseReport",
    "PrefixSession",
    "PrefixSource",
    "PrefixTracker",
    "Prices",
    "PromptCounter",
    "PromptShape",
    "ServerCounter",
    "ServerWindow",
    "SessionBudget",
    "Spend",
    "TiktokenCounter",
    "TokenCounter",
    "TokenEstimate",
    "TokenEstimator",
    "TokenizeDialect",
    "TruncateToolOutputs",
    "check_pairing",
    "content_kind",
    "encoding",
    "encoding_name_for_model",
    "message_kind",
    "overflow_error",
    "pinned_length",
    "policy_name",
    "prefix_reuse",
    "render_transcript",
    "server_window",
    "split_units",
    "window_for",
]

# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())
