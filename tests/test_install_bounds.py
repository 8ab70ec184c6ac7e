"""The lower bounds in pyproject.toml admit no release that lacks an API agentflow uses.

Each row names the API, where agentflow uses it, and the first release that has it. The
installed versions are newer, so a too-low floor shows only for a user who resolves to the
oldest allowed release (every session then failed, e.g. a ContextBudget one on msgspec
0.18.0-0.18.5): this file checks the declared floor against the known one, and that the
installed package does have the API, so that the row stays true.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def floor(requirements: list[str], name: str) -> Version:
    """The ``>=`` bound of ``name`` among ``requirements`` (PEP 508 strings)."""
    for text in requirements:
        req = Requirement(text)
        if req.name == name:
            floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
            assert floors, f"{text!r} has no >= bound"
            return max(floors)
    raise AssertionError(f"{name} is not among {requirements}")


def project() -> dict[str, list[str] | dict[str, list[str]]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]  # type: ignore[no-any-return]


def dependencies() -> list[str]:
    deps = project()["dependencies"]
    assert isinstance(deps, list)
    return deps


def msgspec_encodes_in_order() -> bool:
    """``msgspec.json.encode(..., order=...)``: context/_bustspans.py ``json_text``."""
    import msgspec

    try:
        return msgspec.json.encode({"b": 1, "a": 2}, order="sorted") == b'{"a":2,"b":1}'
    except TypeError:  # 0.18.0-0.18.5: "Extra keyword arguments provided"
        return False


def aiohttp_has_connection_reset_error() -> bool:
    """``aiohttp.ClientConnectionResetError``: imported by agentflow.testing."""
    import aiohttp

    return hasattr(aiohttp, "ClientConnectionResetError")


# (distribution, first release with the API, a check that the installed one has it)
CORE: list[tuple[str, str, Callable[[], bool]]] = [
    ("msgspec", "0.18.6", msgspec_encodes_in_order),
    ("aiohttp", "3.10.6", aiohttp_has_connection_reset_error),
]


@pytest.mark.parametrize(("name", "needed", "installed_has_it"), CORE, ids=[r[0] for r in CORE])
def test_core_dependency_floor_has_the_api_agentflow_uses(
    name: str, needed: str, installed_has_it: Callable[[], bool]
) -> None:
    assert installed_has_it(), f"the installed {name} lacks the API the row names"
    assert floor(dependencies(), name) >= Version(needed), (
        f"pyproject.toml allows a {name} older than {needed}, which lacks the API"
    )


def test_the_openai_extra_admits_no_sdk_without_httpx2() -> None:
    # OpenAITransport reads httpx2's errors and byte streams; openai 1.x and 2.x are on
    # httpx, so with the old floor (1.40) every session failed: ModuleNotFoundError httpx2.
    from importlib.metadata import requires

    extras = project()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert any(Requirement(r).name == "httpx2" for r in requires("openai") or [])
    assert floor(extras["openai"], "openai") >= Version("3.0")


async def test_openai_transport_without_httpx2_names_the_openai_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from openai import AsyncOpenAI

    from agentflow import ConfigError
    from agentflow.transport import OpenAITransport

    client = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="x")
    monkeypatch.setitem(sys.modules, "httpx2", None)  # as if an older openai, on httpx
    try:
        with pytest.raises(
            ConfigError, match=r"needs openai>=3\.0 .*pip install -U 'agentflow\[openai\]'"
        ):
            OpenAITransport(client)
    finally:
        monkeypatch.undo()  # httpx2 back before the client closes its pool
        await client.close()
