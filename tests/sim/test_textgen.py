"""Output plans: tool calls whose arguments satisfy their schemas, answers, stops, deltas."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow import ConfigError
from agentflow.sim import (
    Engine,
    TextGenConfig,
    TextGenerator,
    Tokenizer,
    count_tool_rounds,
    generate_value,
    get_profile,
)
from agentflow.sim.tokenizer import IM_END

jsonschema = pytest.importorskip("jsonschema")

TOK = Tokenizer()


class Address(pydantic.BaseModel):
    street: str
    zip_code: str = pydantic.Field(pattern=r"^\d{5}$")
    tags: list[str] = pydantic.Field(min_length=1, max_length=4)


class Order(pydantic.BaseModel):
    item: str = pydantic.Field(min_length=3, max_length=12)
    quantity: int = pydantic.Field(ge=1, le=5)
    price: float = pydantic.Field(gt=0, lt=10)
    mode: str | None = None
    ship_to: Address
    extra: list[Address] = []


SCHEMAS: dict[str, dict[str, Any]] = {
    "read_file": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "file path"},
            "start": {"type": "integer", "minimum": 1},
            "end": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    "search": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 3},
            "scope": {"type": "string", "enum": ["repo", "docs", "web"]},
            "filters": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "uniqueItems": True,
                "items": {
                    "type": "object",
                    "properties": {
                        "field": {"type": "string"},
                        "op": {"enum": ["eq", "lt", "gt"]},
                        "value": {"type": ["number", "string", "null"]},
                    },
                    "required": ["field", "op", "value"],
                },
            },
            "exact": {"type": "boolean"},
            "when": {"type": "string", "format": "date"},
        },
        "required": ["query", "scope", "filters"],
    },
    "order": Order.model_json_schema(),
    "nothing": {"type": "object", "properties": {}},
}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": name, "parameters": schema}}
    for name, schema in SCHEMAS.items()
]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("seed", range(25))
def test_generated_arguments_validate(name: str, seed: int) -> None:
    schema = SCHEMAS[name]
    value = generate_value(schema, random.Random(seed))
    jsonschema.validate(value, schema)


def _schemas(depth: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.one_of(
        st.builds(
            lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
            st.integers(-50, 50),
            st.integers(0, 20),
        ),
        st.builds(
            lambda lo: {"type": "number", "exclusiveMinimum": lo, "maximum": lo + 1},
            st.integers(-5, 5),
        ),
        st.builds(
            lambda lo, span: {"type": "string", "minLength": lo, "maxLength": lo + span},
            st.integers(0, 6),
            st.integers(0, 10),
        ),
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        st.lists(st.text(max_size=5), min_size=1, max_size=4, unique=True).map(
            lambda xs: {"enum": xs}
        ),
    )

    def extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        obj = st.dictionaries(
            st.text("abcdef", min_size=1, max_size=4), children, max_size=4
        ).flatmap(
            lambda props: st.builds(
                lambda req: {
                    "type": "object",
                    "properties": props,
                    "required": req,
                    "additionalProperties": False,
                },
                st.lists(st.sampled_from(sorted(props)) if props else st.nothing(), unique=True),
            )
        )
        arr = st.builds(
            lambda items, lo, span: {
                "type": "array",
                "items": items,
                "minItems": lo,
                "maxItems": lo + span,
            },
            children,
            st.integers(0, 2),
            st.integers(0, 3),
        )
        nullable = children.map(lambda c: {"anyOf": [c, {"type": "null"}]})
        return st.one_of(obj, arr, nullable)

    return st.recursive(leaf, extend, max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(schema=_schemas(), seed=st.integers(0, 2**32))
def test_arguments_validate_against_random_schemas(schema: dict[str, Any], seed: int) -> None:
    value = generate_value(schema, random.Random(seed))
    jsonschema.validate(value, schema)


def _agent_loop(engine: Engine, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run one conversation to its final answer; return the messages."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Find and fix the failing test."},
    ]
    for _ in range(20):
        rid = engine.add_chat(msgs, tools=tools, max_tokens=400)
        engine.run_until_idle()
        rec = engine.record(rid)
        plan = rec.plan
        assert plan is not None
        if rec.finish_reason != "tool_calls":
            assert rec.finish_reason == "stop"
            msgs.append({"role": "assistant", "content": plan.content})
            return msgs
        calls = []
        for call in plan.tool_calls:
            schema = SCHEMAS[call.name]
            jsonschema.validate(json.loads(call.arguments), schema)
            calls.append(
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            )
        msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call in plan.tool_calls:
            msgs.append({"role": "tool", "tool_call_id": call.id, "content": "ok: 3 lines"})
    raise AssertionError("the conversation never ended")


@pytest.mark.parametrize("rounds", [0, 1, 3])
def test_tool_rounds_then_a_final_answer(rounds: int) -> None:
    engine = Engine(
        "cpu-tiny", seed=3, textgen=TextGenConfig(tool_rounds=rounds, answer_tokens=(8, 30))
    )
    msgs = _agent_loop(engine, TOOLS)
    assert count_tool_rounds(msgs) == rounds
    assert msgs[-1]["role"] == "assistant" and msgs[-1]["content"]
    # Every later turn hit the cache for everything up to the turn it extends.
    recs = [engine.record(i) for i in range(rounds + 1)]
    for prev, cur in itertools.pairwise(recs):
        assert cur.cached_tokens is not None
        assert (
            cur.cached_tokens >= (prev.prompt_tokens + prev.completion_tokens - 1) // 16 * 16 - 16
        )


def test_tool_choice_is_obeyed() -> None:
    gen = TextGenerator(TOK, seed=1, config=TextGenConfig(tool_rounds=0))
    msgs = [{"role": "user", "content": "go"}]
    ids = TOK.render_chat(msgs, TOOLS)
    assert gen.plan(msgs, ids, tools=TOOLS).finish_reason == "stop"  # rounds used up
    required = gen.plan(msgs, ids, tools=TOOLS, tool_choice="required")
    assert required.finish_reason == "tool_calls" and required.tool_calls
    named = gen.plan(
        msgs, ids, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "search"}}
    )
    assert [c.name for c in named.tool_calls] == ["search"]
    gen3 = TextGenerator(TOK, seed=1, config=TextGenConfig(tool_rounds=3))
    assert gen3.plan(msgs, ids, tools=TOOLS, tool_choice="none").tool_calls == ()
    assert gen3.plan(msgs, ids, tools=None).finish_reason == "stop"


def test_parallel_calls_and_their_deltas() -> None:
    cfg = TextGenConfig(tool_rounds=5, tool_calls_per_turn=(3, 3))
    gen = TextGenerator(TOK, seed=2, config=cfg)
    msgs = [{"role": "user", "content": "go"}]
    ids = TOK.render_chat(msgs, TOOLS)
    plan = gen.plan(msgs, ids, tools=TOOLS)
    assert len(plan.tool_calls) == 3
    assert len(gen.plan(msgs, ids, tools=TOOLS, parallel_tool_calls=False).tool_calls) == 1
    # Streaming the plan in runs of 1-3 tokens reassembles every call exactly, name first.
    args = ["", "", ""]
    names: dict[int, str] = {}
    pos = 0
    rng = random.Random(0)
    while pos < len(plan):
        end = min(len(plan), pos + rng.randint(1, 3))
        delta = plan.delta(pos, end)
        assert delta.content == ""
        for d in delta.tool_calls:
            if d.name is not None:
                assert d.index not in names
                names[d.index] = d.name
            assert d.index in names  # arguments never before the name
            args[d.index] += d.arguments
        pos = end
    assert [names[i] for i in range(3)] == [c.name for c in plan.tool_calls]
    assert args == [c.arguments for c in plan.tool_calls]


def test_text_plan_is_tokenized_text_ending_with_the_end_token() -> None:
    gen = TextGenerator(TOK, seed=4, config=TextGenConfig(answer_tokens=(50, 60)))
    ids = TOK.render_chat([{"role": "user", "content": "hi"}])
    plan = gen.plan([{"role": "user", "content": "hi"}], ids)
    assert plan.token_ids[-1] == IM_END and list(plan.token_ids[:-1]) == TOK.encode(plan.text)
    assert 50 <= len(plan) - 1 <= 60
    assert "".join(plan.delta(i, i + 1).content for i in range(len(plan))) == plan.text
    assert plan.text_of(0, len(plan)) == plan.text == plan.content


def test_stop_strings_cut_before_the_first_occurrence() -> None:
    gen = TextGenerator(TOK, seed=5, config=TextGenConfig(answer_tokens=(200, 200)))
    msgs = [{"role": "user", "content": "hi"}]
    ids = TOK.render_chat(msgs)
    full = gen.plan(msgs, ids).text
    word = full.split()[3]
    cut = gen.plan(msgs, ids, stop=["zzz-never", word])
    assert cut.text == full[: full.index(word)]
    assert cut.finish_reason == "stop" and word not in cut.text


def test_same_seed_same_plan_and_salt_or_seed_change_it() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    ids = TOK.render_chat(msgs, TOOLS)
    a = TextGenerator(TOK, seed=9).plan(msgs, ids, tools=TOOLS)
    b = TextGenerator(TOK, seed=9).plan(msgs, ids, tools=TOOLS)
    assert a == b
    assert TextGenerator(TOK, seed=10).plan(msgs, ids, tools=TOOLS) != a
    assert TextGenerator(TOK, seed=9).plan(msgs, ids, tools=TOOLS, salt="x") != a


def test_an_answer_is_made_only_as_far_as_max_tokens_cuts_it() -> None:
    """``agentflow sim --answer-tokens 99999999999`` and a request with ``max_tokens`` 5:
    the plan was the whole answer — billions of words, the event loop blocked, GBs of
    memory — before ``max_tokens`` cut it. The plan now ends not long after the cut."""
    window = dataclasses.replace(
        get_profile("cpu-tiny"), kv_capacity_tokens=2 * 10**6, max_model_len=10**6
    )  # an answer as long as the window: allowed, and only as much made as max_tokens cuts
    engine = Engine(window, seed=1, textgen=TextGenConfig(answer_tokens=(10**6, 10**6)))
    rid = engine.add_chat([{"role": "user", "content": "hi"}], max_tokens=5)
    plan = engine.record(rid).plan
    assert plan is not None and 5 < len(plan) < 1000
    assert engine.record(rid).max_tokens == 5


@pytest.mark.parametrize("stop", [None, ".", " a", ["zz", "e. T"], "a stop longer than a word"])
@pytest.mark.parametrize("max_tokens", [1, 2, 7, 64, 700])
def test_a_cut_short_answer_sends_what_the_whole_answer_would(
    stop: str | list[str] | None, max_tokens: int
) -> None:
    """Made only as far as ``max_tokens`` cuts it, an answer's first ``max_tokens`` tokens
    and its finish reason are those of the whole answer, whatever the seed and stop."""
    for seed in range(20):
        gen = TextGenerator(TOK, seed=seed, config=TextGenConfig(answer_tokens=(1, 3000)))
        msgs = [{"role": "user", "content": f"task {seed}"}]
        ids = TOK.render_chat(msgs)
        whole = gen.plan(msgs, ids, stop=stop)
        cut = gen.plan(msgs, ids, stop=stop, max_tokens=max_tokens)
        assert cut.token_ids[:max_tokens] == whole.token_ids[:max_tokens]
        assert (len(cut) > max_tokens) == (len(whole) > max_tokens)
        if len(whole) <= max_tokens:
            assert cut == whole


def test_answer_tokens_beyond_the_window_are_refused_by_the_api_too() -> None:
    """`agentflow sim --answer-tokens` refused a max beyond the window, but
    SimServer/Engine(textgen=TextGenConfig(answer_tokens=(1, 10**9))) took it: the check
    was the CLI's. It is the config's now, run by the engine (the CLI's names its flag)."""
    from agentflow.sim import SimServer

    huge = TextGenConfig(answer_tokens=(1, 10**9))
    words = r"^TextGenConfig\.answer_tokens max 1000000000: more than the profile's window "
    for make in (lambda: Engine("cpu-tiny", textgen=huge), lambda: SimServer(textgen=huge)):
        with pytest.raises(ConfigError, match=words + r"\(max_model_len 2048\)"):
            make()
    Engine("cpu-tiny", textgen=TextGenConfig(answer_tokens=(2048, 2048)))  # the window: fine
    small = dataclasses.replace(get_profile("cpu-tiny"), max_model_len=128)
    for textgen in (None, TextGenConfig(tool_rounds=1)):  # agentflow sim always passes one
        Engine(small, textgen=textgen)  # the default answers (≤ 256 tokens): nobody's slip


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("answer_tokens", (0, 5)),
        ("answer_tokens", (5, 2)),
        ("answer_tokens", (1.5, 3)),
        ("answer_tokens", (True, 3)),
        ("answer_tokens", "ab"),
        ("answer_tokens", (1, 2, 3)),
        ("tool_calls_per_turn", (1, None)),
    ],
)
def test_a_range_that_is_no_pair_of_ints_is_named_with_its_value(field: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        TextGenConfig(**{field: value})
    assert str(caught.value) == (
        f"TextGenConfig.{field} must be (min, max), ints with 0 < min ≤ max, got {value!r}"
    )
    pair: Any = [2, 4]  # a list (JSON has no tuples) is taken as its tuple
    assert getattr(TextGenConfig(**{field: pair}), field) == (2, 4)
