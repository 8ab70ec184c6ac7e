"""What the demo asks a real server (``--base-url``) before its run: the model it serves,
its context window, and how long each such probe may take."""

from __future__ import annotations

import contextlib
import sys

from agentflow._errors import ConfigError, TransportError
from agentflow._redact import display_url
from agentflow.context import server_window, window_for
from agentflow.demo._config import DemoConfig
from agentflow.sim.profiles import get_profile
from agentflow.transport import Endpoint, Timeouts
from agentflow.typing import Transport

__all__ = ["model_of", "probe_s", "served_model", "window_of"]


def model_of(config: DemoConfig) -> str:
    """The model the fleet asks for. Over HTTP against a real server without ``--model``,
    :func:`served_model` has put the server's own in ``config.model`` before the run."""
    return config.model or ("agentflow-sim" if not config.base_url else "default")


async def served_model(config: DemoConfig, endpoint: Endpoint) -> tuple[str, int | None]:
    """The model a real server serves, for ``--base-url`` without ``--model``: the one its
    ``GET /v1/models`` lists, as ``agentflow bench`` asks (vLLM answers any other name,
    ``"default"`` included, with a 404 "The model … does not exist") — with its window
    when the server gave one, so that the run need not ask again.

    A server that names none with a window (no ``/v1/models``; a list without windows, as
    OpenAI's or Ollama's) gets ``"default"`` with a warning on stderr naming ``--model``:
    some servers answer any name, and one that does not says so in each session's error.

    Raises:
        ConfigError: the server could not be asked (unreachable, no answer within the
            probe's time), or it serves several models with different windows; the
            message says to pass ``--model``.
    """
    url = display_url(endpoint.base_url)
    try:
        found = await server_window(endpoint, timeout_s=probe_s(config.timeouts, 10.0))
    except TransportError as exc:
        raise ConfigError(
            f"demo: could not ask {url} which model it serves ({exc}); pass --model NAME"
        ) from exc
    except ConfigError as exc:  # several models, different windows: which one is not known
        several = str(exc).split("; pass model=")[0]  # (its advice is the Python API's)
        raise ConfigError(f"demo: {several}; pass --model NAME (one of their ids)") from exc
    if found is not None and found.model:
        return found.model, found.tokens
    print(
        f"agentflow demo: warning: {url}/models names no model with its context window; "
        "asking for model 'default' (pass --model NAME if the server wants another)",
        file=sys.stderr,
        flush=True,
    )
    return "default", None


def probe_s(timeouts: Timeouts | None, default: float = 5.0) -> float:
    """How long a request the demo makes of a real server before its run (its window, its
    slots, its ``/metrics``) may take: ``default``, or less when the ``--*-timeout`` flags
    want a model request to answer sooner — the shortest of ``first_token``, ``idle`` and
    ``total`` (a silent server then fails the demo at once, not after ~20 s of probes)."""
    if timeouts is None:
        return default
    given = (timeouts.first_token, timeouts.idle, timeouts.total)
    return min(default, *(t for t in given if t is not None))


async def window_of(config: DemoConfig, transport: Transport) -> int:
    """The budget's window: on a real server its own (vLLM's ``max_model_len``, llama.cpp's
    ``n_ctx``), else the model table's, else the profile's; on the simulator the profile's."""
    profile = get_profile(config.profile).max_model_len
    if not config.base_url:
        return profile
    with contextlib.suppress(TransportError, ConfigError):
        found = await server_window(
            transport, model=config.model, timeout_s=probe_s(config.timeouts, 10.0)
        )
        if found is not None:
            return found.tokens
    return window_for(model_of(config)) or profile
