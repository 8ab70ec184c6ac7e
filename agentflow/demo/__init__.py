"""``agentflow demo``: a fleet of coding agents on the embedded simulator (or any server).

The demo brings client and simulator together, which the library itself never does.
"""
