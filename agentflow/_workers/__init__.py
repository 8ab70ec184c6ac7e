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
unfinished sessions with :class:`WorkerError` (with a store, one killed is replaced
instead: below) and the run goes on; cancelling the
run cancels the workers' runs, waits ``stop_timeout_s`` for their partial results,
then kills them. See ``docs/scale-out.md``.

With ``Fleet(workers=N, backend="ray")`` the workers are Ray actors: the same run
(:func:`run_sharded`) and the same worker core (``WorkerRun``) over another channel
(a ``Launcher``); an actor lost mid-run has its unfinished sessions run again on a new one.

With a store (``Fleet(store=...)``) the parent is the run's one writer: each worker's
sessions record through a ``Recorder`` whose writes are sent to the parent (in order with
the worker's events), and the parent writes them; a resumed run's sessions are claimed at
once and sent to the workers restored; a worker lost mid-run (a killed process, a lost
Ray actor; not one that crashed on its own) is replaced, and its sessions continue from
the store's finished turns.

Modules: ``_parent`` (the ``Launcher`` protocol; which launcher, and the run's steps:
``run_sharded``), ``_checks`` (what must pickle), ``_sharded`` (one run's state: starting
workers, their messages, the broker's wiring, re-running a lost worker's sessions),
``_watchdog`` (the heartbeat), ``_results`` (merged counts, the sessions no worker
finished, the cancel path), ``_broker`` (the leases), ``_worker`` (a worker: its fleet on
leased limits; the process entry point), ``_processes`` (the process launcher), ``_ray``
(the Ray actor and launcher), ``_wire`` (a worker's configuration, event batches).
"""

from agentflow._workers._parent import check_picklable, run_in_workers, run_sharded

__all__ = ["check_picklable", "run_in_workers", "run_sharded"]
