"""When to look at each connection's deadlines, so a tick costs what is due, not what is open.

A runner holds thousands of connections, nearly all of them far from any
deadline (an idle timeout of minutes, refreshed by every read). Walking all
of them every tick made the loop's timer work grow with the fleet. Instead
each connection is filed under the earliest time one of its deadlines could
pass; a tick takes only the connections whose time has come, and each of
them, once looked at, files itself again under its next time.

A time may only move earlier by scheduling again (a frame starting, say);
a later one comes from looking at the connection when it is due. An entry
superseded by an earlier one stays in the heap until its own time and is
then skipped, so the heap holds at most the live entries plus those made in
the last deadline period. Entries refer to connections weakly: a connection
that is gone is not kept alive by its entry.
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from typing import Any, Generic, Hashable, TypeVar

__all__ = ["DeadlineQueue"]

T = TypeVar("T", bound=Hashable)


class DeadlineQueue(Generic[T]):
    """Items, each filed under one time; :meth:`pop_due` hands out those whose time has come."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._order = itertools.count()
        #: Each item's time, as long as it is filed (the earliest entry of it that counts).
        self._due_at: weakref.WeakKeyDictionary[T, float] = weakref.WeakKeyDictionary()

    def schedule(self, item: T, at: float) -> None:
        """File ``item`` under ``at``, unless it is filed under that time or earlier already."""
        filed = self._due_at.get(item)
        if filed is not None and filed <= at:
            return
        self._due_at[item] = at
        heapq.heappush(self._heap, (at, next(self._order), weakref.ref(item)))

    def pop_due(self, now: float) -> list[T]:
        """The items filed under ``now`` or earlier, each once, in time order; they are filed no longer."""
        heap, due_at, due = self._heap, self._due_at, []
        while heap and heap[0][0] <= now:
            at, _, ref = heapq.heappop(heap)
            item = ref()
            if item is None or due_at.get(item) != at:
                continue  # gone, or filed again under an earlier time that came first
            del due_at[item]
            due.append(item)
        return due

    def discard(self, item: T) -> None:
        """Forget ``item`` (its entry is skipped when its time comes)."""
        self._due_at.pop(item, None)

    def filed(self, item: T) -> float | None:
        """The time ``item`` is filed under, or ``None``."""
        return self._due_at.get(item)

    def __len__(self) -> int:
        """Entries in the heap, superseded ones included."""
        return len(self._heap)
