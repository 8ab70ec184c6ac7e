"""Exported classes report the path users import them from, not the private module.

``agentflow._fleet.Fleet`` shows as ``agentflow.Fleet`` in reprs, tracebacks, ``help()``
and pickles once :func:`publish` has run. Moving ``__module__`` would break
:func:`typing.get_type_hints` (and msgspec, which decodes through it): string annotations
are evaluated in ``sys.modules[cls.__module__]``, where ``Literal`` or a sibling type is not
defined. So each class's annotations are first evaluated where they were written and
stored as objects; one that cannot be (a name imported only under ``TYPE_CHECKING``) is
tried against ``extra`` and otherwise left as the string it was.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["publish"]


def _resolve(cls: type, extra: Mapping[str, Any]) -> None:
    # The class's own annotations, not its bases' (inspect would cost the import of
    # inspect, ~10 ms, on `import agentflow`).
    raw = cls.__dict__.get("__annotations__")  # noqa: RUF063
    if not raw or not any(isinstance(v, str) for v in raw.values()):
        return
    home = sys.modules[cls.__module__].__dict__
    resolved: dict[str, Any] = {}
    for name, annotation in raw.items():
        if isinstance(annotation, str):
            # A name imported only under TYPE_CHECKING: keep the string.
            with contextlib.suppress(Exception):
                annotation = eval(annotation, dict(home), {**extra, cls.__name__: cls})
        resolved[name] = annotation
    cls.__annotations__ = resolved


def publish(module: str, names: Iterable[str], namespace: Mapping[str, Any]) -> None:
    """Set ``__module__`` to ``module`` for each agentflow class among ``names`` in
    ``namespace``, after evaluating its annotations where they were written
    (``namespace`` helps with names imported there only for type checking).

    A subpackage publishes its exports first; the top level then re-publishes the few
    it re-exports (``agentflow.Limits`` reports ``agentflow``)."""
    for name in names:
        value = namespace.get(name)
        if not isinstance(value, type) or not value.__module__.startswith("agentflow"):
            continue
        if value.__module__ == module:
            continue
        for klass in value.__mro__:
            if klass.__module__.startswith("agentflow") and klass.__module__ in sys.modules:
                _resolve(klass, namespace)
        value.__module__ = module
