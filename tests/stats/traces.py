"""Hand-built traces and events for the stats tests: times in milliseconds, exact."""

from __future__ import annotations

from collections.abc import Sequence

from agentflow import SessionEndEvent, SessionResult, TurnEndEvent, TurnTrace, Usage, turn_metrics
from agentflow._trace import CacheSource, ToolCall

MS = 1_000_000


def trace(
    *,
    sent_ms: float,
    chunks_ms: Sequence[float],
    end_ms: float,
    completion: int | None = None,
    prompt: int | None = None,
    cached: int | None = None,
    cached_source: CacheSource | None = "prompt_tokens_details",
    chunk_tokens: Sequence[int] | None = None,
    exact: bool = False,
    tool_calls: int = 0,
    finish: str | None = "stop",
) -> TurnTrace:
    """A trace sent at ``sent_ms`` with output chunks at ``chunks_ms`` and its end at ``end_ms``.

    Usage is sent when any of ``completion``, ``prompt`` or ``cached`` is given.
    """
    chunk_ns = tuple(round(t * MS) for t in chunks_ms)
    usage = None
    if completion is not None or prompt is not None or cached is not None:
        usage = Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            cached_source=cached_source if cached is not None else None,
        )
    return TurnTrace(
        endpoint="http://test",
        model="m",
        response_id=None,
        sent_ns=round(sent_ms * MS),
        headers_ns=round(sent_ms * MS),
        end_ns=round(end_ms * MS),
        chunk_ns=chunk_ns,
        chunk_chars=tuple(4 for _ in chunk_ns),
        chunk_tokens=tuple(chunk_tokens)
        if chunk_tokens is not None
        else tuple(1 for _ in chunk_ns),
        tokens_exact=exact,
        n_events=len(chunk_ns) + 2,
        content="x" * len(chunk_ns),
        reasoning="",
        tool_calls=tuple(
            ToolCall(index=i, id=f"c{i}", name="t", arguments="{}") for i in range(tool_calls)
        ),
        finish_reason=finish,
        usage=usage,
        done=True,
    )


def turn_end(agent: str, session: str, turn: int, tr: TurnTrace, ready_ms: float) -> TurnEndEvent:
    """The event a session emits for ``tr``, which became ready at ``ready_ms``."""
    return TurnEndEvent(
        agent=agent,
        session_id=session,
        turn=turn,
        metrics=turn_metrics(tr, ready_ns=round(ready_ms * MS)),
        trace=tr,
    )


def session_end(agent: str, session: str, status: str = "completed") -> SessionEndEvent:
    """A session ended with ``status`` (no turns kept on the result: stats do not read them)."""
    return SessionEndEvent(
        agent=agent,
        session_id=session,
        result=SessionResult(
            session_id=session,
            agent=agent,
            status=status,  # type: ignore[arg-type]
            final_output=None,
            messages=[],
            turns=[],
        ),
    )


def fixed_run() -> list[TurnEndEvent]:
    """Two agents, two turns each; every figure below is worked out in test_aggregate.py.

    a/T0: sent 0, chunks 50 60 80 120, end 130, usage 5 out, 1000 prompt, 0 cached.
    a/T1: ready 1000, sent 1100, chunks 1300 1310 1320, end 1330, 3 out, 1200 prompt, 1000 cached.
    b/T0: ready 0, sent 500, chunks 900 1000, end 1100, no usage (2 chunks counted).
    b/T1: sent 2000, no output, end 2050, 0 out, 1500 prompt, cache not reported.
    """
    return [
        turn_end(
            "a", "a-1", 0,
            trace(sent_ms=0, chunks_ms=[50, 60, 80, 120], end_ms=130, completion=5,
                  prompt=1000, cached=0, tool_calls=1, finish="tool_calls"),
            ready_ms=0,
        ),
        turn_end(
            "b", "b-1", 0,
            trace(sent_ms=500, chunks_ms=[900, 1000], end_ms=1100, exact=False, finish=None),
            ready_ms=0,
        ),
        turn_end(
            "a", "a-1", 1,
            trace(sent_ms=1100, chunks_ms=[1300, 1310, 1320], end_ms=1330, completion=3,
                  prompt=1200, cached=1000, exact=True),
            ready_ms=1000,
        ),
        turn_end(
            "b", "b-1", 1,
            trace(sent_ms=2000, chunks_ms=[], end_ms=2050, completion=0, prompt=1500),
            ready_ms=2000,
        ),
    ]  # fmt: skip
