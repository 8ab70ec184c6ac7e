"""Context windows of well-known models, for budgets that are given a model name only.

The table is the fallback: a budget built with ``ContextBudget.from_server`` uses the
window the server reports (vLLM's ``max_model_len``, llama.cpp's ``n_ctx``), which is the
deployment's real limit. The models of agentflow's planner catalog take their window from
it (for DeepSeek V4.1 Flash the report's ``--max-model-len 1000000``), so the table, the
planner and the simulator's profiles agree on one number per model.
"""

from __future__ import annotations

from agentflow.planner._catalog import DEPLOYMENTS

__all__ = ["DEFAULT_RESERVE", "KNOWN_WINDOWS", "window_for"]

#: Context windows of well-known models, in tokens; longer names win a prefix match.
KNOWN_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4-turbo": 128_000,
    "gpt-3.5-turbo": 16_385,
    # Family members whose window differs from the family's (a prefix would match them).
    "gpt-3.5-turbo-instruct": 4_096,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "deepseek-chat": 128_000,
    "deepseek-reasoner": 128_000,
    "qwen2.5-7b-instruct": 32_768,
    "llama-3.1-8b-instruct": 131_072,
    "llama-3.3-70b-instruct": 131_072,
    "smollm2": 8_192,
    "cpu-tiny": 2_048,
    # deepseek-v4.1-flash (1,000,000), deepseek-v4 and qwen2.5-coder-32b (131,072): the
    # max_model_len of the planner's shipped deployment of each model.
    **{d.model.name: d.context_limit for d in DEPLOYMENTS.values()},
}

#: The output reserve when neither ``reserve_output`` nor the agent's ``max_tokens`` says.
DEFAULT_RESERVE = 1024


def window_for(model: str) -> int | None:
    """The window of ``model`` from :data:`KNOWN_WINDOWS` (exact, else longest prefix)."""
    name = model.lower().rsplit("/", 1)[-1]
    if name in KNOWN_WINDOWS:
        return KNOWN_WINDOWS[name]
    best = max((k for k in KNOWN_WINDOWS if name.startswith(k)), key=len, default=None)
    return KNOWN_WINDOWS[best] if best is not None else None
