"""The server URLs the docs pass to a transport reach the server's chat endpoint: a base
URL without ``/v1`` (docs/scale-out.md's two) sent every request to
``/chat/completions``, a 404 on vLLM, SGLang and the simulator."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from urllib.parse import urlsplit

from agentflow import Agent, Fleet, HTTPTransport
from agentflow.testing import Reply, ScriptedServer
from tests.wait import GUARD_S

ROOT = Path(__file__).parents[2]

#: A URL literal given to a transport or an endpoint: ``HTTPTransport("http://…")``.
_URL = re.compile(
    r"""(?:HTTPTransport|AiohttpTransport|Endpoint)\(\s*(?:base_url=)?"(https?://[^"]+)\""""
)


def _doc_urls() -> dict[str, str]:
    """Every such URL, by ``page:line``."""
    found = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for url in _URL.findall(line):
                found[f"{page.relative_to(ROOT)}:{n}"] = url
    return found


async def test_every_url_the_docs_give_a_transport_reaches_the_chat_endpoint() -> None:
    urls = _doc_urls()
    # (the pattern finds what it is meant to: scale-out.md's, whatever line they move to)
    assert any(where.startswith("docs/scale-out.md:") for where in urls)
    agent = Agent(name="a", model="m")
    async with ScriptedServer([Reply.text("ok")] * len(urls)) as server:
        here = urlsplit(server.base_url).netloc
        statuses = {}
        for where, url in urls.items():
            async with HTTPTransport(
                urlsplit(url)._replace(scheme="http", netloc=here).geturl()
            ) as t:
                run = Fleet(t).run([agent.session("hi")])
                result = await asyncio.wait_for(run, GUARD_S)
            statuses[where] = (url, result.sessions[0].status)
    assert {w: u for w, (u, status) in statuses.items() if status != "completed"} == {}
