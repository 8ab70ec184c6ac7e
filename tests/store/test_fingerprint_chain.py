"""An agent's fingerprint names its context chain's links, and a run recorded before the
chain existed (``ContextBudget(fleet=...)``, fingerprinted as ``ContextBudget``) resumes
with the chain spelling that replaced it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, ConfigError, FleetResult
from agentflow.context import ContextBudget, FleetBudget
from agentflow.embedded import run_virtual
from agentflow.store._codec import (
    _fingerprint_v1,
    _fingerprint_v2,
    _fingerprint_v3,
    _fingerprint_v4,
    fingerprint,
    fingerprints,
)

from .fleets import agents, resume, run_cut

N = 9


def team(context: Any) -> list[Agent]:
    return [dataclasses.replace(a, context=context) for a in agents()]


def test_a_chains_fingerprint_names_its_links_in_order() -> None:
    budget, fleet = ContextBudget(window=32_768), FleetBudget(max_tokens=10**9)
    prints = {
        fingerprint(team([budget])[0]),
        fingerprint(team([fleet, budget])[0]),
        fingerprint(team([budget, fleet])[0]),
        fingerprint(team(budget)[0]),
    }
    assert len(prints) == 4  # dropping, adding or moving a link is a different agent
    # Equal links in equal order: the same fingerprint across instances.
    assert fingerprint(team([FleetBudget(max_tokens=5), ContextBudget(window=9)])[0]) == (
        fingerprint(team([fleet, budget])[0])
    )


def test_the_legacy_fingerprint_is_accepted_only_for_a_chain_with_a_budget() -> None:
    budget, fleet = ContextBudget(window=32_768), FleetBudget(max_tokens=10**9)
    with pytest.warns(DeprecationWarning, match="fleet="):
        old = ContextBudget(window=32_768, fleet=FleetBudget(max_tokens=10**9))
    legacy = fingerprint(team(old)[0])
    assert legacy in fingerprints(team([fleet, budget])[0])
    assert legacy not in fingerprints(team([fleet])[0])
    earlier = {
        _fingerprint_v4(team(old)[0]), _fingerprint_v3(team(old)[0]), _fingerprint_v2(team(old)[0]),
        _fingerprint_v1(team(old)[0]),
    }  # fmt: skip
    assert fingerprints(team(budget)[0]) == {legacy, *earlier}


def test_a_run_recorded_with_the_deprecated_spelling_resumes_with_the_chain(
    tmp_path: Path,
) -> None:
    with pytest.warns(DeprecationWarning, match="fleet="):
        old = ContextBudget(window=32_768, fleet=FleetBudget(max_tokens=10**9))
    assert run_virtual(run_cut(tmp_path / "cut.db", team(old), N, 6)) is None
    chain = [FleetBudget(max_tokens=10**9), ContextBudget(window=32_768)]
    result = run_virtual(resume(tmp_path / "cut.db", team(chain)))
    assert isinstance(result, FleetResult)
    assert [s.status for s in result.sessions] == ["completed"] * N


def test_a_chain_that_lost_a_link_does_not_resume(tmp_path: Path) -> None:
    chain = [FleetBudget(max_tokens=10**9), ContextBudget(window=32_768)]
    assert run_virtual(run_cut(tmp_path / "cut.db", team(chain), N, 6)) is None
    with pytest.raises(ConfigError, match="not configured as it was"):
        run_virtual(resume(tmp_path / "cut.db", team([ContextBudget(window=32_768)])))
