"""The embedded default: agentflow's client and simulator brought together.

The library proper never imports the simulator, and the simulator never imports the
client; this package is where the two meet — virtual time, the in-process transport,
and the simulator launcher.
"""

from agentflow.embedded._clock import VirtualTimeLoop, run_virtual

__all__ = ["VirtualTimeLoop", "run_virtual"]
