"""The library's paths that need no rich (the ``demo`` extra) work without it.

``agentflow.demo.summary`` imported rich at module level, and ``export_report`` (hence
``agentflow report --store``) and ``run_bench`` (its failure lines) import that module:
without the extra both failed with ``ModuleNotFoundError: rich``. Each check runs in a
fresh interpreter where rich cannot be imported.
"""

from __future__ import annotations

from pathlib import Path

from tests.procutil import run_python


def run_without_rich(code: str) -> str:
    """Run ``code`` where ``import rich`` fails; its stdout (it must exit 0)."""
    proc = run_python(code, without=("rich",))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_export_report_of_a_stored_run(tmp_path: Path) -> None:
    out = run_without_rich(
        f"""
        import asyncio
        from agentflow import Agent, Fleet
        from agentflow.store import SQLiteStore, export_report
        from agentflow.testing import MockTransport, Reply

        async def main():
            store = SQLiteStore({str(tmp_path / "runs.db")!r})
            t = MockTransport(lambda r: Reply.text("hi"))
            try:
                res = await Fleet(t, store=store).run([Agent(name="a", model="m").session("q")])
                report = await export_report(store, res.run_id)
                print(report["schema_version"], report["fleet"]["completed"])
            finally:
                store.close()

        asyncio.run(main())
        """
    )
    assert out.split() == ["agentflow.report/2", "1"]


def test_run_bench_lists_each_levels_failures() -> None:
    # Every level's entry lists its failures (failure_lines), none here: the path ran.
    out = run_without_rich(
        """
        from agentflow.bench import BenchConfig, Load, get_workload, run_bench

        r = run_bench(BenchConfig(workload=get_workload("short"), levels=(Load(rate=1.0),),
                                  duration_s=5, warmup_s=0))
        print(len(r["levels"]), type(r["levels"][0]["failures"]).__name__)
        """
    )
    assert out.split() == ["1", "list"]
