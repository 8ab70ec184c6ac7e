"""``agentflow chat`` against a server that reports no usage (many do not without
``stream_options``): its last line said "prompt None"; it now says the count was not
reported, as it does for cached tokens. The real command runs in a child Python against a
:class:`ScriptedServer`."""

from __future__ import annotations

from agentflow.testing import Reply, ScriptedServer, sse_frames

from .test_chat_retry_cli import chat_piped


def no_usage() -> Reply:
    chunk = {"id": "c", "object": "chat.completion.chunk"}
    first = {"index": 0, "delta": {"role": "assistant", "content": "hi"}}
    last = {"index": 0, "delta": {"content": " there"}, "finish_reason": "stop"}
    return Reply(frames=sse_frames([{**chunk, "choices": [first]}, {**chunk, "choices": [last]}]))


async def test_a_prompt_count_not_sent_is_not_reported() -> None:
    async with ScriptedServer([no_usage()]) as srv:
        code, out, err = await chat_piped(srv.base_url)
    assert code == 0, err.decode()
    assert out.decode() == "hi there\n"
    (last,) = err.decode().splitlines()[-1:]
    assert "· prompt not reported · cached not reported" in last
    assert "None" not in last
