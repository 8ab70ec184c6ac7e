"""Error answers of the simulator's HTTP server, in vLLM's JSON shape.

:func:`error_response` is one ``{"error": {"message", "type", "param", "code"}}`` answer;
:func:`json_errors`, the server's middleware, gives aiohttp's own 404/405/413 answers
that shape, and answers any exception a handler lets escape with a JSON 500 (logged)
instead of aiohttp's plain-text one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import msgspec
from aiohttp import web

from agentflow.sim.answers import error_body

__all__ = ["error_response", "json_errors"]

_log = logging.getLogger("agentflow.sim")
_encode = msgspec.json.encode


def error_response(
    status: int, message: str, param: str | None = None, headers: Mapping[str, str] | None = None
) -> web.Response:
    """vLLM's JSON error answer."""
    return web.Response(
        status=status,
        body=_encode(error_body(status, message, param)),
        content_type="application/json",
        headers=headers,
    )


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """aiohttp's own 404/405/413 answers, and a handler's unexpected exception (a 500),
    in vLLM's JSON error shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(
            exc.status,
            exc.reason,
            headers={"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None,
        )
    except ConnectionError:
        raise  # the client left: there is no one to answer
    except Exception as exc:
        if request.writer.output_size > 0:
            raise  # the answer has begun; aiohttp closes the connection
        _log.exception("agentflow sim: %s %s failed", request.method, request.path)
        return error_response(500, f"Internal server error: {type(exc).__name__}: {exc}")
