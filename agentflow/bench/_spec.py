"""What ``agentflow bench`` runs, as data: workloads a user writes, and the scripts they
sample into.

Two layers:

- A :class:`Workload` is what a user writes (in JSON, or in Python): session templates
  whose figures are *distributions* (:class:`Constant`, :class:`Uniform`,
  :class:`LogNormal`, :class:`Zipf`; a plain number is a constant) — turns per session,
  prompt and output lengths, tool latency, think time — plus shared prompt prefixes
  (one global, and one per group), sub-agents that fork with a fresh context and rejoin
  (:class:`FanOut`), and a cache-busting option for a session's first turn.
- A :class:`SessionScript` is one concrete conversation: when it arrives, its system
  prompt, and per turn (:class:`TurnScript`) the message appended before it (text, or a
  length to synthesise), the output limit, the tool latency and think time that precede
  it, and the sub-agents forked before it. The runner (``agentflow.bench._session``)
  executes scripts and nothing else, so anything that produces them — sampling a
  workload (:meth:`Workload.sample`), or a recorded trace — is run the same way.

Everything is seeded: a workload sampled with the same seed gives the same scripts, and
each session's draws depend only on the seed and its index, never on the order sessions
are sampled in. Synthetic text (:func:`synth_text`) is words of at most five letters,
each one token on the simulator's tokenizer and on common BPE tokenizers, so a length in
tokens is what the server counts (exactly on the simulator, closely elsewhere).

The records live in three modules, gathered here: ``_dist`` (the distributions),
``_script`` (scripts and synthetic text) and ``_workload_spec`` (templates, the workload,
its sampling and loading).
"""

from __future__ import annotations

from agentflow.bench._dist import (
    Constant,
    Dist,
    LogNormal,
    Uniform,
    Zipf,
    sample_value,
)
from agentflow.bench._dist import _bounds as _bounds
from agentflow.bench._dist import _check_dist as _check_dist
from agentflow.bench._dist import _clip as _clip
from agentflow.bench._dist import _finite as _finite
from agentflow.bench._dist import _zipf_cdf as _zipf_cdf
from agentflow.bench._script import _WORDS as _WORDS
from agentflow.bench._script import (
    SessionScript,
    TurnScript,
    synth_text,
)
from agentflow.bench._script import scripts_output_tokens as scripts_output_tokens
from agentflow.bench._workload_spec import (
    FanOut,
    SessionTemplate,
    Workload,
    load_workload,
)
from agentflow.bench._workload_spec import _joined_prefix as _joined_prefix
from agentflow.bench._workload_spec import _prefix_text as _prefix_text
from agentflow.bench._workload_spec import _sample_int as _sample_int
from agentflow.bench._workload_spec import _sample_s as _sample_s
from agentflow.bench._workload_spec import _system_prompt as _system_prompt

__all__ = [
    "Constant",
    "Dist",
    "FanOut",
    "LogNormal",
    "SessionScript",
    "SessionTemplate",
    "TurnScript",
    "Uniform",
    "Workload",
    "Zipf",
    "load_workload",
    "sample_value",
    "synth_text",
]
