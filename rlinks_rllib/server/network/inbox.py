"""The bounded queue of episode batches between the network thread and ``sample()``.

The network thread puts one :class:`Batch` per ``EPISODES`` message; RLlib's
actor thread takes them out in ``sample()``. The inbox never drops a batch
and never blocks the network thread: it only reports when it is full, and
the network thread then stops reading from clients, so TCP pushes back on
them. A put may overshoot the bound by at most one message, which is itself
bounded by the frame size limit.

A batch can be a marker (:attr:`Batch.marker`: a sample server's word that
a client flushed or left, with no steps): it ends a waiting take at once,
since the taker acts on it rather than wait for more steps.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Batch", "Inbox"]


@dataclass
class Batch:
    """The episodes of one message, and what we know about how they were made."""

    episodes: list[Any]
    steps: int
    nbytes: int
    #: Version of the weights the client held when it sampled these steps.
    weights_seq_no: int
    client: str

    @property
    def marker(self) -> bool:
        """Whether this is a marker rather than steps (see the module docs); a subclass says."""
        return False


class Inbox:
    """FIFO of batches bounded in env steps and bytes, safe across two threads.

    Args:
        max_steps: steps held before :meth:`full` says so.
        max_bytes: frame bytes held before :meth:`full` says so.
        on_drained: called (from the taking thread) when a take leaves room
            again after the inbox was full; the network side resumes reading.
    """

    def __init__(self, max_steps: int, max_bytes: int, on_drained: Callable[[], None] | None = None) -> None:
        self.max_steps = max_steps
        self.max_bytes = max_bytes
        self._on_drained = on_drained
        self._batches: collections.deque[Batch] = collections.deque()
        self._steps = 0
        self._bytes = 0
        #: Batches of no steps held (markers).
        self._markers = 0
        self._was_full = False
        self._closed = False
        self._cond = threading.Condition()
        # min_steps of each take() now waiting: a put wakes them only once
        # the smallest is met, not for every batch.
        self._wants: list[int] = []

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._batches)

    def full(self) -> bool:
        """Whether the network side should stop reading until the next take."""
        with self._cond:
            return self._full_locked()

    def _full_locked(self) -> bool:
        return self._steps >= self.max_steps or self._bytes >= self.max_bytes

    def _must_wait_locked(self, min_steps: int) -> bool:
        """Whether a take of ``min_steps`` waits on: too few steps, open, and room for more to come in."""
        return self._steps < min_steps and not self._markers and not self._closed and not self._full_locked()

    def put(self, batch: Batch) -> bool:
        """Add a batch; never blocks. Returns whether the inbox is now full.

        A waiting :meth:`take` is woken only once the steps held reach what
        it waits for, or the inbox is full, not by every batch.
        """
        with self._cond:
            self._batches.append(batch)
            if batch.marker:
                self._markers += 1
            return self._grew_locked(batch.steps, batch.nbytes)

    def put_back(self, batches: list[Batch]) -> bool:
        """Return batches RLlib never got to the front, oldest first; like :meth:`put` otherwise."""
        with self._cond:
            self._batches.extendleft(reversed(batches))
            return self._grew_locked(sum(batch.steps for batch in batches), sum(batch.nbytes for batch in batches))

    def _grew_locked(self, steps: int, nbytes: int) -> bool:
        """Count what was just added; wake a take() it satisfies; return whether the inbox is full."""
        self._steps += steps
        self._bytes += nbytes
        full = self._full_locked()
        self._was_full = self._was_full or full
        if self._wants and (full or self._markers or self._steps >= min(self._wants)):
            self._cond.notify_all()
        return full

    def take(self, min_steps: int, timeout: float) -> list[Batch]:
        """Wait until ``min_steps`` are held, the inbox is full, or ``timeout`` passes; take at least that many.

        Takes whole batches, oldest first, until their steps reach
        ``min_steps``; what is left waits for the next call. A full inbox
        ends the wait at once: nothing more comes in until something is
        taken (a share of large observations can be more than the inbox
        holds). On timeout it takes everything held (possibly nothing).
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            if self._must_wait_locked(min_steps):
                self._wants.append(min_steps)
                try:
                    while self._must_wait_locked(min_steps):
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                finally:
                    self._wants.remove(min_steps)
            taken: list[Batch] = []
            got = 0
            while self._batches and (got < min_steps or self._batches[0].marker):
                batch = self._batches.popleft()
                taken.append(batch)
                got += batch.steps
                self._steps -= batch.steps
                self._bytes -= batch.nbytes
                if batch.marker:
                    self._markers -= 1
            drained = self._was_full and not self._full_locked()
            if drained:
                self._was_full = False
        if drained and self._on_drained is not None:
            self._on_drained()
        return taken

    def drop_oldest(self, keep_steps: int) -> list[Batch]:
        """Take out the oldest batches until at most ``keep_steps`` are held (the newest batch always stays).

        For an off-policy runner whose learner takes less than its clients
        send: what it gets should be the freshest. Returns what was taken
        out, oldest first; the caller confirms and counts it.
        """
        dropped: list[Batch] = []
        with self._cond:
            while len(self._batches) > 1 and self._steps > keep_steps:
                batch = self._batches.popleft()
                dropped.append(batch)
                self._steps -= batch.steps
                self._bytes -= batch.nbytes
            drained = bool(dropped) and self._was_full and not self._full_locked()
            if drained:
                self._was_full = False
        if drained and self._on_drained is not None:
            self._on_drained()
        return dropped

    def close(self) -> None:
        """Make every waiting and later :meth:`take` return at once (shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
