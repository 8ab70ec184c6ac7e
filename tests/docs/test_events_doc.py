"""docs/events.md documents every event class and every field, and its snippet runs.

The classes are found by introspection: the members of the ``Event`` union, and every
class in the event modules that has a ``type`` tag — so a new event, or a new field on
one, fails here until the reference says what it is.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path

import msgspec

from agentflow import Event, FleetResult, SessionResult
from agentflow.sched import FailedAttempt

DOC = (Path(__file__).parents[2] / "docs" / "events.md").read_text()
EVENT_MODULES = (
    "agentflow._events",
    "agentflow._turn_events",
    "agentflow.context._events",
    "agentflow.context._bustreport",
)


def _fields(cls: type) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    assert issubclass(cls, msgspec.Struct)
    return list(cls.__struct_fields__)


def _tag(cls: type) -> str:
    """The class's ``type`` string (its default)."""
    if dataclasses.is_dataclass(cls):
        (field,) = [f for f in dataclasses.fields(cls) if f.name == "type"]
        return str(field.default)
    names, defaults = cls.__struct_fields__, cls.__struct_defaults__  # type: ignore[attr-defined]
    return str(defaults[names.index("type") - (len(names) - len(defaults))])


def _section(heading: str) -> str:
    """The text under ``## heading`` (or ``### heading``) up to the next heading of that level."""
    match = re.search(rf"^(#+) {re.escape(heading)}\n(.*?)(?=^#{{1,3}} |\Z)", DOC, re.M | re.S)
    assert match, f"docs/events.md has no section {heading!r}"
    return match.group(2)


def _tagged_classes() -> set[type]:
    found: set[type] = set()
    for name in EVENT_MODULES:
        for _, obj in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if "type" in getattr(obj, "__annotations__", {}) and "Literal" in str(
                obj.__annotations__["type"]
            ):
                found.add(obj)
    return found


EVENTS = typing.get_args(Event)


def test_every_event_class_is_in_the_union() -> None:
    """No class with a ``type`` tag in the event modules is left out of ``Event``."""
    assert _tagged_classes() <= set(EVENTS)
    assert f"union of the {len(EVENTS)} classes" in DOC


def test_every_event_and_field_is_documented() -> None:
    """Each event has a section naming its ``type`` string and every one of its fields."""
    missing = []
    for cls in EVENTS:
        section = _section(cls.__name__)
        for name in _fields(cls):
            if f"`{name}`" not in section:
                missing.append(f"{cls.__name__}.{name}")
        tag = _tag(cls)
        assert f'`"{tag}"`' in section, cls.__name__
        assert f"| `{tag}` | [`{cls.__name__}`]" in DOC, cls.__name__  # in the overview table
    assert missing == []


def test_results_and_retry_attempt_are_documented() -> None:
    """SessionResult's fields (and properties), FleetResult's, and each field of
    RetryEvent.attempt (a FailedAttempt, ``attempt.error`` included)."""
    session = _section("SessionResult")
    props = [n for n, v in vars(SessionResult).items() if isinstance(v, property)]
    assert [f for f in _fields(SessionResult) + props if f"`{f}`" not in session] == []
    fleet = _section("FleetEndEvent")
    assert [f for f in _fields(FleetResult) if f"`{f}`" not in fleet] == []
    retry = _section("RetryEvent")
    assert [f for f in _fields(FailedAttempt) if f"`attempt.{f}`" not in retry] == []


def test_the_snippet_prints_each_session_whole() -> None:
    """The page's snippet runs as it is and prints one whole line per session."""
    (code,) = re.findall(r"```python\n(.*?)```", DOC, re.S)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    (shown,) = re.findall(r"```text\n(.*?)```", DOC, re.S)
    assert sorted(proc.stdout.splitlines()) == sorted(shown.splitlines())
    assert len(proc.stdout.splitlines()) == 3


def test_the_guide_names_the_events_that_cannot_be_hashed() -> None:
    """The guide said only ``turn_end``, ``session_end`` and ``fleet_end`` events are
    unhashable; a ``compaction`` event always carries a trace (its response headers a
    dict), and a ``retry`` event does when its failed attempt has one."""
    from agentflow._context_events import CompactionEvent
    from agentflow._errors import StreamInterrupted
    from agentflow._events import RetryEvent
    from tests.stats.traces import trace

    tr = trace(sent_ms=0, chunks_ms=[1, 2], end_ms=3, completion=2, prompt=5)
    err = StreamInterrupted("cut", endpoint="e")
    failed = FailedAttempt(attempt=0, replica="r", error=err, trace=tr, wait_s=0.1)
    unhashable: list[CompactionEvent | RetryEvent] = [
        CompactionEvent(
            agent="a", session_id="s", turn=1, messages_summarised=3, tokens_before=10,
            tokens_after=5, summary_tokens=2, model="m", trace=tr,
        ),
        RetryEvent(agent="a", session_id="s", turn=1, attempt=failed),
    ]  # fmt: skip
    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    (sentence,) = re.findall(r"hashing as\s+for most:.*?instead\)", guide, re.S)
    for event in unhashable:
        try:
            hash(event)
        except TypeError:
            assert f"`{event.type}`" in sentence, event.type
        else:
            raise AssertionError(f"a {event.type} event with a trace was hashable")
    no_trace = dataclasses.replace(failed, trace=None)
    hash(RetryEvent(agent="a", session_id="s", turn=1, attempt=no_trace))
