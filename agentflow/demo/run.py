"""Run the demo: start the simulator (or use a given server), run the fleet, report.

By default the simulator runs in a child process and the fleet talks to it over real
HTTP on loopback, exactly as it would to a vLLM deployment; ``virtual=True`` runs the
same fleet in-process on virtual time instead (no sockets, faster than real time).

SIGINT (Ctrl-C) or SIGTERM during the run stops it and still writes the report, of
what finished, marked ``run.interrupted``; a second signal exits at once
(``agentflow/demo/_stop.py``). The report's path is checked before anything starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from agentflow._cli_console import CliConsole
from agentflow._cli_signals import run_command
from agentflow._cliargs import check_no_overwrite, check_output_file, store_inputs
from agentflow._errors import TransportError
from agentflow._files import replaced_on_write, write_text_file
from agentflow._fleet import Fleet, FleetResult
from agentflow._printable import printable
from agentflow._process import ChildServer, free_port
from agentflow._session import Session
from agentflow.demo._config import DemoConfig
from agentflow.demo._probes import model_of, probe_s, served_model, window_of
from agentflow.demo._recorded import recorded_config, resume_config, run_recorded
from agentflow.demo._stop import Stopper, run_stoppable
from agentflow.demo.summary import (
    LiveView,
    advertised_time_scale,
    build_report,
    failure_lines,
    goodput_line,
    summary_table,
)
from agentflow.demo.workload import BUILD_CHUNK, Workload, build_workload
from agentflow.llamacpp import oversubscription
from agentflow.report import LoopLagProbe, ServerWatch
from agentflow.stats import RunJournal
from agentflow.transport import Endpoint, HTTPTransport, Timeouts
from agentflow.typing import Clock, Transport

__all__ = ["DemoConfig", "recorded_config", "resume_config", "run_demo"]


def run_demo(config: DemoConfig, console: Console | None = None) -> dict[str, Any]:
    """Run the demo to its end, or until SIGINT/SIGTERM; returns the report (also
    written to ``config.report``). A stopped run's report has ``run.interrupted``. A
    ``virtual`` run draws no live view: with ``live`` (the default) a line on stderr
    says so.

    Raises:
        ConfigError: ``config.report`` or ``config.store`` cannot be written, or the
            report would be written over the store (checked before the run).
        OSError: the report could not be written at the end (a full disk); the summary
            is printed first.
    """
    # With a --report to write, a reader of the summary or live view that goes away
    # (`agentflow demo --report r.json | head -1`) does not cost it: exit 141 once written.
    console = console or CliConsole(finish=config.report is not None)
    if config.report is not None:
        if config.store is not None:  # the report written over the run it records
            check_no_overwrite([("--report", config.report)], store_inputs(config.store))
        check_output_file(config.report, "--report")
    if config.store is not None:  # before the run: a directory, an unwritable place
        check_output_file(config.store, "--store")
    if config.virtual and config.live:
        # The live view is the default, but a run faster than real time has none to watch.
        command = "resume" if config.resume is not None else "demo"
        print(
            f"agentflow {command}: note: no live view under virtual time (--virtual runs "
            "faster than real time); the summary follows at the end (--no-live: no note)",
            file=sys.stderr,
            flush=True,
        )
    watched = _Watched()
    stopper = Stopper()
    with stopper.guarding():  # once stopped, a second signal exits at once until we return
        result, scale = _run(config, console, watched, stopper)
        report = _report(config, result, scale, watched, stopper, console)
        if config.report is not None:
            # Written before the summary is printed: a reader of it that goes away
            # (`agentflow demo --report r.json | head`) must not cost the report. One that
            # cannot be written (a full disk) must not cost the summary: printed, then raised.
            try:
                _write_report(config.report, report, result, stopper)
            except OSError:
                _print_summary(config, report, result, stopper, console)
                raise
        seen = stopper.signal
        _print_summary(config, report, result, stopper, console)
        if config.report is not None:
            # A signal came while the summary was printed: the report again, marked
            # (not where a second write would add to the first: a descriptor, a pipe;
            # the exit status still says so).
            if stopper.signal is not seen:
                if replaced_on_write(config.report):
                    _write_report(config.report, report, result, stopper)
                else:
                    _mark_interrupted(report, result, stopper)
            console.print(f"report written to {config.report}", markup=False)
            return report
    _mark_interrupted(report, result, stopper)  # the exit status says so (cli.py)
    return report


def _print_summary(
    config: DemoConfig,
    report: dict[str, Any],
    result: FleetResult,
    stopper: Stopper,
    console: Console,
) -> None:
    """The summary table, goodput and failures, where the run is recorded, and whether a
    signal stopped it."""
    console.print(summary_table(report))
    scale = float(report["run"].get("time_scale") or 1.0)
    for g in report["goodput"]:  # one line per --slo
        console.print(goodput_line(g, scale), highlight=False)
    for line in failure_lines(result):  # a server's words: no control characters
        console.print(printable(line), highlight=False, markup=False)
    if config.store is not None and result.run_id:
        console.print(
            f"run {result.run_id} recorded in {config.store}; resume or read it with "
            f"agentflow resume {result.run_id} --store {config.store} / "
            f"agentflow report --store {config.store} {result.run_id}",
            highlight=False,
            markup=False,
        )
    if stopper.signal is not None and not stopper.after_run:
        console.print(f"[bold]stopped by {stopper.signal.name}[/bold]: the report covers what ran")


def _run(
    config: DemoConfig, console: Console, watched: _Watched, stopper: Stopper
) -> tuple[FleetResult, float]:
    """The fleet's run, with the simulator child around it (stopped when it returns)."""
    with contextlib.ExitStack() as stack:
        if config.virtual:
            from agentflow.embedded import VirtualTimeLoop

            return run_command(
                _virtual_fleet(config, stopper, watched), loop_factory=VirtualTimeLoop
            )
        url = config.base_url or _start_simulator(config, stack).rstrip("/") + "/v1"
        scale = 1.0 if config.base_url else config.time_scale
        endpoint = Endpoint(base_url=url, api_key=config.api_key)
        result = run_command(_http_fleet(config, endpoint, scale, console, watched, stopper))
        return result, scale


def _report(
    config: DemoConfig,
    result: FleetResult,
    scale: float,
    watched: _Watched,
    stopper: Stopper,
    console: Console,
) -> dict[str, Any]:
    scale = advertised_time_scale(result) or scale
    run = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in asdict(config).items()
        if k not in ("api_key", "live", "slos")
    }
    run["slos"] = [slo.label for slo in config.slos]
    # The limits each request ran under: the transport's defaults when no --*-timeout
    # was given (not null); a virtual run has no HTTP requests, and none.
    run["timeouts"] = None if config.virtual else asdict(config.timeouts or Timeouts())
    if result.run_id is not None:
        run["run_id"] = result.run_id
    run["time_scale"] = scale
    _mark_interrupted({"run": run}, result, stopper)
    run["server"] = config.base_url or ("in-process, virtual time" if config.virtual else "sim")
    if watched.loop_lag is not None:
        run["loop_lag"] = watched.loop_lag
        run["reads_stamped_by"] = "kernel" if watched.kernel_stamps else "event loop"
    # A resumed run's result holds the earlier attempts' turns too, moved onto this
    # clock: its times count from the run's first start, as ``report --store``'s do; its
    # journal has the earlier attempts' tool calls too (``run_recorded``).
    start_ns = result.start_ns if config.resume is not None else watched.start_ns
    report = build_report(
        result, run=run, start_ns=start_ns, slos=config.slos, journal=watched.journal
    )
    if watched.server is not None:
        report["server"] = _server_section(watched.server, report, start_ns, config)
    elif watched.server_error:
        error = escape(watched.server_error)  # a server's words: "[" is no markup
        console.print(f"[dim]no server section in the report: {error}[/dim]")
    return report


#: Why a resumed run's server section has no comparison table.
RESUMED_NO_COMPARISON = (
    "No comparison with the client's figures: this run was resumed, and the client's cover "
    "every attempt while the server's counters cover this attempt only."
)


def _server_section(
    watch: ServerWatch, report: dict[str, Any], start_ns: int | None, config: DemoConfig
) -> dict[str, Any]:
    """The report's ``server`` section. A resumed run's has no comparison with the client
    (a note says why): the report's client figures are the whole run's, the scrapes this
    attempt's — every ratio would be off (requests: the run's 56 beside this attempt's 0)."""
    if config.resume is None:
        return watch.section(report, origin_ns=start_ns)
    section = watch.section(None, origin_ns=start_ns)
    section["notes"].append(RESUMED_NO_COMPARISON)
    return section


def _mark_interrupted(report: dict[str, Any], result: FleetResult, stopper: Stopper) -> None:
    """``run.interrupted`` in ``report`` once a signal has stopped the run (or came after
    it ended: ``after_run``, nothing cut short); it stays as it was first marked."""
    if stopper.signal is None or "interrupted" in report["run"]:
        return
    statuses = [s.status for s in result.sessions]
    report["run"]["interrupted"] = {
        "signal": stopper.signal.name,
        "sessions_ended": sum(st != "cancelled" for st in statuses),
        "sessions_cancelled": statuses.count("cancelled"),
        "after_run": stopper.after_run,
    }


def _write_report(
    path: Path, report: dict[str, Any], result: FleetResult, stopper: Stopper
) -> None:
    """Write ``report``, marked with any signal so far, and again if one came meanwhile:
    the file and the exit status (cli.py reads the report returned) agree. A signal once
    the summary is printed and the file written cuts nothing short and changes neither."""
    while True:
        seen = stopper.signal
        _mark_interrupted(report, result, stopper)
        _write_json(path, report)
        if stopper.signal is seen or not replaced_on_write(path):
            return


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path``: whole or not at all for a file (a device or a pipe is
    written directly; see :func:`~agentflow._files.write_text_file`). Plain JSON, as the
    report format promises: a NaN or an infinity is a ``ValueError``, not a file
    ``agentflow report`` refuses."""
    write_text_file(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def _start_simulator(config: DemoConfig, stack: contextlib.ExitStack) -> str:
    port = free_port()
    cmd = [
        sys.executable, "-m", "agentflow.sim", "--host", "127.0.0.1", "--port", str(port),
        "--profile", config.profile, "--seed", str(config.seed),
        "--time-scale", f"{config.time_scale:g}",
    ]  # fmt: skip
    if config.fault_rate:
        half = f"{config.fault_rate / 2:g}"
        cmd += ["--fault-server-error", half, "--fault-reset", half]
    child = ChildServer(cmd, port=port, name="agentflow sim", startup_timeout_s=60)
    stack.enter_context(child)
    return f"http://127.0.0.1:{port}"


async def _run_fleet(
    config: DemoConfig,
    transport: Transport,
    view: LiveView | None,
    stopper: Stopper,
    clock: Clock = time.perf_counter_ns,
    watched: _Watched | None = None,
    journal: RunJournal | None = None,
    window: int | None = None,
) -> FleetResult:
    """Build the demo's workload (for a ``window`` of tokens, or the one :func:`window_of`
    finds) and run it."""
    if watched is not None and journal is None:
        journal = watched.journal = RunJournal(clock)
    # Built in chunks, the loop running between them: a signal is handled meanwhile.
    workload = await build_workload(
        config.agents,
        model=model_of(config),
        seed=config.seed,
        turns=config.turns,
        max_tokens=config.max_tokens,
        sim_tool_rounds=not config.base_url,
        window=window or await window_of(config, transport),
    )
    fleet = Fleet(
        transport,
        max_concurrency=config.max_concurrency,
        callbacks=[c for c in (view, journal) if c is not None],
        clock=clock,
    )
    if view is not None:
        view.fleet = fleet  # in flight and queued, read at each redraw
        if not config.base_url and config.resume is None:  # the simulator takes every turn planned
            view.total_turns = sum(r + 1 for r in workload.tool_rounds)
    sessions = await _sessions(workload)
    if watched is not None:  # the run starts now, not before the workload was built
        watched.start_ns = clock()
    if view is not None:
        view.started = view.clock()
    if config.store is None:
        return await run_stoppable(fleet, sessions, stopper, clock)
    return await run_recorded(
        config, config.store, fleet, sessions, workload.agents, stopper, clock, journal, view
    )


async def _sessions(workload: Workload) -> list[Session]:
    """A session per agent of ``workload``, made a chunk at a time (as the workload is)."""
    sessions = []
    for i, (a, t) in enumerate(zip(workload.agents, workload.tasks, strict=True), 1):
        sessions.append(a.session(t))
        if i % BUILD_CHUNK == 0:
            await asyncio.sleep(0)
    return sessions


@dataclass
class _Watched:
    """What the HTTP run measured besides the fleet: the server's ``/metrics`` around it,
    the client's own loop lag, and when it started (on the traces' clock)."""

    start_ns: int | None = None
    #: Reads stamped by the kernel (Linux, http://), not when the event loop got to them.
    kernel_stamps: bool = False
    server: ServerWatch | None = None
    server_error: str = ""
    loop_lag: dict[str, Any] | None = None
    #: When retries and errors happened and what tools took (a result does not keep them).
    journal: RunJournal | None = None


async def _http_fleet(
    config: DemoConfig,
    endpoint: Endpoint,
    scale: float,
    console: Console,
    watched: _Watched,
    stopper: Stopper,
) -> FleetResult:
    view = LiveView(total_sessions=config.agents, time_scale=scale, console=console)
    if config.base_url:  # a llama.cpp server with fewer slots than the fleet's concurrency
        # As many in flight as the fleet can have: one session per agent, as its own probe.
        most = min(config.max_concurrency, config.agents)
        warning = await oversubscription(
            endpoint.base_url, most, api_key=endpoint.api_key, timeout_s=probe_s(config.timeouts)
        )
        if warning is not None:
            print(f"agentflow demo: warning: {warning}", file=sys.stderr, flush=True)
    window: int | None = None
    # The server's model, not a made-up name; a resumed run keeps the one it recorded (a
    # run recorded without one asked for "default", and is resumed so).
    if config.base_url and not config.model and config.resume is None:
        model, window = await served_model(config, endpoint)
        config = replace(config, model=model)
    watch = ServerWatch(endpoint.base_url, interval_s=0.5)
    try:
        await watch.start(timeout_s=probe_s(config.timeouts))
        watched.server = watch
    except (TransportError, ValueError) as exc:  # no /metrics there: report without it
        watched.server_error = str(exc)
    try:
        transport = HTTPTransport(endpoint, timeouts=config.timeouts)
        async with transport, LoopLagProbe() as lag:
            watched.kernel_stamps = transport.kernel_timestamps
            watched.start_ns = time.perf_counter_ns()
            if not config.live:
                result = await _run_fleet(
                    config, transport, view, stopper, watched=watched, window=window
                )
            else:
                with view.live():
                    result = await _run_fleet(
                        config, transport, view, stopper, watched=watched, window=window
                    )
        watched.loop_lag = lag.summary()
    finally:
        if watched.server is not None:
            try:
                await watch.stop()
            except (TransportError, ValueError) as exc:
                watched.server, watched.server_error = None, str(exc)
    return result


async def _virtual_fleet(
    config: DemoConfig, stopper: Stopper, watched: _Watched
) -> tuple[FleetResult, float]:
    from agentflow.embedded import SimTransport, loop_clock
    from agentflow.sim import Engine
    from agentflow.sim.driver import EngineDriver

    # No live view, whatever config.live says: the run goes faster than real time
    # (run_demo says so on stderr).
    driver = EngineDriver(Engine(config.profile, seed=config.seed))
    transport = SimTransport(driver)
    try:
        journal = watched.journal = RunJournal(loop_clock)
        result = await _run_fleet(config, transport, None, stopper, loop_clock, journal=journal)
        return result, 1.0
    finally:
        await transport.aclose()
