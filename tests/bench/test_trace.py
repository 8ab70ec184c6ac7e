"""The trace format: reading (errors name file, line and field), writing, the mapping to
session scripts (arrivals, gaps, texts or lengths, shared prefixes, time scale), the
Mooncake converter (prefix sharing kept), the shipped trace, and the CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agentflow._errors import ConfigError
from agentflow.bench import (
    SHIPPED_TRACES,
    TraceMessage,
    TraceRecord,
    load_trace,
    read_mooncake,
    read_trace,
    shipped_trace,
    trace_scripts,
    write_trace,
)
from agentflow.cli import main


def _lines(*objs: dict[str, object]) -> list[str]:
    return [json.dumps(o) for o in objs]


def test_round_trip_through_jsonl(tmp_path: Path) -> None:
    """What write_trace writes, read_trace reads back equal; defaults are left out."""
    records = [
        TraceRecord(session_id="a", timestamp=0.0, turn=0, text="hi", output_tokens=4),
        TraceRecord(
            session_id="a",
            timestamp=1.25,
            turn=1,
            messages=(TraceMessage(role="tool", name="ls", content="x.py"),),
            output_tokens=3,
            tool_s=0.5,
        ),
        TraceRecord(session_id="b", timestamp=0.5, input_tokens=9, prefix_key="k", prefix_tokens=7),
    ]
    path = tmp_path / "t.jsonl"
    assert write_trace(records, path) == 3
    text = path.read_text()
    assert '"think_s"' not in text and '"system"' not in text  # defaults omitted
    assert read_trace(path) == records
    buf = io.StringIO()
    write_trace(records, buf)
    assert read_trace(buf.getvalue().splitlines()) == records


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"session_id": "a", "timestamp": "soon", "text": "x"}', "$.timestamp"),
        ('{"timestamp": 0, "text": "x"}', "session_id"),
        ('{"session_id": "a", "timestamp": 0}', "give text, messages or input_tokens"),
        ('{"session_id": "a", "timestamp": 0, "text": "x", "tool_s": -1}', "tool_s"),
        ('{"session_id": "a", "timestamp": 0, "input_tokens": 0}', "input_tokens must be ≥ 1"),
        ('{"session_id": "a", "timestamp": 0, "text": "x", "output_tokens": 0}', "output_tokens"),
        ('{"session_id": "a", "timestamp": 0, "text": "x", "bogus": 1}', "bogus"),
        (
            '{"session_id": "a", "timestamp": 0, "input_tokens": 1000000000000}',
            "input_tokens must be ≤ 10,000,000, got 1,000,000,000,000",
        ),
        ('{"session_id": "a", "timestamp": 0, "text": "x", "output_tokens": 10000001}', "output"),
        ('{"session_id": "a", "timestamp": 0, "text": "x", "prefix_tokens": 20000000}', "prefix"),
        ('{"session_id": "a", "timestamp": 0, "text": "x", "block_tokens": 20000000}', "block"),
        (  # each bounded, their product not: a 60M-token system prompt (2.5 min, 4.8 GB)
            '{"session_id": "a", "timestamp": 0, "text": "x", "block_tokens": 10000000, '
            '"prefix_blocks": [1, 2, 3, 4, 5, 6]}',
            "prefix_blocks: 6 blocks of 10,000,000 tokens (block_tokens) are 60,000,000",
        ),
        (  # 200,000 blocks of the default 512 tokens
            json.dumps(
                {
                    "session_id": "a",
                    "timestamp": 0,
                    "text": "x",
                    "prefix_blocks": list(range(200_000)),
                }
            ),
            "prefix_blocks: 200,000 blocks of 512 tokens",
        ),
        ("[1, 2]", "Expected `object`"),
        ('{"session_id": "a",', "not a JSON object"),
    ],
)
def test_bad_lines_name_the_line_and_field(tmp_path: Path, line: str, needle: str) -> None:
    """A bad record is a ConfigError naming the file, its line number and the field."""
    path = tmp_path / "bad.jsonl"
    good = '{"session_id": "ok", "timestamp": 0, "text": "fine"}'
    path.write_text(f"# a comment\n{good}\n\n{line}\n")
    with pytest.raises(ConfigError) as info:
        read_trace(path)
    assert "bad.jsonl:4:" in str(info.value)
    assert needle in str(info.value)


@pytest.mark.parametrize("fmt", ["agentflow", "mooncake"])
def test_a_byte_order_mark_is_not_part_of_line_1(tmp_path: Path, fmt: str) -> None:
    """A trace saved with a UTF-8 BOM (Windows editors, PowerShell) reads as without it,
    from a path or from a file opened as utf-8."""
    line = (
        '{"session_id": "a", "timestamp": 0, "text": "x"}'
        if fmt == "agentflow"
        else '{"timestamp": 0, "input_length": 10, "output_length": 5}'
    )
    path = tmp_path / "bom.jsonl"
    path.write_text("\ufeff" + line + "\n", encoding="utf-8")
    (record,) = load_trace(path, format=fmt)  # type: ignore[arg-type]
    assert record.timestamp == 0
    with path.open(encoding="utf-8") as f:
        read = read_trace if fmt == "agentflow" else read_mooncake
        assert read(f) == [record]


def test_unknown_fields_are_rejected_not_ignored() -> None:
    """A misspelt field (``tool_sec``) is an error, not a silently lost tool delay."""
    with pytest.raises(ConfigError, match="tool_sec"):
        read_trace(_lines({"session_id": "a", "timestamp": 0, "text": "x", "tool_sec": 1}))


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.jsonl"):
        read_trace(tmp_path / "nope.jsonl")


def test_scripts_arrivals_gaps_and_scale() -> None:
    """First request → arrival (from the earliest timestamp); explicit tool/think time
    wins; else the recorded gap after the previous response (timestamp + duration);
    without a duration, the gap between timestamps; all scaled."""
    records = read_trace(
        _lines(
            {"session_id": "s", "timestamp": 100.0, "text": "go", "output_tokens": 5},
            {"session_id": "s", "timestamp": 103.0, "text": "t", "tool_s": 1.5, "think_s": 0.25},
            {"session_id": "s", "timestamp": 104.0, "input_tokens": 7, "duration_s": 0.5},
            {"session_id": "s", "timestamp": 106.0, "input_tokens": 3},
            {"session_id": "late", "timestamp": 110.0, "text": "hello"},
        )
    )
    for scale in (1.0, 0.5, 3.0):
        s, late = trace_scripts(records, time_scale=scale)
        assert (s.session_id, late.session_id) == ("s", "late")
        assert s.arrival_s == 0.0 and late.arrival_s == pytest.approx(10.0 * scale)
        t = s.turns
        assert (t[0].text, t[0].max_tokens) == ("go", 5)
        assert (t[1].tool_s, t[1].think_s) == (1.5 * scale, 0.25 * scale)
        assert t[2].tool_s == 0.0 and t[2].think_s == pytest.approx(1.0 * scale)  # no duration
        assert (t[2].text, t[2].tokens, t[2].max_tokens) == (None, 7, 128)
        assert t[3].think_s == pytest.approx((2.0 - 0.5) * scale)  # after the response
        assert s.turn_text(2).count(" ") == 7  # 7 synthetic one-token words


def test_turn_order_comes_from_turn_fields() -> None:
    """Records may come in any order; ``turn`` orders a session; bad indices are named."""
    recs = read_trace(
        _lines(
            {"session_id": "s", "timestamp": 2, "turn": 1, "text": "second"},
            {"session_id": "s", "timestamp": 0, "turn": 0, "text": "first"},
        )
    )
    assert [t.text for t in trace_scripts(recs)[0].turns] == ["first", "second"]
    dup = read_trace(
        _lines(
            {"session_id": "s", "timestamp": 0, "turn": 0, "text": "a"},
            {"session_id": "s", "timestamp": 1, "turn": 2, "text": "b"},
        )
    )
    with pytest.raises(ConfigError, match=r"session 's'.*got \[0, 2\]"):
        trace_scripts(dup)
    back = read_trace(
        _lines(
            {"session_id": "s", "timestamp": 5, "text": "a"},
            {"session_id": "s", "timestamp": 1, "text": "b"},
        )
    )
    with pytest.raises(ConfigError, match="turn 1: timestamp 1"):
        trace_scripts(back)
    with pytest.raises(ConfigError, match="time_scale"):
        trace_scripts(recs, time_scale=0)


def test_shared_prefixes() -> None:
    """Equal prefix keys share one system prompt (and one agent key); synthetic prefixes
    have ``prefix_tokens`` words; one key with two prompts is an error."""
    recs = read_trace(
        _lines(
            {
                "session_id": "a",
                "timestamp": 0,
                "text": "x",
                "prefix_key": "p",
                "prefix_tokens": 40,
            },
            {
                "session_id": "b",
                "timestamp": 1,
                "text": "y",
                "prefix_key": "p",
                "prefix_tokens": 40,
            },
            {"session_id": "c", "timestamp": 1, "text": "z", "system": "Be brief."},
            {"session_id": "d", "timestamp": 2, "text": "w", "system": "Be brief."},
        )
    )
    a, b, c, d = trace_scripts(recs)
    assert a.system == b.system and len(a.system.split()) == 40
    assert a.system_key == b.system_key is not None
    assert c.system == d.system == "Be brief." and c.system_key == d.system_key != a.system_key
    clash = read_trace(
        _lines(
            {"session_id": "a", "timestamp": 0, "text": "x", "prefix_key": "p", "system": "A"},
            {"session_id": "b", "timestamp": 1, "text": "y", "prefix_key": "p", "system": "B"},
        )
    )
    with pytest.raises(ConfigError, match="prefix_key 'p'"):
        trace_scripts(clash)


def test_prefix_blocks_share_their_common_start() -> None:
    """``prefix_blocks``: each block id is a fixed synthetic text of ``block_tokens``
    words, so prompts whose ids start alike start with the same bytes; equal id lists
    share one prompt string and one agent key."""
    recs = read_trace(
        _lines(
            {"session_id": "a", "timestamp": 0, "text": "x", "prefix_blocks": [4, 5, 6],
             "block_tokens": 16},
            {"session_id": "b", "timestamp": 1, "text": "y", "prefix_blocks": [4, 5],
             "block_tokens": 16},
            {"session_id": "c", "timestamp": 2, "text": "z", "prefix_blocks": [4, 5, 6],
             "block_tokens": 16},
            {"session_id": "d", "timestamp": 3, "text": "w", "prefix_blocks": [5]},
        )
    )  # fmt: skip
    a, b, c, d = trace_scripts(recs)
    # The scripts name the blocks; their text is made when a session starts.
    assert a.system == "" and a.prefix_blocks == (4, 5, 6) and a.block_tokens == 16
    sa, sb, sc, sd = (s.system_text() for s in (a, b, c, d))
    assert len(sa.split()) == 48 and len(sb.split()) == 32
    assert sa.startswith(sb) and sa == sc
    assert a.system_key == c.system_key != b.system_key
    assert len(sd.split()) == 512  # the default block size
    with pytest.raises(ConfigError, match="block_tokens must be ≥ 1"):
        read_trace(_lines({"session_id": "a", "timestamp": 0, "text": "x", "block_tokens": 0}))


def test_the_shipped_trace() -> None:
    """The shipped trace is package data, reads cleanly, and has sessions with several
    turns, texts, messages, lengths, tool and think time and a shared prefix."""
    assert "agentic-small" in SHIPPED_TRACES
    path = shipped_trace("agentic-small")
    assert path.is_file() and path.parent.name == "traces"
    records = read_trace(path)
    scripts = trace_scripts(records)
    assert len(scripts) == 3 and sum(len(s.turns) for s in scripts) == len(records) == 7
    assert all(len(s.turns) >= 2 for s in scripts)
    turns = [t for s in scripts for t in s.turns]
    assert any(t.text is None for t in turns) and any(t.tool_s > 0 for t in turns)
    assert any(t.think_s > 0 for t in turns)
    assert scripts[0].system_key == scripts[1].system_key  # shared prefix
    with pytest.raises(ConfigError, match="no shipped trace 'nope'"):
        shipped_trace("nope")


# ---- Mooncake ----------------------------------------------------------------------

MOONCAKE = [
    {"timestamp": 0, "input_length": 1500, "output_length": 20, "hash_ids": [1, 2, 3]},
    {"timestamp": 250, "input_length": 1200, "output_length": 10, "hash_ids": [1, 2, 9]},
    {"timestamp": 500, "input_length": 700, "output_length": 5, "hash_ids": [1, 7]},
    {"timestamp": 750, "input_length": 300, "output_length": 8, "hash_ids": [5]},
    {"timestamp": 900, "input_length": 1100, "output_length": 0, "hash_ids": [1, 2, 3]},
]


def test_mooncake_keeps_prefix_sharing() -> None:
    """hash_ids prefixes become shared system prompts: requests that start with the same
    blocks send the same bytes (each block 512 synthetic tokens), the rest is their own;
    milliseconds become seconds; total lengths are kept."""
    recs = read_mooncake(_lines(*MOONCAKE))
    assert [r.timestamp for r in recs] == [0.0, 0.25, 0.5, 0.75, 0.9]
    # The converted trace names blocks, it does not spell them out.
    assert [r.prefix_blocks for r in recs] == [(1, 2), (1, 2), (1,), None, (1, 2)]
    assert all(r.system is None for r in recs)
    scripts = trace_scripts(recs)
    a, b, c, d, e = (s.system_text() for s in scripts)
    assert all(s.system == "" for s in scripts)  # no text before a session starts
    blocks = {len(s.split()) for s in (a, b, c, d, e)}
    assert blocks <= {0, 512, 1024}
    # [1,2,3] and [1,2,3] share 3 blocks, but 1100 tokens leave room for only 2 full ones
    assert len(a.split()) == 1024 and len(e.split()) == 1024
    assert len(b.split()) == 1024  # [1,2] shared with a and e
    assert len(c.split()) == 512  # [1] shared
    assert d == "" and scripts[3].system_key is None  # block 5 is its own
    assert a == b == e and c == a[: len(c)]
    assert b.startswith(c)  # byte-identical prefixes: the cache sees them
    for s, row in zip(scripts, MOONCAKE, strict=True):
        assert len(s.system_text().split()) + s.turns[0].tokens == row["input_length"]
        assert s.turns[0].max_tokens == max(1, int(row["output_length"]))  # type: ignore[call-overload]


def test_mooncake_delay_places_a_turn_after_the_previous_one() -> None:
    """A later AIPerf turn given by ``delay`` alone arrives at least that long after the
    previous one; a following turn given by ``timestamp`` then waits only the rest of its
    gap (the delay used to be counted twice: turn 2 at 10 s instead of 9 s)."""
    recs = read_mooncake(
        _lines(
            {"session_id": "a", "timestamp": 1000, "input_length": 100, "output_length": 10},
            {"session_id": "a", "delay": 2000, "input_length": 50, "output_length": 10},
            {"session_id": "a", "timestamp": 9000, "input_length": 50, "output_length": 10},
        )
    )
    assert [r.timestamp for r in recs] == [1.0, 3.0, 9.0]
    (s,) = trace_scripts(recs)
    assert [t.tool_s + t.think_s for t in s.turns] == [0.0, 2.0, 6.0]


def test_a_row_without_session_id_never_joins_a_named_session() -> None:
    """A row without ``session_id`` is a session of its own, ``mooncake-LINE``: a row
    that names its session ``mooncake-2`` made the second line (no id) its second turn,
    its 5 tokens appended to that conversation instead of sent alone."""
    recs = read_mooncake(
        _lines(
            {"session_id": "mooncake-2", "timestamp": 0, "input_length": 5, "output_length": 2},
            {"timestamp": 1000, "input_length": 5, "output_length": 2},
            {"session_id": "mooncake-2~1", "timestamp": 0, "input_length": 5, "output_length": 2},
        )
    )
    assert [(r.session_id, r.turn) for r in recs] == [
        ("mooncake-2", 0),
        ("mooncake-2~2", 0),
        ("mooncake-2~1", 0),
    ]
    assert len(trace_scripts(recs)) == 3


def test_mooncake_sessions_and_errors() -> None:
    """AIPerf's session_id groups rows into turns (later input_length is appended;
    delay in ms is think time); a bad row names its line and field."""
    recs = read_mooncake(
        _lines(
            {"session_id": "x", "timestamp": 1000, "input_length": 64, "output_length": 4},
            {"session_id": "x", "delay": 1500, "input_length": 16, "output_length": 4},
            {"session_id": "y", "timestamp": 1200, "input_length": 32, "output_length": 2},
        )
    )
    x, y = trace_scripts(recs)
    assert [t.tokens for t in x.turns] == [64, 16] and x.turns[1].think_s == 1.5
    assert y.arrival_s == pytest.approx(0.2)
    with pytest.raises(ConfigError, match=r"mooncake trace:2: .*input_length"):
        read_mooncake(_lines(MOONCAKE[0], {"timestamp": 1, "output_length": 2}))
    with pytest.raises(ConfigError, match=r":1: timestamp is required"):
        read_mooncake(_lines({"input_length": 5, "output_length": 2}))
    for field in ("input_length", "output_length"):  # a workload's bound: 10,000,000
        row: dict[str, object] = {"timestamp": 0, "input_length": 5, "output_length": 2}
        row[field] = 10**12
        with pytest.raises(ConfigError, match=rf":1: {field} must be ≤ 10,000,000"):
            read_mooncake(_lines(row))


# ---- CLI ---------------------------------------------------------------------------


def test_cli_convert_show_and_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``agentflow trace convert`` writes a trace ``load_trace`` reads as the converter
    gives; ``show`` lists it; ``bench --trace`` replays it on the simulator as one level
    with every request sent, and ``--record`` writes what ran."""
    src = tmp_path / "mc.jsonl"
    src.write_text("\n".join(_lines(*MOONCAKE)) + "\n")
    out = tmp_path / "af.jsonl"
    assert main(["trace", "convert", str(src), "-o", str(out)]) == 0
    assert load_trace(out) == load_trace(src, format="mooncake")
    assert main(["trace", "show", str(out)]) == 0
    assert "5 sessions, 5 requests" in capsys.readouterr().out
    report, rec = tmp_path / "r.json", tmp_path / "rec.jsonl"
    argv = ["bench", "--trace", str(src), "--trace-format", "mooncake", "--time-scale", "2"]
    assert main([*argv, "--report", str(report), "--record", str(rec)]) == 0
    data = json.loads(report.read_text())
    (level,) = data["levels"]
    assert level["turns"] == 5 and level["sessions"]["started"] == 5
    assert data["run"]["source"] == {
        "trace": str(src),
        "format": "mooncake",
        "time_scale": 2.0,
        "sessions": 5,
        "requests": 5,
    }
    assert data["run"]["duration_s"] is None  # a replay runs to its end
    recorded = read_trace(rec)
    assert sorted(r.timestamp for r in recorded) == pytest.approx([0.0, 0.5, 1.0, 1.5, 1.8])
    assert [r.output_tokens for r in recorded] == [20, 10, 5, 8, 1]  # ignore_eos: exact


def test_cli_bad_trace_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": "a", "timestamp": 0}\n')
    assert main(["bench", "--trace", str(bad)]) == 2
    assert "bad.jsonl:1: give text" in capsys.readouterr().err
