"""The workload data model: seeded distributions, sampling into scripts, JSON, errors."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import msgspec
import pytest

from agentflow import ConfigError
from agentflow.bench import (
    Constant,
    FanOut,
    LogNormal,
    SessionScript,
    SessionTemplate,
    TurnScript,
    Uniform,
    Workload,
    Zipf,
    load_workload,
    sample_value,
    synth_text,
)
from agentflow.bench._workloads import WORKLOADS, get_workload
from agentflow.sim.tokenizer import Tokenizer


def test_distributions_have_their_stated_moments() -> None:
    rng = random.Random(1)
    n = 20_000
    assert sample_value(7, rng) == 7.0 and Constant(value=2.5).sample(rng) == 2.5
    u = [Uniform(low=2, high=6).sample(rng) for _ in range(n)]
    assert min(u) >= 2 and max(u) <= 6 and statistics.fmean(u) == pytest.approx(4, rel=0.02)
    ln = [LogNormal(mean=3.0, sigma=0.8).sample(rng) for _ in range(n)]
    assert statistics.fmean(ln) == pytest.approx(3.0, rel=0.04)
    assert statistics.median(ln) < 3.0  # long right tail
    clipped = [LogNormal(mean=3.0, sigma=2, low=1, high=4).sample(rng) for _ in range(1000)]
    assert min(clipped) >= 1 and max(clipped) <= 4
    z = [Zipf(s=1.2, low=1, high=50).sample(rng) for _ in range(n)]
    assert min(z) == 1 and max(z) <= 50 and all(v == int(v) for v in z)
    # P(1) / P(2) = 2 ** 1.2
    assert z.count(1) / z.count(2) == pytest.approx(2**1.2, rel=0.1)


def test_sampling_is_seeded_per_session() -> None:
    """Session i's script depends on the seed and i only — not on sampling order."""
    w = get_workload("agentic")
    a = [w.sample(i, seed=5) for i in range(20)]
    b = [w.sample(i, seed=5) for i in reversed(range(20))][::-1]
    assert a == b
    assert w.sample(3, seed=6) != a[3]
    assert len({s.session_id for s in a}) == 20
    assert a[0].turn_text(1) == b[0].turn_text(1)


def test_synth_text_is_exactly_that_many_simulator_tokens() -> None:
    tok = Tokenizer()
    for n in (1, 16, 500):
        assert tok.count(synth_text(n, n)) == n
    assert synth_text(100, "x") == synth_text(100, "x") != synth_text(100, "y")


def test_prefixes_are_shared_and_grouped() -> None:
    w = Workload(
        name="g",
        shared_prefix_tokens=100,
        group_prefix_tokens={"a": 40, "b": 40},
        templates=(
            SessionTemplate(name="x", group="a"),
            SessionTemplate(name="y", group="b"),
        ),
    )
    tok = Tokenizer()
    sa, sb = w.system_prompt("a"), w.system_prompt("b")
    assert tok.count(sa) == tok.count(sb) == 140
    assert sa[: len(w.system_prompt(None))] == sb[: len(w.system_prompt(None))]
    assert sa != sb
    scripts = [w.sample(i) for i in range(30)]
    for s in scripts:
        assert s.system == w.system_prompt("a" if s.agent == "x" else "b")
        assert s.system is w.system_prompt("a" if s.agent == "x" else "b")  # one string


def test_fanout_scripts_fork_with_the_parents_prefix() -> None:
    w = Workload(
        name="f",
        shared_prefix_tokens=64,
        templates=(
            SessionTemplate(name="p", turns=4, fanout=FanOut(template="s", width=3, max_forks=2)),
            SessionTemplate(name="s", weight=0, turns=2),
        ),
    )
    s = w.sample(0)
    forks = [t.subagents for t in s.turns if t.subagents]
    assert len(forks) == 2 and all(len(f) == 3 for f in forks)
    assert not s.turns[0].subagents  # a fork follows a turn
    for sub in forks[0]:
        assert sub.system == s.system and sub.system_key == s.system_key
        assert sub.session_id.startswith(s.session_id + "/") and sub.agent == "s"
    assert s.output_tokens == sum(t.max_tokens for t in s.turns) + sum(
        sub.output_tokens for f in forks for sub in f
    )


def test_cache_bust_gives_each_session_its_own_prefix() -> None:
    w = Workload(
        name="c", shared_prefix_tokens=50, templates=(SessionTemplate(name="t", cache_bust=True),)
    )
    a, b = w.sample(0), w.sample(1)
    assert a.system != b.system and a.system_key is None
    assert a.system.endswith(w.system_prompt(None))


def test_json_round_trip_and_builtins(tmp_path: Path) -> None:
    for w in WORKLOADS.values():
        text = msgspec.json.encode(w)
        assert load_workload(text.decode()) == w
    path = tmp_path / "w.json"
    path.write_text(
        json.dumps(
            {
                "name": "mine",
                "templates": [
                    {
                        "name": "t",
                        "turns": {"kind": "zipf", "s": 1.5, "low": 1, "high": 9},
                        "tool_latency_s": {"kind": "lognormal", "mean": 2, "sigma": 0.5},
                        "output_tokens": 64,
                    }
                ],
            }
        )
    )
    w = load_workload(path)
    assert w.templates[0].turns == Zipf(s=1.5, low=1, high=9)
    assert w.templates[0].output_tokens == 64


@pytest.mark.parametrize(
    ("doc", "names"),
    [
        ({"templates": []}, "templates must not be empty"),
        ({"templates": [{"name": "t", "turns": 0}]}, "turns must be ≥ 1"),
        (
            {"templates": [{"name": "t", "turns": {"kind": "uniform", "low": 3, "high": 1}}]},
            "$.templates[0].turns",
        ),
        ({"templates": [{"name": "t", "turns": {"kind": "gamma"}}]}, "$.templates[0].turns"),
        ({"templates": [{"name": "t", "group": "g"}]}, "group 'g'"),
        ({"templates": [{"name": "t", "fanout": {"template": "nope"}}]}, "unknown template 'nope'"),
        ({"templates": [{"name": "t", "weight": 0}]}, "no template has weight > 0"),
        ({"templates": [{"name": "t", "tool_latency_s": -1}]}, "tool_latency_s must be ≥ 0"),
        # A misspelt field is refused, not ignored (the run would use the default).
        ({"templates": [{"name": "t", "turn": 8}]}, "unknown field `turn` - at `$.templates[0]`"),
        ({"name": "w", "template": [], "templates": [{"name": "t"}]}, "unknown field `template`"),
        (
            {"templates": [{"name": "t", "turns": {"kind": "uniform", "low": 1, "hi": 4}}]},
            "unknown field `hi`",
        ),
        (
            {"templates": [{"name": "t", "fanout": {"template": "t", "widht": 2}}]},
            "unknown field `widht`",
        ),
        # A figure no run could hold is refused before it hangs the bench or fills memory.
        (
            {"templates": [{"name": "t", "turns": {"kind": "uniform", "low": 1, "high": 1e9}}]},
            "turns must be ≤ 10,000, but can be 1,000,000,000",
        ),
        ({"templates": [{"name": "t", "prompt_tokens": 1e10}]}, "prompt_tokens must be ≤"),
        ({"shared_prefix_tokens": 10**10, "templates": [{"name": "t"}]}, "shared_prefix_tokens"),
    ],
)
def test_bad_workloads_name_the_field(doc: dict, names: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as err:
        load_workload(doc)
    assert names in str(err.value)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="workload file"):
        load_workload(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_workload(bad)


def test_scripts_can_be_built_by_hand() -> None:
    """What a trace replay produces: concrete turns, texts or lengths, recorded gaps."""
    s = SessionScript(
        session_id="trace-1",
        arrival_s=1.5,
        system="You are terse.",
        turns=(
            TurnScript(text="hello", max_tokens=8),
            TurnScript(tokens=20, max_tokens=4, tool_s=0.3, think_s=1.0),
        ),
    )
    assert s.turn_text(0) == "hello"
    assert Tokenizer().count(s.turn_text(1)) == 20
    assert msgspec.json.decode(msgspec.json.encode(s), type=SessionScript) == s
    with pytest.raises(ConfigError, match="turns must not be empty"):
        SessionScript(session_id="x", turns=())
    with pytest.raises(ConfigError, match="max_tokens"):
        TurnScript(tokens=3, max_tokens=0)


def test_a_uniform_whole_number_takes_each_value_equally() -> None:
    """Uniform(1, 4) turns: 1, 2, 3 and 4 each about a quarter of the sessions (rounding
    a real draw gave the ends half the middle's share)."""
    w = Workload(templates=(SessionTemplate(name="t", turns=Uniform(low=1, high=4)),))
    counts = [0] * 5
    for i in range(4000):
        counts[len(w.sample(i, seed=3).turns)] += 1
    assert counts[0] == 0
    assert all(850 <= c <= 1150 for c in counts[1:]), counts


def test_an_unbounded_tail_is_clipped_to_the_figures_limit() -> None:
    """A long-tailed prompt length never draws more than MAX_TOKENS."""
    from agentflow.bench._workload_spec import MAX_TOKENS

    tail = LogNormal(mean=5_000_000, sigma=3.0)
    w = Workload(templates=(SessionTemplate(name="t", prompt_tokens=tail, turns=5),))
    sizes = [t.tokens for i in range(200) for t in w.sample(i).turns[1:]]
    assert max(sizes) == MAX_TOKENS
