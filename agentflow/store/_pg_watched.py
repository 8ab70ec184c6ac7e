"""The connection :class:`~agentflow.store.PostgresStore` uses: psycopg's, telling the
store's :class:`~agentflow.store._pg_conn.Watchdog` each time its socket moves data, so
that the watchdog's deadline is per answer, not per call. Imported only once psycopg is
(the ``pg`` extra)."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from agentflow.store._pg_conn import Watchdog

__all__ = ["WatchedConnection"]


class WatchedConnection(psycopg.Connection[tuple[Any, ...]]):
    """A psycopg connection whose :attr:`watchdog`, if set, hears of its I/O.

    Every operation of a psycopg connection — a statement, a pipeline's sync, a fetch, a
    commit — runs as a generator through :meth:`wait`, which resumes it each time the
    socket is ready (or after a short interval, to check for interrupts: not ready)."""

    #: Told (:meth:`Watchdog.answered`) each time the socket is found ready.
    watchdog: Watchdog | None = None

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        """psycopg's ``wait``, with ``gen`` telling :attr:`watchdog` of the socket's I/O."""
        dog = self.watchdog
        if dog is not None:
            gen = _answering(gen, dog, self)
        return super().wait(gen, *args, **kwargs)


def _answering(
    gen: Generator[Any, Any, Any], watchdog: Watchdog, conn: WatchedConnection
) -> Generator[Any, Any, Any]:
    """``gen``, telling ``watchdog`` each time it is resumed with its socket ready —
    data came, or could go."""
    try:
        wait = next(gen)
        while True:
            ready = yield wait
            if ready:
                watchdog.answered(conn)
            wait = gen.send(ready)
    except StopIteration as stop:
        return stop.value
