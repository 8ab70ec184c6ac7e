"""``agentflow plan``: the KV-cache capacity of a deployment, from the command line.

Start from a shipped deployment (``--deployment``; the report's vLLM command by default), or
from ``--model`` and ``--hardware``, then override any field by flag::

    agentflow plan                                   # the report's command (SEED.md)
    agentflow plan --kv-dtype bf16 --context 128k    # the same with a bf16 cache, 128k sessions
    agentflow plan --model qwen2.5-coder-32b --hardware hgx-h100 --tp 4 --json
    agentflow plan --list

Bad values raise :class:`~agentflow.ConfigError` naming the field; ``agentflow``'s entry point
prints it and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Sequence
from decimal import Decimal, DecimalException
from typing import Any

from agentflow._errors import ConfigError

from ._catalog import DEFAULT_DEPLOYMENT, get_deployment, get_hardware, get_model
from ._kv import plan
from ._render import catalog_to_dict, plan_to_dict, render_catalog, render_plan
from ._specs import MAX_COUNT, Deployment, GQAAttention, MLAAttention, ModelSpec

__all__ = ["add_parser", "build_parser", "deployment_from_args", "main", "parse_count", "run"]

_DESCRIPTION = (
    "Plan a vLLM deployment's KV cache: bytes per token per GPU, tokens it holds, and how many "
    "sessions of a given length fit at once. Every assumption is printed with the result."
)

_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_COUNT = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]+)?(?:e[0-9]+)?)\s*([kmbgt]?)\s*$", re.I)


def parse_count(text: str) -> int:
    """A whole count from ``text``: ``1000000``, ``1_000_000``, ``1M``, ``128k``, ``32.5B``.

    Suffixes are decimal (k = 10³, M = 10⁶, B or G = 10⁹, T = 10¹²).

    Raises:
        argparse.ArgumentTypeError: not a count, or not a whole number.
    """
    match = _COUNT.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (e.g. 1000000, 1M, 128k, 32.5B)")
    try:
        value = Decimal(match.group(1).replace("_", "")) * _SUFFIXES[match.group(2).lower()]
        if value > MAX_COUNT:  # 1e99999999 is a Decimal; its int would take minutes
            raise argparse.ArgumentTypeError(f"too large: {text!r} (at most {MAX_COUNT:.0e})")
        if value != value.to_integral_value():
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    except DecimalException:  # an exponent past Decimal's own range
        raise argparse.ArgumentTypeError(f"too large: {text!r} (at most {MAX_COUNT:.0e})") from None
    return int(value)


def _partition(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--pp-partition wants layers per stage like 6,7,7, got {text!r}"
        ) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the ``plan`` options to ``p``."""
    pick = p.add_argument_group("what to plan")
    pick.add_argument("--list", action="store_true", help="list the shipped specs and exit")
    pick.add_argument(
        "--deployment", help=f"a shipped deployment to start from (default {DEFAULT_DEPLOYMENT})"
    )
    pick.add_argument("--model", help="a shipped model (replaces the deployment's)")
    pick.add_argument("--hardware", help="shipped hardware (replaces the deployment's)")
    pick.add_argument(
        "--context",
        type=parse_count,
        help="tokens per session for the session count (default 1M = 1,000,000, or "
        "max_model_len when that is shorter)",
    )
    pick.add_argument("--json", action="store_true", help="print JSON instead of text")
    dep = p.add_argument_group("deployment overrides (vLLM's flags)")
    dep.add_argument("--tp", type=int, help="--tensor-parallel-size")
    dep.add_argument("--pp", type=int, help="--pipeline-parallel-size")
    dep.add_argument("--dp", type=int, help="--data-parallel-size (independent replicas)")
    dep.add_argument(
        "--gpus",
        type=int,
        help="GPUs to use (default: all of the hardware's; more: several of it, e.g. nodes)",
    )
    dep.add_argument(
        "--pp-partition", type=_partition, help="layers per stage, e.g. 6,7,7 (default: vLLM's)"
    )
    dep.add_argument("--kv-dtype", help="--kv-cache-dtype: bf16, fp16, fp8_e4m3, fp8_e5m2, fp32…")
    dep.add_argument(
        "--gpu-mem-util",
        "--gpu-memory-utilization",
        dest="gpu_mem_util",
        type=float,
        help="--gpu-memory-utilization, in (0, 1]",
    )
    dep.add_argument("--block-size", type=int, help="tokens per KV block")
    dep.add_argument("--max-model-len", type=parse_count, help="--max-model-len")
    dep.add_argument(
        "--reserve-gib",
        type=float,
        help="GiB per GPU for activations, NCCL, CUDA context and graphs (default 5)",
    )
    hw = p.add_argument_group("hardware overrides")
    hw.add_argument(
        "--gpu-mem-gib",
        type=float,
        help="nominal memory per GPU, GiB (alone: the visible figure becomes unknown)",
    )
    hw.add_argument(
        "--gpu-visible-gib",
        type=float,
        help="memory per GPU visible to CUDA, GiB (vLLM's logged total_gpu_memory)",
    )
    mod = p.add_argument_group("model overrides")
    mod.add_argument("--layers", type=int, help="layers with a KV cache")
    mod.add_argument("--kv-heads", type=int, help="GQA: KV heads per layer")
    mod.add_argument("--head-dim", type=int, help="GQA: values per head")
    mod.add_argument("--attention-heads", type=int, help="query heads (TP must divide them)")
    mod.add_argument("--kv-lora-rank", type=int, help="MLA: latent width")
    mod.add_argument("--qk-rope-head-dim", type=int, help="MLA: RoPE key width")
    mod.add_argument("--params", type=parse_count, help="total parameters, e.g. 552B")
    mod.add_argument("--active-params", type=parse_count, help="active parameters, e.g. 16B")
    mod.add_argument("--weight-dtype", help="weight dtype: bf16, fp8, fp4, int4…")


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``plan`` subcommand to ``parser.add_subparsers()``; it runs :func:`run`."""
    p = subparsers.add_parser(
        "plan", help="plan a deployment's KV-cache capacity", description=_DESCRIPTION
    )
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def build_parser(prog: str = "agentflow plan") -> argparse.ArgumentParser:
    """A stand-alone parser with the ``plan`` options (for ``python -m`` and tests)."""
    p = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION)
    add_arguments(p)
    return p


def _model(base: ModelSpec, args: argparse.Namespace, notes: list[str]) -> ModelSpec:
    attn = base.attention
    gqa = {"kv_heads": args.kv_heads, "head_dim": args.head_dim}
    mla = {"kv_lora_rank": args.kv_lora_rank, "qk_rope_head_dim": args.qk_rope_head_dim}
    gqa_set = {k: v for k, v in gqa.items() if v is not None}
    mla_set = {k: v for k, v in mla.items() if v is not None}
    if gqa_set and mla_set:
        raise ConfigError(
            "give GQA fields (--kv-heads, --head-dim) or MLA fields (--kv-lora-rank, "
            "--qk-rope-head-dim), not both"
        )
    heads = {} if args.attention_heads is None else {"attention_heads": args.attention_heads}
    if gqa_set:
        if isinstance(attn, GQAAttention):
            attn = dataclasses.replace(attn, **gqa_set, **heads)
        elif len(gqa_set) < 2:
            raise ConfigError("switching to GQA needs both --kv-heads and --head-dim")
        else:
            attn = GQAAttention(**gqa_set, **heads)
    elif mla_set:
        if isinstance(attn, MLAAttention):
            attn = dataclasses.replace(attn, **mla_set, **heads)
        elif len(mla_set) < 2:
            raise ConfigError("switching to MLA needs both --kv-lora-rank and --qk-rope-head-dim")
        else:
            attn = MLAAttention(**mla_set, **heads)
    elif heads:
        attn = dataclasses.replace(attn, **heads)
    changes: dict[str, Any] = {}
    for flag, field in (
        ("layers", "layers"),
        ("params", "total_params"),
        ("active_params", "active_params"),
        ("weight_dtype", "weight_dtype"),
    ):
        if getattr(args, flag) is not None:
            changes[field] = getattr(args, flag)
    if "total_params" in changes and "active_params" not in changes:
        changes["active_params"] = min(base.active_params, changes["total_params"])
    if attn is not base.attention:
        changes["attention"] = attn
    if not changes:
        return base
    said = ", ".join(f"{k}={v.describe() if k == 'attention' else v}" for k, v in changes.items())
    notes.append(f"model {base.name}: {said}")
    return dataclasses.replace(base, name=f"{base.name} (modified)", **changes)


def deployment_from_args(args: argparse.Namespace) -> Deployment:
    """The deployment the parsed ``plan`` arguments describe.

    Raises:
        ConfigError: an unknown name, or a field the specs refuse (the message names it).
    """
    if args.deployment or not (args.model or args.hardware):
        base = get_deployment(args.deployment or DEFAULT_DEPLOYMENT)
    else:
        # A name that is wrong is said first: it is wrong either way.
        model = get_model(args.model) if args.model else None
        hardware = get_hardware(args.hardware) if args.hardware else None
        if model is None or hardware is None:
            raise ConfigError(
                "--model and --hardware go together when no --deployment is given "
                f"(or start from one: --deployment {DEFAULT_DEPLOYMENT})"
            )
        base = Deployment(name=f"{model.name} on {hardware.name}", model=model, hardware=hardware)
    notes: list[str] = []
    changes: dict[str, Any] = {}
    if args.deployment and args.model:
        changes.update(model=get_model(args.model), max_model_len=None, pp_partition=None)
        notes.append(f"model={args.model}")
    if args.deployment and args.hardware:
        changes.update(hardware=get_hardware(args.hardware), gpus=None)
        notes.append(f"hardware={args.hardware}")
    hardware = changes.get("hardware", base.hardware)
    memory: dict[str, Any] = {}
    if args.gpu_mem_gib is not None:
        # Another nominal figure: the catalog's visible one belonged to the old one.
        memory.update(gpu_memory_gib=args.gpu_mem_gib, visible_memory_source="")
        memory["gpu_memory_visible_gib"] = None
    if args.gpu_visible_gib is not None:
        memory["gpu_memory_visible_gib"] = args.gpu_visible_gib
        memory["visible_memory_source"] = "given on the command line (--gpu-visible-gib)."
    if memory:
        hardware = dataclasses.replace(hardware, **memory)
        changes["hardware"] = hardware
        said = ", ".join(f"{k}={v:g}" for k, v in memory.items() if isinstance(v, float))
        notes.append(f"hardware {hardware.name}: {said or 'gpu_memory_visible_gib=None'}")
    model = _model(changes.get("model", base.model), args, notes)
    if model is not base.model:
        changes["model"] = model
    for flag, field in (
        ("tp", "tp"),
        ("pp", "pp"),
        ("dp", "dp"),
        ("gpus", "gpus"),
        ("pp_partition", "pp_partition"),
        ("kv_dtype", "kv_dtype"),
        ("gpu_mem_util", "gpu_memory_utilization"),
        ("block_size", "block_size"),
        ("max_model_len", "max_model_len"),
        ("reserve_gib", "reserve_gib"),
    ):
        value = getattr(args, flag)
        if value is not None:
            changes[field] = value
            notes.append(f"{field}={list(value) if field == 'pp_partition' else value}")
    if "pp" in changes and "pp_partition" not in changes:
        changes["pp_partition"] = None
    if not changes:
        return base
    if notes:
        changes["name"] = f"{base.name} (modified)"
        changes["sources"] = (
            f"{base.sources} Changed on the command line: {'; '.join(notes)}.".strip()
        )
    return dataclasses.replace(base, **changes)


def run(args: argparse.Namespace) -> int:
    """Print the plan (or the catalog, with ``--list``) the arguments ask for; the exit code.

    Raises:
        ConfigError: bad input; the message names the field and the value.
    """
    if args.list:
        text = json.dumps(catalog_to_dict(), indent=2) + "\n" if args.json else render_catalog()
        sys.stdout.write(text)
        return 0
    result = plan(deployment_from_args(args), context_tokens=args.context)
    if args.json:
        sys.stdout.write(json.dumps(plan_to_dict(result), indent=2) + "\n")
    else:
        sys.stdout.write(render_plan(result))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentflow.planner``: the ``plan`` subcommand on its own."""
    args = build_parser("python -m agentflow.planner").parse_args(argv)
    try:
        return run(args)
    except ConfigError as exc:  # one line, exit 2, as `agentflow plan` and argparse do
        print(f"python -m agentflow.planner: error: {exc}", file=sys.stderr)
        return 2
