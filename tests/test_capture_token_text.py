"""``capture_events("token").text(id)`` is the answer the conversation kept: the tokens of
a failed attempt are dropped, as by ``capture_events().text(id)``. A capture of tokens
alone never got the ``attempt_discarded`` events that drop them, so its text kept the
failed attempt's tokens before the retry's."""

from __future__ import annotations

from agentflow import Agent, Fleet, HTTPTransport, RetryPolicy
from agentflow.testing import Reply, ScriptedServer, capture_events


async def test_a_token_capture_drops_a_discarded_attempts_text() -> None:
    full = Reply.stream(["The answer ", "is 42."])
    cut = Reply(frames=list(full.frames[:2]), cut=True)  # the first delta, then a drop
    only_tokens = capture_events("token")
    everything = capture_events()
    async with ScriptedServer([cut, full]) as srv, HTTPTransport(srv.base_url) as t:
        result = await Fleet(
            t,
            callbacks=[only_tokens, everything],
            retry=RetryPolicy(max_attempts=2, backoff_s=0.001, jitter=False),
        ).run([Agent(name="a", model="m").session("q", session_id="s")])
    assert result.retries == 1
    assert result.sessions[0].final_output == "The answer is 42."
    assert only_tokens.text("s") == everything.text("s") == "The answer is 42."
    assert only_tokens.event_types == frozenset({"token", "attempt_discarded"})
    # Its events are the tokens asked for, each with its text: the discard is kept apart.
    assert set(only_tokens.types()) == {"token"}
    assert "".join(e.text for e in only_tokens.of_type("token")) == "The answer The answer is 42."


async def _run(capture: object, replies: list[Reply]) -> None:
    async with ScriptedServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        await Fleet(
            t,
            callbacks=[capture],  # type: ignore[list-item]
            retry=RetryPolicy(max_attempts=2, backoff_s=0.001, jitter=False),
        ).run([Agent(name="a", model="m").session("q", session_id="s")])


async def test_asked_for_discards_are_events_as_any_other() -> None:
    full = Reply.stream(["The answer ", "is 42."])
    both = capture_events("token", "attempt_discarded")
    await _run(both, [Reply(frames=list(full.frames[:2]), cut=True), full])
    assert "attempt_discarded" in both.types()
    assert both.text("s") == "The answer is 42."


async def test_a_capture_cleared_for_the_next_run_keeps_no_stale_discard() -> None:
    """``events.clear()`` between runs: a discard of the first run pointed into the
    cleared list and dropped the next run's tokens of the same session and turn."""
    full = Reply.stream(["The answer ", "is 42."])
    capture = capture_events("token")
    await _run(capture, [Reply(frames=list(full.frames[:2]), cut=True), full])
    capture.events.clear()
    await _run(capture, [full])
    assert capture.text("s") == "The answer is 42."


def test_an_event_delivered_twice_keeps_the_discard_after_both() -> None:
    """The same capture given each event twice (``callbacks=[capture, capture]``): the
    discard follows both copies of the failed attempt's last token."""
    from agentflow import AttemptDiscardedEvent, TokenEvent

    capture = capture_events("token")
    bad = TokenEvent(agent="a", session_id="s", turn=0, kind="content", text="bad ", t_ns=1)
    good = TokenEvent(agent="a", session_id="s", turn=0, kind="content", text="good", t_ns=2)
    discard = AttemptDiscardedEvent(
        agent="a",
        session_id="s",
        turn=0,
        attempt=0,
        deltas=1,
        chars=4,
        content_chars=4,
        retried=True,
        error=RuntimeError("cut"),
    )
    for event in (bad, discard, good):
        capture(event)
        capture(event)
    assert capture.text("s") == "goodgood"
