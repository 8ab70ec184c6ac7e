"""The built-in workloads ``agentflow bench --workload NAME`` knows (``docs/workloads.md``).

Each is an ordinary :class:`Workload` — ``agentflow bench --show-workload NAME`` prints
its JSON, a starting point for writing one's own.
"""

from __future__ import annotations

from agentflow._errors import ConfigError
from agentflow.bench._spec import (
    FanOut,
    LogNormal,
    SessionTemplate,
    Uniform,
    Workload,
    Zipf,
)

__all__ = ["WORKLOADS", "get_workload", "workload_names"]

_AGENTIC = Workload(
    name="agentic",
    description=(
        "coding agents: a 2,000-token shared prefix (instructions and tool schemas), "
        "Zipf turns per session, tool results of log-normal length and latency"
    ),
    shared_prefix_tokens=2000,
    templates=(
        SessionTemplate(
            name="coder",
            turns=Zipf(s=1.1, low=3, high=30),
            first_prompt_tokens=LogNormal(mean=300, sigma=0.6, low=32, high=2000),
            prompt_tokens=LogNormal(mean=250, sigma=1.0, low=16, high=2000),
            output_tokens=LogNormal(mean=120, sigma=0.7, low=8, high=600),
            tool_latency_s=LogNormal(mean=1.0, sigma=1.0, low=0.05, high=30),
        ),
    ),
)

_CHAT = Workload(
    name="chat",
    description="multi-turn chat: a short system prompt, replies after seconds of think time",
    shared_prefix_tokens=200,
    templates=(
        SessionTemplate(
            name="chat",
            turns=Uniform(low=2, high=6),
            prompt_tokens=LogNormal(mean=150, sigma=0.8, low=8, high=1500),
            output_tokens=LogNormal(mean=200, sigma=0.6, low=16, high=800),
            think_time_s=LogNormal(mean=4.0, sigma=0.7, low=0.5, high=30),
        ),
    ),
)

_FANOUT = Workload(
    name="fanout",
    description=(
        "an orchestrator that forks 2–4 sub-agents (fresh context, the same prefix) "
        "and joins their answers, twice per session at most"
    ),
    shared_prefix_tokens=1500,
    group_prefix_tokens={"research": 500},
    templates=(
        SessionTemplate(
            name="orchestrator",
            group="research",
            turns=Uniform(low=3, high=6),
            prompt_tokens=LogNormal(mean=200, sigma=0.6, low=16, high=1500),
            output_tokens=LogNormal(mean=150, sigma=0.5, low=16, high=600),
            tool_latency_s=LogNormal(mean=0.5, sigma=0.8, low=0.05, high=10),
            fanout=FanOut(template="subagent", width=Uniform(low=2, high=4), max_forks=2),
        ),
        SessionTemplate(
            name="subagent",
            weight=0,
            group="research",
            turns=Uniform(low=1, high=3),
            prompt_tokens=LogNormal(mean=150, sigma=0.6, low=16, high=1000),
            output_tokens=LogNormal(mean=100, sigma=0.5, low=8, high=400),
            tool_latency_s=LogNormal(mean=0.8, sigma=0.8, low=0.05, high=10),
        ),
    ),
)

_SHORT = Workload(
    name="short",
    description="one-turn requests, 128 tokens in and 128 out (the classic serving benchmark)",
    templates=(SessionTemplate(name="request", turns=1, prompt_tokens=128, output_tokens=128),),
)

#: The built-in workloads, by name.
WORKLOADS: dict[str, Workload] = {w.name: w for w in (_AGENTIC, _CHAT, _FANOUT, _SHORT)}


def workload_names() -> list[str]:
    """The built-in workload names, sorted."""
    return sorted(WORKLOADS)


def get_workload(name: str) -> Workload:
    """The built-in workload ``name``.

    Raises:
        ConfigError: no such workload (the message lists them).
    """
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ConfigError(
            f"unknown workload {name!r}; built in: {', '.join(workload_names())} "
            "(or give a JSON file)"
        ) from None
