"""Shared by the store tests: agents with deterministic tools, fleets on the simulator
(in-process, virtual time), and a store's contents in a comparable form."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from agentflow import Agent
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver


def lookup(key: str, count: int = 1) -> str:
    """Look a key up.

    Args:
        key: what to look up.
        count: how many values.
    """
    return f"{count} value(s) of {key!r}"


def agents(n: int = 3) -> list[Agent]:
    """``n`` agents with one tool and a shared prefix."""
    return [
        Agent(
            name=f"agent-{i}",
            model="sim",
            instructions="You look things up. " * 10,
            tools=[lookup],
            params={"max_tokens": 32},
            max_turns=8,
        )
        for i in range(n)
    ]


def driver(seed: int = 3, rounds: int = 3) -> EngineDriver:
    """The simulator's engine, in-process: 1–2 tool calls a turn, short answers."""
    engine = Engine(
        "deepseek-v4.1-flash-gb300",
        seed=seed,
        textgen=TextGenConfig(
            tool_rounds=rounds, answer_tokens=(8, 24), tool_calls_per_turn=(1, 2)
        ),
    )
    return EngineDriver(engine)


def contents(path: Path, run_id: str) -> dict[str, Any]:
    """What a run's rows say, without times and attempts: per session its status, final
    output and turns' messages, and every tool result by call id."""
    conn = sqlite3.connect(path)
    try:
        sessions = {
            sid: (st, final, n)
            for sid, st, final, n in conn.execute(
                "SELECT session_id, status, final_output, turns FROM sessions WHERE run_id=?",
                (run_id,),
            )
        }
        turns = sorted(
            conn.execute(
                "SELECT session_id, turn, message, rewrite FROM turns WHERE run_id=?", (run_id,)
            )
        )
        tools = sorted(
            conn.execute(
                "SELECT session_id, call_id, turn, name, arguments, output, is_error "
                "FROM tool_calls WHERE run_id=?",
                (run_id,),
            )
        )
    finally:
        conn.close()
    return {"sessions": sessions, "turns": turns, "tools": tools}
