"""Prefix fingerprints: how many of a prompt's tokens any prefix cache could have served.

Servers with prefix caching (vLLM, SGLang, llama.cpp) keep the KV of token *blocks*
(16 tokens in vLLM) under a hash chain: block ``i``'s hash covers block ``i - 1``'s hash
and block ``i``'s tokens, so equal hashes mean equal prefixes; only full blocks count.
:class:`PrefixIndex` does the same over the locally rendered prompt (tool schemas, then
each message as :meth:`MessageCounter.render` tokenizes it) and remembers, fleet-wide,
every block already sent. For each turn, a session's tracker reports the *theoretical
maximum of cacheable prompt tokens* — the leading blocks seen before, by any session,
× block size — which reports set against the ``cached_tokens`` the server reported.

Two modules do it: :mod:`~agentflow.context._prefix_session` (a session's tracker:
its prompt's block chain, kept incrementally) and :mod:`~agentflow.context._prefix_index`
(the fleet-wide index: the blocks sent, bounded, as a tree of packed runs). Their
names are still importable from here, where both were written first.

Counts are in the local tokenizer's tokens; with another tokenizer on the server the
ratio of the two is what :class:`~agentflow.context.Calibrator` learns.
"""

from agentflow.context._prefix_index import DEFAULT_CAPACITY_TOKENS, PrefixIndex
from agentflow.context._prefix_index import _Run as _Run
from agentflow.context._prefix_session import _SMALL as _SMALL
from agentflow.context._prefix_session import PrefixSession
from agentflow.context._prefix_session import _renderer as _renderer

__all__ = ["DEFAULT_CAPACITY_TOKENS", "PrefixIndex", "PrefixSession"]
