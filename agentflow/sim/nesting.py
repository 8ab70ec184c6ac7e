"""How deep a request's ``messages`` and ``tools`` nest, checked at C speed.

The chat template serialises what a request sends (``json.dumps`` of tool schemas and of
content that is no string, ``repr`` of a call's function), which recurses once per level:
past ~990 levels that is a ``RecursionError``. So the simulator refuses more than
:data:`MAX_NESTING` levels of arrays and objects with a 400 naming the field.

Every request repeats its whole conversation, so the check runs over every message of it,
each time. It goes level by level, and within a level the work on each value is done by
C code (``map``, ``itertools``, set membership): what Python's interpreter does per level
is a handful of calls, whatever the number of values in it. A Python loop over every node
cost about five times the JSON decoding of the body itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain, compress
from typing import Any

from agentflow.sim.errors import RequestRejected

__all__ = ["MAX_NESTING", "check_nesting"]

#: The most levels of arrays and objects ``messages`` and ``tools`` may nest (the list
#: itself is the first): far beyond any real schema or message, and far below the
#: recursion limit of the chat template's ``json.dumps``.
MAX_NESTING = 64

#: What JSON decodes to; a value of any other type (an in-process caller's) is looked at
#: one by one.
_JSON_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})
_is_dict = frozenset({dict}).__contains__
_is_list = frozenset({list}).__contains__
_is_node = frozenset({dict, list}).__contains__


def check_nesting(value: Any, field: str) -> None:
    """A 400 naming ``field`` if ``value`` nests more than :data:`MAX_NESTING` levels of
    arrays and objects (mappings, lists and tuples; ``value`` itself is the first level).

    Raises:
        RequestRejected: ``{field} is nested too deep: …``, ``param`` ``field``.
    """
    level = _nodes([value])
    for _ in range(MAX_NESTING):
        if not level:
            return
        level = _nodes(_children(level))
    if level:
        raise RequestRejected(
            f"{field} is nested too deep: at most {MAX_NESTING} levels of arrays and objects.",
            status=400,
            param=field,
        )


def _children(nodes: list[Any]) -> list[Any]:
    """The values of the objects and the items of the arrays in ``nodes``."""
    types = list(map(type, nodes))
    values = chain(
        chain.from_iterable(map(dict.values, compress(nodes, map(_is_dict, types)))),
        chain.from_iterable(compress(nodes, map(_is_list, types))),
    )
    if not _JSON_TYPES.issuperset(types):  # a Mapping that is no dict, a tuple
        odd = [n for n, t in zip(nodes, types, strict=True) if not _is_node(t)]
        values = chain(values, chain.from_iterable(map(_items, odd)))
    return list(values)


def _nodes(values: list[Any]) -> list[Any]:
    """The arrays and objects among ``values``."""
    types = list(map(type, values))
    if _JSON_TYPES.issuperset(types):
        return list(compress(values, map(_is_node, types)))
    return [v for v in values if _is_node(type(v)) or isinstance(v, Mapping | list | tuple)]


def _items(node: Any) -> Any:
    return node.values() if isinstance(node, Mapping) else node
