"""What a run is given is checked before it starts: a path for ``Fleet(store=...)`` was
an AttributeError (``'str' object has no attribute 'open'``) when the run opened it,
``Fleet.run(["hello"])`` or ``run([agent])`` one on ``session_id``, ``run(None)`` a bare
TypeError, and ``Session("coder", task)`` one on the agent's ``name``; each is now a
ConfigError naming what was wrong and what to give."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet, HTTPTransport, Session
from agentflow.store import SQLiteStore
from agentflow.testing import Reply, ScriptedServer

AGENT = Agent(name="a", model="m")


def bad(value: Any) -> Any:
    """``value``, typed Any: the point is what happens when a caller passes it anyway."""
    return value


def _fleet(**kw: Any) -> Fleet:
    return Fleet(HTTPTransport("http://127.0.0.1:9/v1"), **kw)


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (
            lambda: _fleet(store=bad("runs.db")),
            r"Fleet\.store must be a run store .*wrap a path in SQLiteStore\(path\), "
            r"got str 'runs\.db'",
        ),
        (
            lambda: _fleet(store=bad(Path("runs.db"))),
            r"Fleet\.store .*wrap a path in SQLiteStore\(path\)",
        ),
        (lambda: _fleet(store=bad({})), r"Fleet\.store must be a run store .*got dict \{\}$"),
        (
            lambda: Session(bad("coder"), "task"),
            r"Session needs an Agent \(agent\.session\(task\) makes one\), got str 'coder'",
        ),
        # a clock of 'x' failed the run's first reading with a bare TypeError
        (
            lambda: _fleet(clock=bad("x")),
            r"^Fleet\.clock must be a function \(monotonic .*str 'x'$",
        ),
        (lambda: _fleet(sleep=bad(0.1)), r"^Fleet\.sleep must be a function \(an async sleep"),
    ],
)
def test_a_wrong_value_is_a_config_error_naming_it(build: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        build()


@pytest.mark.parametrize(
    ("sessions", "says"),
    [
        (["hello"], r"Fleet\.run takes sessions: agent\.session\(task\); item 0 is str 'hello'"),
        ([AGENT], r"Fleet\.run takes sessions: agent\.session\(task\); item 0 is Agent"),
        (None, r"Fleet\.run takes sessions: agent\.session\(task\) for each.* NoneType None"),
        ("hello", r"Fleet\.run takes sessions: .* got str 'hello'"),
    ],
)
async def test_a_run_of_what_is_not_sessions_is_refused(sessions: Any, says: str) -> None:
    fleet = _fleet()
    with pytest.raises(ConfigError, match=says):
        await fleet.run(sessions)
    with pytest.raises(ConfigError, match=says.replace("run", "stream", 1)):
        async for _ in fleet.stream(sessions):
            pass


async def test_resume_from_a_path_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"Fleet\.resume: store .*SQLiteStore\(path\)"):
        await _fleet().resume("r1", agents=[AGENT], store=bad("runs.db"))


async def test_good_values_still_run(tmp_path: Path) -> None:
    """A store, sessions from a generator, and a fleet that then runs them."""
    async with ScriptedServer([Reply.text("hi")]) as srv, HTTPTransport(srv.base_url) as t:
        store = SQLiteStore(tmp_path / "runs.db")
        result = await Fleet(t, store=store).run(AGENT.session("go") for _ in range(1))
        await store.aclose()
    assert [s.status for s in result.sessions] == ["completed"]


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"retry": "x"}, r"^Session\.run: retry must be a RetryPolicy or None, got 'x'$"),
        ({"callbacks": [5]}, r"^Session\.run: callbacks\[0\] must be a callable .*got int 5$"),
        ({"callbacks": "ab"}, r"^Session\.run: callbacks must be a list of callables, got str"),
        ({"clock": "x"}, r"^Session\.run: clock must be a function \(monotonic nanoseconds\)"),
    ],
)
async def test_a_session_run_alone_checks_what_a_fleet_checks(
    kw: dict[str, Any], says: str
) -> None:
    """``Session.run(retry="x")`` or ``callbacks=[5]`` was taken (a fleet refuses them):
    now refused before the session is held, so it can still run with good values."""
    async with ScriptedServer([Reply.text("hi")]) as srv, HTTPTransport(srv.base_url) as t:
        session = AGENT.session("go")
        with pytest.raises(ConfigError, match=says):
            await session.run(t, **kw)
        seen: list[str] = []
        result = await session.run(t, callbacks=[lambda e: seen.append(e.type)])
    assert result.status == "completed" and "session_end" in seen
