"""Who owes the coming on-policy update how many env steps: the :class:`~.scheduler.Scheduler`'s ledger.

Steps the update needs, steps received for it, and steps promised to
clients. The promises never add up to more than the update needs, so data
from clients that speak ``want_steps`` reaches the learner with a policy lag
of 0 and none is thrown away. Plain RLlib clients can't be told; they send
what they like, and steps beyond the update's need wait for the next one
(their lag is reported). When a client is parked or released is the
scheduler's decision, not this ledger's.

This is pure bookkeeping: no sockets, threads or Ray.
"""

from __future__ import annotations

__all__ = ["UpdateBudget"]


class UpdateBudget:
    """Steps the coming update needs, steps received for it, and steps promised.

    Args:
        target: env steps one update takes from this runner.
    """

    def __init__(self, target: int) -> None:
        if target < 1:
            raise ValueError(f"an update needs at least one step, got {target}")
        self.target = target
        self.received = 0
        self._promised: dict[str, int] = {}

    @property
    def promised(self) -> int:
        return sum(self._promised.values())

    @property
    def unassigned(self) -> int:
        """Steps the update still needs that no client has been asked for."""
        return max(0, self.target - self.received - self.promised)

    @property
    def complete(self) -> bool:
        """Whether the update has all the steps it needs."""
        return self.received >= self.target

    def record(self, client: str, steps: int) -> None:
        """``client`` delivered ``steps`` sampled with the current weights."""
        self.received += steps
        left = self._promised.pop(client, 0) - steps
        if left > 0:
            self._promised[client] = left

    def promised_to(self, client: str) -> int:
        """Steps ``client`` was asked for and has not delivered yet."""
        return self._promised.get(client, 0)

    def assign(self, client: str, share: int) -> int:
        """Promise up to ``share`` of the unassigned steps to ``client``; return how many."""
        steps = min(max(0, share), self.unassigned)
        if steps:
            self._promised[client] = self._promised.get(client, 0) + steps
        return steps

    def forget(self, client: str) -> None:
        """``client`` left; what it promised is unassigned again."""
        self._promised.pop(client, None)

    def should_park(self) -> bool:
        """Whether a client that just delivered must wait for new weights."""
        return self.unassigned == 0

    def next_update(self, target: int | None = None) -> None:
        """New weights arrived: start counting for the next update."""
        self.received = 0
        self._promised.clear()
        if target is not None:
            self.target = target

    def extend(self, steps: int) -> None:
        """The learner wants ``steps`` more with the current weights."""
        self.target = self.received + self.promised + steps

    @staticmethod
    def split(total: int, parts: int) -> list[int]:
        """``total`` steps split over ``parts`` clients as evenly as whole steps allow."""
        if parts <= 0:
            return []
        base, extra = divmod(total, parts)
        return [base + (1 if i < extra else 0) for i in range(parts)]
