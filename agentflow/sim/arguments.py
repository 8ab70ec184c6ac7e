"""Random values that satisfy a JSON schema: the simulator's tool-call arguments.

Covers what tool schemas use in practice (and what pydantic emits): ``type`` (one or
a list), ``enum``, ``const``, ``properties``/``required`` (optional properties are
included at random), ``items``/``prefixItems``/``minItems``/``maxItems``/
``uniqueItems``, numeric bounds (``minimum``, ``maximum``, the exclusive forms,
``multipleOf``), ``minLength``/``maxLength``, common string ``format`` values (dates,
times, e-mail, URLs, UUIDs of each version pydantic checks, ISO 8601 durations), a
``pattern`` (a string generated from it, never by running it: :mod:`agentflow.sim.pattern`;
one with lookarounds or ``\\b`` is ignored), ``anyOf``/``oneOf``/
``allOf``, and local ``$ref`` into ``$defs``/``definitions``. An object holds its
``required`` keys, those ``dependentRequired`` (or ``dependencies``) asks for with them,
and for a ``minProperties`` beyond the ``properties`` it names, keys built from a
``patternProperties`` pattern — or, if ``additionalProperties`` allows, words (or
``propertyNames`` strings) — with the values their schemas describe; no other key the
schema does not name. Deterministic for a given :class:`random.Random` state.

The value is built on the server's event loop, so its size is bounded: the characters of
its strings plus its array items and object properties may not exceed
:data:`MAX_ARGUMENT_SIZE`; a schema that demands more (a ``minLength``, ``minItems`` or
``minProperties`` beyond what is left) is a :class:`SchemaError`, not minutes of work.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from agentflow.sim.pattern import PatternError, pattern_string
from agentflow.sim.schema_keys import add_dependents, extra_keys
from agentflow.sim.schema_samples import FORMATS, WORDS

__all__ = ["MAX_ARGUMENT_SIZE", "SchemaError", "generate_value"]

_MAX_DEPTH = 8
#: The most one generated value may hold: characters of its strings, plus its array items
#: and object properties (64 Ki; a tool call's arguments are a few hundred in practice).
MAX_ARGUMENT_SIZE = 1 << 16


class SchemaError(ValueError):
    """The schema cannot be satisfied (``false``, an empty ``enum``, contradictory bounds)."""


def generate_value(schema: Any, rng: random.Random, *, root: Any = None) -> Any:
    """A value that validates against ``schema``.

    Args:
        schema: a JSON schema (a mapping, or ``True``/``False``).
        rng: the source of randomness; the same state gives the same value.
        root: the document ``$ref`` pointers resolve against (default: ``schema``).

    Raises:
        SchemaError: the schema admits no value this generator can produce.
    """
    return _Gen(rng, schema if root is None else root).value(schema, 0)


class _Gen:
    def __init__(self, rng: random.Random, root: Any) -> None:
        self.rng = rng
        self.root = root
        #: What the value may still hold (see MAX_ARGUMENT_SIZE).
        self.left = MAX_ARGUMENT_SIZE

    def spend(self, n: int, what: str) -> None:
        """Take ``n`` of the size left, or raise :class:`SchemaError` naming ``what``."""
        if n > self.left:
            raise SchemaError(
                f"{what} asks for more than the simulator generates: a tool call's arguments "
                f"may hold at most {MAX_ARGUMENT_SIZE} characters, items and properties"
            )
        self.left -= n

    def resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str):
            raise SchemaError(f"$ref must be a string, got {ref!r}")
        if not ref.startswith("#"):
            raise SchemaError(f"only local $ref is supported, got {ref!r}")
        node = self.root
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise SchemaError(f"$ref {ref!r} does not resolve")
            node = node[part]
        return node

    def value(self, schema: Any, depth: int) -> Any:
        if schema is True or schema is None:
            return self.rng.choice(WORDS)
        if schema is False:
            raise SchemaError("schema `false` admits no value")
        if not isinstance(schema, Mapping):
            raise SchemaError(f"not a schema: {schema!r}")
        if "$ref" in schema:
            target = self.resolve(schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = _merge(target, rest) if rest and isinstance(target, Mapping) else target
            return self.value(schema, depth + 1)
        if "allOf" in schema:
            merged: Mapping[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for sub in schema["allOf"]:
                sub = (
                    self.resolve(sub["$ref"]) if isinstance(sub, Mapping) and "$ref" in sub else sub
                )
                if isinstance(sub, Mapping):
                    merged = _merge(merged, sub)
            return self.value(merged, depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            options = list(schema["enum"])
            if not options:
                raise SchemaError("empty enum")
            return self.rng.choice(options)
        for key in ("oneOf", "anyOf"):
            if key in schema:
                branches = list(schema[key])
                if not branches:
                    raise SchemaError(f"empty {key}")
                # Prefer a non-null branch: more interesting, and never ambiguous for oneOf.
                non_null = [b for b in branches if not _is_null(b)]
                branch = self.rng.choice(non_null or branches)
                rest = {k: v for k, v in schema.items() if k != key}
                if rest and isinstance(branch, Mapping):
                    branch = _merge(rest, branch)
                return self.value(branch, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"] or list(kind)
            kind = self.rng.choice(kinds) if kinds else None
        if kind is None:
            if "properties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            elif "minimum" in schema or "maximum" in schema:
                kind = "number"
            else:
                kind = "string"
        method = getattr(self, f"_{kind}", None)
        if method is None:
            raise SchemaError(f"unknown type {kind!r}")
        result: Any = method(schema, depth)
        return result

    # --- One method per JSON type ------------------------------------------------------

    def _null(self, schema: Mapping[str, Any], depth: int) -> None:
        return None

    def _boolean(self, schema: Mapping[str, Any], depth: int) -> bool:
        return self.rng.random() < 0.5

    def _integer(self, schema: Mapping[str, Any], depth: int) -> int:
        lo = schema.get("minimum")
        hi = schema.get("maximum")
        if "exclusiveMinimum" in schema and not isinstance(schema["exclusiveMinimum"], bool):
            lo = (
                max(lo, schema["exclusiveMinimum"] + 1e-9)
                if lo is not None
                else schema["exclusiveMinimum"] + 1e-9
            )
        if "exclusiveMaximum" in schema and not isinstance(schema["exclusiveMaximum"], bool):
            hi = (
                min(hi, schema["exclusiveMaximum"] - 1e-9)
                if hi is not None
                else schema["exclusiveMaximum"] - 1e-9
            )
        ilo = _ceil(lo) if lo is not None else None
        ihi = _floor(hi) if hi is not None else None
        if ilo is None and ihi is None:
            ilo, ihi = 0, 100
        elif ilo is None:
            assert ihi is not None
            ilo = ihi - 100
        elif ihi is None:
            ihi = ilo + 100
        mult = schema.get("multipleOf")
        if isinstance(mult, int) and not isinstance(mult, bool) and mult > 0:
            first = -(-ilo // mult) * mult
            if first > ihi:
                raise SchemaError(f"no multiple of {mult} in [{ilo}, {ihi}]")
            return first + mult * self.rng.randint(0, (ihi - first) // mult)
        if ilo > ihi:
            raise SchemaError(f"empty integer range [{ilo}, {ihi}]")
        return self.rng.randint(ilo, ihi)

    def _number(self, schema: Mapping[str, Any], depth: int) -> float | int:
        if isinstance(schema.get("multipleOf"), int):
            return self._integer(schema, depth)
        lo = float(schema.get("minimum", schema.get("exclusiveMinimum", 0.0)))
        hi = float(schema.get("maximum", schema.get("exclusiveMaximum", lo + 100.0)))
        if "maximum" not in schema and "exclusiveMaximum" not in schema:
            hi = lo + 100.0
        if "minimum" not in schema and "exclusiveMinimum" not in schema:
            lo = min(0.0, hi - 100.0)
        if lo > hi:
            raise SchemaError(f"empty number range [{lo}, {hi}]")
        for _ in range(8):
            x = round(self.rng.uniform(lo, hi), 3)
            if _number_ok(schema, x):
                return x
        mid = (lo + hi) / 2
        if _number_ok(schema, mid):
            return mid
        raise SchemaError(f"no number found in ({lo}, {hi})")

    def _string(self, schema: Mapping[str, Any], depth: int) -> str:
        lo = _count(schema, "minLength", 0)
        hi = _count(schema, "maxLength", max(lo, 24))
        if lo > hi:
            raise SchemaError(f"minLength {lo} > maxLength {hi}")
        if lo > self.left:
            self.spend(lo, f"minLength {lo}")
        text = self._text(schema, lo, hi)
        self.spend(len(text), "the strings")
        return text

    def _text(self, schema: Mapping[str, Any], lo: int, hi: int) -> str:
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in FORMATS:
            candidate = self.rng.choice(FORMATS[fmt])
            # Only a maxLength the schema sets bounds it (a UUID's 36 characters are
            # beyond the 24 a free string gets, and so were replaced by words).
            if lo <= len(candidate) <= (hi if "maxLength" in schema else len(candidate)):
                return candidate
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            most = hi if "maxLength" in schema else None
            try:
                text = pattern_string(pattern, self.rng, lo, most)
            except PatternError as exc:
                raise SchemaError(str(exc)) from None
            if text is not None:
                return text
        words = [self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 3))]
        size = sum(map(len, words)) + len(words) - 1
        while size < lo:  # a list joined once: growing a str by += is quadratic
            words.append(self.rng.choice(WORDS))
            size += 1 + len(words[-1])
        return "_".join(words)[:hi]

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        prefix = list(schema.get("prefixItems") or ())
        items = schema.get("items", True)
        if isinstance(items, list):  # draft-4 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        lo = _count(schema, "minItems", 0)
        hi = _count(schema, "maxItems", max(lo, 3))
        if lo > hi:
            raise SchemaError(f"minItems {lo} > maxItems {hi}")
        if lo > self.left:
            self.spend(lo, f"minItems {lo}")
        lower = lo if depth >= _MAX_DEPTH else max(lo, min(1, hi))
        n = self.rng.randint(lower, max(lower, min(hi, 3)))
        out: list[Any] = []
        unique = bool(schema.get("uniqueItems"))
        seen: set[str] = set()
        attempts = 0
        while len(out) < n:
            i = len(out)
            sub = prefix[i] if i < len(prefix) else items
            if sub is False:
                break
            v = self.value(sub, depth + 1)
            if unique:
                key = json.dumps(v, sort_keys=True)
                if key in seen:
                    attempts += 1
                    if attempts > 50:
                        if len(out) >= lo:
                            break
                        raise SchemaError("cannot find enough unique items")
                    continue
                seen.add(key)
            self.spend(1, f"minItems {lo}" if i < lo else "the arrays' items")
            out.append(v)
        return out

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties") or {}
        if not isinstance(props, Mapping):
            raise SchemaError(f"properties must be an object, got {props!r}")
        required = [r for r in schema.get("required") or () if isinstance(r, str)]
        out: dict[str, Any] = {}
        min_props = _count(schema, "minProperties", 0)
        if min_props > self.left:
            self.spend(min_props, f"minProperties {min_props}")
        required_set = set(required)
        optional = [k for k in props if k not in required_set]
        chosen = list(required)
        if depth < _MAX_DEPTH:
            chosen += [k for k in optional if self.rng.random() < 0.5]
        chosen_set = set(chosen)
        for k in optional:
            if len(chosen_set) >= min_props:
                break
            if k not in chosen_set:
                chosen.append(k)
                chosen_set.add(k)
        add_dependents(schema, chosen, chosen_set)
        need = min_props - len(chosen_set)
        try:
            extra = extra_keys(self, schema, need, chosen_set | set(props), WORDS)
        except PatternError as exc:
            raise SchemaError(str(exc)) from None
        if len(extra) < need:
            raise SchemaError(
                f"minProperties {min_props}: the schema allows too few property names"
            )
        additional = schema.get("additionalProperties", True)
        for key in [k for k in props if k in chosen_set] + [k for k in chosen if k not in props]:
            self.spend(1, "the objects' properties")
            out[key] = self.value(props.get(key, additional), depth + 1)
        for key, sub in extra:
            self.spend(1, "the objects' properties")
            out[key] = self.value(sub, depth + 1)
        return out


def _count(schema: Mapping[str, Any], key: str, default: int) -> int:
    """``schema[key]`` (a length or a count) as an int."""
    value = schema.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise SchemaError(f"{key} must be a non-negative integer, got {value!r}") from None


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        if k == "properties" and isinstance(out.get(k), Mapping):
            out[k] = {**out[k], **v}
        elif k == "required" and isinstance(out.get(k), list):
            out[k] = list(dict.fromkeys([*out[k], *v]))
        else:
            out[k] = v
    return out


def _is_null(schema: Any) -> bool:
    return isinstance(schema, Mapping) and schema.get("type") == "null"


def _ceil(x: float) -> int:
    i = _int(x)
    return i if i >= x else i + 1


def _floor(x: float) -> int:
    i = _int(x)
    return i if i <= x else i - 1


def _int(x: float) -> int:
    try:
        return int(x)
    except OverflowError:  # ±inf (1e400 in the JSON); NaN is a ValueError
        raise SchemaError(f"an integer bound must be finite, got {x!r}") from None


def _number_ok(schema: Mapping[str, Any], x: float) -> bool:
    if "minimum" in schema and x < schema["minimum"]:
        return False
    if "maximum" in schema and x > schema["maximum"]:
        return False
    emin = schema.get("exclusiveMinimum")
    if emin is not None and not isinstance(emin, bool) and x <= emin:
        return False
    emax = schema.get("exclusiveMaximum")
    return emax is None or isinstance(emax, bool) or x < emax
