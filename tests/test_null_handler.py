"""The ``agentflow`` logger has its NullHandler whichever agentflow module is imported,
so a module that logs through ``logging.getLogger`` (the report's ServerWatch and live
view, the simulator) prints nothing unasked through logging's last-resort handler."""

from __future__ import annotations

from tests.procutil import run_python


def test_an_error_logged_without_agentflow_logging_loaded_prints_nothing() -> None:
    out = run_python(
        """
        import logging, sys
        import agentflow.report._watch, agentflow.sim.httperrors
        assert "agentflow._logging" not in sys.modules
        logging.getLogger("agentflow.report").error("sampling failed unexpectedly")
        logging.getLogger("agentflow.sim").error("a request failed")
        print("done")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n" and out.stderr == ""


def test_one_null_handler_however_agentflow_is_imported() -> None:
    """``import agentflow`` alone adds it; agentflow._logging adds no second, nor does a
    reload; a configured application still sees the lines."""
    out = run_python(
        """
        import importlib, logging, sys
        import agentflow
        print(logging.getLogger("agentflow").handlers)
        import agentflow._logging
        importlib.reload(agentflow)
        print(logging.getLogger("agentflow").handlers)
        logging.basicConfig(stream=sys.stdout, format="%(name)s %(message)s")
        logging.getLogger("agentflow.sim").error("shown")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[<NullHandler (NOTSET)>]"] * 2 + ["agentflow.sim shown"]
