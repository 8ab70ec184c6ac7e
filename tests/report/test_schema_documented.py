"""Every field the report schema allows is documented (``docs/report-schema.md`` and the
server section's page): the prefix-reuse counts were written in every demo report but
named nowhere in the docs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentflow.stats import report_schema

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _fields(node: Any, defs: dict[str, Any], path: str, depth: int = 0) -> list[str]:
    """Every property of the schema under ``node``, as ``path.name``."""
    if depth > 16 or not isinstance(node, dict):
        return []
    out: list[str] = []
    if "$ref" in node:
        out += _fields(defs.get(node["$ref"].rsplit("/", 1)[-1]), defs, path, depth + 1)
    for name, sub in (node.get("properties") or {}).items():
        out.append(f"{path}.{name}")
        out += _fields(sub, defs, f"{path}.{name}", depth + 1)
    for key, tail in (("items", "[]"), ("additionalProperties", ".*")):
        out += _fields(node.get(key), defs, path + tail, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in node.get(key) or ():
            out += _fields(sub, defs, path, depth + 1)
    return out


def test_every_report_field_is_documented() -> None:
    schema = report_schema()
    doc = (DOCS / "report-schema.md").read_text() + (DOCS / "report-server-section.md").read_text()
    missing = sorted(
        {
            f
            for f in _fields(schema, schema.get("$defs", {}), "$")
            if not re.search(r"[`\"{,\s.]" + re.escape(f.rsplit(".", 1)[-1]) + r"[`\"},\s.\[]", doc)
        }
    )
    assert missing == []
