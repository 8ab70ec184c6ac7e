"""`agentflow resume` runs the rest of a demo run with the settings it began with: its
`--slo`s, `--fault-rate` and `--*-timeout` limits are recorded with the run's config and
applied on resume (they used to be dropped: a resumed run had no goodput and no faults)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentflow._errors import ConfigError
from agentflow.cli import main
from agentflow.demo.run import DemoConfig, recorded_config, resume_config
from agentflow.stats import SLO
from agentflow.transport import Timeouts

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _count(db: Path, sql: str) -> int:
    conn = sqlite3.connect(db)
    try:
        ((n,),) = conn.execute(sql)
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        conn.close()
    return int(n or 0)


def test_the_recorded_config_round_trips_and_old_records_resume() -> None:
    config = DemoConfig(
        agents=3, slos=(SLO(ttft_s=2.0, tpot_s=0.01), SLO(e2e_s=60, name="slow")),
        fault_rate=0.25, timeouts=Timeouts(idle=30.0, total=None), store=Path("x.db"),
    )  # fmt: skip
    # Through JSON, as the store keeps it.
    recorded = json.loads(json.dumps(recorded_config(config)))
    back = resume_config(recorded, "run-1", store=Path("x.db"), live=False)
    assert back.slos == config.slos and back.fault_rate == 0.25
    assert back.timeouts == config.timeouts and back.resume == "run-1"
    # A record from before these were kept resumes with none of them.
    for key in ("slos", "fault_rate", "timeouts"):
        del recorded["demo"][key]
    old = resume_config(recorded, "run-1", store=Path("x.db"))
    assert (old.slos, old.fault_rate, old.timeouts) == ((), 0.0, None)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d["demo"].update(new_option=1), "does not know \\('new_option'\\)"),
        (lambda d: d["demo"].pop("turns"), "lacks 'turns'"),
        (lambda d: d["demo"].update(timeouts={"connect_s": 1, "new_s": 2}), "not one this"),
        (lambda d: d["demo"].update(slos=[{"bogus": 1}]), "not one this"),
        (lambda d: d["demo"].update(turns=5), "not one this"),
        (lambda d: d.update(demo=[1]), "not an object \\(got list\\)"),
    ],
)
def test_a_recorded_config_this_release_cannot_read_is_a_config_error(
    change: Callable[[dict[str, Any]], object], match: str
) -> None:
    """A recorded demo configuration with a key a later release added, one missing, or a
    field of the wrong shape: a ConfigError naming the run, not a TypeError/KeyError."""
    recorded = json.loads(json.dumps(recorded_config(DemoConfig(agents=3))))
    change(recorded)
    with pytest.raises(ConfigError, match=match) as refused:
        resume_config(recorded, "run-1", store=Path("x.db"))
    assert "'run-1'" in str(refused.value)


def test_a_resumed_http_demo_keeps_its_slo_fault_rate_and_limits(tmp_path: Path) -> None:
    """A demo over HTTP on the simulator with --slo, --fault-rate and --idle-timeout,
    stopped by SIGINT after a few turns, is resumed by `agentflow resume`: the resumed
    part meets faults (its retries, as the store counts them) and its report has the
    recorded SLO, fault rate and limits."""
    db, first = tmp_path / "runs.db", tmp_path / "first.json"
    # Slowed down (--time-scale 15, ~14 s) so that the store's first SQLite commit, which
    # the loop below waits for (every 5 s with the journal), comes well before the end.
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", "demo", "--agents", "10", "--turns", "3:4",
         "--max-concurrency", "2", "--time-scale", "15", "--max-tokens", "32",
         "--fault-rate", "0.3", "--slo", "e2e=600s", "--idle-timeout", "30",
         "--no-live", "--store", str(db), "--report", str(first)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _count(db, "SELECT COUNT(*) FROM turns") < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no turns recorded in 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:] + out[-3000:]
    stopped: dict[str, Any] = json.loads(first.read_text())
    run_id = stopped["run"]["run_id"]
    assert stopped["run"]["interrupted"]["sessions_cancelled"] > 0

    again = tmp_path / "again.json"
    status = main(["resume", run_id, "--store", str(db), "--no-live", "--report", str(again)])
    resumed: dict[str, Any] = json.loads(again.read_text())
    assert status == (0 if resumed["fleet"]["failed"] == 0 else 1)
    run = resumed["run"]
    assert run["fault_rate"] == 0.3 and run["slos"] == ["e2e<=600s"]
    assert run["timeouts"]["idle"] == 30.0 and run["resume"] == run_id
    assert [g["name"] for g in resumed["goodput"]] == ["e2e<=600s"]
    assert resumed["fleet"]["sessions"] == 10
    # The resumption (run attempt 1) ran turns, and the simulator it started failed some.
    ran = _count(db, f"SELECT COUNT(*) FROM turns WHERE run_id = '{run_id}' AND attempt = 1")
    retries = _count(
        db, f"SELECT retries FROM run_attempts WHERE run_id = '{run_id}' AND attempt = 1"
    )
    assert ran >= 10 and retries > 0, (ran, retries)


def test_a_base_url_keeps_no_userinfo_and_a_resume_gives_it_again() -> None:
    """The recorded config keeps the server's URL without `user:password@` (a Basic-auth
    password), noting it had one; a resume without `base_url` is refused (not run without
    credentials), one with it runs against it, one naming another server is refused.
    A URL without userinfo, and one recorded with it before, resume as before."""
    secret = "http://alice:pw-0123456789@example.test:8000/v1"
    recorded = json.loads(json.dumps(recorded_config(DemoConfig(base_url=secret))))
    assert "pw-0123456789" not in json.dumps(recorded) and "alice" not in json.dumps(recorded)
    assert recorded["demo"]["base_url"] == "http://example.test:8000/v1"
    with pytest.raises(ConfigError, match="--base-url") as refused:
        resume_config(recorded, "run-1", store=Path("x.db"))
    assert "pw-0123456789" not in str(refused.value)
    back = resume_config(recorded, "run-1", store=Path("x.db"), base_url=secret)
    assert back.base_url == secret
    with pytest.raises(ConfigError, match="is not the server"):
        resume_config(recorded, "run-1", base_url="http://a:b@other.test:8000/v1")
    plain = recorded_config(DemoConfig(base_url="http://example.test:8000/v1"))
    assert "base_url_userinfo" not in plain["demo"]
    assert resume_config(plain, "run-1", store=Path("x.db")).base_url == plain["demo"]["base_url"]
    old = {"kind": "agentflow-demo", "demo": {**plain["demo"], "base_url": secret}}
    assert resume_config(old, "run-1", store=Path("x.db")).base_url == secret
    with pytest.raises(ConfigError, match="embedded simulator"):
        resume_config(recorded_config(DemoConfig()), "run-1", base_url=secret)
