"""The cache-buster check: volatile differences in prefixes that should match are reported,
once per agent and kind, with the span; real differences and per-session messages are not."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from agentflow import Agent, ConfigError, HTTPTransport
from agentflow.context._cachebuster import CacheBusterCheck, CacheBusterWarning
from agentflow.testing import Reply, ScriptedServer


def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: the city.
    """
    return city


TOOLS = Agent(name="t", model="m", tools=[lookup]).tool_specs


def convo(system: str, task: str = "do it") -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": task}]


def run_check(
    check: CacheBusterCheck, session: str, agent: str, system: str, task: str = "do it"
) -> list[CacheBusterWarning]:
    events: list[CacheBusterWarning] = []
    out = check.check(session, agent, convo(system, task), TOOLS, events.append, turn=0)
    assert out == events
    return out


async def test_timestamp_in_the_system_prompt_fires_over_real_sessions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two sessions whose system prompts differ only by datetime.now().isoformat(): one
    warning, as an event through the session's callbacks (after the turn, with the loss
    the server's usage shows) and as a log line, naming the session, the span and both
    snippets."""
    caplog.set_level(logging.WARNING, logger="agentflow.context")
    now = datetime.now()
    stamps = [now.isoformat(), (now + timedelta(seconds=1)).isoformat()]
    check = CacheBusterCheck()
    seen: list[object] = []
    async with (
        ScriptedServer(
            [Reply.text("ok"), Reply.text("ok", prompt_tokens=400, cached_tokens=16)]
        ) as srv,
        HTTPTransport(srv.base_url) as transport,
    ):
        for i, stamp in enumerate(stamps):
            agent = Agent(
                name="clock",
                model="m",
                instructions=f"You are a helpful agent. The time is {stamp}. Answer briefly.",
                tools=[lookup],
                context=check,
            )
            result = await agent.session(f"task {i}", session_id=f"s{i}").run(
                transport, callbacks=[seen.append]
            )
            assert result.ok
    warnings = [e for e in seen if isinstance(e, CacheBusterWarning)]
    assert len(warnings) == 1 and check.warnings == warnings
    w = warnings[0]
    assert (w.kind, w.scope, w.agent, w.session_id, w.reference_session_id, w.turn) == (
        "timestamp",
        "sessions",
        "clock",
        "s1",
        "s0",
        0,
    )
    assert w.segment == "messages[0]" and w.type == "cache_buster"
    assert (w.snippet, w.reference_snippet) == (stamps[1], stamps[0])
    start = len("You are a helpful agent. The time is ")
    assert (w.start, w.end) == (start, start + len(stamps[1]))
    assert (w.reference_start, w.reference_end) == (start, start + len(stamps[0]))
    # The shared prefix is nearly all of the 400-token prompt; the server served one block.
    assert w.lost_source == "server" and w.occurrence == 1
    assert 300 < w.lost_tokens <= 400 - 16 and w.lost_tokens % 16 == 0
    assert check.lost_tokens == w.lost_tokens and check.busts == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "agentflow.context"]
    assert len(lines) == 1
    assert "context.cache_buster" in lines[0] and "kind='timestamp'" in lines[0]
    assert "session='s1'" in lines[0] and stamps[1] in lines[0]


def test_uuid_fires() -> None:
    """A UUID generated per session is reported as kind 'uuid'."""
    check = CacheBusterCheck()
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    assert run_check(check, "s1", "agent", f"Request id {a}. Be terse.") == []
    [w] = run_check(check, "s2", "agent", f"Request id {b}. Be terse.")
    assert (w.kind, w.snippet, w.reference_snippet) == ("uuid", b, a)
    assert (w.start, w.end) == (11, 47)


def test_reordered_json_keys_fire() -> None:
    """The same JSON document with its keys in another order: kind 'reordered_keys',
    the span covering the object."""
    config = {"region": "eu", "limits": {"rpm": 60, "tpm": 1000}, "tags": ["a", "b"]}
    shuffled = {"tags": ["a", "b"], "limits": {"tpm": 1000, "rpm": 60}, "region": "eu"}
    check = CacheBusterCheck()
    assert run_check(check, "s1", "ops", f"Config: {json.dumps(config)}\nBe careful.") == []
    [w] = run_check(check, "s2", "ops", f"Config: {json.dumps(shuffled)}\nBe careful.")
    assert w.kind == "reordered_keys"
    assert (w.snippet, w.reference_snippet) == (json.dumps(shuffled), json.dumps(config))
    assert w.start == len("Config: ")


@pytest.mark.parametrize(
    ("first", "second", "kind", "snippet"),
    [
        ("Session 41 of the day.", "Session 42 of the day.", "counter", "42"),
        ("nonce=9f86d081884c7d65 ok", "nonce=2c26b46b68ffc68f ok", "nonce", "2c26b46b68ffc68f"),
        ("Epoch 1714560000.25 now", "Epoch 1714560007.5 now", "timestamp", "1714560007.5"),
        ("Today is 2024-05-01.", "Today is 2024-05-02.", "timestamp", "2024-05-02"),
        ("At 09:15:02 sharp", "At 09:16:40 sharp", "timestamp", "09:16:40"),
    ],
)
def test_other_volatile_kinds(first: str, second: str, kind: str, snippet: str) -> None:
    """Counters, hex nonces, epochs, dates and times of day are each recognised."""
    check = CacheBusterCheck()
    run_check(check, "s1", "a", first)
    [w] = run_check(check, "s2", "a", second)
    assert (w.kind, w.snippet) == (kind, snippet)


def test_legitimate_differences_do_not_fire() -> None:
    """Different agents, different task messages (after the pinned prefix), and system
    prompts that differ in words are not cache busters."""
    check = CacheBusterCheck()
    stamp = datetime(2024, 5, 1, 12, 0, 0).isoformat()
    later = datetime(2024, 5, 1, 12, 0, 7).isoformat()
    # The same volatile prompt under two agents: never compared.
    assert run_check(check, "a1", "alpha", f"Now {stamp}.") == []
    assert run_check(check, "b1", "beta", f"Now {later}.") == []
    # Task messages differ by timestamps and counters: they follow the pinned prefix.
    assert run_check(check, "g1", "gamma", "Shared.", f"task 1 at {stamp}") == []
    assert run_check(check, "g2", "gamma", "Shared.", f"task 2 at {later}") == []
    # Words differ (and a number too): a different prompt, not a volatile one.
    assert run_check(check, "d1", "delta", "You review Python code, 3 files.") == []
    assert run_check(check, "d2", "delta", "You review Rust code, 4 files.") == []
    # The key order of a message dict never reaches the prompt (templates read keys by name).
    swapped = [{"content": "Shared.", "role": "system"}, {"role": "user", "content": "x"}]
    assert check.check("g3", "gamma", swapped, TOOLS) == []
    assert check.warnings == []


def test_every_bust_is_reported_and_counted_per_cause(caplog: pytest.LogCaptureFixture) -> None:
    """Every session whose timestamp differs is a bust, reported with its occurrence of the
    cause; a new cause starts its own count; another agent counts apart. The log warns
    once per agent and cause, then logs at debug level."""
    caplog.set_level(logging.DEBUG, logger="agentflow.context")
    check = CacheBusterCheck()
    for i in range(5):
        run_check(check, f"s{i}", "a", f"T {datetime(2024, 1, 1, 0, 0, i).isoformat()}")
    # A prefix that differs in words too is a real difference: not reported.
    run_check(check, "u1", "a", f"T 2024-01-01T00:00:09 id {uuid.UUID(int=1)}")
    run_check(check, "u2", "a", f"T 2024-01-01T00:00:10 id {uuid.UUID(int=2)}")
    for i in range(2):
        run_check(check, f"b{i}", "b", f"T {datetime(2024, 1, 1, 0, 0, i).isoformat()}")
    assert [(w.agent, w.session_id, w.kind, w.occurrence) for w in check.warnings] == [
        ("a", "s1", "timestamp", 1),
        ("a", "s2", "timestamp", 2),
        ("a", "s3", "timestamp", 3),
        ("a", "s4", "timestamp", 4),
        ("a", "u2", "timestamp", 5),
        ("a", "u2", "uuid", 1),
        ("b", "b1", "timestamp", 1),
    ]
    assert check.busts == 6  # u2's two causes are one bust
    levels = [(r.levelno, "kind='uuid'" in r.getMessage()) for r in caplog.records]
    assert levels == [(logging.WARNING, False)] + [(logging.DEBUG, False)] * 4 + [
        (logging.WARNING, True),
        (logging.WARNING, False),
    ]


def test_group_compares_agents_built_from_one_template() -> None:
    """``group`` puts differently named agents together: compared, and counted per group."""
    plain, grouped = CacheBusterCheck(), CacheBusterCheck(group=lambda name: name.split("-")[0])
    for check in (plain, grouped):
        for i in range(3):
            run_check(check, f"s{i}", f"coder-{i}", f"Build {1000 + i}.")
    assert plain.warnings == []
    [w1, w2] = grouped.warnings
    assert (w1.agent, w1.reference_session_id, w1.kind, w1.occurrence) == (
        "coder-1",
        "s0",
        "counter",
        1,
    )
    assert (w2.agent, w2.reference_session_id, w2.occurrence) == ("coder-2", "s1", 2)


def test_turn_to_turn_change_of_a_pinned_message() -> None:
    """A pinned message rewritten between turns with a new timestamp: scope 'turns'."""
    check = CacheBusterCheck()
    messages = convo("Clock: 2024-05-01T10:00:00Z")
    assert check.check("s", "a", messages, TOOLS, turn=0) == []
    messages.append({"role": "assistant", "content": "hi"})
    assert check.check("s", "a", messages, TOOLS, turn=1) == []  # append-only: fine
    messages[0] = {"role": "system", "content": "Clock: 2024-05-01T10:05:00Z"}
    [w] = check.check("s", "a", messages, TOOLS, turn=2)
    assert (w.scope, w.session_id, w.reference_session_id, w.turn) == ("turns", "s", "s", 2)
    assert (w.snippet, w.reference_snippet) == ("2024-05-01T10:05:00Z", "2024-05-01T10:00:00Z")


def test_pinned_task_is_compared_turn_to_turn_not_across_sessions() -> None:
    """``pinned=2`` pins the task: a counter rewritten in it between turns fires; tasks
    of two sessions are never compared with each other."""
    check = CacheBusterCheck()
    first = convo("Shared.", "Ticket 7: fix the build")
    assert check.check("s1", "a", first, TOOLS, pinned=2) == []
    assert (
        check.check("s2", "a", convo("Shared.", "Ticket 8: fix the build"), TOOLS, pinned=2) == []
    )
    first[1] = {"role": "user", "content": "Ticket 9: fix the build"}
    [w] = check.check("s1", "a", first, TOOLS)
    assert (w.kind, w.scope, w.segment) == ("counter", "turns", "messages[1]")


def test_tool_schemas_are_part_of_the_shared_prefix() -> None:
    """Tools whose JSON differs only by key order (bypassing Tool's canonical spec) fire."""
    check = CacheBusterCheck()
    tools_a = [{"type": "function", "function": {"name": "f", "parameters": {"a": 1, "b": 2}}}]
    tools_b = [{"function": {"parameters": {"b": 2, "a": 1}, "name": "f"}, "type": "function"}]
    assert check.check("s1", "a", convo("Same."), tools_a) == []
    [w] = check.check("s2", "a", convo("Same."), tools_b)
    assert (w.kind, w.segment) == ("reordered_keys", "tools")
    assert json.loads(w.snippet) == json.loads(w.reference_snippet)


def test_lost_tokens_counts_from_the_first_difference() -> None:
    """``lost_tokens`` is the given counter applied to the pinned prefix from the first
    differing character on (the rest of the system prompt, then the tools' JSON)."""
    check = CacheBusterCheck(count=len)
    head = "x" * 100
    run_check(check, "s1", "a", f"{head} 2024-01-01 tail")
    [w] = run_check(check, "s2", "a", f"{head} 2024-01-02 tail")
    fields = len('{"role":"system"}')
    tools = len(json.dumps(TOOLS, separators=(",", ":")))
    assert w.lost_tokens == len("2 tail") + fields + tools


def test_unchanged_turns_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a session is known, an unchanged pinned prefix is neither encoded nor hashed."""
    import agentflow.context._bustdiff as mod

    check = CacheBusterCheck()
    messages = convo("A long shared prompt. " * 200)
    check.check("s", "a", messages, TOOLS)
    calls = 0
    real = mod.build_prefix

    def counting(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args)

    monkeypatch.setattr(mod, "build_prefix", counting)
    for turn in range(1, 20):
        messages.append({"role": "assistant", "content": f"turn {turn}"})
        assert check.check("s", "a", messages, list(TOOLS), turn=turn) == []
    assert calls == 0
    # A second session with the same shared prefix is hashed once, never diffed.
    monkeypatch.setattr(mod, "diff", lambda *a: pytest.fail("diffed a known prefix"))
    assert check.check("s2", "a", convo("A long shared prompt. " * 200), TOOLS) == []
    assert calls == 1


async def test_check_as_the_agents_context_policy_sends_nothing_different() -> None:
    """As ``Agent(context=...)`` the check rewrites nothing and reports no PromptInfo."""
    agent = Agent(name="plain", model="m", instructions="Hi.", context=CacheBusterCheck())
    async with (
        ScriptedServer([Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as transport,
    ):
        result = await agent.run("go", transport)
    assert result.ok and result.turns[0].prompt is None
    assert srv.requests[0].body["messages"] == [
        {"role": "system", "content": "Hi."},
        {"role": "user", "content": "go"},
    ]


def test_sessions_are_forgotten_beyond_the_limit() -> None:
    """At most ``max_sessions`` sessions are remembered; ``forget`` drops one."""
    check = CacheBusterCheck(max_sessions=2)
    for s in ("s1", "s2", "s3"):
        check.check(s, "a", convo("Same."), TOOLS)
    check.forget("s3")
    assert "sessions=1" in repr(check)


def test_bad_settings_are_config_errors() -> None:
    """Nonsense settings fail at construction, naming the setting."""
    with pytest.raises(ConfigError, match="shared_messages"):
        CacheBusterCheck(shared_messages=-1)
    with pytest.raises(ConfigError, match="max_sessions"):
        CacheBusterCheck(max_sessions=0)
    with pytest.raises(ConfigError, match="block_size"):
        CacheBusterCheck(block_size=0)
    with pytest.raises(ConfigError, match="max_warnings"):
        CacheBusterCheck(max_warnings=True)
    # Not functions: accepted before, then a TypeError at the session's first check.
    with pytest.raises(ConfigError, match=r"CacheBusterCheck\.group must be a function or None"):
        CacheBusterCheck(group="coder")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"CacheBusterCheck\.count must be a function or None"):
        CacheBusterCheck(count=4)  # type: ignore[arg-type]
