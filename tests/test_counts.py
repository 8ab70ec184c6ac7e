"""One check of a count (agentflow/_counts.py), shared by the llama.cpp modules, the
simulator and the client's constructors (fleet, agent, scheduler, stores, context links,
demo, bench): an int, never a bool, in its range, the error naming the field and the value."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet, Tool
from agentflow._counts import check_count
from agentflow.bench import BenchConfig, Load, Sweep, replay_sessions
from agentflow.context import (
    CacheBusterCheck,
    Compact,
    FleetBudget,
    MessageCounter,
    PrefixIndex,
    TiktokenCounter,
)
from agentflow.demo._config import DemoConfig
from agentflow.llamacpp import check_context, check_slots
from agentflow.sched import CircuitBreaker, Limits, Replica, RetryPolicy, Router
from agentflow.sim import Engine, TextGenConfig, get_profile
from agentflow.sim.driver import EngineDriver
from agentflow.sim.kv import BlockManager
from agentflow.sim.sessions import SessionRounds
from agentflow.store import PostgresStore, SQLiteStore
from agentflow.testing import MockTransport, Reply


def test_an_int_in_range_is_returned_anything_else_is_named() -> None:
    assert check_count(1, "n") == 1 and check_count(0, "n", 0) == 0
    assert check_count(256, "n", 1, 256) == 256
    for bad, need in [
        (0, "an int ≥ 1"),
        (True, "an int ≥ 1"),
        (2.0, "an int ≥ 1"),
        ("3", "an int ≥ 1"),
        (None, "an int ≥ 1"),
    ]:
        with pytest.raises(ConfigError) as caught:
            check_count(bad, "Thing.n")
        assert str(caught.value) == f"Thing.n must be {need}, got {bad!r}"
    with pytest.raises(ConfigError, match=r"^n must be an int in \[512, 1,048,576\], got 511$"):
        check_count(511, "n", 512, 1 << 20)
    with pytest.raises(ConfigError, match=r"^n must be an int ≥ 0, got -1$"):
        check_count(-1, "n", 0)


def test_none_is_taken_only_where_it_means_something_and_the_error_says_what() -> None:
    assert check_count(None, "n", none="no cap") is None and check_count(3, "n", none="x") == 3
    with pytest.raises(ConfigError, match=r"^n must be an int ≥ 1, got None$"):
        check_count(None, "n")
    with pytest.raises(ConfigError, match=r"^n must be an int ≥ 1 or None \(no cap\), got True$"):
        check_count(True, "n", none="no cap")


def test_the_llama_cpp_checks_keep_their_words() -> None:
    assert check_slots(256, "x") == 256 and check_context(512, "x") == 512
    with pytest.raises(ConfigError, match=r"^--n-parallel must be an int in \[1, 256\], got 0$"):
        check_slots(0, "--n-parallel")
    with pytest.raises(
        ConfigError, match=r"^n_ctx must be an int in \[512, 1,048,576\], got 2097152$"
    ):
        check_context(1 << 21, "n_ctx")


TINY = get_profile("cpu-tiny")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        # Each was accepted: a bool or a float passed `value < 1` (or `< 0`).
        (lambda: dataclasses.replace(TINY, max_num_seqs=True), "'cpu-tiny': max_num_seqs"),
        (
            lambda: dataclasses.replace(TINY, calibration_context_tokens=0.5),  # type: ignore[arg-type]
            "'cpu-tiny': calibration_context_tokens",
        ),
        (lambda: EngineDriver(Engine(TINY), tokens_per_chunk=1.5), "tokens_per_chunk"),  # type: ignore[arg-type]
        (lambda: EngineDriver(Engine(TINY), keep_records=True), "keep_records"),
        (lambda: BlockManager(8, 2.5), "block_size"),  # type: ignore[arg-type]
        (lambda: SessionRounds(max_rounds=2.5), "max_rounds"),  # type: ignore[arg-type]
        (lambda: TextGenConfig(tool_rounds=0.5), "TextGenConfig.tool_rounds"),  # type: ignore[arg-type]
    ],
)
def test_the_simulators_counts_refuse_bools_and_floats(make: Callable[[], Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        make()


def _transport() -> MockTransport:
    return MockTransport(lambda _: Reply.text("unused"))


def _tool() -> None:
    """A tool that is never called."""


#: A client-side count, built with a value: (its field as the error names it, build it, the
#: lowest it takes). Each refuses a bool, a float and one below its lowest value.
Site = tuple[str, Callable[[Any, Path], object], int]

#: These took ``True`` (an int: ``value < 1`` is False) before they used check_count; most
#: refused a float by ``isinstance(value, int)``, which a bool passes — the router's and the
#: bench's (the last seven) took a float too.
TOOK_A_BOOL: list[Site] = [
    ("Fleet.max_tool_concurrency", lambda v, _: Fleet(_transport(), max_tool_concurrency=v), 1),
    ("Fleet.workers", lambda v, _: Fleet(_transport(), workers=v), 1),
    ("Agent 'a': max_turns", lambda v, _: Agent(name="a", model="m", max_turns=v), 1),
    ("RetryPolicy.max_attempts", lambda v, _: RetryPolicy(max_attempts=v), 1),
    ("CircuitBreaker.threshold", lambda v, _: CircuitBreaker(time.perf_counter_ns, threshold=v), 1),
    ("CircuitBreaker.window", lambda v, _: CircuitBreaker(time.perf_counter_ns, window=v), 1),
    ("SQLiteStore.max_batch", lambda v, tmp: SQLiteStore(tmp / "runs.db", max_batch=v), 1),
    ("demo: --agents", lambda v, _: DemoConfig(agents=v), 1),
    ("demo: --max-concurrency", lambda v, _: DemoConfig(max_concurrency=v), 1),
    ("demo: --max-tokens", lambda v, _: DemoConfig(max_tokens=v), 1),
    ("Load.concurrency", lambda v, _: Load(concurrency=v), 1),
    ("Router.balance_slack", lambda v, _: Router(balance_slack=v), 0),
    ("Sweep.max_levels", lambda v, _: Sweep(start=1.0, max_levels=v), 1),
    ("Sweep.stop_after", lambda v, _: Sweep(start=1.0, stop_after=v), 1),
    ("bench: repeats", lambda v, _: _bench(repeats=v), 1),
    ("bench: max_sessions (--sessions)", lambda v, _: _bench(max_sessions=v), 1),
    ("bench: max_in_flight", lambda v, _: _bench(max_in_flight=v), 1),
    ("max_sessions", lambda v, _: replay_sessions([], Load(scale=1.0), max_sessions=v), 1),
]


def _bench(**kw: Any) -> BenchConfig:
    return BenchConfig(scripts=(), levels=(Load(concurrency=1),), **kw)


#: These refused a bool and a float already, in their own words.
REFUSED_BOTH: list[Site] = [
    (
        "tool '_tool': max_output_chars",
        lambda v, _: Tool.from_function(_tool, max_output_chars=v),
        1,
    ),
    (
        "Agent 'a': max_tool_output_chars",
        lambda v, _: Agent(name="a", model="m", max_tool_output_chars=v),
        1,
    ),
    (
        "Agent 'a': params['max_tokens']",
        lambda v, _: Agent(name="a", model="m", params={"max_tokens": v}),
        1,
    ),
    (
        "Agent 'a': params['max_completion_tokens']",
        lambda v, _: Agent(name="a", model="m", params={"max_completion_tokens": v}),
        1,
    ),
    ("Fleet.max_concurrency", lambda v, _: Fleet(_transport(), max_concurrency=v), 1),
    ("Limits.max_in_flight", lambda v, _: Limits(max_in_flight=v), 1),
    ("Limits.kv_tokens", lambda v, _: Limits(kv_tokens=v), 1),
    (
        "Replica.breaker_threshold",
        lambda v, _: Replica(transport=_transport(), breaker_threshold=v),
        1,
    ),
    ("Replica.breaker_window", lambda v, _: Replica(transport=_transport(), breaker_window=v), 1),
    ("PostgresStore.max_batch", lambda v, _: PostgresStore("postgresql:///x", max_batch=v), 1),
    ("PostgresStore.max_held", lambda v, _: PostgresStore("postgresql:///x", max_held=v), 1),
    ("PrefixIndex.block_size", lambda v, _: PrefixIndex(block_size=v), 1),
    ("CacheBusterCheck.shared_messages", lambda v, _: CacheBusterCheck(shared_messages=v), 0),
    ("CacheBusterCheck.block_size", lambda v, _: CacheBusterCheck(block_size=v), 1),
    ("CacheBusterCheck.max_sessions", lambda v, _: CacheBusterCheck(max_sessions=v), 1),
    ("CacheBusterCheck.max_warnings", lambda v, _: CacheBusterCheck(max_warnings=v), 1),
    *[
        (
            f"MessageCounter.{field}",
            lambda v, _, f=field: MessageCounter(TiktokenCounter(), **{f: v}),
            0,
        )
        for field in ("per_message", "per_name", "reply_priming", "per_image")
    ],
    (
        "MessageCounter.cache_size",
        lambda v, _: MessageCounter(TiktokenCounter(), cache_size=v),
        1,
    ),
    *[
        (f"Compact.{field}", lambda v, _, f=field: Compact(**{f: v}), 1)
        for field in ("max_summary_tokens", "keep_last", "tool_output_tokens", "max_input_tokens")
    ],
    ("FleetBudget.max_tokens", lambda v, _: FleetBudget(max_tokens=v), 1),
]


@pytest.mark.parametrize(
    ("field", "make", "low"),
    [pytest.param(*site, id=site[0]) for site in TOOK_A_BOOL + REFUSED_BOTH],
)
@pytest.mark.parametrize("kind", ["bool", "float", "below"])
def test_a_count_refuses_a_bool_a_float_and_too_few_by_name(
    field: str, make: Callable[[Any, Path], object], low: int, kind: str, tmp_path: Path
) -> None:
    bad = {"bool": True, "float": low + 1.5, "below": low - 1}[kind]
    least = rf"(≥ {low}\b|in \[{low}, )"  # (Fleet.workers has a most too)
    with pytest.raises(ConfigError, match=rf"^{re.escape(field)} must be an int {least}") as e:
        make(bad, tmp_path)
    assert str(e.value).endswith(f", got {bad!r}")
