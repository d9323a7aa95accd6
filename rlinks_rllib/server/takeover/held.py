"""When a message whose parts are held back (``takeover_terminates``) may be confirmed: once all of it is handed on.

The runner holds the last part of an open episode's chunk back for up to
``HOLD_S`` (takeover_segments.py) and queues the rest of the message at
once. A ``sample()`` that takes the rest used to confirm the message
(``ACK``), so the client forgot it while the held part still lived only in
the runner: a runner that died within the hold lost it. Now the message is
owed as many hand-overs as it has pieces in flight (its own batch and each
part held from it, which goes on with a later message's batch or a batch of
its own), and its ``ACK`` goes out with the last of them.

Pure bookkeeping on the listener's loop thread: no I/O, no clock.
"""

from __future__ import annotations

from typing import Hashable

__all__ = ["HeldConfirmations"]


class HeldConfirmations:
    """Messages ``(client, seq)`` whose confirmation waits for pieces not yet handed to RLlib.

    Bounded by the parts held back (each entry waits for at least one, and
    the segmenter bounds those); an entry goes once its last piece is handed.
    """

    def __init__(self) -> None:
        self._owed: dict[tuple[Hashable, int], int] = {}

    def __len__(self) -> int:
        return len(self._owed)

    def owe(self, client: Hashable, seq: int, pieces: int) -> None:
        """Message ``seq`` of ``client`` is confirmed once ``pieces`` hand-overs of it are done."""
        if pieces > 1:
            self._owed[(client, seq)] = pieces

    def handed(self, client: Hashable, seq: int) -> bool:
        """A piece of message ``seq`` was handed to RLlib; whether the message may be confirmed now."""
        key = (client, seq)
        left = self._owed.get(key)
        if left is None:
            return True
        if left <= 1:
            del self._owed[key]
            return True
        self._owed[key] = left - 1
        return False

    def owes(self, client: Hashable, seq: int) -> bool:
        """Whether message ``seq`` of ``client`` still waits for a piece."""
        return (client, seq) in self._owed
