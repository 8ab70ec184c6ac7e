"""``agentflow sim`` (and ``python -m agentflow.sim``): serve the simulator over HTTP.

:func:`add_sim_parser` adds the ``sim`` subcommand to an ``argparse`` subparsers object;
:func:`run_sim` serves until SIGINT or SIGTERM. Once listening it prints one line to
stdout, ``agentflow sim: serving <model> at http://HOST:PORT/v1 …``, so a parent process
that started it with ``--port 0`` can read the port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from agentflow._cli_signals import run_command
from agentflow._cliargs import (
    OneLineParser,
    at_least,
    check_listen,
    fail,
    header_name,
    non_negative,
    port,
)
from agentflow._errors import ConfigError
from agentflow.sim.faults import FaultConfig
from agentflow.sim.profiles import Profile, get_profile, profile_names
from agentflow.sim.server import SimServer
from agentflow.sim.textgen import TextGenConfig

__all__ = ["add_sim_arguments", "add_sim_parser", "main", "run_sim", "server_from_args"]

_DESCRIPTION = (
    "Serve agentflow's engine simulator: an OpenAI-compatible, vLLM-like server with "
    "continuous batching, a finite KV cache, a prefix cache and a timing model. "
    "Faults can also be forced per request with the X-Agentflow-Fault header."
)
_FAULT_HELP = {
    "rate_limit": "429 with Retry-After",
    "server_error": "500",
    "unavailable": "503 with Retry-After",
    "reset_mid_stream": "connection reset after some output",
    "stall_mid_stream": "no bytes for --stall-seconds after some output",
    "malformed_chunk": "one payload that is not JSON after some output",
    "cut_stream": "body ends after some output, no finish and no [DONE]",
}
_FAULT_FLAGS = {
    "rate_limit": "--fault-rate-limit",
    "server_error": "--fault-server-error",
    "unavailable": "--fault-unavailable",
    "reset_mid_stream": "--fault-reset",
    "stall_mid_stream": "--fault-stall",
    "malformed_chunk": "--fault-malformed",
    "cut_stream": "--fault-cut",
}


def _number(text: str, ok: Callable[[float], bool], need: str) -> float:
    """``text`` as a float that ``ok`` accepts; else an argparse error saying ``need``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{need}, got {text}")
    return value


def _rate(text: str) -> float:
    return _number(text, lambda v: 0 <= v <= 1, "a rate must be in [0, 1]")


def _positive(text: str) -> float:
    return _number(text, lambda v: v > 0 and math.isfinite(v), "must be a finite number > 0")


def _seconds(text: str) -> float:
    """A finite number ≥ 0 (a header's ``Retry-After`` must be one)."""
    return non_negative(text)


def _range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    try:
        a = int(lo)
        b = int(hi) if sep else a
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or MIN:MAX, got {text!r}") from None
    if not 0 < a <= b:
        raise argparse.ArgumentTypeError(f"expected 0 < MIN ≤ MAX, got {text!r}")
    return a, b


def add_sim_arguments(p: argparse.ArgumentParser) -> None:
    """Add the simulator's options to a parser."""
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=port, default=8000, help="port (0: a free one)")
    p.add_argument(
        "--profile",
        default="cpu-tiny",
        help=f"deployment profile: {', '.join(profile_names())} (default: cpu-tiny)",
    )
    p.add_argument(
        "--profile-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one profile field, e.g. max_num_seqs=512 (repeatable)",
    )
    p.add_argument("--seed", type=int, default=0, help="fixes every output")
    p.add_argument(
        "--time-scale",
        type=_positive,
        default=1.0,
        help="wall seconds per engine second (10 = a rack at a tenth of its speed)",
    )
    p.add_argument(
        "--tokens-per-chunk",
        type=at_least(1),
        default=1,
        help="output tokens per SSE chunk after the first",
    )
    p.add_argument(
        "--tool-rounds",
        type=at_least(0),
        default=3,
        help="tool-calling turns before a final answer",
    )
    p.add_argument(
        "--session-header",
        type=header_name,
        default="X-Session-ID",
        metavar="NAME",
        help="header naming a conversation: its tool rounds are counted across its "
        "requests, so compaction does not reset them ('' counts only visible rounds)",
    )
    p.add_argument(
        "--sessions",
        type=int,
        default=10_000,
        help="conversations whose tool rounds are remembered (least recently used go first)",
    )
    p.add_argument(
        "--answer-tokens",
        type=_range,
        default=None,
        metavar="MIN[:MAX]",
        help="tokens of a final answer (default 32:256; MAX at most the profile's max_model_len)",
    )
    p.add_argument("--served-model-name", default=None, help="model name (default: profile's)")
    p.add_argument("--no-prefix-caching", action="store_true", help="disable the prefix cache")
    p.add_argument(
        "--keep-records", type=int, default=1000, help="finished requests' ground truth kept"
    )
    p.add_argument(
        "--max-batch-ms",
        type=_positive,
        default=10.0,
        help="when the server falls behind the modelled speed: steps taken back to back "
        "before one write per stream (default 10)",
    )
    g = p.add_argument_group("fault injection (rates are probabilities per request)")
    for kind, flag in _FAULT_FLAGS.items():
        g.add_argument(
            flag,
            dest=f"fault_{kind}",
            type=_rate,
            default=0.0,
            metavar="RATE",
            help=f"{kind}: {_FAULT_HELP[kind]}",
        )
    g.add_argument(
        "--retry-after",
        type=_seconds,
        default=1.0,
        help="Retry-After of 429/503, s (sent whole: a fraction rounds up)",
    )
    g.add_argument("--stall-seconds", type=_positive, default=30.0, help="length of a stall, s")
    g.add_argument("--fault-seed", type=int, default=None, help="seed of the draws (--seed)")
    g.add_argument(
        "--no-fault-header",
        action="store_true",
        help="ignore the X-Agentflow-Fault request header",
    )
    p.add_argument(
        "--uvloop", action="store_true", help="run on uvloop (if installed; ms-resolution timers)"
    )
    p.add_argument("--quiet", action="store_true", help="print only the serving line")


def add_sim_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``sim`` subcommand to ``parser.add_subparsers()``; it runs :func:`run_sim`."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "sim",
        help="serve the engine simulator (an OpenAI-compatible, vLLM-like server)",
        description=_DESCRIPTION,
    )
    add_sim_arguments(p)
    p.set_defaults(func=run_sim)
    return p


def _profile(args: argparse.Namespace) -> Profile:
    profile = get_profile(args.profile)  # UnknownProfileError is a ConfigError
    changes: dict[str, Any] = {}
    types = {f.name: f.type for f in dataclasses.fields(Profile)}
    for item in args.profile_set:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or name not in types:
            raise ConfigError(
                f"--profile-set wants FIELD=VALUE with FIELD one of "
                f"{', '.join(sorted(types))}; got {item!r}"
            )
        kind = str(types[name])
        try:
            changes[name] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
        except ValueError:
            raise ConfigError(f"--profile-set {name} wants a {kind}, got {raw!r}") from None
    if changes:
        try:
            profile = dataclasses.replace(profile, **changes)
        except ValueError as exc:
            raise ConfigError(f"--profile-set: {exc}") from None
    return profile


def server_from_args(args: argparse.Namespace) -> SimServer:
    """A :class:`SimServer` configured from parsed ``sim`` arguments (not started).

    Raises:
        ConfigError: a value is wrong (the message names it).
    """
    textgen_kw: dict[str, Any] = {"tool_rounds": args.tool_rounds, "sessions": args.sessions}
    profile = _profile(args)
    if args.answer_tokens is not None:
        textgen_kw["answer_tokens"] = args.answer_tokens
    try:
        textgen = TextGenConfig(**textgen_kw)
        # The engine's own check, in the flag's name.
        textgen.check_window(profile.max_model_len, "--answer-tokens")
        faults = FaultConfig(
            **{kind: getattr(args, f"fault_{kind}") for kind in _FAULT_FLAGS},
            retry_after_s=args.retry_after,
            stall_s=args.stall_seconds,
            seed=args.seed if args.fault_seed is None else args.fault_seed,
            honour_header=not args.no_fault_header,
        )
        return SimServer(
            profile,
            host=args.host,
            port=args.port,
            seed=args.seed,
            time_scale=args.time_scale,
            tokens_per_chunk=args.tokens_per_chunk,
            textgen=textgen,
            faults=faults,
            served_model_name=args.served_model_name,
            enable_prefix_caching=not args.no_prefix_caching,
            keep_records=args.keep_records,
            max_batch_s=args.max_batch_ms / 1000.0,
            session_header=args.session_header or None,
        )
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


async def _serve(server: SimServer, quiet: bool) -> None:
    try:
        await server.start()
    except OSError as exc:  # taken between run_sim's check and the bind
        raise ConfigError(
            f"cannot listen on --host {server.host!r} --port {server.port}: {exc.strerror or exc}"
        ) from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    handled: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Windows' loops have no signal handlers: there Ctrl-C ends the run (asyncio's
        # own SIGINT handling cancels it), as the worker and the demo allow.
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    try:
        profile = server.engine.profile
        print(
            f"agentflow sim: serving {server.model} at {server.base_url} "
            f"(profile {profile.name}, time scale {server.driver.time_scale:g}, "
            f"{server.driver.tokens_per_chunk} token(s) per chunk)",
            flush=True,
        )
        if not quiet:
            print(
                f"  {profile.description}; max_num_seqs={profile.max_num_seqs}, "
                f"max_model_len={profile.max_model_len}, KV {profile.kv_capacity_tokens} tokens. "
                "Ctrl-C stops.",
                file=sys.stderr,
                flush=True,
            )
        await stop.wait()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await server.stop()


def run_sim(args: argparse.Namespace) -> int:
    """Serve the simulator configured by ``args`` until SIGINT or SIGTERM; the exit code
    (0: stopped by a signal, which is how a server is meant to stop).

    Raises:
        ConfigError: a bad value, or ``--host``/``--port`` cannot be listened on (checked
            before the server is built).
    """
    check_listen(args.host, args.port)
    server = server_from_args(args)
    if args.uvloop:
        try:
            import uvloop  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise ConfigError(
                "--uvloop needs uvloop, which is not installed: pip install 'agentflow[fast]'"
            ) from None
        run_command(_serve(server, args.quiet), loop_factory=uvloop.new_event_loop)
    else:
        run_command(_serve(server, args.quiet))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentflow.sim``: the ``sim`` subcommand on its own."""
    p = OneLineParser(prog="python -m agentflow.sim", description=_DESCRIPTION)
    add_sim_arguments(p)
    args = p.parse_args(argv)
    try:
        return run_sim(args)
    except ConfigError as exc:
        return fail(p.prog, exc)
    except KeyboardInterrupt:
        return 130
