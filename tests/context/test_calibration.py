"""Calibration: the fit on synthetic data, anchoring, and convergence on real llama.cpp."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentflow import ConfigError, HTTPTransport
from agentflow.context import Calibrator, MessageCounter, PromptCounter, TiktokenCounter
from agentflow.llamacpp import LlamaCppServer
from agentflow.transport import ChatRequest


def test_nothing_learnt_means_no_correction() -> None:
    cal = Calibrator()
    assert cal.correct("m", 1000) == 1000
    assert cal.stats("m") is None
    cal.observe("m", 100, None)  # no usage reported: ignored
    cal.observe("m", 0, 50)
    cal.observe("m", 100, 0)
    assert cal.models == [] and cal.correct("m", 1000) == 1000


def test_one_turn_teaches_a_ratio() -> None:
    cal = Calibrator()
    cal.observe("m", 1000, 1200)
    assert cal.correct("m", 500) == 600
    assert cal.correct("other", 500) == 500  # per model
    stats = cal.stats("m")
    assert stats is not None and stats.samples == 1
    assert stats.slope == pytest.approx(1.2) and stats.offset == 0
    # The first turn had nothing to be corrected with: its corrected error is its raw one.
    assert stats.mean_raw_error == stats.mean_error == pytest.approx(200 / 1200)


def test_slope_and_offset_are_recovered_and_an_outlier_is_ignored() -> None:
    cal = Calibrator(window=16)
    for e in range(100, 1700, 100):
        reported = round(1.1 * e + 30)
        if e == 800:
            reported = 5000  # one wild report
        cal.observe("m", e, reported)
    stats = cal.stats("m")
    assert stats is not None
    assert stats.slope == pytest.approx(1.1, abs=1e-3)
    assert stats.offset == pytest.approx(30, abs=1)
    assert cal.correct("m", 2000) == pytest.approx(2230, abs=2)
    assert stats.max_raw_error > 5 * stats.recent_error


def test_errors_are_measured_out_of_sample() -> None:
    cal = Calibrator()
    cal.observe("m", 100, 110)  # raw error 10/110; nothing learnt yet
    cal.observe("m", 200, 220)  # predicted 220 from the first turn: exact
    cal.observe("m", 300, 345)  # predicted 330: error 15/345
    stats = cal.stats("m")
    assert stats is not None
    assert stats.max_raw_error == pytest.approx(45 / 345)
    assert stats.max_error == pytest.approx(10 / 110)  # the first, uncorrected turn
    assert stats.mean_error == pytest.approx((10 / 110 + 0 + 15 / 345) / 3)
    # What a caller used for a turn can be passed instead.
    cal.observe("m", 400, 460, predicted=400)
    stats = cal.stats("m")
    assert stats is not None and stats.max_error == pytest.approx(60 / 460)


def test_window_must_hold_two_turns() -> None:
    with pytest.raises(ConfigError, match="window"):
        Calibrator(window=1)


def _anchor(pc: PromptCounter) -> tuple[int, int] | None:
    return pc.anchor_point  # read through a call: mypy would keep an earlier narrowing


def test_anchored_estimate_is_the_servers_count_plus_the_growth() -> None:
    mc = MessageCounter(TiktokenCounter())
    cal = Calibrator()
    cal.observe("m", 1000, 1500)  # this server counts 1.5× ours
    pc = mc.session()
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "word " * 200}]
    raw = pc.count(msgs)
    assert _anchor(pc) is None
    assert cal.estimate("m", pc) == cal.correct("m", raw) == round(1.5 * raw)
    pc.anchor(333)  # the server's own count of that prompt
    assert _anchor(pc) == (raw, 333)
    msgs.append({"role": "assistant", "content": "ok " * 20})
    grown = pc.count(msgs)
    assert cal.estimate("m", pc) == 333 + round(1.5 * (grown - raw))
    # An edit inside the anchored prompt drops the anchor.
    msgs[0] = {"role": "user", "content": "other " * 200}
    pc.count(msgs)
    assert _anchor(pc) is None
    assert cal.estimate("m", pc) == cal.correct("m", pc.tokens)
    # So does a change of tools, or an anchor without a figure.
    pc.anchor(400)
    pc.count(msgs, [{"type": "function", "function": {"name": "f"}}])
    assert _anchor(pc) is None
    pc.anchor(None)
    assert _anchor(pc) is None


# --- on the real server ------------------------------------------------------------------

_PROSE = "The committee met on Tuesday to review the budget and agreed to wait for more figures. "
_CODE = "def total(rows):\n    return sum(r['score'] * 2 for r in rows if r.get('ok'))\n"
_LOG = "- job {i}: see /var/log/app-{i}.log, then restart worker-{i}\n"


def _observation(session: int, turn: int) -> str:
    """Varied content: prose, code, log lines and JSON, of varied length."""
    n = 1 + (session * 5 + turn * 3) % 3
    kind = (session + turn) % 4
    if kind == 0:
        return _PROSE * n
    if kind == 1:
        return "```python\n" + _CODE * n + "```"
    if kind == 2:
        return "".join(_LOG.format(i=j) for j in range(2 * n))
    return json.dumps(
        {"rows": [{"id": j, "name": f"user{j}", "score": j * 1.5} for j in range(2 * n)]}
    )


#: ~600 tokens of shared instructions, as agents carry (identical for every session, so
#: the server's prefix cache serves it after the first request).
_INSTRUCTIONS = "You are a careful assistant for a software team. " + " ".join(
    f"Rule {i}: keep answers short, cite file names, and never invent APIs." for i in range(45)
)


@pytest.mark.llamacpp
async def test_calibration_converges_on_llamacpp(llamacpp: LlamaCppServer) -> None:
    """Agent-like sessions (shared instructions, then varied observations: prose, code,
    logs, JSON) sent to SmolLM2 through HTTPTransport. The cl100k estimate is off by
    ~10%; after three turns every calibrated estimate is within 2% of prompt_tokens."""
    mc = MessageCounter(TiktokenCounter())
    cal = Calibrator()
    rows: list[tuple[int, int, int, int, int, bool]] = []
    async with HTTPTransport(llamacpp.base_url) as transport:
        for s in range(3):
            pc = mc.session()
            msgs: list[dict[str, Any]] = [
                {"role": "system", "content": _INSTRUCTIONS},
                {"role": "user", "content": f"Task {s}. First observation:\n{_observation(s, 0)}"},
            ]
            for turn in range(4):
                raw = pc.count(msgs)
                anchored = pc.anchor_point is not None
                estimate = cal.estimate("smollm2", pc)
                trace = await transport.stream(
                    ChatRequest(
                        model="smollm2",
                        messages=msgs,
                        params={"max_tokens": 4, "temperature": 0, "seed": 1},
                    )
                )
                assert trace.usage is not None and trace.usage.prompt_tokens is not None
                reported = trace.usage.prompt_tokens
                rows.append((s, turn, raw, reported, estimate, anchored))
                cal.observe("smollm2", raw, reported, predicted=estimate)
                pc.anchor(reported)
                msgs.append({"role": "assistant", "content": trace.content})
                msgs.append({"role": "user", "content": "Next:\n" + _observation(s, turn + 1)})
    table = "session, turn, raw, reported, estimate, anchored\n" + "\n".join(map(str, rows))
    print(table)  # shown with -s: the convergence, turn by turn
    raw_errors = [abs(raw - rep) / rep for _, _, raw, rep, _, _ in rows]
    assert sum(raw_errors) / len(raw_errors) > 0.04, table  # the tokenizers do differ
    errors = [abs(est - rep) / rep for _, _, _, rep, est, _ in rows]
    assert max(errors[3:]) <= 0.02, table
    assert sum(1 for row in rows if row[5]) == 9, table  # every later turn anchored
    stats = cal.stats("smollm2")
    assert stats is not None and stats.samples == 12
    assert stats.recent_error < stats.mean_raw_error / 3, stats
