"""The shipped trace replayed against the real llama.cpp server (SmolLM2-135M on the CI's
CPU cores) through ``agentflow bench``'s runner, recorded as it ran: every recorded
request was sent — its text, or its length of synthetic text — with its output length,
in the trace's turn structure, on the trace's schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentflow.bench import (
    BenchConfig,
    HTTPTarget,
    TraceRecord,
    TraceRecorder,
    read_trace,
    run_bench,
    shipped_trace,
    trace_scripts,
)
from agentflow.bench._load import Load
from agentflow.cli import main
from agentflow.llamacpp import LlamaCppServer

pytestmark = pytest.mark.llamacpp

SCALE = 0.25  # four times as fast as recorded: the whole replay takes about a second
#: asyncio may wake a timer up to a clock tick early; the recorder reads another clock.
SLACK_S = 0.005


def test_shipped_trace_replays_against_llamacpp(llamacpp: LlamaCppServer) -> None:
    trace = read_trace(shipped_trace("agentic-small"))
    scripts = trace_scripts(trace, time_scale=SCALE)
    recorder = TraceRecorder()
    report = run_bench(
        BenchConfig(
            scripts=tuple(scripts),
            levels=(Load(scale=1.0),),
            duration_s=None,
            params={"temperature": 0, "ignore_eos": True},
            callbacks=(recorder,),
        ),
        HTTPTarget(base_url=llamacpp.base_url, model="smollm2"),
    )
    (level,) = report["levels"]
    assert level["statuses"]["completed"] == 3 and not any(level["errors"].values())
    recorded = recorder.records()
    assert len(recorded) == len(trace) == level["turns"] == 7
    by_session: dict[str, list[TraceRecord]] = {}
    for r in recorded:
        by_session.setdefault(r.session_id, []).append(r)
    assert set(by_session) == {s.session_id for s in scripts}
    for s in scripts:
        reqs = by_session[s.session_id]
        assert [r.turn for r in reqs] == list(range(len(s.turns)))  # the turn structure
        assert reqs[0].system == (s.system or None)
        for k, (turn, r) in enumerate(zip(s.turns, reqs, strict=True)):
            sent = "\n\n".join(m.content for m in r.messages or ())
            assert sent == s.turn_text(k)  # the recorded text, or its synthetic length
            assert r.output_tokens == turn.max_tokens  # ignore_eos: the recorded length
            assert r.prompt_tokens is not None and r.prompt_tokens > 0
            if k:
                prev = reqs[k - 1]
                assert r.prompt_tokens is not None and prev.prompt_tokens is not None
                # The server saw the history, the previous answer and this message.
                assert r.prompt_tokens > prev.prompt_tokens + (prev.output_tokens or 0)
                gap = (r.tool_s or 0.0) + (r.think_s or 0.0)
                assert gap >= turn.tool_s + turn.think_s - SLACK_S
        if s.turns[0].text is None:  # a lengths-only session: its synthetic words were sent
            assert len(reqs[0].messages[0].content.split()) == s.turns[0].tokens  # type: ignore[index]
    # The sessions started in the trace's order, none before its (scaled) arrival.
    starts = sorted((by_session[s.session_id][0].timestamp, s.session_id) for s in scripts)
    assert [sid for _, sid in starts] == [s.session_id for s in scripts]
    for s in scripts:
        assert by_session[s.session_id][0].timestamp >= s.arrival_s - SLACK_S
    # The shared prefix ("team") was served from the server's cache for the second session.
    assert level["cached_tokens"] > 0


def test_bench_cli_replays_the_shipped_trace_by_name(
    llamacpp: LlamaCppServer, tmp_path: Path
) -> None:
    """``agentflow bench --trace agentic-small --base-url …`` replays and records it."""
    report, rec = tmp_path / "r.json", tmp_path / "rec.jsonl"
    status = main(
        [
            "bench", "--trace", "agentic-small", "--time-scale", str(SCALE),
            "--base-url", llamacpp.base_url, "--model", "smollm2",
            "--report", str(report), "--record", str(rec),
        ]
    )  # fmt: skip
    assert status == 0
    data = json.loads(report.read_text())
    assert data["run"]["source"]["requests"] == 7 and data["levels"][0]["turns"] == 7
    assert sorted((r.session_id, r.turn) for r in read_trace(rec)) == sorted(
        (r.session_id, r.turn) for r in read_trace(shipped_trace("agentic-small"))
    )
