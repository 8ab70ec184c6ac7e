"""Prefix-reuse efficiency from hand-built session results: per agent, for the fleet, and
clear about figures the server or the client did not report."""

from __future__ import annotations

import json

import pytest

from agentflow._metrics import TurnMetrics
from agentflow._session import SessionResult, TurnRecord
from agentflow._trace import PromptInfo, TurnTrace
from agentflow.context._reuse import prefix_reuse

TRACE = TurnTrace(
    endpoint="e",
    model="m",
    response_id=None,
    sent_ns=0,
    headers_ns=0,
    end_ns=1,
    chunk_ns=(),
    chunk_chars=(),
    chunk_tokens=(),
    tokens_exact=False,
    n_events=0,
    content="",
    reasoning="",
    tool_calls=(),
    finish_reason="stop",
    usage=None,
    done=True,
)


def turn(
    index: int, prompt: int | None, cached: int | None, max_cacheable: int | None
) -> TurnRecord:
    """A turn whose server reported ``prompt``/``cached`` and whose fingerprint said
    ``max_cacheable`` (``None`` = not reported / not fingerprinted)."""
    metrics = TurnMetrics(
        queue_wait_s=0.0,
        ttft_s=None,
        e2e_s=0.0,
        tpot_s=None,
        decode_tps=None,
        itl_s=(),
        tokens_per_chunk=(),
        tokens_per_chunk_exact=False,
        prompt_tokens=prompt,
        cached_tokens=cached,
        cached_source=None if cached is None else "prompt_tokens_details",
        output_tokens=1,
        output_tokens_source="server_usage",
    )
    info = (
        None
        if max_cacheable is None
        else PromptInfo(
            estimated_tokens=prompt or 0,
            raw_estimate=prompt or 0,
            max_cacheable_tokens=max_cacheable,
        )
    )
    return TurnRecord(index, metrics, TRACE, info)


def session(agent: str, sid: str, *turns: TurnRecord) -> SessionResult:
    return SessionResult(
        session_id=sid,
        agent=agent,
        status="completed",
        final_output="",
        messages=[],
        turns=list(turns),
    )


def test_efficiency_per_agent_and_fleet() -> None:
    """Efficiency is Σ cached / Σ max cacheable over turns with both, per agent and fleet."""
    report = prefix_reuse(
        [
            session("b", "b1", turn(0, 1000, 0, 0), turn(1, 1200, 960, 1000)),
            session("a", "a1", turn(0, 1000, 800, 960), turn(1, 1500, 1400, 1440)),
            session("a", "a2", turn(0, 1000, 960, 960)),
        ]
    )
    assert list(report.per_agent) == ["a", "b"]
    a, b, fleet = report.per_agent["a"], report.per_agent["b"], report.fleet
    assert (a.sessions, a.turns, a.turns_compared) == (2, 3, 3)
    assert (a.cached_tokens, a.max_cacheable_tokens, a.prompt_tokens) == (3160, 3360, 3500)
    assert a.efficiency == pytest.approx(3160 / 3360)
    assert a.hit_rate == pytest.approx(3160 / 3500)
    assert a.note == ""
    assert b.efficiency == pytest.approx(960 / 1000)
    assert (fleet.sessions, fleet.turns) == (3, 5)
    assert fleet.efficiency == pytest.approx((3160 + 960) / (3360 + 1000))
    assert fleet.hit_rate == pytest.approx(4120 / 5700)


def test_missing_figures_are_said_not_zeroed() -> None:
    """Not reported (server) and not fingerprinted (client) are None with a note, never 0."""
    report = prefix_reuse(
        [
            session("no-cache-field", "s1", turn(0, 500, None, 480), turn(1, 600, None, 592)),
            session("no-fingerprint", "s2", turn(0, 500, 0, None), turn(1, 600, 480, None)),
            session("partly", "s3", turn(0, 500, 0, 0), turn(1, 600, 480, None)),
        ]
    )
    server = report.per_agent["no-cache-field"]
    assert server.cached_tokens is None and server.max_cacheable_tokens == 1072
    assert server.efficiency is None and server.hit_rate is None
    assert "server reported no cached tokens" in server.note
    client = report.per_agent["no-fingerprint"]
    assert client.cached_tokens == 480 and client.max_cacheable_tokens is None
    assert client.efficiency is None and "not fingerprinted" in client.note
    assert client.hit_rate == pytest.approx(480 / 1100)
    partly = report.per_agent["partly"]
    assert partly.turns_compared == 1 and partly.efficiency is None
    assert "fingerprinted for 1 of 2 turns" in partly.note
    assert "nothing was cacheable yet" in partly.note
    assert "not available" in partly.describe()
    assert report.fleet.turns_compared == 1 and report.fleet.efficiency is None


def test_no_prompt_usage_and_no_turns() -> None:
    """A server with no usage at all, and sessions that never finished a turn."""
    report = prefix_reuse(
        [session("quiet", "s1", turn(0, None, None, None)), session("idle", "s2")]
    )
    quiet, idle = report.per_agent["quiet"], report.per_agent["idle"]
    assert quiet.prompt_tokens is None and quiet.efficiency is None
    assert idle.turns == 0 and idle.note == "no turns"
    assert prefix_reuse([]).fleet.note == "no turns"


def test_report_serialises_and_reads() -> None:
    """``to_dict`` is JSON-ready; ``lines`` gives one readable line per agent and the fleet."""
    report = prefix_reuse([session("a", "s", turn(0, 1001, 900, 1000))])
    data = json.loads(json.dumps(report.to_dict()))
    assert data["fleet"]["efficiency"] == pytest.approx(0.9)
    assert data["per_agent"]["a"]["turns_compared"] == 1
    assert report.lines() == [
        "fleet: prefix reuse 90.0%: 900 cached of 1,000 cacheable prompt tokens over 1 turn",
        "a: prefix reuse 90.0%: 900 cached of 1,000 cacheable prompt tokens over 1 turn",
    ]


def test_a_short_maximum_is_raised_to_the_servers_count() -> None:
    """A turn whose server cached more than the client's maximum proves the maximum short:
    it is raised to the cached figure, so the efficiency never exceeds 1, and the report
    says on how many turns and by how much."""
    report = prefix_reuse([session("a", "s", turn(0, 1000, 960, 800), turn(1, 1200, 1100, 1150))])
    a = report.per_agent["a"]
    assert a.max_cacheable_tokens == 800 + 1150  # the client's own figures
    assert a.compared_max_cacheable_tokens == 960 + 1150
    assert a.efficiency == pytest.approx((960 + 1100) / (960 + 1150))
    assert (a.turns_raised, a.raised_tokens) == (1, 160)
    assert "more than the client's maximum on 1 of 2 turns (+160 tokens" in a.note
    exact = prefix_reuse([session("b", "s", turn(0, 1000, 960, 960))]).fleet
    assert exact.efficiency == 1.0 and exact.turns_raised == 0 and exact.note == ""


def test_a_maximum_above_the_prompt_is_capped_to_it() -> None:
    """A session's first turn scales its local maximum by a ratio not learnt yet: on
    llama.cpp the maximum was 336 for a prompt of 278, and the efficiency came out 40.3%
    where it was ~49%. A maximum is at most the prompt less its last token."""
    first = turn(0, 278, 136, 336)  # above the prompt: capped to 277
    later = turn(1, 400, 256, 300)
    report = prefix_reuse([session("a", "s", first, later)])
    a = report.fleet
    assert a.max_cacheable_tokens == 277 + 300
    assert a.compared_max_cacheable_tokens == 277 + 300
    assert a.efficiency == pytest.approx((136 + 256) / (277 + 300))
    assert a.turns_raised == 0
    assert "exceeded the prompt on 1 of 2 turns (−59 tokens" in a.note
    # Capped, then raised where the server reported the whole prompt cached: capped by
    # 50 on the whole, said once (it was said both ways, raised by 1 and capped by 51).
    full = prefix_reuse([session("b", "s", turn(0, 100, 100, 150))]).fleet
    assert full.compared_max_cacheable_tokens == 100 and full.efficiency == 1.0
    assert full.turns_raised == 0 and full.raised_tokens == 0
    assert "exceeded the prompt on 1 of 1 turns (−50 tokens" in full.note
    assert "more than the client's maximum" not in full.note
    # Without the server's prompt count nothing caps it.
    blind = prefix_reuse([session("c", "s", turn(0, None, 50, 150))]).fleet
    assert blind.max_cacheable_tokens == 150 and "exceeded" not in blind.note


def test_a_maximum_equal_to_the_prompt_is_capped_without_a_word() -> None:
    """A maximum equal to the prompt is one token over (the server computes the last
    one): it was said to have "exceeded the prompt (−1 tokens; the local tokenizer
    differs...)". It is capped to the prompt less one, and the note says nothing."""
    a = prefix_reuse([session("a", "s", turn(0, 1000, 900, 1000))]).fleet
    assert a.max_cacheable_tokens == a.compared_max_cacheable_tokens == 999
    assert a.efficiency == pytest.approx(900 / 999)
    assert a.note == "" and a.turns_raised == 0
    # Capped to 999, then raised to the 1,000 the server cached: back where it was.
    b = prefix_reuse([session("b", "s", turn(0, 1000, 1000, 1000))]).fleet
    assert (b.compared_max_cacheable_tokens, b.efficiency) == (1000, 1.0)
    assert b.note == "" and b.turns_raised == 0
    # Below the prompt, a cached figure above it still raises it: +1.
    c = prefix_reuse([session("c", "s", turn(0, 1000, 1000, 999))]).fleet
    assert (c.turns_raised, c.raised_tokens) == (1, 1) and "exceeded" not in c.note
