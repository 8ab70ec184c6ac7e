"""The ``agentflow`` commands' SIGTERM handler and ``run_command`` (``agentflow/_cli_signals.py``),
in process.

A real SIGTERM is raised in this process (``signal.raise_signal``: the handler runs at
once, where the signal is raised — inside a task, the worst place). Within a
``run_command`` run the handler must not raise there: it cancels the run's main task,
which unwinds in order, and :class:`Terminated` then comes out of ``run_command`` once the
runner has shut its loop down — with no "Task exception was never retrieved" on the way.
The same on every loop: asyncio's, the virtual-time one, uvloop's and one whose
``run_until_complete`` is its own (the handler finds nothing by looking at the stack).

Every command starts its event loop with ``run_command`` — checked here over the package's
source, so that a new command cannot forget.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import gc
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentflow._cli_signals import SigtermHandler, Terminated, run_command
from agentflow.embedded import VirtualTimeLoop

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

T = TypeVar("T")
Runner = Callable[[Coroutine[Any, Any, Any]], Any]


class OwnRunLoop(asyncio.SelectorEventLoop):
    """A loop whose ``run_until_complete`` is its own (as uvloop's and nest_asyncio's are):
    ``BaseEventLoop.run_until_complete`` is never on the stack."""

    def run_until_complete(self, future: Any) -> Any:
        task = asyncio.ensure_future(future, loop=self)
        task.add_done_callback(lambda _: self.stop())
        while not task.done():
            self.run_forever()
        return task.result()


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    uvloop = pytest.importorskip("uvloop")
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _runner(loop: str) -> Runner:
    factories: dict[str, Callable[[], Callable[[], asyncio.AbstractEventLoop] | None]] = {
        "asyncio": lambda: None,
        "virtual": lambda: VirtualTimeLoop,
        "own-run-until-complete": lambda: OwnRunLoop,
        "uvloop": _uvloop_factory,
    }
    factory = factories[loop]()

    def run(main: Coroutine[Any, Any, T]) -> T:
        return run_command(main, loop_factory=factory)

    return run


LOOPS = pytest.mark.parametrize("loop", ["asyncio", "virtual", "own-run-until-complete", "uvloop"])


@contextmanager
def sigterm_handled() -> Iterator[SigtermHandler]:
    """The handler ``agentflow.cli.main`` installs, for the block."""
    handler = SigtermHandler()
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGTERM, previous)


class Unretrieved:
    """What the loop's exception handler was told (a task's exception never retrieved, …)."""

    def __init__(self) -> None:
        self.contexts: list[dict[str, Any]] = []

    def watch(self) -> None:
        """Catch the running loop's reports (its handler stays set once it is closed)."""
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: self.contexts.append(ctx))

    def messages(self) -> list[str]:
        gc.collect()  # a task never retrieved says so when it is collected
        return [str(c.get("message")) for c in self.contexts]


@LOOPS
def test_sigterm_inside_a_child_task_cancels_the_run_in_order(loop: str) -> None:
    """The signal comes while a child task runs: that task goes on to its next await,
    is cancelled there, its parent's cleanup runs after it, and Terminated comes out of
    the runner. (Raised where the signal came, it killed the child mid-step — "went on"
    never happened — left its parent pending and its exception never retrieved.)"""
    run = _runner(loop)
    order: list[str] = []
    reports = Unretrieved()

    async def child() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            order.append("child went on")
            await asyncio.Event().wait()
        finally:
            order.append("child unwound")

    async def main() -> None:
        reports.watch()
        try:
            await asyncio.create_task(child())
        finally:
            order.append("main unwound")

    with sigterm_handled(), pytest.raises(Terminated):
        run(main())
    assert order == ["child went on", "child unwound", "main unwound"]
    assert reports.messages() == []


@LOOPS
def test_sync_work_in_progress_is_finished_before_the_run_stops(loop: str) -> None:
    """Work between two awaits is never cut in the middle: the cancel lands at the next
    await. A run that returned meanwhile still ends as terminated."""
    run = _runner(loop)
    written: list[int] = []

    async def main() -> str:
        for i in range(5):
            if i == 2:
                signal.raise_signal(signal.SIGTERM)
            written.append(i)
        return "done"

    with sigterm_handled(), pytest.raises(Terminated):
        run(main())
    assert written == [0, 1, 2, 3, 4]


@LOOPS
def test_an_error_of_the_run_s_own_while_it_unwinds_is_raised_not_hidden(loop: str) -> None:
    run = _runner(loop)

    async def main() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(3600)
        finally:
            raise OSError("the cleanup failed")

    with sigterm_handled(), pytest.raises(OSError, match="the cleanup failed"):
        run(main())


class RecordedExecutor(concurrent.futures.ThreadPoolExecutor):
    """A default executor that says when the runner shuts it down."""

    def __init__(self, order: list[str]) -> None:
        super().__init__(max_workers=1)
        self.order = order

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if "executor shut down" not in self.order:  # (closing the loop shuts it down again)
            self.order.append("executor shut down")
        super().shutdown(wait, cancel_futures=cancel_futures)


@LOOPS
def test_sigterm_after_the_main_task_ended_leaves_the_shutdown_alone(loop: str) -> None:
    """The signal comes once the main task is done, while the runner cancels the tasks
    left (from one's ``finally``): it cancels nothing — that task goes on past its next
    await, the async generators and the default executor are still shut down — and
    Terminated comes out once the runner has returned."""
    run = _runner(loop)
    order: list[str] = []
    kept: list[object] = []  # the generator and the task left, alive until the shutdown

    async def numbers() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            order.append("async generator closed")

    async def leftover(started: asyncio.Event) -> None:
        try:
            started.set()
            await asyncio.Event().wait()
        finally:
            order.append("leftover cancelled")
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(0)
            order.append("leftover went on")

    async def main() -> str:
        asyncio.get_running_loop().set_default_executor(RecordedExecutor(order))
        await asyncio.get_running_loop().run_in_executor(None, order.append, "executor used")
        kept.append(gen := numbers())
        await anext(gen)  # left suspended: the runner's shutdown closes it
        started = asyncio.Event()
        kept.append(asyncio.create_task(leftover(started)))  # pending when main returns
        await started.wait()
        return "done"

    with sigterm_handled() as handler, pytest.raises(Terminated):
        run(main())
    assert order == [
        "executor used",
        "leftover cancelled",
        "leftover went on",
        "async generator closed",
        "executor shut down",
    ]
    assert handler.signals == 1


def test_a_sigterm_before_the_main_task_starts_cancels_it_as_it_starts() -> None:
    """A signal between the registration and the first step of the main task: the task
    is cancelled at its first await, its ``finally`` runs."""
    order: list[str] = []

    class SignalledLoop(asyncio.SelectorEventLoop):
        def create_task(self, coro: Any, **kwargs: Any) -> Any:
            task = super().create_task(coro, **kwargs)
            if not order:  # the runner's main task, not started yet
                order.append("signalled")
                signal.raise_signal(signal.SIGTERM)
            return task

    async def main() -> None:
        try:
            order.append("started")
            await asyncio.sleep(3600)
        finally:
            order.append("unwound")

    with sigterm_handled(), pytest.raises(Terminated):
        run_command(main(), loop_factory=SignalledLoop)
    assert order == ["signalled", "started", "unwound"]


def test_a_second_sigterm_raises_at_once() -> None:
    """A run that does not stop when cancelled: the second SIGTERM raises where it comes."""
    seen: list[str] = []

    async def main() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            signal.raise_signal(signal.SIGTERM)
            seen.append("not reached")

    with sigterm_handled() as handler, pytest.raises(Terminated):
        run_command(main())
    assert seen == ["cancelled"] and handler.signals == 2


def test_outside_an_event_loop_it_raises_at_once() -> None:
    with sigterm_handled(), pytest.raises(Terminated):
        signal.raise_signal(signal.SIGTERM)


def test_a_run_that_ended_leaves_the_handler_as_outside_a_loop() -> None:
    """After a run, the handler knows no run: a SIGTERM raises where it comes."""

    async def main() -> str:
        return "done"

    with sigterm_handled() as handler:
        assert run_command(main()) == "done"
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGTERM)
    assert handler.signals == 1


def test_a_loop_not_started_by_run_command_gets_terminated_where_it_is() -> None:
    """A loop the handler does not know of (no command has one): the signal raises
    Terminated where it comes, as Ctrl-C raises KeyboardInterrupt."""
    loop = asyncio.new_event_loop()
    order: list[str] = []

    async def main() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            order.append("not reached")
        finally:
            order.append("unwound")

    try:
        task = loop.create_task(main())
        with sigterm_handled(), pytest.raises(Terminated):
            loop.run_until_complete(task)
    finally:
        loop.close()
    assert order == ["unwound"]


def test_run_command_without_the_handler_is_asyncio_run() -> None:
    """Without the commands' handler (the library's ``run_bench``, ``run_demo``), a
    SIGTERM is whatever the process made of it; the run is ``asyncio.run``'s."""

    async def main() -> str:
        return "done"

    assert not isinstance(signal.getsignal(signal.SIGTERM), SigtermHandler)
    assert run_command(main()) == "done"
    assert run_command(main(), loop_factory=VirtualTimeLoop) == "done"


# ---- every command starts its loop through run_command -------------------------------

PACKAGE = Path(__file__).resolve().parents[1] / "agentflow"

#: The modules allowed to start an event loop themselves, and why.
ALLOWED = {
    "_cli_signals.py": "run_command itself",
    "embedded/_clock.py": "run_virtual, the library's own; no command calls it",
    "_workers/_worker.py": "a worker process (spawned): its own SIGTERM, no command's",
}

#: Calls that start (or run) an event loop: ``asyncio.run(…)``, ``uvloop.run(…)``,
#: ``asyncio.Runner(…)``, ``run_virtual(…)``, ``….run_until_complete(…)``,
#: ``….run_forever(…)``.
_MODULE_CALLS = {("asyncio", "run"), ("asyncio", "Runner"), ("uvloop", "run")}
_METHODS = {"run_until_complete", "run_forever"}
_IMPORTED = {("asyncio", "run"), ("asyncio", "Runner"), ("uvloop", "run")}


def _loop_starts(tree: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                if isinstance(f.value, ast.Name) and (f.value.id, f.attr) in _MODULE_CALLS:
                    found.append(f"{f.value.id}.{f.attr}( line {node.lineno}")
                elif f.attr in _METHODS or f.attr == "run_virtual":
                    found.append(f".{f.attr}( line {node.lineno}")
            elif isinstance(f, ast.Name) and f.id == "run_virtual":
                found.append(f"run_virtual( line {node.lineno}")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                if (node.module, alias.name) in _IMPORTED:
                    found.append(f"from {node.module} import {alias.name} line {node.lineno}")
    return found


def test_the_check_finds_each_way_of_starting_a_loop() -> None:
    code = (
        "import asyncio, uvloop\n"
        "from agentflow.embedded import run_virtual\n"
        "from asyncio import run\n"
        "asyncio.run(main())\n"
        "uvloop.run(main())\n"
        "with asyncio.Runner() as r: pass\n"
        "run_virtual(main())\n"
        "embedded.run_virtual(main())\n"
        "loop.run_until_complete(main())\n"
        "loop.run_forever()\n"
    )
    assert len(_loop_starts(ast.parse(code))) == 8


def test_every_command_starts_its_event_loop_with_run_command() -> None:
    """No module of the package starts an event loop itself (``asyncio.run``,
    ``run_virtual``, …) but the ones in ALLOWED: every command runs its coroutine with
    ``agentflow._cli_signals.run_command``, whose main task SIGTERM cancels."""
    offenders: dict[str, list[str]] = {}
    allowed_seen: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        found = _loop_starts(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        if name in ALLOWED:
            allowed_seen.add(name)
        elif found:
            offenders[name] = found
    assert offenders == {}, (
        "start the loop with agentflow._cli_signals.run_command (loop_factory= for "
        "VirtualTimeLoop, uvloop), so that SIGTERM cancels its main task"
    )
    assert allowed_seen == set(ALLOWED)  # a moved or renamed module: update ALLOWED
