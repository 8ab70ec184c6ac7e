"""What ``agentflow demo`` runs: :class:`DemoConfig`, checked as it is made."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._redact import display_url
from agentflow.sim.profiles import get_profile
from agentflow.stats import SLO
from agentflow.transport import Endpoint, Timeouts

__all__ = ["MAX_AGENTS", "DemoConfig"]

#: The most agents (``--agents``) one demo run takes: each is an agent, a session, a copy
#: of the repository and its report row in this one process (a typo of a few more zeros
#: used to build them for minutes, gigabytes deep, deaf to Ctrl-C and SIGTERM).
MAX_AGENTS = 100_000

#: ``--time-scale``'s default (a ``--virtual`` run has no pace: it takes no other).
DEFAULT_TIME_SCALE = 10.0
#: Why ``--time-scale`` is refused with ``--virtual`` (here, and by the CLI when given).
VIRTUAL_HAS_NO_PACE = (
    "demo: --time-scale paces the HTTP simulator; a --virtual run has no pace "
    "(it runs on virtual time, as fast as it computes): drop --time-scale or --virtual"
)

#: Why ``--time-scale`` is refused with ``--base-url``: it paces the simulator, and that
#: server is not one (it used to be ignored without a word).
BASE_URL_HAS_NO_PACE = (
    "demo: --time-scale paces the simulator; with --base-url the server runs at its own "
    "pace: drop --time-scale or --base-url"
)
DEFAULT_PROFILE = "deepseek-v4.1-flash-gb300"


@dataclass(frozen=True, kw_only=True, repr=False)
class DemoConfig:
    """What ``agentflow demo`` runs.

    Attributes:
        agents: coding agents, one session each; at most :data:`MAX_AGENTS`.
        profile: the simulator's deployment profile; with ``base_url``, its window is the
            budget's when the server reports none and the model table has no entry.
        seed: fixes the workload and the simulator's output.
        time_scale: how much slower than the modelled deployment the simulator runs, so
            that one Python client on a laptop can keep up with a rack's token rate;
            figures are also shown scaled back. Over HTTP only: a ``virtual`` run, on
            virtual time, refuses any other than the default (a resumed one ignores
            the one it was recorded with, as it always did); so does one with
            ``base_url``, a server that runs at its own pace.
        max_concurrency: model requests in flight at once.
        turns: (min, max) model turns per agent.
        max_tokens: output limit per turn.
        base_url, api_key, model: run against this server instead of the simulator.
        virtual: run in-process on virtual time instead of over HTTP.
        live: draw the live view (over HTTP; a ``virtual`` run draws none).
        report: where to write the JSON report.
        timeouts: time limits of each model request over HTTP (``None``: the
            transport's defaults); not for ``virtual``.
        store: record the run in this SQLite store (``docs/store.md``); the demo's
            configuration is recorded with it, so ``agentflow resume`` can rebuild it.
        resume: the id of a run in ``store`` to resume instead of starting one.
        slos: SLOs the report counts goodput against (``--slo ttft=2s,tpot=10ms``); the
            summary says how much of the run met each.
        fault_rate: the share of the simulator's requests that fail (half answered with
            a 500, half reset after some output), so that retries and errors show; over
            HTTP on the simulator only.

    Its ``repr`` shows no ``api_key`` and ``base_url`` without its userinfo (as
    :class:`~agentflow.transport.Endpoint`'s).

    Raises:
        ConfigError: a value is wrong or the options conflict (the message names them).
    """

    agents: int = 64
    profile: str = DEFAULT_PROFILE
    seed: int = 0
    time_scale: float = DEFAULT_TIME_SCALE
    max_concurrency: int = 64
    turns: tuple[int, int] = (5, 20)
    max_tokens: int = 128
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    virtual: bool = False
    live: bool = True
    report: Path | None = None
    timeouts: Timeouts | None = None
    store: Path | None = None
    resume: str | None = None
    slos: tuple[SLO, ...] = ()
    fault_rate: float = 0.0

    def __repr__(self) -> str:
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        if self.base_url is not None:  # a password in the URL: not shown
            values["base_url"] = display_url(self.base_url)
        return f"DemoConfig({', '.join(f'{k}={v!r}' for k, v in values.items())})"

    def __post_init__(self) -> None:
        for name in ("agents", "max_concurrency", "max_tokens"):
            check_count(getattr(self, name), f"demo: --{name.replace('_', '-')}")
        if self.agents > MAX_AGENTS and self.resume is None:  # (a recorded run resumes)
            raise ConfigError(
                f"demo: --agents is at most {MAX_AGENTS:,} (one process runs them all), "
                f"got {self.agents:,}"
            )
        if not (math.isfinite(self.time_scale) and 1e-6 <= self.time_scale <= 1e6):
            raise ConfigError(
                f"demo: --time-scale must be a finite number in [1e-06, 1e+06], got "
                f"{self.time_scale!r}"
            )
        lo, hi = self.turns
        if not 1 <= lo <= hi:
            raise ConfigError(f"demo: --turns must be MIN:MAX with 1 ≤ MIN ≤ MAX, got {lo}:{hi}")
        if self.virtual and self.base_url:
            raise ConfigError("demo: --virtual runs the embedded simulator; drop --base-url")
        if self.virtual and self.time_scale != DEFAULT_TIME_SCALE and self.resume is None:
            raise ConfigError(VIRTUAL_HAS_NO_PACE)
        # (a resumed run keeps what it was recorded with, as it always did)
        if self.base_url and self.resume is None and self.time_scale != DEFAULT_TIME_SCALE:
            raise ConfigError(BASE_URL_HAS_NO_PACE)
        if self.virtual and self.timeouts is not None:
            raise ConfigError("demo: the --*-timeout limits are for HTTP runs; drop --virtual")
        if not 0 <= self.fault_rate <= 1:
            raise ConfigError(f"demo: --fault-rate must be in [0, 1], got {self.fault_rate!r}")
        if self.fault_rate and (self.virtual or self.base_url):
            raise ConfigError(
                "demo: --fault-rate injects faults in the HTTP simulator; drop --virtual "
                "and --base-url"
            )
        if self.resume is not None and self.store is None:
            raise ConfigError("demo: resuming a run needs its --store")
        window = get_profile(self.profile).max_model_len  # an UnknownProfileError names it
        if not self.base_url and self.max_tokens > window // 2:
            # The demo's prompts run to tens of thousands of tokens; the budget reserves
            # max_tokens of the window for the answer (a server's window: checked per
            # session, each failed session says why).
            raise ConfigError(
                f"demo: --max-tokens {self.max_tokens:,} leaves less than half of the "
                f"{window:,}-token window of --profile {self.profile} for the prompt"
            )
        if not self.base_url:
            _check_first_prompt(self, window)
        if self.base_url:
            Endpoint(base_url=self.base_url)  # a ConfigError names a malformed URL


def _check_first_prompt(config: DemoConfig, window: int) -> None:
    """On the simulator, the workload's first prompt (instructions, repository guide, tool
    schemas, task) plus ``--max-tokens`` must fit the profile's window — as the run's
    own budget counts it — or every session would fail with ``ContextOverflow`` at its
    first turn (``--profile cpu-tiny``'s 2,048 tokens hold no demo prompt)."""
    import json

    from agentflow._context_chain import Binding
    from agentflow.context import ContextBudget
    from agentflow.context._estimates import SessionEstimates
    from agentflow.demo.workload import make_workload
    from agentflow.sim.profiles import PROFILES

    # The run's agents, each with its budget over this window (their prompts differ in
    # the task alone, by a token or two: the first one speaks for all).
    budget = ContextBudget(window=window, cache_buster=False)
    work = make_workload(
        1,
        model=config.model or "agentflow-sim",
        seed=config.seed,
        turns=config.turns,
        max_tokens=config.max_tokens,
        context=budget,
    )
    agent = work.agents[0]
    at = Binding(
        session_id="demo", agent=agent.name, emit=lambda _: None, model=agent.model,
        params=agent.params,
    )  # fmt: skip
    limit = budget.session_for(at)  # reserve (--max-tokens) and margin as the run's
    prompt = agent.session(work.tasks[0]).messages
    bound = SessionEstimates(budget.counter, budget.calibrator, agent.model).prompt(
        prompt, json.loads(agent.tool_specs_json)
    )
    if bound <= limit.limit:
        return
    fit = [
        f"{name} ({p.max_model_len:,})"
        for name, p in PROFILES.items()
        if ContextBudget(window=p.max_model_len, cache_buster=False).session_for(at).limit >= bound
    ]
    raise ConfigError(
        f"demo: the workload's first prompt is ~{bound:,} tokens (instructions, repository "
        f"guide, tool schemas); with --max-tokens {limit.reserve:,} and a {limit.margin:,}-token "
        f"margin it needs {bound + limit.reserve + limit.margin:,}, more than the "
        f"{window:,}-token window of --profile {config.profile}: every session would fail "
        f"at its first turn. Profiles whose window holds it: {', '.join(fit) or 'none'}"
    )
