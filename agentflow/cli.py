"""The ``agentflow`` command.

``agentflow demo``      a fleet of coding agents on the embedded simulator, with a live view
``agentflow resume``    resume a recorded ``agentflow demo --store`` run where it stopped
``agentflow sim``       serve the engine simulator over HTTP (OpenAI-compatible, vLLM-like)
``agentflow chat``      stream one prompt from any OpenAI-compatible server, with its metrics
``agentflow llamacpp``  serve SmolLM2-135M on 127.0.0.1 with llama.cpp (needs the extra)
``agentflow plan``      KV-cache capacity of a deployment: tokens, and 1M-token sessions held
``agentflow report``    plots of run reports (latency CDFs, interactivity vs throughput) in HTML
``agentflow bench``     open-loop agentic load, level by level, sweeps to saturation
``agentflow trace``     traces: convert Mooncake's, export a stored run, show one

Nothing in the library imports this module.

Exit status: 0 success; 1 a run that ended with failed sessions, or an error at run time;
2 a bad argument (one line, ``agentflow CMD: error: …``, checked before any work
starts); 130 / 143 stopped by SIGINT / SIGTERM (``128 + signal``; ``agentflow demo``
still writes its report of what ran). ``agentflow sim`` and ``agentflow llamacpp`` are
servers: SIGINT and SIGTERM are how they stop, with status 0 (``llamacpp`` exits 1 if its
llama.cpp server dies on its own). SIGTERM is handled like
Ctrl-C everywhere, so every command stops its child processes on its way out; within an
event loop it cancels the run's main task, which unwinds in order before the command exits
(``agentflow/_cli_signals.py``: one handler for every command, and ``run_command``, which
every command runs its coroutine with). 141 the
reader of standard output went away (``agentflow plan | head``): the rest is dropped
quietly, as a SIGPIPE death's would be (``agentflow/_cli_signals.py``) — a command asked
to write files (``bench --report``, ``demo --report``) still writes them first.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from agentflow._cli_signals import (
    STDOUT_GONE_STATUS,
    SigtermHandler,
    drop_stdout,
    stdout_dropped,
    stdout_gone,
)
from agentflow._cli_signals import Terminated as _Terminated
from agentflow._cliargs import OneLineParser, fail
from agentflow._errors import AgentflowError, ConfigError
from agentflow._files import OutputFileError
from agentflow._printable import printable

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentflow`` console script; returns the exit status."""
    # The handlers first: building the parser imports every command's module (a few
    # tenths of a second), and Ctrl-C or SIGTERM then must end it as anywhere else (130 /
    # 143, no traceback). This module itself imports only what that takes.
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, SigtermHandler()) if on_main else None
    prog = "agentflow"
    try:
        parser = _parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        prog = f"agentflow {args.command}"
        status = int(args.func(args))
        sys.stdout.flush()  # a reader gone shows here, not as an error at the interpreter's exit
        # A reader gone while a command went on to write its files (bench --report): 141.
        return STDOUT_GONE_STATUS if stdout_dropped() else status
    except BrokenPipeError:
        if not stdout_gone():
            raise
        return drop_stdout()  # `agentflow plan | head`: quietly, as a SIGPIPE death (141)
    except ConfigError as exc:
        return fail(prog, exc)
    except OutputFileError as exc:  # checked up front, but a directory can change since
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except AgentflowError as exc:
        # Its message may quote a server: control characters escaped, not sent to the terminal.
        print(f"{prog}: {type(exc).__name__}: {printable(str(exc))}", file=sys.stderr)
        return 1
    except _Terminated:
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _parser() -> argparse.ArgumentParser:
    from agentflow._cli_chat import add_chat_parser
    from agentflow._cli_demo import add_demo_parsers
    from agentflow._cli_llamacpp import add_llamacpp_parser

    p = OneLineParser(
        prog="agentflow",
        description=_DESCRIPTION,
        epilog="`agentflow COMMAND --help` describes a command; the library: docs/guide.md.",
    )
    sub: Any = p.add_subparsers(title="commands", dest="command")

    add_demo_parsers(sub)

    from agentflow.sim.cli import add_sim_parser

    add_sim_parser(sub)

    from agentflow.planner.cli import add_parser as add_plan_parser

    add_plan_parser(sub)

    from agentflow.report.cli import add_parser as add_report_parser

    add_report_parser(sub)

    from agentflow.bench.cli import add_parser as add_bench_parser

    add_bench_parser(sub)

    from agentflow.bench._trace_cli import add_trace_parser

    add_trace_parser(sub)

    add_chat_parser(sub)
    add_llamacpp_parser(sub)
    return p


_DESCRIPTION = (
    "agentflow runs fleets of streaming, tool-calling LLM agents against OpenAI-compatible "
    "servers (vLLM, SGLang, llama.cpp, hosted APIs) and measures every token: time to first "
    "token, time per output token, inter-token latency, decode speed. These commands run a "
    "demo fleet, serve a simulator or a real llama.cpp, stream one prompt, plan KV-cache "
    "capacity and turn run reports into HTML."
)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
