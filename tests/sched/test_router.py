"""The router across several simulator replicas on loopback: stickiness, least-loaded
placement, prefix affinity, session keys on the wire (and a session id no header can
carry, refused before the run), and failover when one stops.

Where a turn went is read at the servers: the ``X-Session-ID`` header each received
(and the body, for ``prompt_cache_key``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import quote, unquote

import openai
import pytest

from agentflow import (
    Agent,
    ConfigError,
    Event,
    Fleet,
    HTTPTransport,
    Limits,
    Replica,
    RetryPolicy,
    TurnEndEvent,
)
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import ReplicaState, Router, Scheduler
from agentflow.transport import AiohttpTransport, OpenAITransport
from agentflow.typing import Transport
from tests.sched.conftest import (
    FakeClock,
    IdleTransport,
    RecordingSim,
    peak_overlap,
    ticket,
)

_NS = 1_000_000_000


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def nap(seconds: float) -> str:
    """Wait a little, as a slow tool does."""
    await asyncio.sleep(min(seconds, 0.02))
    return "rested"


def agent(name: str, *, tools: bool = True) -> Agent:
    return Agent(
        name=name,
        model="m",
        instructions=f"You are {name}.",
        tools=[lookup] if tools else [],
        params={"max_tokens": 32},
    )


def where(sims: list[RecordingSim]) -> dict[str, set[int]]:
    """For each session id: the indexes of the servers that received its requests."""
    out: dict[str, set[int]] = {}
    for i, sim in enumerate(sims):
        for sid in sim.session_ids():
            out.setdefault(sid, set()).add(i)
    return out


async def transports(sims: list[RecordingSim]) -> list[Transport]:
    return [HTTPTransport(s.base_url) for s in sims]


async def close(ts: list[Transport]) -> None:
    await asyncio.gather(*(t.aclose() for t in ts))


# --- On the wire ------------------------------------------------------------------------


async def test_sessions_stick_to_one_replica(sims: list[RecordingSim]) -> None:
    """30 two-turn sessions over 3 replicas: every session's turns reach one server."""
    ts = await transports(sims)
    router = Router()
    try:
        result = await Fleet(ts, router=router).run(
            agent(f"a{i % 5}").session(f"task {i}", session_id=f"s{i}") for i in range(30)
        )
    finally:
        await close(ts)
    assert not result.failed
    placed = where(sims)
    assert set(placed) == {f"s{i}" for i in range(30)}
    assert all(len(servers) == 1 for servers in placed.values())
    assert all(
        sum(len(s.turns) for s in result.sessions if s.session_id in sim.session_ids())
        == len(sim.seen)
        for sim in sims
    )
    assert router.sticky_hits == 30 and router.moves == 0
    assert sorted(r.served for r in result.replicas) == sorted(len(s.seen) for s in sims)


async def test_new_sessions_go_to_the_least_loaded_replica(sims: list[RecordingSim]) -> None:
    """30 sessions of agents with no shared prefix, started together: the least-loaded
    rule spreads them 10/10/10."""
    ts = await transports(sims)
    plain = Agent(name="plain", model="m", params={"max_tokens": 8})
    try:
        result = await Fleet(ts).run(
            plain.session(f"task {i}", session_id=f"s{i}") for i in range(30)
        )
    finally:
        await close(ts)
    assert not result.failed
    assert [len(sim.session_ids()) for sim in sims] == [10, 10, 10]


async def test_sessions_sharing_a_prefix_land_together(sims: list[RecordingSim]) -> None:
    """Two agents, six sessions each, interleaved, on two replicas: each agent's
    sessions share a replica (its prefix is cached there), and the two are balanced.
    (Warm-up off: all twelve are placed at once, so the placement is exact.)"""
    two = sims[:2]
    ts = await transports(two)
    alpha, beta = agent("alpha"), agent("beta")
    try:
        result = await Fleet(ts, prefix_warmup=False).run(
            (alpha if i % 2 == 0 else beta).session(f"task {i}", session_id=f"{i % 2}-{i}")
            for i in range(12)
        )
    finally:
        await close(ts)
    assert not result.failed
    groups = [{sid[0] for sid in sim.session_ids()} for sim in two]
    assert sorted(map(sorted, groups)) == [["0"], ["1"]]
    assert [len(sim.session_ids()) for sim in two] == [6, 6]


async def test_prefix_affinity_gives_way_to_balance(sims: list[RecordingSim]) -> None:
    """One agent, 8 sessions: with no slack they spread; with ample slack they stay
    together on one replica."""
    two = sims[:2]
    solo = agent("solo")

    async def run(slack: int) -> list[int]:
        for sim in two:
            sim.seen.clear()
        ts = await transports(two)
        try:
            fleet = Fleet(ts, router=Router(balance_slack=slack), prefix_warmup=False)
            result = await fleet.run(solo.session(f"task {i}") for i in range(8))
        finally:
            await close(ts)
        assert not result.failed
        return sorted(len(sim.session_ids()) for sim in two)

    assert await run(100) == [0, 8]
    assert await run(0) == [4, 4]


async def test_session_keys_on_the_wire(sims: list[RecordingSim]) -> None:
    """The session key goes in the configured header (``X-Session-ID`` by default); the
    prefix key goes in the body as ``prompt_cache_key`` when asked."""
    sim = sims[0]
    a = agent("keyed")  # two turns a session
    async with HTTPTransport(sim.base_url) as t:
        await Fleet(t).run([a.session("x", session_id="one")])
        router = Router(session_header="X-Affinity", prompt_cache_key=True)
        await Fleet(t, router=router).run([a.session("y", session_id="two")])
        await Fleet(t, router=Router(session_header=None)).run([a.session("z")])
    assert len(sim.seen) == 6
    default, keyed, bare = sim.seen[0:2], sim.seen[2:4], sim.seen[4:6]
    assert all(s.headers["X-Session-ID"] == "one" for s in default)
    assert all("prompt_cache_key" not in s.body for s in default + bare)
    assert all(s.headers["X-Affinity"] == "two" for s in keyed)
    assert all("X-Session-ID" not in s.headers for s in keyed + bare)
    assert all("X-Affinity" not in s.headers for s in bare)
    assert a.prefix_key is not None
    assert all(s.body["prompt_cache_key"] == a.prefix_key for s in keyed)


def _openai_transport(base_url: str) -> OpenAITransport:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    return OpenAITransport(client, owns_client=True)


@pytest.mark.parametrize("make", [HTTPTransport, AiohttpTransport, _openai_transport])
async def test_a_session_id_no_header_can_carry_is_refused_where_the_session_is_made(
    sims: list[RecordingSim], make: Callable[[str], Transport]
) -> None:
    """A line break in a session id used to fail that session mid-run, differently per
    transport (a ConfigError over HTTPTransport, a bare ValueError over aiohttp): now
    ``Agent.session`` refuses it, naming the id. A non-ASCII id goes in the header
    percent-encoded (UTF-8), the same over every transport: raw, it went out over aiohttp
    but failed every turn over the OpenAI SDK (a bare UnicodeEncodeError). An ASCII id
    goes as it is."""
    sim, a = sims[0], agent("a", tools=False)
    with pytest.raises(ConfigError, match=r"'line\\nbreak'.*X-Session-ID"):
        a.session("x", session_id="line\nbreak")
    ids = ["plain", "tab\tand 100%", "café-会话-🚀"]
    t = make(sim.base_url)
    try:
        result = await Fleet(t).run([a.session("x", session_id=i) for i in ids])
    finally:
        await t.aclose()
    assert all(s.ok for s in result.sessions)
    # An ASCII id goes as it is, "%" and all.
    assert sim.session_ids() == {"plain", "tab\tand 100%", "caf%C3%A9-" + quote("会话-🚀")}
    assert {unquote(i) for i in sim.session_ids()} == set(ids)


def test_a_session_header_that_is_no_header_name_is_refused() -> None:
    for bad in ("", "X Session", "X-Session:", 7):
        with pytest.raises(ConfigError, match=r"Router\.session_header"):
            Router(session_header=bad)  # type: ignore[arg-type]
    assert Router(session_header="X-Affinity").session_header == "X-Affinity"


async def test_a_replicas_own_limits_hold_at_that_server(sims: list[RecordingSim]) -> None:
    """Replica 0 takes at most 2 requests at once (its own limit); replica 1 is open.
    The work-conserving router sends the rest to replica 1."""
    two = sims[:2]
    ts = await transports(two)
    replicas = [Replica(transport=ts[0], limits=Limits(max_in_flight=2)), Replica(transport=ts[1])]
    try:
        result = await Fleet(replicas, max_concurrency=16).run(
            agent(f"a{i % 4}").session(f"task {i}") for i in range(40)
        )
    finally:
        await close(ts)
    assert not result.failed
    peaks = [peak_overlap([(r.arrival_s, r.finished_s or 0.0) for r in s.records]) for s in two]
    assert peaks[0] <= 2 and result.replicas[0].peak_in_flight <= 2
    assert peaks[1] > 2


async def test_failover_when_a_replica_is_stopped_mid_run(sims: list[RecordingSim]) -> None:
    """Two replicas; replica 0 is stopped once ten turns have ended. Every session still
    completes; every turn that failed on replica 0 was re-run on replica 1, and the
    session stayed there; replica 0's breaker opened."""
    two = sims[:2]
    ts = await transports(two)
    worker = Agent(
        name="worker", model="m", instructions="Work.", tools=[nap], params={"max_tokens": 32}
    )
    stopper: list[asyncio.Task[None]] = []
    turns = 0

    def on_event(event: Event) -> None:
        nonlocal turns
        if isinstance(event, TurnEndEvent):
            turns += 1
            if turns == 10:
                stopper.append(asyncio.get_running_loop().create_task(two[0].server.stop()))

    # Judged on its last two outcomes: after the stop nothing on replica 0 succeeds (its
    # streams are aborted), so its last two are failures however many succeeded before —
    # a window of 20 would open it only if failures were half of them, which depends on
    # how fast the machine ran up to the stop.
    replicas = [Replica(transport=t, breaker_threshold=2, breaker_window=2) for t in ts]
    fleet = Fleet(replicas, retry=RetryPolicy(backoff_s=0.01, jitter=False), callbacks=[on_event])
    try:
        result = await fleet.run(worker.session(f"task {i}", session_id=f"s{i}") for i in range(20))
        await asyncio.gather(*stopper)
    finally:
        await close(ts)
    assert stopper, "replica 0 was stopped"
    assert not result.failed, [s.error for s in result.failed]
    assert all(len(s.turns) == 2 for s in result.sessions)
    first, second = (r.name for r in result.replicas)
    assert two[0].session_ids(), "replica 0 had sessions before it stopped"
    moved = 0
    for s in result.sessions:
        endpoints = [t.trace.endpoint for t in s.turns]
        for i, turn in enumerate(s.turns):
            if turn.failed_attempts:  # failed on replica 0, re-run on replica 1 ...
                assert {f.replica for f in turn.failed_attempts} == {first}
                assert endpoints[i:] == [second] * (len(endpoints) - i)  # ... and stayed
                moved += 1
    assert moved >= 1
    assert result.replicas[0].breaker_opened >= 1 and result.replicas[0].failures >= 2
    assert result.replicas[1].breaker_opened == 0


# --- The router's rules, on hand-made replica states ---------------------------------------


def states(*names: str, clock: FakeClock | None = None, **limits: int) -> list[ReplicaState]:
    c = clock or FakeClock()
    return [
        ReplicaState(Replica(transport=IdleTransport(n), limits=Limits(**limits)), c) for n in names
    ]


def test_least_loaded_by_requests_then_tokens() -> None:
    a, b, c = states("a", "b", "c")
    router = Router(prefix_affinity=False)
    a.start(ticket("x1"))
    b.start(ticket("x2", prompt_tokens=500))
    assert router.choose(ticket("new"), [a, b, c]) is c
    c.start(ticket("x3", prompt_tokens=10))
    assert router.choose(ticket("new"), [a, b, c]) is a  # a and c tie: 1 in flight, 20 tokens
    a.start(ticket("x4"))
    assert router.choose(ticket("new"), [a, b, c]) is c


def test_sticky_unless_full_then_it_moves() -> None:
    a, b = states("a", "b", max_in_flight=1)
    router = Router()
    t = ticket("s")
    home = router.choose(t, [a, b])
    assert home is a
    router.placed(t, a)
    assert router.choose(ticket("s", turn=1), [a, b]) is a and router.sticky_hits == 1
    a.start(ticket("other"))  # home is full: the session moves (work-conserving)
    moved = router.choose(ticket("s", turn=2), [a, b])
    assert moved is b
    router.placed(ticket("s", turn=2), b)
    assert router.moves == 1 and a.sessions == 0 and b.sessions == 1
    router.forget("s")
    assert b.sessions == 0


def test_exclusion_and_open_breakers() -> None:
    clock = FakeClock()
    a, b = states("a", "b", clock=clock)
    router = Router()
    t = ticket("s")
    t.exclude = frozenset({"a"})
    assert router.choose(t, [a, b]) is b  # failover prefers another replica...
    b.breaker.threshold = 1
    b.breaker.on_failure()
    assert router.choose(t, [a, b]) is a  # ...but uses the excluded one if it is all there is
    a.breaker.threshold = 1
    a.breaker.on_failure()
    assert router.choose(ticket("s2"), [a, b]) is None  # nothing healthy: wait
    clock.advance(5.0)
    assert router.choose(ticket("s2"), [a, b]) is not None  # a probe may go


def test_an_excluded_replica_with_room_is_used_when_the_others_are_full() -> None:
    """The exclusion is a preference among the replicas with room: a retry excluding an
    idle ``a`` while ``b`` is full goes to ``a`` now (it used to wait for ``b``, stalling
    every turn queued behind it); with room on both, ``b`` is still preferred."""
    a, b = states("a", "b", max_in_flight=1)
    router = Router()
    t = ticket("s")
    t.exclude = frozenset({"a"})
    assert router.choose(t, [a, b]) is b
    b.start(ticket("other"))
    assert router.choose(t, [a, b]) is a


def test_a_replica_held_by_its_retry_after_is_avoided_until_then() -> None:
    """A replica that answered with ``Retry-After`` (held) gets nothing — not even its
    sticky session's turn — while another healthy one has room; it is used when it is
    all there is, and again once the hold is over."""
    clock = FakeClock()
    a, b = states("a", "b", clock=clock)
    router = Router()
    router.placed(ticket("s"), a)
    a.hold.extend(clock(), 10.0)
    assert router.choose(ticket("s", turn=1), [a, b]) is b
    assert router.choose(ticket("new"), [a, b]) is b
    b.breaker.threshold = 1
    b.breaker.on_failure()
    assert router.choose(ticket("new"), [a, b]) is a  # a preference: never a reason to wait
    clock.advance(10.0)
    assert a.held_ns() == 0 and router.choose(ticket("s", turn=2), [a, b]) is a


def test_the_dispatcher_wakes_when_a_hold_ends() -> None:
    """``a`` is held for 2 s and ``b`` is full: the next turn goes to ``a`` when its
    hold ends, with no release to wake the dispatcher."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        a = Replica(transport=IdleTransport("a"), name="a")
        b = Replica(transport=IdleTransport("b"), name="b", limits=Limits(max_in_flight=1))
        sched = Scheduler([a, b], clock=loop_clock, prefix_warmup=False)
        hog = await sched.acquire(ticket("hog"))
        assert hog.replica.name == "a"
        sched.hold(sched.replicas[0], 2.0)
        sched.release(hog, used_tokens=None, ok=True)
        busy = await sched.acquire(ticket("busy"))
        assert busy.replica.name == "b"
        grant = await sched.acquire(ticket("next"))
        assert grant.replica.name == "a" and 2.0 <= loop.time() <= 2.0 + 1e-3
        for g in (busy, grant):
            sched.release(g, used_tokens=None, ok=True)
        await sched.aclose()

    run_virtual(main())


def test_prefix_affinity_within_the_slack() -> None:
    a, b = states("a", "b")
    router = Router(balance_slack=1)
    first = ticket("s1", prefix_key="p")
    router.placed(first, a)
    a.start(first)
    assert router.choose(ticket("s2", prefix_key="p"), [a, b]) is a  # 1 ≤ 0 + 1
    a.start(ticket("s2", prefix_key="p"))
    assert router.choose(ticket("s3", prefix_key="p"), [a, b]) is b  # 2 > 0 + 1
    assert router.choose(ticket("s4", prefix_key="q"), [a, b]) is b


def test_router_config_errors() -> None:
    with pytest.raises(ValueError, match="balance_slack"):
        Router(balance_slack=-1)
