"""A plain ``os.fork()`` child of a process running a PostgresServer leaves the parent's
server alone when it exits: the exit hooks the fork copied used to try to stop the
parent's server — hanging in ChildServer's close of the output pipe, whose reader lock
the parent's drainer thread held at the fork — and past that would have removed the
live server's directory."""

from __future__ import annotations

import os
import signal
import sys
import time

import psycopg
import pytest

from agentflow import _pgserver, _process
from agentflow.testing import PostgresServer

from .conftest import postgres_missing

GUARD_S = 60.0  # a liveness bound for the child, not a timing check

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here"),
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


def test_a_forked_childs_exit_leaves_the_parents_server_running() -> None:
    if reason := postgres_missing():
        pytest.skip(reason)
    with PostgresServer() as pg:
        assert pg.dir is not None
        directory = pg.dir
        pid = os.fork()
        if pid == 0:  # the child: what its normal exit runs, then out (never into pytest)
            code = 1
            try:
                _pgserver._stop_servers()  # the atexit hooks the fork copied
                _process._stop_children()
                pg.stop()  # and a stop called on the copy itself
                code = 0
            except BaseException as exc:
                print(f"child: {exc!r}", file=sys.stderr, flush=True)
            finally:
                os._exit(code)
        deadline = time.monotonic() + GUARD_S
        while not (done := os.waitpid(pid, os.WNOHANG))[0]:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"the forked child did not exit within {GUARD_S} s")
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(done[1]) == 0
        assert directory.is_dir()
        with psycopg.connect(pg.dsn) as conn:  # the server still runs
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not directory.exists()  # the parent's stop still removes it
