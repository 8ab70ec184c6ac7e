"""``Fleet(workers=2, backend="ray")`` on a local Ray (``ray.init(num_cpus=2)``, started
once for the module and shut down at its end) against the HTTP simulator on loopback:
the same transcripts and statistics as one process for the same seed, the fleet's
concurrency and RPM limits counted at the server, sticky routing across two replicas, an
actor killed mid-run whose sessions are run again on a new actor, and no Ray process left
behind."""

from __future__ import annotations

import asyncio
import io
import os
import re
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import pytest
from rich.console import Console

from agentflow import Agent, ConfigError, Event, Fleet, HTTPTransport, Limits, WorkerError
from agentflow.report import LiveView
from agentflow.sched import Router
from agentflow.sim.records import RequestRecord
from agentflow.stats import FleetStats
from agentflow.store import SQLiteStore
from tests.sched.conftest import RecordingSim, max_in_window, peak_overlap
from tests.workers.tools import counted_workload, workload

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'agentflow[ray]'")

#: The Ray daemons a local ``ray.init`` starts (and ``ray.shutdown`` must stop).
_DAEMONS = ("raylet", "gcs_server")


def ray_daemons() -> set[int]:
    """Pids of the Ray daemons running now (from /proc)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if os.path.basename(argv0) in _DAEMONS:
            pids.add(int(entry))
    return pids


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray for the module (two CPUs: one per actor; its workers import from
    this directory, as Ray adds the driver's working directory to their path);
    afterwards, none of the daemons it started is left."""
    before = ray_daemons()
    ray.init(
        num_cpus=2,
        object_store_memory=100 * 1024 * 1024,  # the least it takes: the tests move KBs
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()
        deadline = time.monotonic() + 30
        while ray_daemons() - before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not ray_daemons() - before, "ray.shutdown() left Ray daemons running"


def actor_killer(victims: list[str]) -> Callable[[Event], None]:
    """A callback that ``ray.kill``s actor 1 once a tool session there ended its first
    turn (s<k> runs on actor k % 2, dealt round-robin; s<odd> call a tool first), and
    appends that session's id to ``victims``."""

    def kill_one(event: Event) -> None:
        if event.type == "turn_end" and event.turn == 0 and not victims:
            k = int(event.session_id[1:])
            if k % 2 == 1:
                (name,) = (n for n in agentflow_actors() if n.endswith("-1"))
                victims.append(event.session_id)
                ray.kill(ray.get_actor(name))

    return kill_one


def agentflow_actors() -> list[str]:
    """Names of the live actors of agentflow runs."""
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("agentflow-")
    ]


def intervals(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    out = []
    for r in records:
        assert r.finished_s is not None
        out.append((r.arrival_s, r.finished_s))
    return out


async def test_same_transcripts_and_stats_as_one_process() -> None:
    """Same seed, same session ids: every session's messages and ending are the same on
    two Ray actors as in one process; the caller's sessions hold them; the driver's
    statistics (fed the actors' forwarded events) count the same turns and tokens as one
    process's, and per-actor statistics merged give the driver's quantiles within the
    sketches' relative accuracy."""
    one_stats = FleetStats()
    async with RecordingSim(seed=3) as sim, HTTPTransport(sim.base_url) as http:
        one = await Fleet(http, max_concurrency=4, callbacks=[one_stats]).run(workload(12))
    stats = FleetStats()
    types: Counter[str] = Counter()
    mine = workload(12)
    async with RecordingSim(seed=3) as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(
            http,
            max_concurrency=4,
            workers=2,
            backend="ray",
            callbacks=[stats, lambda e: types.update([e.type])],
        )
        two = await fleet.run(mine)
    assert not one.failed
    assert not two.failed, [s.error for s in two.failed]
    assert [s.session_id for s in two.sessions] == [f"s{i}" for i in range(12)]
    for a, b, session in zip(one.sessions, two.sessions, mine, strict=True):
        assert (a.status, a.final_output, a.messages) == (b.status, b.final_output, b.messages)
        assert session.result is b
        assert len(session.turns) == len(a.turns)
    assert types["turn_end"] == sum(len(s.turns) for s in two.sessions) == 18
    assert types["session_end"] == 12
    assert types["fleet_start"] == types["fleet_end"] == 1
    assert types["token"] > 0  # the lambda reads every type: the actors sent tokens
    # One report for the whole run, counted as one process counts it.
    r_one, r_two = one_stats.report(), stats.report()
    for key in ("sessions", "completed", "turns", "output_tokens", "prompt_tokens", "tool_calls"):
        assert r_one["fleet"][key] == r_two["fleet"][key], key
    assert r_two["fleet"]["turns"] == 18
    # Per-actor statistics (sessions are dealt round-robin: s<k> ran on actor k % 2),
    # merged, against the driver's.
    parts = [FleetStats(), FleetStats()]
    for k, s in enumerate(two.sessions):
        for t in s.turns:
            parts[k % 2].observe_turn(s.agent, s.session_id, t.index, t.metrics, t.trace, t.prompt)
    merged = parts[0]
    merged.merge(parts[1])
    alpha = stats.relative_accuracy
    for name in ("ttft_s", "e2e_s"):
        for q in (0.5, 0.9, 0.99):
            mine_q, theirs_q = merged.quantile(name, q), stats.quantile(name, q)
            assert mine_q is not None and theirs_q is not None
            assert abs(mine_q - theirs_q) <= 2 * alpha * theirs_q, (name, q)
    assert not agentflow_actors()


async def test_limits_are_counted_at_the_server_across_actors() -> None:
    """max_concurrency=3 over two actors (each alone would be allowed all 3): the server
    never had more than 3 requests at once, nor did ``Fleet.in_flight`` (the live view's
    count) read more; then rpm=1,200 (20 a second, a 1 s burst): in every window the
    server received at most rate × window + burst requests."""
    samples: list[int | None] = []
    out = io.StringIO()
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=3, workers=2, backend="ray")
        view = LiveView(60, fleet=fleet, console=Console(file=out, width=100), lag=None)
        fleet.subscribe(view)
        fleet.subscribe(lambda e: samples.append(view.load()[0]))
        with view.live():  # redrawn by rich's thread while the actors run
            result = await fleet.run(workload(60))
    assert not result.failed
    counts = [n for n in samples if n is not None]
    assert counts and 0 < max(counts) <= 3
    assert view.snapshot()["sessions_done"] == 60
    assert view.snapshot()["turns"] == 90
    assert "60/60" in out.getvalue() or "100%" in out.getvalue()
    assert fleet.in_flight == fleet.queued == 0
    assert len(sim.records) == sum(len(s.turns) for s in result.sessions) == 90
    assert 2 <= peak_overlap(intervals(sim.records)) <= 3  # never over; both actors sent
    assert 0 < result.peak_in_flight <= 3
    assert result.replicas[0].served == 90

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, workers=2, backend="ray", limits=Limits(rpm=1200))
        result = await fleet.run(workload(40))
    assert not result.failed
    arrivals = [r.arrival_s for r in sim.records]
    assert len(arrivals) == 60
    for window_s in (0.0, 0.25, 0.5, 1.0, 2.0):
        # + 1: the limit holds on the client's clock; arrival at the server adds a transit
        # delay that varies (a loaded machine), which can bring one request closer.
        assert max_in_window(arrivals, window_s) <= 20 * window_s + 20 + 1
    assert not agentflow_actors()


async def test_tokens_per_minute_hold_at_the_server_across_actors() -> None:
    """tpm=60,000 (1,000 a second, a 1 s burst) over two actors, with exact prompt counts:
    in every window the server received at most rate × window + burst tokens (prompt +
    max_tokens of each request, from its own records)."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=16, workers=2, backend="ray", limits=Limits(tpm=60_000))
        result = await fleet.run(counted_workload(40))
    assert not result.failed
    arrivals = [r.arrival_s for r in sim.records]
    weights = [r.prompt_tokens + r.max_tokens for r in sim.records]
    assert len(arrivals) == 60
    for window_s in (0.0, 0.5, 1.0, 2.0, 4.0):
        # + one request: the limit holds on the client's clock; arrival at the server adds
        # a transit delay that varies (a loaded machine), which can bring one closer.
        assert max_in_window(arrivals, window_s, weights) <= 1000 * window_s + 1000 + max(weights)
    assert not agentflow_actors()


async def test_sessions_stay_on_one_replica_across_actors() -> None:
    """Two replicas, a sticky router that places new sessions on the least-loaded one
    (each actor's router sees its own sessions: a session lives on one actor, so its
    home replica is known where its turns are placed), two actors: every session's
    requests all went to one server, both servers were used, and every tool session's
    second turn found its home."""
    async with (
        RecordingSim(seed=5) as a,
        RecordingSim(seed=5) as b,
        HTTPTransport(a.base_url) as ha,
        HTTPTransport(b.base_url) as hb,
    ):
        fleet = Fleet(
            [ha, hb],
            max_concurrency=8,
            router=Router(prefix_affinity=False),
            workers=2,
            backend="ray",
        )
        result = await fleet.run(workload(16))
    assert not result.failed
    on_a, on_b = a.session_ids(), b.session_ids()
    assert on_a and on_b
    assert not on_a & on_b
    assert on_a | on_b == {f"s{i}" for i in range(16)}
    assert len(a.seen) + len(b.seen) == sum(len(s.turns) for s in result.sessions)


async def test_a_killed_actor_has_its_sessions_run_again_elsewhere() -> None:
    """``ray.kill`` the actor of a tool session right after that session's first turn
    (mid-session): the run still completes every session, with the same transcripts as
    one process; the killed session was sent again from its start on a new actor (the
    server saw its first turn twice), and no actor is left after the run."""
    async with RecordingSim(seed=7) as sim, HTTPTransport(sim.base_url) as http:
        one = await Fleet(http, max_concurrency=2).run(workload(20))
    victims: list[str] = []
    kill_one = actor_killer(victims)

    async with RecordingSim(seed=7) as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=2, workers=2, backend="ray", callbacks=[kill_one])
        result = await fleet.run(workload(20))
    assert victims, "no tool session ended a first turn on actor 1"
    assert not result.failed, [s.error for s in result.failed]
    assert all(s.status == "completed" for s in result.sessions)
    for a, b in zip(one.sessions, result.sessions, strict=True):
        assert (a.final_output, a.messages) == (b.final_output, b.messages)
    (victim,) = victims
    # Its first turn (system + user message) reached the server twice: before the kill
    # (that turn had ended) and in the re-run from its start. (Its second may have been
    # sent before the kill took effect, so only the first is counted exactly.)
    firsts = [
        x
        for x in sim.seen
        if x.headers.get("X-Session-ID") == victim and len(x.body["messages"]) == 2
    ]
    assert len(firsts) == 2
    assert len(sim.seen) > sum(len(s.turns) for s in result.sessions)
    assert not agentflow_actors()


async def test_more_workers_than_the_cluster_has_cpus_is_refused_naming_both() -> None:
    """Each actor takes one CPU: workers=3 on this 2-CPU Ray is refused with a
    ConfigError naming both numbers and the ways out, before any actor starts or any
    request is sent (it used to wait the 300 s start timeout for a CPU none of the
    finished actors gave back, then fail the third actor's sessions)."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, workers=3, backend="ray")
        with pytest.raises(
            ConfigError,
            match=r"workers=3, backend='ray'.*Ray cluster has 2: use workers=2 or fewer, "
            "or a cluster with more CPUs",
        ):
            await fleet.run(workload(6))
    assert not sim.seen
    assert not agentflow_actors()


async def test_cancel_stops_the_actors_and_keeps_partial_results() -> None:
    """Cancelling the run after its first turn: every actor's run stops in order, every
    session has a result (completed or cancelled), and no actor is left."""
    sessions = workload(40)
    first = asyncio.Event()
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=2, workers=2, backend="ray")
        fleet.subscribe(lambda e: first.set() if e.type == "turn_end" else None)
        task = asyncio.create_task(fleet.run(sessions))
        await asyncio.wait_for(first.wait(), 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    statuses = [s.result.status for s in sessions if s.result is not None]
    assert len(statuses) == 40
    assert "cancelled" in statuses
    assert set(statuses) <= {"completed", "cancelled"}
    assert not agentflow_actors()


async def test_an_actor_that_cannot_load_its_sessions_fails_them_with_the_reason() -> None:
    """A tool from a module only the driver has (made at run time, as in a notebook)
    pickles here but not in an actor: its sessions fail with a WorkerError that says why
    (they are not run again: another actor could not load them either), and the run ends
    with no actor left."""
    module = types.ModuleType("agentflow_test_driver_only")
    source = 'def probe(key: str) -> str:\n    """Driver-only."""\n    return key\n'
    exec(source, module.__dict__)
    sys.modules[module.__name__] = module
    try:
        agent = Agent(name="notebook", model="m", tools=[module.probe])
        sessions = [agent.session(f"q{i}", session_id=f"n{i}") for i in range(4)]
        async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
            result = await Fleet(http, workers=2, backend="ray").run(sessions)
    finally:
        del sys.modules[module.__name__]
    assert len(result.failed) == 4
    for s in result.failed:
        assert isinstance(s.error, WorkerError)
        assert "No module named 'agentflow_test_driver_only'" in str(s.error)
        assert str(s.error).startswith("Ray actor ")
    assert not sim.seen
    assert not agentflow_actors()


async def test_actors_die_with_a_killed_driver() -> None:
    """SIGKILL a driver process (connected to this Ray) mid-run: Ray ends the actors it
    owned; the test waits for that with a bound."""
    address = ray.get_runtime_context().gcs_address
    async with RecordingSim() as sim:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.ray.driver",
            sim.base_url,
            address,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 120)
            names = set(line.decode().split())
            assert len(names) == 2
            assert names <= set(agentflow_actors())
            proc.kill()
            await asyncio.wait_for(proc.wait(), 30)
            for _ in range(300):  # at most 30 s
                if not names & set(agentflow_actors()):
                    break
                await asyncio.sleep(0.1)
            assert not names & set(agentflow_actors())
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def test_ray_backend_is_checked_when_the_fleet_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Ray installed, the hint names the extra; a bad backend and a missing worker
    count are refused by name (a store is taken)."""
    url = "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="backend must be 'processes' or 'ray', got 'dask'"):
        Fleet(HTTPTransport(url), workers=2, backend="dask")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs workers=N"):
        Fleet(HTTPTransport(url), backend="ray")
    store = SQLiteStore(":memory:")  # taken since issue 15 part 4 (tests/ray/test_ray_store.py)
    assert Fleet(HTTPTransport(url), workers=2, backend="ray", store=store).store is store
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ConfigError, match=r"pip install 'agentflow\[ray\]'"):
        Fleet(HTTPTransport(url), workers=2, backend="ray")


async def test_an_actor_reported_unavailable_is_stopped_before_its_sessions_move() -> None:
    """Ray reports an actor that is only unreachable for now (``ActorUnavailableError``)
    as a ``RayActorError``; the run then moves its sessions to a new actor, so the old one
    must be stopped first, or it would go on running them on slots handed to others. A
    real actor, alive, whose poll reports it unavailable: it is killed."""
    from ray.exceptions import ActorUnavailableError, RayActorError

    from agentflow._workers._ray import RayLauncher

    launcher = RayLauncher()
    w = launcher.launch(0, [])
    await w.actor.__ray_ready__.remote()  # alive

    async def unavailable() -> list[object]:
        raise ActorUnavailableError("unreachable for now", None)

    w.actor.poll = types.SimpleNamespace(remote=unavailable)
    lost: list[bool] = []
    await launcher._listen(w, lambda handle, msg: None, lambda handle, gone: lost.append(gone))
    assert lost == [True]
    # ray.kill takes effect asynchronously: the actor answers at most a few more calls.
    # Without the kill it would answer every one of them (it is alive and idle).
    for _ in range(20):
        try:
            await asyncio.wait_for(w.actor.__ray_ready__.remote(), 30)
        except RayActorError:
            break
        await asyncio.sleep(0.25)
    else:
        pytest.fail("the actor reported unavailable is still running its sessions")
    assert not agentflow_actors()


async def test_a_hung_actor_is_killed_and_its_sessions_fail_naming_the_heartbeat() -> None:
    """Actor 1's tool blocks its loop for 600 s: the heartbeat watchdog kills it; its
    sessions run again on a new actor (a lost actor's are), hang it too, and after the
    last re-run fail with a WorkerError naming the missed heartbeat. Actor 0's complete;
    no actor is left."""
    from agentflow._workers._parent import MAX_RERUNS
    from tests.workers.hang_tools import ONCE, hang_workload

    assert ONCE not in os.environ  # every call of the tool blocks
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=4, workers=2, backend="ray", heartbeat_timeout_s=2.0)
        result = await fleet.run(hang_workload(6))
    by_id = {s.session_id: s for s in result.sessions}
    assert all(by_id[f"s{k}"].ok for k in (0, 2, 4))
    workers = set()
    for k in (1, 3, 5):
        error = by_id[f"s{k}"].error
        assert isinstance(error, WorkerError)
        # The heartbeat leads (an actor has no exit code to give).
        assert re.fullmatch(
            rf"Ray actor {error.worker} \(agentflow-\w+-{error.worker}, pid \d+\) sent no "
            rf"heartbeat for 2 s and was killed before session 's{k}' ended: its event "
            r"loop was blocked \(.*\)",
            str(error),
        ), str(error)
        workers.add(error.worker)
    # The actor of their last re-run (indexes 2, 3, … go to the replacements).
    assert workers == {1 + MAX_RERUNS}
    assert not agentflow_actors()
