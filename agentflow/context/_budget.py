"""The :class:`ContextBudget`: every session's prompt inside its window, or a clear error.

Per session (:class:`SessionBudget`, made by :meth:`ContextBudget.bind`)::

    limit    = window − reserve − margin
    raw      = MessageCounter estimate of the prompt (messages + tool schemas)
    forecast = Calibrator.forecast(model, shape)    # per content kind, anchored on the
                                                    # server's count of the last prompt
    bound    = forecast.tokens + forecast.margin    # margin learnt from its own errors

Before each turn, if ``bound > limit``, the overflow policies run in order
(re-estimating after each) until the prompt fits; if none makes it fit, the session fails
with :class:`~agentflow.ContextOverflow`. After each turn the server's reported
``usage.prompt_tokens`` is fed to the calibrator (shared per :class:`ContextBudget`, per
model) and anchors the session's next estimate.

It is one link of an agent's context chain (``agentflow._context_chain``): a fleet budget,
a cache-buster check and a prefix index are links of their own beside it. It runs a
:class:`CacheBusterCheck` of its own unless the chain has a check link (or
``cache_buster=False``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from agentflow._agent import output_size
from agentflow._context_chain import Binding, Link
from agentflow._errors import ConfigError
from agentflow.context._cachebuster import CacheBusterCheck
from agentflow.context._calibration import Calibrator
from agentflow.context._counting import TiktokenCounter
from agentflow.context._encodings import encoding_name_for_model
from agentflow.context._fleet_budget import FleetBudget
from agentflow.context._messages import MessageCounter
from agentflow.context._overflow import (
    Fail,
    OverflowPolicy,
)
from agentflow.context._prefix_index import check_message_counter
from agentflow.context._server_window import DEFAULT_WINDOW_TIMEOUT_S, server_window
from agentflow.context._session_budget import SessionBudget
from agentflow.context._windows import DEFAULT_RESERVE, KNOWN_WINDOWS, window_for

if TYPE_CHECKING:
    from agentflow.typing import ContextLink

__all__ = ["ContextBudget", "PrefixSource", "PrefixTracker"]


class PrefixTracker(Protocol):
    """One session's view of a prefix index (what :meth:`PrefixSource.session` returns)."""

    def observe(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> int:
        """Fingerprint the prompt about to be sent; return its most cacheable tokens."""


class PrefixSource(Protocol):
    """A fleet-wide prefix index (:class:`~agentflow.context.PrefixIndex` is one)."""

    def session(self) -> PrefixTracker:
        """A tracker for one session's prompts."""


#: Frames between a user's call and ``ContextBudget.__init__`` beyond the usual one (1
#: inside :meth:`ContextBudget.from_server`), so that a deprecated argument's warning
#: names the user's line, not agentflow's.
_CALLER_DEPTH: ContextVar[int] = ContextVar("_CALLER_DEPTH", default=0)


def _positive_int(owner: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{owner} must be an int ≥ {minimum}, got {value!r}")
    return value


def _policies(overflow: object) -> tuple[Any, ...]:
    """``overflow`` as a chain of policies: one policy, or an iterable of them."""
    if callable(overflow):
        return (overflow,)
    if isinstance(overflow, str | bytes | Mapping) or not isinstance(overflow, Iterable):
        raise ConfigError(
            f"ContextBudget.overflow must be a policy or a sequence of policies (e.g. "
            f"[TruncateToolOutputs(), Compact(), Fail()]), got {overflow!r}"
        )
    return tuple(overflow)


class ContextBudget(Link[SessionBudget]):
    """Keeps every session's prompt inside its window; set it as ``Agent(context=...)``.

    One instance may serve many agents and sessions: the calibrator (per model), the
    counter's per-message cache and the prefix index are shared; every session gets
    its own :class:`SessionBudget` from :meth:`bind`.

    Build it with :meth:`from_server` to use the window the server reports — the
    deployment's real limit — rather than the model table's.

    Args:
        window: the context window in tokens; by default :func:`window_for` the model.
        model: the model whose window and calibration apply when the session does not
            say (see :meth:`bind`); also the window lookup's key.
        reserve_output: tokens kept free for the answer; by default the agent's
            ``max_tokens`` (or ``max_completion_tokens``) param, else
            ``min(1024, window // 4)``. Never less than that param: a server may refuse a
            prompt that leaves less than ``max_tokens`` of the window (vLLM does), so a
            smaller ``reserve_output`` is raised to it.
        margin: tokens kept free on top of the calibrator's own error margin: an int is
            a token count, a float in ``[0, 1)`` a fraction of the window.
        overflow: a policy, or a chain of them run in order, for prompts that do not fit
            (:class:`~agentflow.context.Fail` by default).
        pin_first: messages after the system message(s) that no policy may touch (1 pins
            the first user message: the task).
        counter: the message counter; by default tiktoken's encoding for ``model``
            (``o200k_base`` for OpenAI's recent models), else ``cl100k_base``.
        calibrator: learns the local-to-server token ratio per model and content kind,
            and the error margin added to every estimate.
        prefix_index: deprecated: put the :class:`~agentflow.context.PrefixIndex` in the
            chain after the budget, ``Agent(context=[ContextBudget(...), PrefixIndex(...)])``
            (it fingerprints prompts with the budget's counts, filling
            ``PromptInfo.max_cacheable_tokens``; ``docs/context.md``, "Prefix
            fingerprints").
        fleet: deprecated: put the :class:`~agentflow.context.FleetBudget` in the chain,
            ``Agent(context=[FleetBudget(...), ContextBudget(...)])``.
        cache_buster: ``False`` runs no :class:`~agentflow.context.CacheBusterCheck`;
            by default the budget runs one with defaults, unless the chain has a check
            link (a configured check: ``[ContextBudget(...),
            CacheBusterCheck(...)]``; passing the check here is deprecated).
    """

    def __init__(
        self,
        *,
        window: int | None = None,
        model: str | None = None,
        reserve_output: int | None = None,
        margin: int | float = 0.02,
        overflow: OverflowPolicy | Sequence[OverflowPolicy] = (),
        pin_first: int = 0,
        counter: MessageCounter | None = None,
        calibrator: Calibrator | None = None,
        prefix_index: PrefixSource | None = None,
        fleet: FleetBudget | None = None,
        cache_buster: CacheBusterCheck | bool | None = None,
    ) -> None:
        if model is not None and (not isinstance(model, str) or not model):
            raise ConfigError(f"ContextBudget.model must be a non-empty string, got {model!r}")
        if window is not None:
            _positive_int("ContextBudget.window", window)
        elif model is not None and window_for(model) is None:
            raise ConfigError(
                f"ContextBudget.model {model!r} has no known window; pass window= "
                f"(known: {', '.join(sorted(KNOWN_WINDOWS))})"
            )
        if reserve_output is not None:
            _positive_int("ContextBudget.reserve_output", reserve_output, minimum=0)
        if isinstance(margin, bool) or not isinstance(margin, int | float):
            raise ConfigError(f"ContextBudget.margin must be an int or a float, got {margin!r}")
        if (isinstance(margin, int) and margin < 0) or (
            isinstance(margin, float) and not 0 <= margin < 1
        ):
            raise ConfigError(
                f"ContextBudget.margin must be tokens ≥ 0 (int) or a fraction in [0, 1) "
                f"(float), got {margin!r}"
            )
        _positive_int("ContextBudget.pin_first", pin_first, minimum=0)
        policies = _policies(overflow)
        for p in policies:
            if isinstance(p, type):  # overflow=[DropOldest]: the class, not a policy
                raise ConfigError(
                    f"ContextBudget.overflow: {p.__name__} is a class; give a policy: "
                    f"{p.__name__}()"
                )
            if not callable(p):
                raise ConfigError(f"ContextBudget.overflow: {p!r} is not a policy (not callable)")
        if fleet is not None:
            if not isinstance(fleet, FleetBudget):
                raise ConfigError(f"ContextBudget.fleet must be a FleetBudget, got {fleet!r}")
            warnings.warn(
                "ContextBudget(fleet=...) is deprecated; put the FleetBudget in the agent's "
                "context chain: Agent(context=[FleetBudget(...), ContextBudget(...)])",
                DeprecationWarning,
                stacklevel=2 + _CALLER_DEPTH.get(),
            )
        # (Each failed with an AttributeError at the session's first turn.)
        check_message_counter(counter, "ContextBudget.counter")
        if calibrator is not None and not isinstance(calibrator, Calibrator):
            raise ConfigError(
                f"ContextBudget.calibrator must be a Calibrator or None, got {calibrator!r:.80}"
            )
        if prefix_index is not None:
            if not callable(getattr(prefix_index, "session", None)):
                raise ConfigError(
                    f"ContextBudget.prefix_index must be a prefix index (a PrefixIndex, or "
                    f"anything with session()), got {prefix_index!r}"
                )
            warnings.warn(
                "ContextBudget(prefix_index=...) is deprecated; put the PrefixIndex in the "
                "agent's context chain, after the budget: "
                "Agent(context=[ContextBudget(...), PrefixIndex(...)]) "
                "(or ContextChain([ContextBudget(...), PrefixIndex(...)]))",
                DeprecationWarning,
                stacklevel=2 + _CALLER_DEPTH.get(),
            )
        if isinstance(cache_buster, CacheBusterCheck):
            warnings.warn(
                "ContextBudget(cache_buster=CacheBusterCheck(...)) is deprecated; put the "
                "check in the agent's context chain: "
                "Agent(context=[ContextBudget(...), CacheBusterCheck(...)])",
                DeprecationWarning,
                stacklevel=2 + _CALLER_DEPTH.get(),
            )
        elif cache_buster is not None and not isinstance(cache_buster, bool):
            raise ConfigError(
                f"ContextBudget.cache_buster must be a bool or a CacheBusterCheck, "
                f"got {cache_buster!r}"
            )
        self.window = window
        #: Where the window comes from: ``"given"``, ``"table"`` (:data:`KNOWN_WINDOWS`),
        #: or the server's report (``"server http://…/v1 max_model_len"``).
        self.window_source = "given" if window is not None else "table"
        self.model = model
        self.reserve_output = reserve_output
        self.margin = margin
        self.policies: tuple[OverflowPolicy, ...] = policies or (Fail(),)
        self.pin_first = pin_first
        if counter is None:
            counter = MessageCounter(
                TiktokenCounter(encoding_name_for_model(model) if model else "cl100k_base")
            )
        self.counter = counter
        self.calibrator = calibrator if calibrator is not None else Calibrator()
        self.prefix_index = prefix_index
        self.fleet = fleet
        #: The check this budget runs itself (``None``: none), unless a chain's check link
        #: replaces it.
        self.cache_buster: CacheBusterCheck | None = (
            cache_buster
            if isinstance(cache_buster, CacheBusterCheck)
            else (CacheBusterCheck() if cache_buster is not False else None)
        )
        self._cache_buster_arg = cache_buster

    def chain_links(self, chain: Sequence[object]) -> tuple[ContextLink, ...]:
        """What this budget stands for in ``chain`` (the links an agent's context lists):
        the deprecated ``fleet=`` budget before it, then itself (it runs its own
        cache-buster check unless the chain has a check link).

        Raises:
            ConfigError: the chain sets the fleet budget, the check or the prefix index
                both as a link and through this budget's arguments.
        """
        fleets = [x for x in chain if isinstance(x, FleetBudget)]
        if self.fleet is not None and fleets:
            raise ConfigError(
                f"the context chain has a FleetBudget link ({fleets[0]!r}) and "
                f"ContextBudget(fleet={self.fleet!r}): give the fleet budget once, as the link"
            )
        checks = [x for x in chain if isinstance(x, CacheBusterCheck)]
        if self._cache_buster_arg is not None and checks:
            raise ConfigError(
                f"the context chain has a CacheBusterCheck link ({checks[0]!r}) and "
                f"ContextBudget(cache_buster={self._cache_buster_arg!r}): give the check "
                f"once, as the link"
            )
        indexes = [x for x in chain if not hasattr(x, "bind") and hasattr(x, "session")]
        if self.prefix_index is not None and indexes:
            raise ConfigError(
                f"the context chain has a prefix index link ({indexes[0]!r}) and "
                f"ContextBudget(prefix_index={self.prefix_index!r}): give the index once, "
                f"as the link"
            )
        links: list[ContextLink] = []
        if self.fleet is not None:
            links.append(self.fleet)
        links.append(self)
        return tuple(links)

    @classmethod
    async def from_server(
        cls,
        source: object,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_WINDOW_TIMEOUT_S,
        **kwargs: Any,
    ) -> ContextBudget:
        """A budget over the window the server reports, read once (at most two requests).

        vLLM's ``/v1/models`` gives ``max_model_len`` (the deployment's ``--max-model-len``),
        llama.cpp's the slot's ``n_ctx``; see :func:`~agentflow.context.server_window`.
        When the server does not say (a hosted API, a 404), the window is the model
        table's (:func:`window_for` of ``model``), and :attr:`window_source` says so.

        Args:
            source: a base URL ending in ``/v1``, an :class:`~agentflow.Endpoint`, an HTTP
                transport, or :class:`~agentflow.embedded.SimTransport`.
            model: the served model the budget is for (needed when the server serves
                several with different windows; also the table fallback's key).
            api_key: sent when ``source`` is a URL.
            timeout_s: the limit for each request to the server.
            **kwargs: every other :class:`ContextBudget` argument but ``window``.

        Raises:
            ConfigError: ``window`` given, or neither the server nor the table knows the
                window.
            ConnectError: the server could not be reached.
            StreamTimeout: it did not answer within ``timeout_s``.
        """
        if "window" in kwargs:
            raise ConfigError(
                "ContextBudget.from_server reads the window from the server; do not pass window="
            )
        found = await server_window(source, model=model, api_key=api_key, timeout_s=timeout_s)
        if found is None and (model is None or window_for(model) is None):
            raise ConfigError(
                f"ContextBudget.from_server: {source!r} does not report its context window "
                f"and model {model!r} is not in the window table; pass model= (known: "
                f"{', '.join(sorted(KNOWN_WINDOWS))}) or build ContextBudget(window=...)"
            )
        depth = _CALLER_DEPTH.set(1)  # a deprecated argument's warning names the caller's line
        try:
            budget = cls(window=found.tokens if found is not None else None, model=model, **kwargs)
        finally:
            _CALLER_DEPTH.reset(depth)
        if found is not None:
            budget.window_source = f"server {found.endpoint} {found.field}"
        return budget

    def window_of(self, model: str | None) -> int:
        """The window that applies to ``model`` (the given one first)."""
        if self.window is not None:
            return self.window
        for name in (model, self.model):
            found = window_for(name) if name else None
            if found is not None:
                return found
        raise ConfigError(
            f"ContextBudget: no window for model {model or self.model!r}; pass window="
        )

    def session_for(self, at: Binding) -> SessionBudget:
        """A fresh :class:`SessionBudget` for one session (:meth:`bind` makes ``at``), with
        the budget's cache-buster check (a check link in the agent's chain replaces it; a
        deprecated ``fleet=`` runs as a link before it, see :meth:`chain_links`).
        ``at.model`` is the calibration key, window lookup and summary model
        (``ContextBudget.model`` when ``None``); ``max_completion_tokens`` (else
        ``max_tokens``) in ``at.params`` sets the default reserve and is the least one: a
        smaller ``reserve_output`` is raised to it.

        Raises:
            ConfigError: no window is known, or reserve and margin leave no room.
        """
        model, params, session_id = at.model, at.params, at.session_id
        name = model or self.model
        window = self.window_of(name)
        # The output size the session asks for (max_completion_tokens, else max_tokens, as
        # the server and the scheduler read it): a server may hold prompt + it to the
        # window (vLLM does), so the reserve is never below it, whatever reserve_output says.
        asked = output_size(params)
        if self.reserve_output is not None:
            reserve = max(self.reserve_output, asked or 0)
        elif asked is not None:
            reserve = asked
        else:
            reserve = min(DEFAULT_RESERVE, window // 4)
        margin = int(self.margin * window) if isinstance(self.margin, float) else self.margin
        limit = window - reserve - margin
        if limit < 1:
            # Name the reserve's sources: the reserve may be the agent's, not reserve_output.
            given = params.get("max_completion_tokens")
            key = "max_completion_tokens" if asked is not None and given == asked else "max_tokens"
            raise ConfigError(
                f"ContextBudget for session {session_id!r}: window {window:,} leaves no room "
                f"for a prompt after an output reserve of {reserve:,} "
                f"(reserve_output={_shown(self.reserve_output)}, the agent's {key}="
                f"{_shown(asked)}) and margin={margin:,}"
            )
        return SessionBudget(self, at, model=name, window=window, reserve=reserve, margin=margin)


def _shown(count: int | None) -> str:
    """``count`` for an error message: ``1,024``, or ``None``."""
    return "None" if count is None else f"{count:,}"
