"""Tool call ids a server repeats — ``"0"`` in every turn, or one id for two parallel
calls — are made unique within the session as each turn's trace comes back, so the run
store (which knows a result by (run, session, call id)) keeps every result. It used to
refuse the later ones as conflicts: a finished run could not be read back (``turn 1 has
later turns but no recorded result for tool calls ['0']``), a resume ran a recorded,
side-effecting call again, and two calls under one id were stored with one output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentflow import Agent, Event, HTTPTransport, Session
from agentflow._call_ids import unique_call_ids
from agentflow._trace import ToolCall, TurnTrace
from agentflow.store import SQLiteStore, load_result
from agentflow.testing import Reply, ScriptedServer, sse_frames

from .fleets import contents, stored

paid: list[int] = []


def pay(n: int) -> str:
    """Pay an amount: an outside effect that must never run twice for one call.

    Args:
        n: the amount.
    """
    paid.append(n)
    return f"paid {n}"


AGENT = Agent(name="payer", model="m", tools=[pay], max_turns=8)


def call(n: int, call_id: str = "0") -> Reply:
    return Reply.tool_call("pay", {"n": n}, call_id=call_id)


def two_calls_one_id() -> Reply:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "x",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    calls = [
        {"index": i, "id": "call", "type": "function",
         "function": {"name": "pay", "arguments": f'{{"n": {n}}}'}}
        for i, n in enumerate((3, 7))
    ]  # fmt: skip
    return Reply(frames=sse_frames([chunk({"tool_calls": calls}), chunk({}, "tool_calls")]))


def tool_results(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]


async def run(path: Path, replies: list[Reply], **kw: Any) -> Any:
    async with ScriptedServer(replies) as server:
        return await stored(
            path,
            HTTPTransport(server.base_url),
            lambda fleet: fleet.run([AGENT.session("go", session_id="s")], run_id="r"),
            **kw,
        )


async def resume(path: Path, replies: list[Reply]) -> Any:
    async with ScriptedServer(replies) as server:
        result = await stored(
            path,
            HTTPTransport(server.base_url),
            lambda fleet: fleet.resume("r", agents=[AGENT]),
        )
        server.assert_complete()
    return result


async def read_back(path: Path) -> tuple[Any, list[str]]:
    async with SQLiteStore(path) as store:
        return (await load_result(store, "r")).sessions[0], await store.conflicts("r")


async def test_an_id_repeated_in_every_turn_is_stored_and_read_back(tmp_path: Path) -> None:
    paid.clear()
    live = await run(tmp_path / "r.db", [call(3), call(7), call(9), Reply.text("done")])
    (session,) = live.sessions
    assert session.ok, session.error
    assert tool_results(session.messages) == [
        ("0", "paid 3"),
        ("0_t1c0", "paid 7"),
        ("0_t2c0", "paid 9"),
    ]
    assert [c.id for t in session.turns for c in t.trace.tool_calls] == ["0", "0_t1c0", "0_t2c0"]
    back, conflicts = await read_back(tmp_path / "r.db")
    assert conflicts == []
    assert back.messages == session.messages


async def test_two_calls_under_one_id_in_one_turn(tmp_path: Path) -> None:
    paid.clear()
    live = await run(tmp_path / "r.db", [two_calls_one_id(), Reply.text("done")])
    (session,) = live.sessions
    assert tool_results(session.messages) == [("call", "paid 3"), ("call_t0c1", "paid 7")]
    back, conflicts = await read_back(tmp_path / "r.db")
    assert conflicts == []
    assert tool_results(back.messages) == tool_results(session.messages)


def second_result(event: Event) -> bool:
    return event.type == "tool_result" and event.turn == 1


async def test_a_resume_never_runs_a_recorded_call_again(tmp_path: Path) -> None:
    """Stopped once turn 1's call (the server's second ``"0"``) ran and was recorded:
    the resume asks the model for turn 2 and runs nothing else."""
    paid.clear()
    path = tmp_path / "r.db"
    first = await run(path, [call(3), call(7), Reply.text("not asked")], cut=second_result)
    assert first is None and paid == [3, 7]
    resumed = await resume(path, [Reply.text("done")])
    assert paid == [3, 7]
    assert tool_results(resumed.sessions[0].messages) == [("0", "paid 3"), ("0_t1c0", "paid 7")]


def turn_2_streams(event: Event) -> bool:
    return event.type == "token" and event.turn == 2


async def test_a_turn_run_again_after_a_stop_names_its_calls_alike(tmp_path: Path) -> None:
    """Stopped while turn 2 streamed (not recorded), then resumed: the turn run again
    gets the name an uninterrupted run gives it, and the store holds the same rows."""
    whole, cut = tmp_path / "whole.db", tmp_path / "cut.db"
    script = [call(3), call(7), call(9), Reply.text("done")]
    paid.clear()
    await run(whole, script)
    paid.clear()
    assert await run(cut, script[:3], cut=turn_2_streams) is None
    resumed = await resume(cut, script[2:])
    assert paid == [3, 7, 9]
    assert tool_results(resumed.sessions[0].messages)[-1] == ("0_t2c0", "paid 9")
    assert contents(cut, "r") == contents(whole, "r")


def trace(*ids: str) -> TurnTrace:
    calls = tuple(ToolCall(index=i, id=c, name="pay", arguments="{}") for i, c in enumerate(ids))
    return TurnTrace(
        endpoint="e", model="m", response_id=None, sent_ns=0, headers_ns=0, end_ns=0,
        chunk_ns=(), chunk_chars=(), chunk_tokens=(), tokens_exact=False, n_events=0,
        content="", reasoning="", tool_calls=calls, finish_reason="tool_calls", usage=None,
        done=True,
    )  # fmt: skip


def used(session: Session) -> set[str] | None:
    return session._call_ids


def test_ids_in_the_given_history_and_taken_names_are_avoided() -> None:
    """The history a session is given counts (its calls and results), and so does a
    name the renaming would give that is taken already; the ids are gathered once."""
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "0", "function": {}}]},
        {"role": "tool", "tool_call_id": "0", "content": "paid 1"},
    ]
    session = AGENT.session(history)
    assert used(session) is None
    assert unique_call_ids(session, 0, trace()).tool_calls == ()
    assert used(session) is None  # not gathered for a turn without tools
    out = unique_call_ids(session, 1, trace("0", "0_t1c0", "0", "x"))
    assert [c.id for c in out.tool_calls] == ["0_t1c0", "0_t1c0_t1c1", "0_t1c2", "x"]
    assert used(session) == {"0", "0_t1c0", "0_t1c0_t1c1", "0_t1c2", "x"}
    again = unique_call_ids(session, 1, trace("0"))  # the same turn asked again
    assert [c.id for c in again.tool_calls] == ["0_t1c0_2"]
    fresh = trace("y")
    assert unique_call_ids(session, 2, fresh) is fresh  # nothing renamed: the same trace
