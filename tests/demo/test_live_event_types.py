"""The live view reads every event but tokens, and says so (``event_types``): it declared
nothing, so a fleet with a live view built a token event for every streamed chunk, only
for the view to drop it — its module says the bus builds none for it."""

from __future__ import annotations

from agentflow._event_bus import EventBus, event_type_names
from agentflow.report import LiveView
from agentflow.stats import RunJournal


def test_the_live_view_reads_every_event_but_tokens() -> None:
    view = LiveView(total_sessions=1)
    assert view.event_types == event_type_names() - {"token"}


def test_no_token_events_are_built_for_the_demos_callbacks() -> None:
    assert not EventBus([LiveView(total_sessions=1), RunJournal()]).wants_tokens
