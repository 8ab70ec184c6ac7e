"""``python -m agentflow.planner``: ``agentflow plan`` without the rest of the CLI."""

from __future__ import annotations

import sys

from agentflow.planner.cli import main

if __name__ == "__main__":
    sys.exit(main())
