"""The demo's store where flock is missing (Windows): ``open_store`` asked for the journal
explicitly (``journal=True``), which such a platform refuses ("leave it unset"), so
``demo --store`` and ``resume`` failed there; left unset, the store runs without it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentflow.demo._recorded import open_store
from agentflow.store import _journal


def test_the_demos_store_opens_without_flock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_journal, "AVAILABLE", False)

    async def main() -> bool:
        store = await open_store(tmp_path / "run.db", "demo")
        try:
            return store.journal
        finally:
            await store.aclose()

    assert asyncio.run(main()) is False
