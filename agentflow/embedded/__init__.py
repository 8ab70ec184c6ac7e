"""The embedded default: agentflow's client and simulator brought together.

The library proper never imports the simulator, and the simulator never imports the
client; this package is where the two meet — virtual time and the in-process transport.
"""

from agentflow._public import publish as _publish
from agentflow.embedded._clock import VirtualTimeLoop, run_virtual
from agentflow.embedded._transport import SimTransport, loop_clock

__all__ = ["SimTransport", "VirtualTimeLoop", "loop_clock", "run_virtual"]

# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())
