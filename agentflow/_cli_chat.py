"""``agentflow chat``: stream one prompt from an OpenAI-compatible server, the answer to
stdout and its latency figures to stderr."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from agentflow._agent import Agent
from agentflow._base_url import check_base_url
from agentflow._cli_signals import run_command
from agentflow._cli_timeouts import _add_timeout_arguments, _timeouts
from agentflow._cliargs import at_least, non_empty, non_negative
from agentflow._events import Event, TokenEvent
from agentflow._printable import printable
from agentflow.transport import Endpoint, HTTPTransport

__all__ = ["add_chat_parser"]

_DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


def add_chat_parser(sub: Any) -> None:
    """Add ``chat`` to the ``agentflow`` command's subparsers."""
    chat = sub.add_parser("chat", help="stream one prompt and print its latency figures")
    chat.add_argument("prompt", help="the user message to send")
    chat.add_argument(
        "--base-url",
        default=None,
        help=f"the server, up to /v1 (default: $OPENAI_BASE_URL or {_DEFAULT_BASE_URL})",
    )
    chat.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="defaults to $OPENAI_API_KEY"
    )
    chat.add_argument(
        "--model", type=non_empty, required=True, help="the model name the server serves"
    )
    chat.add_argument("--system", default="", help="a system message (default: none)")
    chat.add_argument(
        "--max-tokens", type=at_least(1), default=256, help="most output tokens (default 256)"
    )
    chat.add_argument(
        "--temperature",
        type=non_negative,
        default=0.0,
        help="sampling temperature, a finite number ≥ 0 (default 0)",
    )
    _add_timeout_arguments(chat)
    chat.set_defaults(func=_chat)


def _chat(args: argparse.Namespace) -> int:
    """Stream one answer to stdout, and its latency figures to stderr.

    On a terminal the answer streams as it arrives. If an attempt fails mid-stream and
    is retried (an ``AttemptDiscardedEvent``), the text it printed is marked as
    discarded on a line of its own and the retry's answer starts on the next line.
    When stdout is not a terminal nothing streams: only the final answer is written,
    once, so a pipe or a file gets exactly the answer. Retries are noted on stderr.
    Interrupted (Ctrl-C) once some of the answer streamed, it ends that line and says
    ``agentflow chat: interrupted`` on stderr (the exit status is 130, as for any
    interrupted command).
    """
    from agentflow._events import AttemptDiscardedEvent, RetryEvent

    base_url = _base_url(args.base_url)
    agent = Agent(
        name="chat",
        model=args.model,
        instructions=args.system,
        params={"max_tokens": args.max_tokens, "temperature": args.temperature},
    )
    live = sys.stdout.isatty()
    streamed = False  # some of an answer was shown on the terminal
    midline = False  # ... and its line is not ended

    def show(event: Event) -> None:
        nonlocal streamed, midline
        if isinstance(event, TokenEvent):
            if live and event.kind == "content" and event.text:
                sys.stdout.write(event.text)
                sys.stdout.flush()
                streamed = midline = True
        elif isinstance(event, AttemptDiscardedEvent):
            if live and event.content_chars:
                then = "; the answer restarts below" if event.retried else ""
                sys.stdout.write(f"\n[discarded: that attempt failed{then}]\n")
                sys.stdout.flush()
                midline = False
        elif isinstance(event, RetryEvent):
            a = event.attempt
            print(
                f"agentflow: attempt {a.attempt + 1} failed ({type(a.error).__name__}: "
                f"{printable(str(a.error))}); retrying in {a.wait_s:.2f} s",
                file=sys.stderr,
                flush=True,
            )

    async def run() -> int:
        nonlocal midline
        endpoint = Endpoint(base_url=base_url, api_key=args.api_key)
        async with HTTPTransport(endpoint, timeouts=_timeouts(args)) as transport:
            result = await agent.session(args.prompt).run(transport, callbacks=[show])
        if live:
            print()
            midline = False
        elif result.final_output is not None:
            print(result.final_output)
        if not result.turns:
            raise result.error or RuntimeError("no turn finished")
        m = result.turns[-1].metrics
        ttft = f"{m.ttft_s * 1e3:.1f} ms" if m.ttft_s is not None else "n/a"
        tps = f"{m.decode_tps:.1f}" if m.decode_tps is not None else "n/a"
        cached = "not reported" if m.cached_tokens is None else str(m.cached_tokens)
        prompt = "not reported" if m.prompt_tokens is None else str(m.prompt_tokens)
        print(
            f"ttft {ttft} · e2e {m.e2e_s * 1e3:.1f} ms · decode {tps} tok/s · "
            f"output {m.output_tokens} ({m.output_tokens_source}) · prompt {prompt} "
            f"· cached {cached}",
            file=sys.stderr,
        )
        return 0 if result.ok else 1

    try:
        return run_command(run())
    except KeyboardInterrupt:  # the caller exits 130; the terminal gets its line back
        if midline:
            sys.stdout.write("\n")
            sys.stdout.flush()
        if streamed:
            print("agentflow chat: interrupted", file=sys.stderr, flush=True)
        raise


def _base_url(given: str | None) -> str:
    """The server's URL: ``--base-url``, else ``$OPENAI_BASE_URL``, else the default; a
    malformed one is a :class:`ConfigError` naming where it came from (not the
    ``Endpoint`` field it goes to)."""
    field, url = "--base-url", given
    if url is None:
        field, url = "$OPENAI_BASE_URL", os.environ.get("OPENAI_BASE_URL")
    if url is None:
        return _DEFAULT_BASE_URL
    check_base_url(url, field)
    return url
