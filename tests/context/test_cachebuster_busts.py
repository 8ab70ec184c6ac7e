"""Every cache bust is reported, once per distinct cause, with the loss the server's cached
tokens show: reordered tool lists (sent in one canonical order by agents, and reported
when a caller's list is reordered), and a timestamp rewritten on every turn (reported on
every turn it busts, each time with its real loss, checked against a counterfactual
request on the simulator)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from agentflow import Agent, Fleet, SessionResult
from agentflow._trace import PromptInfo, TurnTrace, Usage
from agentflow.context import CacheBusterCheck, CacheBusterWarning, ContextBudget, ContextChain
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.transport import ChatRequest
from agentflow.typing import Complete, ContextPolicy, SessionContext

PROFILE = "deepseek-v4.1-flash-gb300"
GUIDE = "Keep every change small, tested and documented in the changelog. " * 30


def alpha(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return f"contents of {path} " * 10


def beta(pattern: str) -> str:
    """Search the repository.

    Args:
        pattern: what to look for.
    """
    return f"{pattern} found in 3 files"


def gamma(command: str) -> str:
    """Run a shell command.

    Args:
        command: the command line.
    """
    return "exit status 0"


def sim_run(
    agents_tasks: Sequence[tuple[Agent, str]], *, rounds: int = 3, events: list[Any] | None = None
) -> list[SessionResult]:
    """Run the sessions one after another on one fresh simulator, in virtual time."""

    async def main() -> list[SessionResult]:
        engine = Engine(
            PROFILE, seed=11, textgen=TextGenConfig(tool_rounds=rounds, answer_tokens=(20, 40))
        )
        transport = SimTransport(EngineDriver(engine))
        try:
            fleet = Fleet(
                transport,
                max_concurrency=1,
                clock=loop_clock,
                callbacks=[events.append] if events is not None else [],
            )
            result = await fleet.run(a.session(t, session_id=f"s{i}") for i, (a, t) in
                                     enumerate(agents_tasks))  # fmt: skip
        finally:
            await transport.aclose()
        return result.sessions

    return run_virtual(main())


# --- reordered tool lists ----------------------------------------------------------------


def test_agents_send_their_tools_in_one_canonical_order() -> None:
    """An agent built with its tools in another order sends the same tool list (by name),
    so its sessions share the prefix — on the simulator the second session's first turn
    is served its whole shared prefix from the cache, as when the order was the same."""
    forward = Agent(name="coder", model="sim", instructions=GUIDE, tools=[alpha, beta, gamma])
    backward = Agent(name="coder", model="sim", instructions=GUIDE, tools=[gamma, beta, alpha])
    assert [t["function"]["name"] for t in backward.tool_specs] == ["alpha", "beta", "gamma"]
    assert backward.tool_specs == forward.tool_specs
    assert backward.prefix_key == forward.prefix_key

    same = sim_run([(forward, "Task one."), (forward, "Task two.")], rounds=0)
    mixed = sim_run([(forward, "Task one."), (backward, "Task two.")], rounds=0)
    shared = same[1].turns[0].metrics.cached_tokens
    assert shared is not None and shared > 400
    assert mixed[1].turns[0].metrics.cached_tokens == shared


def test_a_reordered_tool_list_is_reported() -> None:
    """A caller that sends the tools in another order (across sessions, or between two
    turns of one session) gets a ``reordered_tools`` warning naming the span."""
    specs = Agent(name="t", model="m", tools=[alpha, beta, gamma]).tool_specs
    check = CacheBusterCheck(count=len)
    system = [{"role": "system", "content": GUIDE}, {"role": "user", "content": "go"}]
    assert check.check("s0", "a", system, specs) == []
    (w,) = check.check("s1", "a", system, [specs[1], specs[0], specs[2]])
    assert (w.kind, w.scope, w.segment, w.session_id) == (
        "reordered_tools",
        "sessions",
        "tools",
        "s1",
    )
    assert '"name":"beta"' in w.snippet and '"name":"alpha"' in w.reference_snippet
    assert w.snippet.startswith("{") and w.snippet.endswith("}")
    assert len(w.snippet) == len(w.reference_snippet)  # the same two tools, swapped
    # Between turns of one session (its tools are part of its pinned prefix).
    (w2,) = check.check("s1", "a", system, [specs[2], specs[1], specs[0]], turn=1)
    assert (w2.kind, w2.scope, w2.turn) == ("reordered_tools", "turns", 1)
    # A different tool set is a real difference, not a buster.
    assert check.check("s2", "a", system, specs[:2]) == []


# --- a timestamp rewritten on every turn, with the real loss ------------------------------


@dataclass
class Probe:
    """Per turn: the server's cached tokens for the prompt actually sent, and for the same
    prompt with the previous turn's timestamp (what would have hit without the rewrite)."""

    counterfactual: dict[int, int]


class Clocked:
    """A context policy that rewrites the system prompt's timestamp before every turn (the
    bug under test), then runs ``inner``. Before the turn it sends the counterfactual —
    the prompt with the previous turn's timestamp — as a one-token request, whose cached
    tokens are what the real prompt would have been served without the rewrite."""

    def __init__(self, inner: ContextPolicy, probe: Probe) -> None:
        self.inner = inner
        self.probe = probe

    def bind(self, **kw: Any) -> SessionContext:
        return _ClockedSession(self.inner.bind(**kw), self.probe, kw["model"])


class _ClockedSession:
    def __init__(self, inner: SessionContext, probe: Probe, model: str) -> None:
        self.inner, self.probe, self.model = inner, probe, model

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        if turn > 0:
            counterfactual = [dict(messages[0]), *messages[1:]]
            request = ChatRequest(
                model=self.model,
                messages=counterfactual,
                tools=list(tools),
                params={"max_tokens": 1},
            )
            probe = await complete(request)
            assert probe.usage is not None and probe.usage.cached_tokens is not None
            self.probe.counterfactual[turn] = probe.usage.cached_tokens
        messages[0] = {"role": "system", "content": system_prompt(turn)}
        return await self.inner.before_turn(turn, messages, tools, complete)

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        self.inner.after_turn(turn, trace)


def system_prompt(turn: int) -> str:
    stamp = (datetime(2026, 3, 1, 9, 30) + timedelta(seconds=turn)).isoformat()
    return f"{GUIDE}\nCurrent time: {stamp}. Be brief."


@pytest.mark.parametrize(
    "make_policy",
    [
        lambda check: ContextChain([ContextBudget(window=1_000_000), check]),
        lambda check: check,
    ],
    ids=["context-budget", "check-alone"],
)
def test_a_timestamp_rewritten_every_turn_is_reported_on_every_turn_with_its_real_loss(
    make_policy: Callable[[CacheBusterCheck], ContextPolicy], caplog: pytest.LogCaptureFixture
) -> None:
    """The system prompt's timestamp changes before every turn: every turn after the first
    busts the cache from the timestamp on. Each of those turns gets one warning (one cause:
    a timestamp in messages[0]), counted 1, 2, 3 …; its ``lost_tokens`` is measured from
    the server's figures and equals what the counterfactual prompt would have been served
    minus what was served; the log says it once."""
    caplog.set_level(logging.DEBUG, logger="agentflow.context")
    check = CacheBusterCheck()
    probe = Probe({})
    events: list[Any] = []
    agent = Agent(name="clocked", model="sim", instructions=system_prompt(0),
                  tools=[alpha, beta], context=Clocked(make_policy(check), probe))  # fmt: skip
    (result,) = sim_run([(agent, "Fix the parser.")], rounds=4, events=events)
    assert result.ok and len(result.turns) == 5
    warnings = [e for e in events if isinstance(e, CacheBusterWarning)]
    assert check.warnings == warnings
    assert [w.turn for w in warnings] == [1, 2, 3, 4]
    assert {(w.kind, w.scope, w.segment) for w in warnings} == {
        ("timestamp", "turns", "messages[0]")
    }
    assert [w.occurrence for w in warnings] == [1, 2, 3, 4]
    for w in warnings:
        assert w.turn is not None
        cached = result.turns[w.turn].metrics.cached_tokens
        assert cached is not None and w.lost_source == "server"
        assert w.lost_tokens == probe.counterfactual[w.turn] - cached
        # Everything after the timestamp was lost: the history too, not only the prefix.
        assert w.lost_tokens > 100 * w.turn
    assert check.lost_tokens == sum(w.lost_tokens for w in warnings)
    logged = [r for r in caplog.records if "context.cache_buster" in r.getMessage()]
    assert [r.levelno for r in logged] == [logging.WARNING] + [logging.DEBUG] * 3


def test_distinct_causes_in_one_turn_are_reported_once_each() -> None:
    """Two timestamps and a UUID in one prefix change at once: one warning per distinct
    (kind, segment), all carrying the turn's one loss, which the total counts once."""
    check = CacheBusterCheck(count=len)

    def convo(stamp: str, nonce: str) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": f"Started {stamp}, updated {stamp}."},
            {"role": "system", "content": f"Request {nonce}."},
            {"role": "user", "content": "go"},
        ]

    check.check("s", "a", convo("2026-01-01T10:00:00", "0b8e6f3c-2a51-4f7e-9c3d-5a1b2c3d4e5f"), [])
    out = check.check(
        "s", "a", convo("2026-01-01T10:00:01", "7d9f1e2a-3b4c-4d5e-8f60-718293a4b5c6"), [], turn=1
    )
    assert sorted((w.kind, w.segment) for w in out) == [
        ("timestamp", "messages[0]"),
        ("uuid", "messages[1]"),
    ]
    assert len({w.lost_tokens for w in out}) == 1 and out[0].lost_source == "estimate"
    assert check.lost_tokens == out[0].lost_tokens


# --- without the server's figures, and turns that never report back -----------------------


def trace(prompt: int, completion: int, cached: int | None, reasoning: str = "") -> TurnTrace:
    """A finished turn's trace as a server would report it (usage only matters here)."""
    return TurnTrace(
        endpoint="e", model="m", response_id=None, sent_ns=0, headers_ns=0, end_ns=1,
        chunk_ns=(), chunk_chars=(), chunk_tokens=(), tokens_exact=False, n_events=0,
        content="ok", reasoning=reasoning, tool_calls=(), finish_reason="stop",
        usage=Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached),
        done=True,
    )  # fmt: skip


def clocked(second: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": f"Clock 2026-01-01T10:00:0{second} end"},
        {"role": "user", "content": "task"},
    ]


def test_without_server_figures_the_estimate_counts_the_history_too() -> None:
    """A turn-to-turn bust with no usage to measure it: the estimate counts the prefix from
    the first differing character, then the messages sent after it on the previous turn and
    its reply — they hit no more either."""
    check = CacheBusterCheck(count=len)
    messages = clocked(0)
    check.check("s", "a", messages, [], turn=0)
    messages.append({"role": "assistant", "content": "reply one"})
    messages.append({"role": "user", "content": "more"})
    messages[0] = clocked(1)[0]
    (w,) = check.check("s", "a", messages, [], turn=1)
    prefix = len("1 end") + len('{"role":"system"}') + len("[]")
    history = len("task") + len('{"role":"user"}') + len("reply one") + len('{"role":"assistant"}')
    assert (w.lost_tokens, w.lost_source) == (prefix + history, "estimate")


def test_a_deferred_bust_is_measured_or_else_reported_with_its_estimate() -> None:
    """Deferred: nothing is reported until the turn's usage comes back, then the loss is
    what the server held (prompt + reply, but the reply's last token; the prompt alone
    after a reasoning reply) in whole blocks, less what it served. A bust whose turn never
    reports back is reported with its estimate at the next check, or at ``forget``."""
    check = CacheBusterCheck()
    assert check.check("s", "a", clocked(0), [], turn=0, defer=True) == []
    assert check.observe_turn("s", trace(500, 101, 0)) == []  # held: 600, 592 in blocks
    assert check.check("s", "a", clocked(1), [], turn=1, defer=True) == []
    (w,) = check.observe_turn("s", trace(700, 40, 32))
    assert (w.lost_tokens, w.lost_source, w.turn) == (592 - 32, "server", 1)
    # A reply that began with reasoning: the server held the prompt only (700 → 688).
    check.observe_turn("s", trace(700, 40, 32, reasoning="thinking"))
    check.check("s", "a", clocked(2), [], turn=2, defer=True)
    (w,) = check.observe_turn("s", trace(760, 10, 16))
    assert w.lost_tokens == 688 - 16
    # Never observed: reported with the estimate when the session goes on, or is forgotten.
    check.check("s", "a", clocked(3), [], turn=3, defer=True)
    assert [w.turn for w in check.warnings] == [1, 2]
    check.check("s", "a", clocked(4), [], turn=4, defer=True)
    assert [(w.turn, w.lost_source) for w in check.warnings[2:]] == [(3, "estimate")]
    check.forget("s")
    assert [(w.turn, w.occurrence) for w in check.warnings[3:]] == [(4, 4)]
    assert check.busts == 4 and check.lost_tokens == sum(w.lost_tokens for w in check.warnings)


class _StampedPrompt:
    """A link that (badly) stamps the time into the system prompt before every turn."""

    def bind(self, **_: Any) -> _StampedPrompt:
        return self

    async def before_turn(
        self, turn: int, messages: list[dict[str, Any]], tools: Any, complete: Any
    ) -> None:
        messages[0] = {**messages[0], "content": f"You are careful. Time: 10:00:0{turn}"}

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        pass


@pytest.mark.parametrize("where", ["link", "budget"])
async def test_a_bust_whose_turn_fails_is_reported_when_the_session_ends(where: str) -> None:
    """The second turn's prompt busts the cache and the server refuses it (a 400): no
    usage will measure the loss, so the session's end reports it with its estimate —
    it was never reported at all. The check then forgets the session."""
    from agentflow import HTTPTransport
    from agentflow.testing import Reply, ScriptedServer

    def noop() -> str:
        """Do nothing."""
        return "ok"

    check = CacheBusterCheck()
    if where == "budget":  # the deprecated spelling: the budget's own check
        with pytest.warns(DeprecationWarning, match="cache_buster"):
            budget = ContextBudget(window=100_000, cache_buster=check)
    else:
        budget = ContextBudget(window=100_000)
    chain: list[Any] = [_StampedPrompt(), budget] + ([check] if where == "link" else [])
    agent = Agent(name="a", model="m", instructions="You are careful.", tools=[noop],
                  context=chain)  # fmt: skip
    events: list[str] = []
    replies = [Reply.tool_call("noop", {}), Reply.error(400, "bad request")]
    async with ScriptedServer(replies) as srv, HTTPTransport(srv.base_url) as http:
        result = await agent.session("task", session_id="s").run(
            http, callbacks=[lambda e: events.append(e.type)], retry=None
        )
    assert result.status == "error"
    assert check.busts == 1
    assert [(w.kind, w.lost_source) for w in check.warnings] == [("timestamp", "estimate")]
    assert events.index("cache_buster") < events.index("session_end")
    assert "s" not in check._sessions
