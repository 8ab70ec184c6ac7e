"""``agentflow plan``: the subcommand's parser, overrides, text and JSON output, errors."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from agentflow._errors import ConfigError
from agentflow.planner import DEFAULT_DEPLOYMENT, GIB, get_deployment, plan
from agentflow.planner.cli import add_parser, deployment_from_args, main, parse_count, run


def parse(*argv: str) -> argparse.Namespace:
    """Parse as ``agentflow plan ARGV`` would: through add_parser on a subparsers action."""
    root = argparse.ArgumentParser(prog="agentflow")
    sub = root.add_subparsers()
    add_parser(sub)
    return root.parse_args(["plan", *argv])


def run_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    args = parse(*argv)
    assert args.func is run
    assert args.func(args) == 0
    return capsys.readouterr().out


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    out = run_text(capsys, *argv, "--json")
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def results(data: dict[str, Any]) -> dict[str, Any]:
    r = data["results"]
    assert isinstance(r, dict)
    return r


def test_default_is_the_seed_command(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_text(capsys)
    assert out.startswith(f"KV capacity plan — {DEFAULT_DEPLOYMENT}\n")
    for needle in (
        "TP 8 × PP 9 × DP 1 = 72 of 72 GPUs",
        "35,136 B (34.31 KiB)",  # all layers, one copy
        "4,032 B (3.94 KiB)",  # per GPU of a 7-layer stage
        "← bottleneck",
        "66,921,088",  # KV tokens
        "288 GiB nominal, 277.55 GiB visible to CUDA each",
        "Sessions of 1,000,000 tokens",
        "Assumptions",
    ):
        assert needle in out
    assert "Warnings" not in out


def test_json_has_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys)
    r = results(data)
    expected = plan(get_deployment(DEFAULT_DEPLOYMENT))
    assert r["kv_bytes_per_token_gpu"] == expected.kv_bytes_per_token_gpu == 4032
    assert r["kv_tokens_total"] == expected.kv_tokens_total == 66_921_088
    assert r["sessions_total"] == 66
    deployment = data["deployment"]
    assert (deployment["tp"], deployment["pp"], deployment["kv_dtype"]) == (8, 9, "fp8_e4m3")
    assert deployment["model"]["attention"]["kind"] == "mla"
    assert len(data["stages"]) == 9
    assert data["assumptions"] and data["warnings"] == []


def test_overrides_by_flag(capsys: pytest.CaptureFixture[str]) -> None:
    bf16 = results(run_json(capsys, "--kv-dtype", "bf16"))
    assert bf16["kv_bytes_per_token_gpu"] == 2 * 4032
    r = results(run_json(capsys, "--tp", "8", "--pp", "4", "--dp", "2", "--context", "128k"))
    assert r["gpus_used"] == 64 and r["gpus_idle"] == 8 and r["replicas"] == 2
    assert r["context_tokens"] == 128_000
    assert r["kv_tokens_total"] == 2 * r["kv_tokens_per_replica"]
    r = results(
        run_json(capsys, "--block-size", "16", "--gpu-mem-util", "0.9", "--reserve-gib", "0")
    )
    assert r["blocks_per_session"] == 62_500 and r["reserve_bytes_per_gpu"] == 0
    r = results(run_json(capsys, "--pp-partition", "5,7,7,7,7,7,7,7,7"))
    assert r["bottleneck_stage"] == 1


def test_nominal_and_visible_memory_by_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """--gpu-visible-gib sets what CUDA sees; --gpu-mem-gib alone replaces the nominal figure,
    and the catalog's visible one (which belonged to the old figure) is dropped."""
    given = run_json(capsys, "--gpu-visible-gib", "277")
    assert results(given)["memory_bytes_per_gpu"] == 277 * GIB
    assert results(given)["nominal_memory_bytes_per_gpu"] == 288 * GIB
    assert given["deployment"]["hardware"]["visible_memory_source"].startswith("given")
    nominal = run_json(capsys, "--gpu-mem-gib", "300")
    assert results(nominal)["memory_bytes_per_gpu"] == 300 * GIB
    assert nominal["deployment"]["hardware"]["gpu_memory_visible_gib"] is None
    both = results(run_json(capsys, "--gpu-mem-gib", "300", "--gpu-visible-gib", "290"))
    assert (both["nominal_memory_bytes_per_gpu"], both["memory_bytes_per_gpu"]) == (
        300 * GIB,
        290 * GIB,
    )
    out = run_text(capsys, "--gpu-mem-gib", "300")
    assert "memory (nominal; visible unknown)  300.00 GiB" in out


def test_model_and_hardware_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "--model", "qwen2.5-coder-32b", "--hardware", "hgx-h100", "--tp", "4")
    r = results(data)
    assert r["kv_bytes_per_token_gpu"] == 64 * 1024
    assert r["gpus_used"] == 4 and r["gpus_idle"] == 4
    assert r["context_tokens"] == 131_072  # capped at the model's window
    # A named deployment with another model: the window follows the new model.
    r = results(run_json(capsys, "--deployment", DEFAULT_DEPLOYMENT, "--model", "deepseek-v4"))
    assert r["max_model_len"] == 131_072


def test_model_fields_by_flag(capsys: pytest.CaptureFixture[str]) -> None:
    # MLA → GQA needs both fields; then it is Qwen-like on the SEED rack.
    data = run_json(
        capsys, "--kv-heads", "8", "--head-dim", "128", "--attention-heads", "64", "--pp", "1"
    )
    model = data["deployment"]["model"]
    assert model["attention"] == {
        "kind": "gqa",
        "kv_heads": 8,
        "head_dim": 128,
        "attention_heads": 64,
    }
    assert results(data)["kv_bytes_per_token_gpu"] == 61 * 2 * 128 * 1  # fp8, 1 head per GPU
    r = results(run_json(capsys, "--layers", "43", "--params", "284B", "--weight-dtype", "fp4"))
    assert r["weight_bytes_total"] == 142 * 10**9
    assert r["kv_bytes_per_token_model"] == 43 * 576


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_text(capsys, "--list")
    assert f"* {DEFAULT_DEPLOYMENT}" in out and "hgx-h200" in out and "qwen2.5-coder-32b" in out
    data = run_json(capsys, "--list")
    assert data["default_deployment"] == DEFAULT_DEPLOYMENT
    assert {m["name"] for m in data["models"]} >= {"deepseek-v4", "qwen2.5-coder-32b"}


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (("--gpus", "64"), "tp × pp × dp = 8 × 9 × 1 = 72 GPUs, but gpus=64"),
        (("--tp", "1", "--pp", "1"), "the weights do not fit"),
        (("--kv-dtype", "int3"), "kv_dtype='int3'"),
        (("--gpu-mem-util", "1.5"), "gpu_memory_utilization"),
        (("--model", "qwen2.5-coder-32b"), "--model and --hardware go together"),
        # An unknown name alone was told it needs the other flag, not that it is unknown.
        (("--model", "nope"), r"^unknown model 'nope'; known: .*qwen2\.5-coder-32b"),
        (("--hardware", "nope"), r"^unknown hardware 'nope'; known: "),
        (("--deployment", "nope"), "unknown deployment 'nope'"),
        (("--kv-heads", "8"), "switching to GQA needs both"),
        (("--kv-heads", "8", "--kv-lora-rank", "512"), "not both"),
        (("--context", "0"), "context_tokens must be ≥ 1"),
        # 0 was falsy, so it was ignored and the deployment's 128 heads planned with.
        (("--attention-heads", "0"), "attention_heads must be an integer ≥ 1, got 0"),
        (("--attention-heads", "-8"), "attention_heads must be an integer ≥ 1, got -8"),
        # The plan printed 300-digit token counts.
        (("--gpu-mem-gib", "1.7e308"), r"gpu_memory_gib must be > 0 GiB and at most 65536 GiB"),
        (("--reserve-gib", "1e300"), r"reserve_gib must be ≥ 0 GiB and at most 65536 GiB"),
    ],
)
def test_bad_input_is_a_config_error(argv: tuple[str, ...], match: str) -> None:
    args = parse(*argv)
    with pytest.raises(ConfigError, match=match):
        args.func(args)


def test_changed_deployments_say_so() -> None:
    d = deployment_from_args(parse("--tp", "16", "--pp", "4"))
    assert d.name.endswith("(modified)") and "tp=16" in d.sources and "pp=4" in d.sources
    assert deployment_from_args(parse()) is get_deployment(DEFAULT_DEPLOYMENT)


def test_argparse_rejects_what_is_not_a_count() -> None:
    with pytest.raises(SystemExit):
        parse("--context", "lots")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1000000", 1_000_000),
        ("1_000_000", 1_000_000),
        ("1M", 1_000_000),
        ("128k", 128_000),
        ("32.5B", 32_500_000_000),
        ("552e9", 552_000_000_000),
        ("2T", 2 * 10**12),
    ],
)
def test_parse_count(text: str, value: int) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5", "-3", "1X", "1e19", "1e400000", "1e99999999"])
def test_parse_count_refuses(text: str) -> None:
    """Not a whole count, or past 10¹⁸ (a huge exponent was a traceback: Decimal's
    Overflow, or Python's limit on int digits)."""
    with pytest.raises(argparse.ArgumentTypeError):
        parse_count(text)


def test_module_main_prints_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m agentflow.planner: error: ") and err.count("\n") == 1
    assert main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"]["sessions_total"] == 66
