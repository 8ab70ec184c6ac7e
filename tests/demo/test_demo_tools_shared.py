"""The demo's tools are described once, not once per agent: describing the five (a
pydantic model and schema each) took ~4 ms per agent on the event loop — 2,000 agents
took 9 s, deaf to Ctrl-C and SIGTERM. Each agent's tools are the described ones bound to
its own repository, with schemas byte for byte as before (the shared prefix, and the
fingerprints stored runs hold, are unchanged). ``--agents`` has an upper bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import msgspec
import pytest

from agentflow import ToolError
from agentflow._errors import ConfigError
from agentflow._tools import Tool
from agentflow.demo import workload
from agentflow.demo._config import MAX_AGENTS, DemoConfig
from agentflow.demo.workload import Repository, make_workload

from ..test_cli_errors import assert_one_line, run
from ..wait import GUARD_S

# sha256 of the encoded specs of Repository.sample().tools(), as the tools were described
# per agent before (the bytes every request's tools carry).
SPECS_SHA256 = "6b67de8c49a894f57aec1df3c9ae12ee8201097f06b3f5241a3914b3a4672c04"


def _specs(tools: list[Tool] | tuple[Tool, ...]) -> bytes:
    return msgspec.json.encode([t.spec() for t in tools])


def _by_name(tools: list[Tool] | tuple[Tool, ...]) -> bytes:
    return _specs(sorted(tools, key=lambda t: t.name))


def test_the_schemas_are_byte_for_byte_as_before() -> None:
    assert hashlib.sha256(_specs(Repository.sample().tools())).hexdigest() == SPECS_SHA256
    work = make_workload(3, model="m")
    assert {_by_name(a.tools) for a in work.agents} == {_by_name(Repository.sample().tools())}


def test_each_tool_is_described_once_for_the_whole_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    described: list[str] = []
    real = Tool.from_function.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Tool], /, fn: object, **kwargs: object) -> Tool:
        described.append(getattr(fn, "__name__", "?"))
        return real(cls, fn, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Tool, "from_function", classmethod(counting))
    cache = getattr(workload, "_described_tools", None)
    if cache is not None:
        cache.cache_clear()  # described in this test, whatever ran before
    work = make_workload(40, model="m")
    assert len(work.agents) == 40
    assert sorted(described) == sorted(
        ["list_files", "read_file", "search", "run_tests", "replace_in_file"]
    )


def _call(tool: Tool, **arguments: object) -> str:
    return asyncio.run(asyncio.wait_for(tool.invoke(json.dumps(arguments)), GUARD_S))


def test_each_agent_works_on_its_own_repository() -> None:
    a, b = ({t.name: t for t in agent.tools} for agent in make_workload(2, model="m").agents)
    assert a["replace_in_file"].replay_on_resume and not a["read_file"].replay_on_resume
    assert _call(a["replace_in_file"], path="src/cache.py", old="value * factor", new="0") == (
        "edited src/cache.py"
    )
    assert "return 0" in _call(a["read_file"], path="src/cache.py")
    assert "return value * factor" in _call(b["read_file"], path="src/cache.py")
    assert "FAIL test_scale_cache" in _call(a["run_tests"], path="src/cache.py")
    assert "PASS test_scale_cache" in _call(b["run_tests"], path="src/cache.py")
    with pytest.raises(ToolError, match="cannot take"):  # arguments are still validated
        _call(a["read_file"], path="src/nowhere.py")


def test_agents_have_an_upper_bound() -> None:
    DemoConfig(agents=MAX_AGENTS, virtual=True)
    with pytest.raises(ConfigError, match="--agents is at most 100,000"):
        DemoConfig(agents=MAX_AGENTS + 1, virtual=True)
    code, err = run("demo", "--agents", "100000000000", "--virtual", "--no-live")
    assert code == 2, err
    assert_one_line(err, "agentflow demo", "--agents", "100,000")
