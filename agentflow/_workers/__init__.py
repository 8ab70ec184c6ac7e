"""``Fleet(workers=N)``: one run's sessions sharded over N worker processes.

Each worker is a ``spawn``-started process with its own event loop, scheduler and
connections; it runs the sessions it was given from start to end (a session never
moves). The parent keeps what must be one for the whole run:

- **the user's callbacks** — workers forward the events the parent's bus wants, in
  batches (one message per ~5 ms or 256 events over the worker's pipe: token events
  msgpack-encoded with msgspec, the others pickled); token events only when some
  callback reads them;
- **the fleet's limits** — a :class:`Broker` leases ``max_in_flight`` slots and
  RPM/TPM budget to the workers in batches. A worker spends its lease locally (no
  round trip per request), asks for more when it runs out, and gives slots back when
  the broker reclaims them for a worker that has none. The sum of the leases never
  exceeds the fleet's limits, so neither does what the workers send;
- **the result** — every :class:`SessionResult` (from the workers' ``session_end``
  events) in the order the sessions were given, merged replica counts and retries.

Liveness: a worker dies with its parent (``PR_SET_PDEATHSIG`` on Linux, and it exits
when its pipe to the parent closes, everywhere); a worker that dies fails its
unfinished sessions with :class:`WorkerError` and the run goes on; cancelling the
run cancels the workers' runs, waits ``stop_timeout_s`` for their partial results,
then kills them. See ``docs/scale-out.md``.

Modules: ``_parent`` (checks, start, results, stop), ``_broker`` (the leases),
``_worker`` (a worker process: its fleet on leased limits), ``_wire`` (event batches).
"""

from agentflow._workers._parent import check_picklable, run_in_workers

__all__ = ["check_picklable", "run_in_workers"]
