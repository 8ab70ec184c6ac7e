"""A run with no logging configured does not import structlog (nor rich with it): its
lines are dropped before one is built, so the first run's clock holds no import; a line
some handler takes is still built and logged."""

from __future__ import annotations

from tests.procutil import run_python

_RUN = """
    import asyncio, sys
    from agentflow import Agent, Fleet
    from agentflow.testing import MockTransport, Reply

    def reply(req):
        return Reply.error(401, "no") if req.messages[-1]["content"] == "bad" else Reply.text("hi")

    async def run(prompts):
        result = await Fleet(MockTransport(reply)).run(
            [Agent(name="lazy", model="m").session(p) for p in prompts]
        )
        return [s.status for s in result.sessions]
"""


def test_a_fleet_run_without_logging_leaves_structlog_unimported() -> None:
    """``fleet.start`` (INFO, below the stdlib logger's level) and a failed session's
    warning (no handler but agentflow's NullHandler) are dropped: after the run,
    structlog is not in ``sys.modules``."""
    out = run_python(
        _RUN
        + """
    print(asyncio.run(run(["x", "bad"])), "structlog" in sys.modules)
    """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("]")[-1].strip() == "False", out.stdout
    assert out.stderr == ""


def test_lines_carry_the_session_once_logging_is_configured_later() -> None:
    """The agent/session context variables made before structlog was loaded are the ones
    its lines merge, once the application turns logging on."""
    out = run_python(
        _RUN
        + """
    import logging
    asyncio.run(run(["x"]))
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    asyncio.run(run(["bad"]))
    """
    )
    assert out.returncode == 0, out.stderr
    failed = [line for line in out.stdout.splitlines() if "session.failed" in line]
    assert failed and "agent='lazy'" in failed[0], out.stdout


def test_a_warning_is_logged_once_a_handler_is_added() -> None:
    """With a handler on ``agentflow`` alone (the root has none) a warning is built."""
    out = run_python(
        _RUN
        + """
    import logging
    handler = logging.StreamHandler(sys.stdout)
    logging.getLogger("agentflow").addHandler(handler)
    asyncio.run(run(["bad"]))
    """
    )
    assert out.returncode == 0, out.stderr
    assert "session.failed" in out.stdout and "agent='lazy'" in out.stdout, out.stdout


def test_without_the_null_handler_the_last_resort_still_prints_a_warning() -> None:
    """Dropping a line is only for lines logging would drop: with no handler at all,
    logging's last resort writes a warning to stderr, as it would without agentflow."""
    out = run_python(
        """
        import logging
        import agentflow._logging
        logging.getLogger("agentflow").handlers.clear()
        agentflow._logging.get_logger("agentflow.x").info("dropped")
        agentflow._logging.get_logger("agentflow.x").warning("w.x", n=1)
        """
    )
    assert out.returncode == 0, out.stderr
    assert "event='w.x'" in out.stderr and "dropped" not in out.stderr


def test_logging_configured_with_dictconfig_after_the_import_keeps_agentflows_lines() -> None:
    """``dictConfig`` disables every logger that exists when it runs: agentflow's stdlib
    loggers are made on their first line, not at import, so an application that imports
    agentflow, then configures logging, still gets them (it got none of them)."""
    out = run_python(
        _RUN
        + """
    import logging.config
    logging.config.dictConfig({
        "version": 1,
        "handlers": {"out": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout"}},
        "root": {"handlers": ["out"], "level": "INFO"},
    })
    asyncio.run(run(["bad"]))
    """
    )
    assert out.returncode == 0, out.stderr
    assert "fleet.start" in out.stdout and "session.failed" in out.stdout, out.stdout


def test_a_namesake_the_application_bound_does_not_replace_the_sessions_vars() -> None:
    """structlog imported after agentflow made its variables, and the application binding
    ``agent``/``session`` itself before agentflow's first line: two variables share each
    name, and a session's line carried either's value; it carries the session's."""
    out = run_python(
        _RUN
        + """
    import logging
    asyncio.run(run(["x"]))
    import structlog
    structlog.contextvars.bind_contextvars(agent="app", session="req-7")
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    for _ in range(8):
        asyncio.run(run(["bad"]))
    """
    )
    assert out.returncode == 0, out.stderr
    failed = [line for line in out.stdout.splitlines() if "session.failed" in line]
    assert len(failed) == 8, out.stdout
    assert all("agent='lazy'" in line and "session='req-7'" not in line for line in failed)


def test_a_value_the_call_passes_wins_over_the_sessions() -> None:
    """A line about another session, logged inside a session (``session=`` passed), keeps
    what it was given."""
    out = run_python(
        """
        import logging, sys
        import structlog
        from agentflow._logging import get_logger, log_vars
        logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
        agent, session, turn = log_vars()
        agent.set("a"); session.set("a-1"); turn.set(0)
        get_logger("agentflow.x").info("explicit", session="OTHER", agent="other")
        get_logger("agentflow.x").info("implicit")
        """
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "agent='other'" in lines[0] and "session='OTHER'" in lines[0], out.stdout
    assert "agent='a'" in lines[1] and "session='a-1'" in lines[1], out.stdout
