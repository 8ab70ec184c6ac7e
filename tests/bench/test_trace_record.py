"""Recording edge cases on the simulator: sub-agents are recorded as sessions of their
own, ids reused by a bench's repeats stay apart, and ``agentflow trace export`` writes a
stored run's trace; ``--trace`` refuses a load level of its own."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from agentflow import Agent, Fleet
from agentflow._events import Event
from agentflow.bench import (
    BenchConfig,
    FanOut,
    SessionTemplate,
    TraceRecorder,
    Workload,
    read_trace,
    record_store,
    run_bench,
    trace_scripts,
)
from agentflow.bench._bench import SimTarget
from agentflow.bench._load import Load
from agentflow.cli import main
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.store import SQLiteStore

FAN = Workload(
    name="fan",
    shared_prefix_tokens=200,
    templates=(
        SessionTemplate(
            name="parent",
            turns=3,
            prompt_tokens=32,
            output_tokens=16,
            tool_latency_s=0.5,
            fanout=FanOut(template="sub", width=3),
        ),
        SessionTemplate(name="sub", weight=0, turns=2, prompt_tokens=16, output_tokens=8),
    ),
)


def test_subagents_and_repeats_are_recorded_apart() -> None:
    """A fan-out bench with two repeats: every sub-agent turn is in the recording (as
    sessions of their own, with the parent's system prompt), the second repeat's
    sessions get ``#2`` ids, and the whole recording replays as distinct sessions."""
    recorder = TraceRecorder()
    report = run_bench(
        BenchConfig(
            workload=FAN,
            levels=(Load(rate=0.5, arrival="constant"),),
            duration_s=4.0,
            repeats=2,
            callbacks=(recorder,),
        ),
        SimTarget(),
    )
    records = recorder.records()
    (level,) = report["levels"]
    turns = sum(r["turns"] for r in level["repeats"])
    assert len(records) == turns
    parents = {r.session_id for r in records if r.agent == "parent"}
    subs = {r.session_id for r in records if r.agent == "sub"}
    assert len(parents) == 4 and len(subs) == 4 * 3  # 2 sessions × 2 repeats, 3 subs each
    assert {p for p in parents if p.endswith("#2")} == {p + "#2" for p in parents if "#" not in p}
    first = {r.session_id: r for r in records if r.turn == 0}
    assert {first[s].system for s in subs} == {first[p].system for p in parents}  # shared
    scripts = trace_scripts(records)
    assert len(scripts) == len(parents) + len(subs)
    assert sum(len(s.turns) for s in scripts) == len(records)


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up.
    """
    return f"value of {key!r}"


def _store_with_a_run(path: Path) -> str:
    """A store at ``path`` with one run of three sessions of a tool-calling agent on the
    simulator; the run's id."""
    agent = Agent(
        name="looker",
        model="sim",
        instructions="You look things up.",
        tools=[lookup],
        params={"max_tokens": 16},
        max_turns=6,
    )

    async def run() -> str:
        engine = Engine(
            "deepseek-v4.1-flash-gb300",
            seed=1,
            textgen=TextGenConfig(tool_rounds=1, answer_tokens=(4, 8)),
        )
        transport = SimTransport(EngineDriver(engine))
        store = SQLiteStore(path)
        try:
            fleet = Fleet(transport, clock=loop_clock, store=store)
            result = await fleet.run([agent.session(f"task {i}") for i in range(3)])
            expected = await record_store(store, result.run_id or "")
            assert len(expected) >= 6
            return result.run_id or ""
        finally:
            await store.aclose()
            await transport.aclose()

    return run_virtual(run())


def test_trace_export_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``agentflow trace export --store DB RUN_ID -o FILE`` writes the stored run's trace
    (with ``--lengths-only``: no text); an unknown run or store is a one-line error."""
    path = tmp_path / "runs.db"
    run_id = _store_with_a_run(path)
    out = tmp_path / "t.jsonl"
    assert main(["trace", "export", "--store", str(path), run_id, "-o", str(out)]) == 0
    records = read_trace(out)

    async def again() -> list[object]:
        store = SQLiteStore(path)
        try:
            return list(await record_store(store, run_id))
        finally:
            await store.aclose()

    assert records == asyncio.run(again())
    assert any(m.role == "tool" for r in records for m in r.messages or ())
    bare = tmp_path / "bare.jsonl"
    cmd = ["trace", "export", "--store", str(path), run_id, "-o", str(bare), "--lengths-only"]
    assert main(cmd) == 0
    assert "task 0" not in bare.read_text() and "look things up" not in bare.read_text()
    assert len(read_trace(bare)) == len(records)
    capsys.readouterr()
    assert main(["trace", "export", "--store", str(path), "nope", "-o", str(bare)]) != 0
    assert "nope" in capsys.readouterr().err
    missing = tmp_path / "missing.db"
    assert main(["trace", "export", "--store", str(missing), run_id, "-o", str(bare)]) == 2
    assert "missing.db" in capsys.readouterr().err
    empty = tmp_path / "empty.db"
    empty.touch()  # read commands must not make it a store
    assert main(["trace", "export", "--store", str(empty), run_id, "-o", str(bare)]) == 2
    assert "is empty" in capsys.readouterr().err and empty.stat().st_size == 0


def test_a_dash_writes_the_trace_to_standard_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o -`` (export and convert) wrote a file named ``-`` in the working directory: it
    is standard output now, with the count on stderr so that the trace is all there is."""
    path = tmp_path / "runs.db"
    run_id = _store_with_a_run(path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    file = tmp_path / "t.jsonl"
    export = ["trace", "export", "--store", str(path), run_id, "-o"]
    convert = ["trace", "convert", str(file), "--format", "agentflow", "-o"]
    for argv in (export, convert):
        assert main([*argv, str(file) if argv is export else str(tmp_path / "c.jsonl")]) == 0
        capsys.readouterr()
        assert main([*argv, "-"]) == 0
        out, err = capsys.readouterr()
        n = len(file.read_text().splitlines())
        assert out == file.read_text() and n >= 6
        assert err == f"{n} requests written to standard output\n"
    assert list(work.iterdir()) == []


def test_trace_output_over_its_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trace export --store DB RUN -o DB`` (a slip) would replace every recorded run with
    the trace, and ``trace convert IN -o IN`` the trace it reads: both are refused (exit 2,
    one line) before anything is written — the store's ``-wal``/``-shm`` files, a link to
    it and a ``..`` path to it too."""
    path = tmp_path / "runs.db"
    run_id = _store_with_a_run(path)
    stored = path.read_bytes()
    link = tmp_path / "link.db"
    link.symlink_to(path)
    capsys.readouterr()
    for out in (path, link, tmp_path / "x" / ".." / "runs.db", tmp_path / "runs.db-wal",
                tmp_path / "runs.db-shm"):  # fmt: skip
        assert main(["trace", "export", "--store", str(path), run_id, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "overwrite the input" in err, err
    assert path.read_bytes() == stored
    src = tmp_path / "mc.jsonl"
    src.write_text('{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1]}\n')
    before = src.read_text()
    assert main(["trace", "convert", str(src), "-o", str(src)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentflow trace: error: --output") and "is the input" in err, err
    assert src.read_text() == before


def test_trace_with_a_rate_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--trace", "agentic-small", "--rate", "2"]) == 2
    assert "--trace replays the trace's own arrivals" in capsys.readouterr().err


def test_the_recorder_asks_for_session_ends_only() -> None:
    """``--record`` reads only session ends: with it subscribed the bus still builds no
    token event per streamed delta, and a level delivers it nothing else."""
    seen: Counter[str] = Counter()

    class Counting(TraceRecorder):
        def __call__(self, event: Event) -> None:
            seen[event.type] += 1
            super().__call__(event)

    recorder = Counting()
    run_bench(
        BenchConfig(workload=FAN, levels=(Load(rate=1.0),), duration_s=5.0, callbacks=(recorder,)),
        SimTarget(profile="cpu-tiny"),
    )
    assert set(seen) == {"session_end"}
    assert seen["session_end"] == len(recorder.sessions) > 0
