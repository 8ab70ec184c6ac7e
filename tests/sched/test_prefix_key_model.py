"""An agent's prefix key names its model: agents with the same instructions and tools on
two models (a base model and its LoRA adapter) can never share a server's KV cache, so
they share neither a prefix warm-up nor prefix affinity."""

from __future__ import annotations

from agentflow import Agent, Replica
from agentflow.embedded import loop_clock
from agentflow.sched import Scheduler, Ticket
from tests.sched.conftest import Acquirer, IdleTransport, settle

INSTRUCTIONS = "You are a coder. Keep answers short."
BASE = Agent(name="base", model="llama-3-8b", instructions=INSTRUCTIONS)
LORA = Agent(name="lora", model="llama-3-8b-lora-sql", instructions=INSTRUCTIONS)


def _ticket(agent: Agent, session_id: str) -> Ticket:
    return Ticket(
        session_id=session_id,
        agent=agent.name,
        turn=0,
        ready_ns=0,
        prompt_tokens=10,
        max_output_tokens=10,
        prefix_key=agent.prefix_key,
    )


def test_agents_on_two_models_have_two_prefix_keys() -> None:
    assert BASE.prefix_key is not None and LORA.prefix_key is not None
    assert BASE.prefix_key != LORA.prefix_key
    same = Agent(name="other-name", model="llama-3-8b", instructions=INSTRUCTIONS)
    assert same.prefix_key == BASE.prefix_key  # the name is not part of the prefix


async def test_a_session_on_another_model_does_not_wait_for_the_warm_up() -> None:
    """The base model's first session is its prefix's leader; the adapter's session,
    with the same instructions, leads its own prefix instead of parking behind it."""
    sched = Scheduler([Replica(transport=IdleTransport("A"), name="A")], clock=loop_clock)
    acq = Acquirer(sched)
    acq.submit(_ticket(BASE, "base-1"))
    acq.submit(_ticket(LORA, "lora-1"))
    acq.submit(_ticket(BASE, "base-2"))
    await settle()
    assert acq.order == ["base-1", "lora-1"] and sched.waiting == 1
    assert acq.grants["base-1"].leader and acq.grants["lora-1"].leader
    for sid in ("base-1", "lora-1"):
        acq.release(sid)
    await settle()
    acq.release("base-2")
    await sched.aclose()
