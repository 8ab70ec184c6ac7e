"""Durable fleets: a turn log per run, so a killed run resumes where it stopped.

``Fleet(transport, store=SQLiteStore("runs.db"))`` records every run: its sessions'
starts, every finished turn (only the messages it appended), every tool result as soon
as it is produced, and every session's end. ``Fleet.resume(run_id, agents=...)`` (or
``agentflow resume RUN_ID --store runs.db`` for the demo) continues a run after a kill:
finished turns are not redone, a recorded tool call never runs twice, completed
sessions are left alone. See ``docs/store.md``.

:class:`Store` is the interface a backend implements; :class:`SQLiteStore` is the
default backend; :class:`PostgresStore` (the ``pg`` extra) lets workers on several
machines share one run (``docs/store.md``).
"""

from agentflow._public import publish as _publish
from agentflow.store._durable import new_run_id
from agentflow.store._export import export_report, load_result
from agentflow.store._postgres import PostgresStore
from agentflow.store._protocol import LeaseOwner, RunSummary, Store
from agentflow.store._records import (
    AgentInfo,
    PolicyState,
    Record,
    RunAttempt,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    StoredRun,
    StoredSession,
    StoredToolResult,
    StoredTurn,
    ToolFinished,
    TurnFinished,
)
from agentflow.store._resume import stored_prompts
from agentflow.store._schema import SCHEMA_VERSION
from agentflow.store._sqlite import SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "AgentInfo",
    "LeaseOwner",
    "PolicyState",
    "PostgresStore",
    "Record",
    "RunAttempt",
    "RunEnded",
    "RunStarted",
    "RunSummary",
    "SQLiteStore",
    "SessionEnded",
    "SessionStarted",
    "Store",
    "StoredRun",
    "StoredSession",
    "StoredToolResult",
    "StoredTurn",
    "ToolFinished",
    "TurnFinished",
    "export_report",
    "load_result",
    "new_run_id",
    "stored_prompts",
]

# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())
