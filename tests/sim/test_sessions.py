"""The simulator counts a session's tool rounds by its X-Session-ID, so compaction does
not reset them: unit checks of the memory, the planner, and compacting agents over HTTP
and in virtual time."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest

from agentflow import ConfigError, Fleet, HTTPTransport, SessionResult
from agentflow.context import Compact, ContextBudget, DropOldest, Fail
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine
from agentflow.sim.cli import add_sim_parser, server_from_args
from agentflow.sim.driver import EngineDriver
from agentflow.sim.server import SimServer
from agentflow.sim.sessions import SESSION_HEADER, SessionRounds, round_keys
from agentflow.sim.textgen import TextGenConfig, TextGenerator
from agentflow.sim.tokenizer import Tokenizer
from tests.context.budget_util import SIM_PROFILE, ReadFile, sim_agent
from tests.sim.simhttp import TOOLS


def _round(call_id: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "text"},
    ]


def _history(*ids: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
    for i in ids:
        msgs += _round(i)
    return msgs


def _compacted(*kept: str) -> list[dict[str, Any]]:
    summary = {"role": "user", "content": "Summary of the conversation so far: they read files."}
    return [{"role": "user", "content": "fix it"}, summary, *_history(*kept)[1:]]


def test_round_keys_are_first_call_ids_or_the_call_itself() -> None:
    msgs = _history("a", "b")
    msgs.append({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]})
    msgs.append({"role": "assistant", "content": "plain answer"})
    keys = round_keys(msgs)
    assert keys[:2] == ["a", "b"] and len(keys) == 3 and "'name': 'f'" in keys[2]


def test_hidden_rounds_still_count_for_a_named_session() -> None:
    rounds = SessionRounds()
    assert rounds.rounds("s1", _history("a", "b", "c")) == 3
    # Compaction replaced rounds a and b with a summary: still three, and a new one is four.
    assert rounds.rounds("s1", _compacted("c")) == 3
    assert rounds.rounds("s1", _compacted("c", "d")) == 4
    # A retried request shows the same rounds: the same count.
    assert rounds.rounds("s1", _compacted("c", "d")) == 4
    # Without a session id (or another session) only the visible rounds count.
    assert rounds.rounds(None, _compacted("c", "d")) == 2
    assert rounds.rounds("s2", _compacted("c", "d")) == 2
    assert len(rounds) == 2
    assert rounds.forget("s1") and not rounds.forget("s1")
    assert rounds.rounds("s1", _compacted("c", "d")) == 2  # forgotten: starts over


def test_memory_is_bounded() -> None:
    rounds = SessionRounds(2, max_rounds=3)
    rounds.rounds("s1", _history("a"))
    rounds.rounds("s2", _history("a"))
    rounds.rounds("s1", _history("a", "b"))  # s1 is now the most recently used
    rounds.rounds("s3", _history("a"))  # evicts s2, the least recently used
    assert len(rounds) == 2
    assert rounds.rounds("s1", _compacted()) == 2  # s1 remembered
    assert rounds.rounds("s2", _compacted()) == 0  # s2 forgotten (and s3 evicted now)
    # At most max_rounds ids per session; the visible count still applies beyond that.
    assert rounds.rounds("s1", _history(*"abcdef")) == 6
    assert rounds.rounds("s1", _compacted("f")) == 3
    # A long id is kept as a digest: still one session, same memory.
    long_id = "x" * 10_000
    assert rounds.rounds(long_id, _history("a", "b")) == 2
    assert rounds.rounds(long_id, _compacted()) == 2
    # No memory at all: every count is the visible one.
    none = SessionRounds(0)
    assert none.rounds("s1", _history("a")) == 1 and none.rounds("s1", _compacted()) == 0
    assert len(none) == 0


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_sessions"):
        SessionRounds(-1)
    with pytest.raises(ValueError, match="max_rounds"):
        SessionRounds(max_rounds=0)
    with pytest.raises(ValueError, match="sessions"):
        TextGenConfig(sessions=-1)


def test_the_planner_answers_once_a_named_session_had_its_rounds() -> None:
    tok = Tokenizer()
    gen = TextGenerator(tok, seed=1, config=TextGenConfig(tool_rounds=3))
    full = _history("a", "b", "c")
    ids = tok.render_chat(full, TOOLS)
    assert gen.plan(full, ids, tools=TOOLS, session_id="s").finish_reason == "stop"
    compacted = _compacted("c")
    ids = tok.render_chat(compacted, TOOLS)
    # The stateless count sees one round and calls again; the named session answers.
    assert gen.plan(compacted, ids, tools=TOOLS).finish_reason == "tool_calls"
    assert gen.plan(compacted, ids, tools=TOOLS, session_id="s").finish_reason == "stop"


# --- compacting agents, end to end ------------------------------------------------------

ROUNDS = 6


def _budget(policy: Any) -> ContextBudget:
    # Each file is ~300 words: the window holds about two rounds, so the history is
    # rewritten again and again over six rounds.
    return ContextBudget(window=1300, reserve_output=48, margin=0, pin_first=1,
                         overflow=[policy, Fail()])  # fmt: skip


def _check_completed(session: SessionResult) -> None:
    assert session.status == "completed", (session.status, session.error)
    calls = [t for t in session.turns if t.trace.tool_calls]
    # Exactly the scripted rounds, then the answer: none was played twice.
    assert len(calls) == ROUNDS and len(session.turns) == ROUNDS + 1
    assert not session.turns[-1].trace.tool_calls and session.turns[-1].trace.content


async def _run_http(policy: Any, *, session_header: str | None) -> tuple[SessionResult, int, int]:
    """One agent over HTTP: its result, how often its history was rewritten, and how
    many sessions the server remembers."""
    events: list[Any] = []
    async with (
        SimServer(SIM_PROFILE, time_scale=0.05, session_header=session_header,
                  textgen=TextGenConfig(answer_tokens=(8, 24))) as sim,
        HTTPTransport(sim.base_url) as transport,
    ):  # fmt: skip
        agent = sim_agent(_budget(policy), ReadFile([], 300), rounds=ROUNDS, max_turns=16)
        fleet = Fleet(transport, callbacks=[events.append])
        result = await asyncio.wait_for(fleet.run([agent.session("Fix cache.py")]), 60)
        remembered = len(sim.engine.textgen.sessions)
    rewrites = sum(1 for e in events if getattr(e, "type", "") == "context_trimmed")
    return result.sessions[0], rewrites, remembered


@pytest.mark.parametrize("policy", [Compact(max_summary_tokens=48), DropOldest()],
                         ids=["compact", "drop_oldest"])  # fmt: skip
async def test_a_rewriting_agent_completes_over_http(policy: Any) -> None:
    session, rewrites, remembered = await _run_http(policy, session_header=SESSION_HEADER)
    assert rewrites >= 2  # the history was rewritten more than once
    assert remembered == 1  # the server knew the session by its header
    _check_completed(session)


async def test_without_the_header_the_rewritten_rounds_are_played_again() -> None:
    # The failure the header fixes: counting only visible rounds, a session compacted
    # every two rounds never reaches six and calls tools until max_turns.
    session, rewrites, remembered = await _run_http(
        Compact(max_summary_tokens=48), session_header=None
    )
    assert rewrites >= 2 and remembered == 0
    assert session.status == "max_turns"
    assert all(t.trace.tool_calls for t in session.turns)


def test_compacting_sessions_complete_in_virtual_time() -> None:
    """SimTransport passes the fleet's X-Session-ID to the driver, as the server reads it."""

    async def main() -> list[SessionResult]:
        engine = Engine(SIM_PROFILE, seed=3, textgen=TextGenConfig(answer_tokens=(8, 24)))
        transport = SimTransport(EngineDriver(engine))
        try:
            agent = sim_agent(_budget(Compact(max_summary_tokens=48)), ReadFile([], 300),
                              rounds=ROUNDS, max_turns=16)  # fmt: skip
            fleet = Fleet(transport, max_concurrency=4, clock=loop_clock)
            result = await fleet.run(agent.session(f"Fix bug {i}") for i in range(6))
        finally:
            await transport.aclose()
        assert len(engine.textgen.sessions) == 6
        return list(result.sessions)

    for session in run_virtual(main()):
        _check_completed(session)


def test_the_cli_sets_the_header_and_the_memory() -> None:
    p = argparse.ArgumentParser(prog="agentflow")
    add_sim_parser(p.add_subparsers())
    server = server_from_args(p.parse_args(["sim"]))
    assert server.session_header == SESSION_HEADER
    assert server.engine.textgen.sessions.max_sessions == 10_000
    server = server_from_args(p.parse_args(["sim", "--session-header", "", "--sessions", "5"]))
    assert server.session_header is None
    assert server.engine.textgen.sessions.max_sessions == 5
    with pytest.raises(ConfigError, match=r"TextGenConfig.sessions must be an int ≥ 0, got -1"):
        server_from_args(p.parse_args(["sim", "--sessions", "-1"]))
