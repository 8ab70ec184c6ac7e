"""How a run on workers stops: ``stop_timeout_s`` is a finite number of seconds (a cancel
waits that long for a worker whose loop is blocked), and the reap that ends the workers
leaves none running even when it is itself cancelled."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import signal

import pytest

from agentflow import ConfigError, Fleet, HTTPTransport
from agentflow._workers._broker import WorkerHandle
from agentflow._workers._processes import _reap
from tests.workers.hang_tools import deaf_worker


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        ("10", "'10'"),
        (None, "None"),
        (True, "True"),
        (0, "0"),
        (-1.0, "-1.0"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (2e9, "2000000000.0"),
        (10**400, "an int of 1329 bits"),
    ],
    ids=["str", "None", "True", "0", "negative", "nan", "inf", "too-long", "huge-int"],
)
def test_a_bad_stop_timeout_is_a_config_error_naming_it(bad: object, shown: str) -> None:
    """It was checked with ``not stop_timeout_s > 0`` only: "10" and None raised a bare
    TypeError, True was taken, inf made a cancel with a blocked worker wait for ever, and
    10**400 an OverflowError in the middle of the reap (its blocked worker left alive)."""
    with pytest.raises(
        ConfigError, match=r"^stop_timeout_s must be a finite number of seconds in \[0\.001, "
        r"1e\+09\], got " + re.escape(shown) + "$"
    ):  # fmt: skip
        Fleet(HTTPTransport("http://127.0.0.1:1"), workers=2, stop_timeout_s=bad)  # type: ignore[arg-type]


def test_a_good_stop_timeout_is_taken() -> None:
    http = HTTPTransport("http://127.0.0.1:1")
    assert Fleet(http, workers=2).stop_timeout_s == 10.0
    assert Fleet(http, workers=2, stop_timeout_s=1).stop_timeout_s == 1


async def test_a_cancelled_reap_kills_the_workers_it_was_waiting_for() -> None:
    """A worker that does not exit when told (its loop blocked): the reap waits
    ``stop_timeout_s`` for it before it is terminated and killed. A cancel in that wait
    (a second Ctrl-C, the caller's own timeout) used to leave it running; now the reap
    kills it on its way out."""
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    heard = ctx.Event()
    proc = ctx.Process(target=deaf_worker, args=(theirs, heard), daemon=True)
    proc.start()
    theirs.close()
    w = WorkerHandle(0, [], send=mine.send, process=proc, conn=mine)
    loop = asyncio.get_running_loop()
    try:
        reap = asyncio.ensure_future(_reap([w], 600.0))
        assert await loop.run_in_executor(None, heard.wait, 60)  # told to exit; it does not
        reap.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reap
        await loop.run_in_executor(None, proc.join, 60)
        assert proc.exitcode == -signal.SIGKILL
    finally:
        if proc.exitcode is None:
            proc.kill()
            proc.join(10)
