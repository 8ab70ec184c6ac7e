"""A ``read_file`` tool session's pieces, shared by the accounting tests: the tool's
schema, its outputs, and the assistant call and tool result that carry them."""

from __future__ import annotations

from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def output(lines: int, salt: int = 0) -> str:
    """A tool output of about 10 cl100k tokens a line."""
    return "\n".join(f"line {i}: value={(i * 7919 + salt) % 10007} ok" for i in range(lines))


def call(n: int) -> dict[str, Any]:
    """The assistant's ``n``-th ``read_file`` call (id ``c<n>``)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{n}",
                "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"path": "f{n}.py"}}'},
            }
        ],
    }


def result(n: int, text: str) -> dict[str, Any]:
    """The tool's answer ``text`` to call ``n``."""
    return {"role": "tool", "tool_call_id": f"c{n}", "content": text}
