"""Where a benchmark sends its requests: the :class:`Target` protocol, and its two
kinds — :class:`SimTarget` (the embedded simulator in virtual time, a fresh engine per
level run) and :class:`HTTPTarget` (any OpenAI-compatible server)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from agentflow._errors import ConfigError
from agentflow.bench._load import SessionStream
from agentflow.bench._script import SessionScript
from agentflow.typing import Clock, Transport

if TYPE_CHECKING:
    from agentflow.sim.profiles import Profile

__all__ = ["HTTPTarget", "SimTarget", "Target"]


class Target(Protocol):
    """Where a bench sends its requests; opened once per level run."""

    @property
    def label(self) -> str:
        """For reports: what the target is."""
        ...

    async def model_name(self) -> str:
        """The model name to request when the config gives none."""
        ...

    @property
    def virtual(self) -> bool:
        """Whether runs go on virtual time (``VirtualTimeLoop``) rather than real time."""
        ...

    def clock(self) -> Clock:
        """The clock traces and the fleet use (nanoseconds)."""
        ...

    def open(
        self, scripts: Sequence[SessionScript] | SessionStream, seed: int
    ) -> contextlib.AbstractAsyncContextManager[Transport]:
        """A transport for one level run of ``scripts`` (a concurrency level of a
        workload: a ``SessionStream``, endless — see its ``preview()``)."""
        ...


@dataclass(kw_only=True)
class SimTarget:
    """The embedded simulator, in-process on virtual time: a fresh engine per level run
    (so levels do not share a cache or a backlog), answering with exactly
    ``max_tokens`` tokens (the workload's output lengths).

    Attributes:
        profile: the simulator's deployment profile (a name or a ``Profile``).

    Raises:
        ConfigError: ``profile`` is neither a :class:`~agentflow.sim.Profile` nor the name
            of a built-in one (:func:`~agentflow.sim.profile_names`).
    """

    profile: str | Profile = "qwen2.5-coder-32b"
    virtual: bool = True

    def __post_init__(self) -> None:
        # Checked here, not at the first use (an AttributeError in ``label``). The
        # simulator is imported only now: ``import agentflow.bench`` does not load it.
        from agentflow.sim.profiles import Profile, get_profile

        if isinstance(self.profile, str):
            get_profile(self.profile)  # an UnknownProfileError (ConfigError) naming them
        elif not isinstance(self.profile, Profile):
            raise ConfigError(
                "SimTarget.profile must be a profile name or an agentflow.sim.Profile, got "
                f"{type(self.profile).__name__} {self.profile!r:.60}"
            )

    @property
    def label(self) -> str:
        """``sim://PROFILE (virtual time)``."""
        return f"sim://{self._profile().name} (in-process, virtual time)"

    async def model_name(self) -> str:
        """The profile's model."""
        return str(self._profile().model)

    def _profile(self) -> Profile:
        from agentflow.sim.profiles import get_profile

        return get_profile(self.profile) if isinstance(self.profile, str) else self.profile

    def clock(self) -> Clock:
        """The event loop's clock (virtual)."""
        from agentflow.embedded import loop_clock

        return loop_clock

    @contextlib.asynccontextmanager
    async def open(
        self, scripts: Sequence[SessionScript] | SessionStream, seed: int
    ) -> AsyncIterator[Transport]:
        """A fresh engine whose answers run to ``max_tokens`` (of a stream's sessions: up
        to the longest ``max_tokens`` of its first ones, :meth:`SessionStream.preview`)."""
        from agentflow.embedded import SimTransport
        from agentflow.sim import Engine
        from agentflow.sim.driver import EngineDriver
        from agentflow.sim.textgen import TextGenConfig

        sized = scripts.preview() if isinstance(scripts, SessionStream) else scripts
        longest = max((_longest_output(s) for s in sized), default=1)
        textgen = TextGenConfig(tool_rounds=0, answer_tokens=(longest, longest))
        transport = SimTransport(EngineDriver(Engine(self._profile(), seed=seed, textgen=textgen)))
        try:
            yield transport
        finally:
            await transport.aclose()


def _longest_output(script: SessionScript) -> int:
    return max(
        max([t.max_tokens, *(_longest_output(s) for s in t.subagents)]) for t in script.turns
    )


@dataclass(kw_only=True, repr=False)
class HTTPTarget:
    """An OpenAI-compatible server over HTTP (agentflow's ``HTTPTransport``).

    Attributes:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        api_key: sent as a bearer token (never printed or reported).
        model: the model name to request; ``None``: the one the server's ``/v1/models``
            lists (``"default"`` if it lists none or several).
        timeouts: time limits of each request (the transport's defaults if ``None``).

    Its ``repr`` shows no ``api_key`` and ``base_url`` without its userinfo (as
    :class:`~agentflow.transport.Endpoint`'s).
    """

    base_url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeouts: Any = None
    virtual: bool = False

    def __repr__(self) -> str:
        from agentflow._redact import display_url

        values = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        values["base_url"] = display_url(self.base_url)  # a password in the URL: not shown
        return f"HTTPTarget({', '.join(f'{k}={v!r}' for k, v in values.items())})"

    @property
    def label(self) -> str:
        """The base URL without its userinfo (``http://u:p@host/v1`` → ``http://host/v1``):
        what the bench prints and reports, never a password in the URL."""
        from agentflow._redact import display_url

        return display_url(self.base_url)

    async def model_name(self) -> str:
        """``model``, or the model the server serves (asked once, 10 s at most)."""
        if self.model is None:
            from agentflow._errors import AgentflowError
            from agentflow.context import server_window

            self.model = "default"
            with contextlib.suppress(AgentflowError):
                found = await server_window(self.base_url, api_key=self.api_key, timeout_s=10.0)
                if found is not None and found.model:
                    self.model = found.model
        return self.model

    def clock(self) -> Clock:
        """``time.perf_counter_ns``, the transport's default."""
        import time

        return time.perf_counter_ns

    @contextlib.asynccontextmanager
    async def open(
        self, scripts: Sequence[SessionScript] | SessionStream, seed: int
    ) -> AsyncIterator[Transport]:
        """One transport (one connection pool) for the level run."""
        from agentflow.transport import Endpoint, HTTPTransport

        transport = HTTPTransport(
            Endpoint(base_url=self.base_url, api_key=self.api_key), timeouts=self.timeouts
        )
        async with transport:
            yield transport
