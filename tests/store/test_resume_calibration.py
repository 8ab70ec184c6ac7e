"""A context policy's learnt state continues on resume: the calibrator's fit is recorded
with the run and restored by ``Fleet.resume``, so a resumed run's estimates continue
from where the killed (here: cancelled) one's were, not from an untrained calibrator."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from agentflow import Agent, ConfigError, FleetResult
from agentflow.context import Calibrator, ContextBudget, ContextChain, PromptShape
from agentflow.context._kinds import KINDS
from agentflow.embedded import run_virtual
from agentflow.store._policies import restore
from agentflow.store._records import StoredRun

from .fleets import agents, load_run, resume, run_cut

N = 18


def team(budget: ContextBudget, chain: bool = False) -> list[Agent]:
    """The store tests' agents, sharing one context budget (so one calibrator): the
    budget itself, or (``chain``) the budget as a link of a context chain."""
    return [
        dataclasses.replace(a, context=ContextChain([budget]) if chain else budget)
        for a in agents()
    ]


def budget() -> ContextBudget:
    return ContextBudget(window=32_768, calibrator=Calibrator(window=8))


def _probe(cal: Calibrator) -> list[tuple[int, int, int]]:
    """Forecasts and corrections the calibrator gives for a few fixed prompts."""
    out = []
    for model in cal.models:
        for n in (50, 400, 3000):
            kinds = tuple(n if i == 0 else n // (i + 2) for i in range(len(KINDS)))
            est = cal.forecast(model, PromptShape(kinds=kinds, system=True))
            anchored = cal.forecast(
                model, PromptShape(kinds=kinds, system=True, anchor=(n, n + 7), growth=kinds)
            )
            out.append((est.bound, anchored.bound, cal.correct(model, n)))
    return out


def _observe(cal: Calibrator, rng: random.Random, steps: int) -> None:
    for _ in range(steps):
        kinds = tuple(rng.randint(0, 400) for _ in KINDS)
        anchor = (sum(kinds), sum(kinds) + rng.randint(0, 40)) if rng.random() < 0.5 else None
        growth = tuple(rng.randint(0, 60) for _ in KINDS) if anchor else (0,) * len(KINDS)
        shape = PromptShape(kinds=kinds, system=rng.random() < 0.5, anchor=anchor, growth=growth)
        est = sum(kinds) + 1
        cal.observe("m", est, round(est * rng.uniform(1.0, 1.4)) + 30, shape=shape)


def test_a_restored_calibrator_continues_exactly_like_the_original() -> None:
    """State taken at step 40, loaded into a fresh calibrator: from then on both learn the
    same turns and agree on every figure (the pair slopes are rebuilt, the fit redone)."""
    rng = random.Random(7)
    original = Calibrator(window=16)
    _observe(original, rng, 40)
    state = original.to_state()
    copy = Calibrator(window=16)
    copy.load_state(state)
    assert copy.to_state() == state
    assert _probe(copy) == _probe(original)
    assert copy.stats("m") == original.stats("m")
    later = random.Random(8)
    _observe(original, later, 30)
    _observe(copy, random.Random(8), 30)
    assert copy.to_state() == original.to_state()
    assert _probe(copy) == _probe(original)
    assert copy.stats("m") == original.stats("m")


def test_a_bad_state_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="load_state"):
        Calibrator().load_state({"version": 2, "models": {}})
    with pytest.raises(ConfigError, match="load_state"):
        Calibrator().load_state({"version": 1, "models": {"m": {"points": []}}})
    # A point observe() would never learn from (a store edited by hand, a corrupt row):
    # refused, not a ZeroDivisionError, nor a calibrator that corrects every count to 0.
    good = Calibrator()
    good.observe("m", 100, 120)
    good.observe("m", 200, 230)
    for points in ([[0, 5], [100, 120]], [[100, -50], [200, -90]], [[100, float("nan")]]):
        state = good.to_state()
        state["models"]["m"]["points"] = points
        with pytest.raises(ConfigError, match="load_state: not a calibrator state"):
            Calibrator().load_state(state)


def _load(path: Path) -> StoredRun:
    return run_virtual(load_run(path))


@pytest.mark.parametrize("chain", [False, True], ids=["budget", "chain"])
def test_the_resumed_run_starts_from_the_calibration_the_cut_run_had(
    tmp_path: Path, chain: bool
) -> None:
    first = budget()
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first, chain), N, 20)) is None
    learnt = first.calibrator.to_state()
    assert learnt["models"]  # the cut run learnt something
    # What the store kept is the calibrator as it was when the attempt ended.
    run = _load(tmp_path / "cut.db")
    # The other agents' names lead to it: one record names them all.
    aliases = {"aliases": ["calibrator:agent-1", "calibrator:agent-2"], "of": "calibrator:agent-0"}
    assert run.policy_state == {
        "calibrator:agent-0": learnt, "calibrator:agent-0#aliases": aliases,
    }  # fmt: skip
    # A fresh process's calibrator, restored: the same state, the same estimates.
    fresh = budget()
    assert restore(run.policy_state, team(fresh, chain)) == 1
    assert fresh.calibrator.to_state() == learnt
    assert _probe(fresh.calibrator) == _probe(first.calibrator)

    # Resumed end to end, the calibrator goes on from there: it has learnt from every
    # turn of the run — those before the cut (restored) and those after (observed).
    again = budget()
    result = run_virtual(resume(tmp_path / "cut.db", team(again, chain)))
    assert isinstance(result, FleetResult)
    assert all(s.status == "completed" for s in result.sessions)
    whole = budget()
    assert isinstance(
        run_virtual(run_cut(tmp_path / "whole.db", team(whole, chain), N, None)), FleetResult
    )
    (model,) = whole.calibrator.models
    done = again.calibrator.stats(model)
    assert done is not None
    samples_before = learnt["models"][model]["n"]
    resumed_turns = sum(1 for s in result.sessions for t in s.turns) - sum(
        len(s.turns) for s in run.sessions
    )
    assert done.samples == samples_before + resumed_turns
    # …and the store holds its final state for a later resume.
    assert _load(tmp_path / "cut.db").policy_state["calibrator:agent-0"] == (
        again.calibrator.to_state()
    )


def test_without_the_recorded_state_a_resumed_calibrator_starts_untrained(
    tmp_path: Path,
) -> None:
    """The contrast the feature removes: restoring nothing leaves the fresh calibrator
    empty, so its first estimates differ from the cut run's."""
    first = budget()
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 20)) is None
    fresh = budget()
    assert restore({}, team(fresh)) == 0
    assert fresh.calibrator.models == []
    assert first.calibrator.models


def test_a_resume_given_only_some_agents_restores_their_shared_calibrator(
    tmp_path: Path,
) -> None:
    """agent-0's sessions (one turn each) are all done when the run is cut, so the resume
    is given agent-1 and agent-2 only: their shared calibrator is restored all the same
    (its state is kept under agent-0's name, which they reach through their aliases; it
    used to be looked for under agent-1's alone, and started untrained), and the resumed
    attempt records it where it found it."""

    def members(shared: ContextBudget) -> list[Agent]:
        out = team(shared)
        out[0] = dataclasses.replace(out[0], max_turns=1)
        return out

    path = tmp_path / "cut.db"
    first = budget()
    assert run_virtual(run_cut(path, members(first), N, 20)) is None
    run = _load(path)
    assert all(s.done for s in run.sessions if s.agent == "agent-0")
    assert not all(s.done for s in run.sessions)
    learnt = first.calibrator.to_state()
    assert run.policy_state["calibrator:agent-0"] == learnt
    assert "calibrator:agent-1" in run.policy_state["calibrator:agent-0#aliases"]["aliases"]

    again = budget()
    result = run_virtual(resume(path, members(again)[1:]))
    assert all(s.status in ("completed", "max_turns") for s in result.sessions)
    (model,) = again.calibrator.models
    done = again.calibrator.stats(model)
    assert done is not None
    resumed_turns = sum(len(s.turns) for s in result.sessions) - sum(
        len(s.turns) for s in run.sessions
    )
    assert resumed_turns > 0
    assert done.samples == learnt["models"][model]["n"] + resumed_turns
    after = _load(path).policy_state
    assert after["calibrator:agent-0"] == again.calibrator.to_state()
    assert after["calibrator:agent-0#aliases"]["of"] == "calibrator:agent-0"


def test_a_state_recorded_without_aliases_is_still_restored() -> None:
    """A run recorded before aliases keeps the state under the first agent's name only:
    a resume given that agent restores it as before; aliases that lead nowhere (to
    themselves, or to no state) restore nothing."""
    trained = Calibrator(window=8)
    _observe(trained, random.Random(3), 20)
    state = trained.to_state()
    shared = budget()
    assert restore({"calibrator:agent-0": state}, team(shared)) == 1
    assert shared.calibrator.to_state() == state
    to_itself = {"aliases": ["calibrator:agent-1"], "of": "calibrator:agent-0#aliases"}
    loop = {"calibrator:agent-0#aliases": to_itself}
    assert restore(loop, team(budget())[1:]) == 0
    nowhere = {"calibrator:agent-0#aliases": {"aliases": ["calibrator:agent-1"], "of": "x"}}
    assert restore(nowhere, team(budget())[1:]) == 0


@pytest.mark.parametrize(
    "damaged",
    [
        {"aliases": 7, "of": "calibrator:agent-0"},
        {"aliases": None, "of": "calibrator:agent-0"},
        {"aliases": ["calibrator:agent-1"], "of": ["calibrator:agent-0"]},
    ],
)
def test_a_damaged_aliases_record_restores_nothing_and_raises_nothing(
    damaged: dict[str, object],
) -> None:
    """An aliases record whose fields have the wrong types (a damaged or hand-edited
    store) is no alias: the calibrators it would name start afresh, and the state
    beside it still restores the agent it belongs to."""
    trained = Calibrator(window=8)
    _observe(trained, random.Random(5), 20)
    states = {"calibrator:agent-0#aliases": damaged}
    assert restore(states, team(budget())[1:]) == 0
    shared = budget()
    states["calibrator:agent-0"] = trained.to_state()
    assert restore(states, team(shared)) == 1
    assert shared.calibrator.to_state() == trained.to_state()
