"""The events budgets emit: a prompt trimmed, a history compacted, a fleet budget crossed.

They are frozen dataclasses told apart by ``type``, like every :data:`agentflow.Event`,
and reach the fleet's callbacks through the ``emit`` a session hands to
:meth:`~agentflow.context.ContextBudget.bind`.
"""

from agentflow._context_events import BudgetEvent, CompactionEvent, ContextTrimmedEvent

__all__ = ["BudgetEvent", "CompactionEvent", "ContextTrimmedEvent"]
