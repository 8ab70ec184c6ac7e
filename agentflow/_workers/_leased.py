"""A worker's side of the limits the parent's broker leases out (``_broker.py``): its
slots and its share of the request and token rates, and the scheduler and rate gate
that spend only what was leased."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from agentflow.sched import Scheduler
from agentflow.sched._limits import RateGate

if TYPE_CHECKING:
    from agentflow._workers._worker import WorkerRun

__all__ = ["LeaseClient", "LeasedRates", "LeasedScheduler"]


class LeasedRates(RateGate):
    """A worker's RPM/TPM: spends budget leased from the parent's buckets."""

    __slots__ = ("_client",)

    def __init__(self, client: LeaseClient) -> None:
        super().__init__(None, None, 1.0)
        self._client = client

    def ready(self, tokens: int) -> bool:
        c = self._client
        return c.requests >= 1 and c.tokens >= tokens + self._debt

    async def take(self, tokens: int) -> None:
        c = self._client
        debt = self._debt
        amount = tokens + debt
        self._debt = 0.0  # what settle() adds while this waits is the next take's
        try:
            while c.requests < 1 or c.tokens < amount:
                await c.more_rates(1 if c.requests < 1 else 0, max(0.0, amount - c.tokens))
        except BaseException:  # cancelled while it waited: nothing was spent, still owed
            self._debt += debt
            raise
        c.requests -= 1
        c.tokens -= amount
        self.charged_tokens += tokens
        self.started += 1

    def settle(self, reserved: int, used: int) -> None:
        if used > reserved:
            self._debt += used - reserved
            self.charged_tokens += used - reserved


class LeasedScheduler(Scheduler):
    """A worker's scheduler: dispatches only within the slots leased to it."""

    def __init__(self, *args: Any, client: LeaseClient, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._client = client
        client.scheduler = self
        if client.rated:
            self._rates = LeasedRates(client)

    def _place(self, ticket: Any) -> Any:
        c = self._client
        # Owed slots are not its own — but for the ticket the dispatcher holds while it
        # pays the fleet's rates: its slot is claimed (a reclaim meanwhile left it here,
        # LeaseClient._give_back), and it goes back when that stream ends. Refused, it
        # asked for more slots, which the broker never gives a worker that owes some:
        # with fewer slots than workers, every worker waited for ever.
        owed = 0 if self._granting is not None else c.owed
        if c.slotted and self.in_flight >= c.slots - owed:
            c.need_slots(self.waiting + 1)
            return None
        return self.router.choose(ticket, self.replicas)

    def release(self, grant: Any, **kw: Any) -> None:
        super().release(grant, **kw)
        self._client.released()


class LeaseClient:
    """A worker's leases: slots and rate budget, and the messages that move them."""

    def __init__(self, run: WorkerRun, config: dict[str, Any]) -> None:
        self._run = run
        self.slotted: bool = config["slots"]
        self.rated: bool = config["rates"]
        self.slot_batch: int = config["slot_batch"]
        self.slots: int = config["initial_slots"]
        self.owed = 0
        self._asked = 0  # slots asked for and not granted yet
        self._returning = False
        # Budget left; a limit the fleet does not have is never short.
        self.requests = 0 if config["rpm"] else 1 << 62
        self.tokens = 0.0 if config["tpm"] else float(1 << 62)
        self._rates_wait: asyncio.Future[None] | None = None
        self.scheduler: Scheduler | None = None

    def need_slots(self, n: int) -> None:
        if not self._asked:
            self._asked = max(1, min(n, self.slot_batch))
            self._run.send(("want_slots", self._asked))

    def granted_slots(self, n: int) -> None:
        self._asked = max(0, self._asked - n)
        self.slots += n
        if self.owed:
            self.released()
        if self.scheduler is not None:
            self.scheduler._kick()

    def reclaim(self, n: int) -> None:
        self.owed += n
        self.released()

    def spare(self, n: int) -> None:
        """The broker asks for slots this worker is not using: give back what is free
        now, if nothing waits here (nothing is owed). With nothing waiting, an ask of
        its own still out is stale (the ticket it was for went out or was cancelled):
        the answer, even of no slot, withdraws it (the broker drops it on
        ``return_spare``), and the next ticket short of a slot asks afresh."""
        sched = self.scheduler
        if sched is None or sched.waiting:
            return
        give = max(0, min(n, self.slots - self.owed - sched.claimed))
        if give > 0 or self._asked:
            self._asked = 0
            self.slots -= give
            self._run.send(("return_spare", give))

    def released(self) -> None:
        """A stream ended (or slots were reclaimed): give owed slots back, once per loop
        iteration however many streams ended in it."""
        if self.owed and not self._returning:
            self._returning = True
            asyncio.get_running_loop().call_soon(self._give_back)

    def _give_back(self) -> None:
        self._returning = False
        if not self.owed or self.scheduler is None:
            return
        give = min(self.owed, self.slots - self.scheduler.claimed)
        if give > 0:
            self.slots -= give
            self.owed -= give
            self._run.send(("return_slots", give))

    async def more_rates(self, requests: int, tokens: float) -> None:
        if self._rates_wait is None:
            self._rates_wait = asyncio.get_running_loop().create_future()
            self._run.send(("want_rates", requests, tokens))
        await asyncio.shield(self._rates_wait)

    def granted_rates(self, requests: int, tokens: float) -> None:
        self.requests += requests
        self.tokens += tokens
        fut, self._rates_wait = self._rates_wait, None
        if fut is not None and not fut.done():
            fut.set_result(None)
