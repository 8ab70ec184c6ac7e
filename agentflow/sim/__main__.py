"""``python -m agentflow.sim``: serve the simulator (see :mod:`agentflow.sim.cli`)."""

from __future__ import annotations

import sys

from agentflow.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
