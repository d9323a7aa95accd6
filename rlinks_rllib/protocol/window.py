"""The client's window of batches sent and not yet acknowledged (the ``ack`` extension).

With ``ack`` agreed, every batch of episodes carries a ``seq`` (1, 2, ... per
``client_id``) and the server answers ``ACK {seq}`` once RLlib has taken it.
The window numbers the batches, keeps the unconfirmed ones (with their
encoded frame, so they can be sent again after a reconnect) and checks every
``ACK`` against what was sent. It outlives any one connection: a client that
reconnects hands the same window to its next :class:`~.connection.Connection`,
which resends what is still pending.

Pure bookkeeping: no sockets, clocks or threads.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .codec import Buffer
from .errors import ErrorCode, UnexpectedMessage
from .messages import MessageType

__all__ = ["Batch", "AckWindow", "seq_range"]


@dataclass(eq=False)
class Batch:
    """One ``EPISODES`` or ``EPISODES_AND_GET_STATE`` message as sent.

    Attributes:
        seq: its number; ``None`` when the peer does not acknowledge batches.
        kind: which of the two message types it is.
        parts: the encoded frame (header first), kept while it may be resent.
        steps: env steps in its episodes (samples, in a ``SAMPLES`` message).
        nbytes: what its frame holds, counted against the window's ``max_bytes``.
        sent_on: which connection (the sender's count) last wrote it in full; 0: none yet.
        sends: how many times it was written in full.
        acked: whether the peer confirmed it.
    """

    seq: Optional[int]
    kind: MessageType
    parts: list[Buffer]
    steps: int
    nbytes: int = 0
    sent_on: int = 0
    sends: int = 0
    acked: bool = False


@dataclass
class AckWindow:
    """Batches sent and not yet acknowledged, oldest first.

    Args:
        max_unacked: how many batches may await an ``ACK`` at once; the
            sender waits for ACKs while :attr:`full`.
        max_steps: how many steps (samples) they may hold; ``None``: no bound
            but ``max_unacked``.
        max_bytes: how many bytes their frames may hold; ``None``: no bound.
        steps_from_peer: a server that names a ``samples_window`` in its
            handshake sets ``max_steps`` (:meth:`follow`): a consumer that
            confirms a sample only once its training loop has the batch
            holding it needs that many in flight from a lone client.
    """

    max_unacked: int = 16
    max_steps: Optional[int] = None
    max_bytes: Optional[int] = None
    steps_from_peer: bool = False
    #: The seq the next numbered batch gets.
    next_seq: int = 1
    pending: collections.deque[Batch] = field(default_factory=collections.deque)
    #: Steps and bytes of the pending batches.
    pending_steps: int = 0
    pending_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("max_unacked", "max_steps", "max_bytes"):
            value = getattr(self, name)
            if (value is not None or name == "max_unacked") and (type(value) is not int or value < 1):
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")

    @property
    def full(self) -> bool:
        """Whether as many batches, steps or bytes as allowed await an ``ACK``."""
        return (len(self.pending) >= self.max_unacked
                or (self.max_steps is not None and self.pending_steps >= self.max_steps)
                or (self.max_bytes is not None and self.pending_bytes >= self.max_bytes))

    def follow(self, peer_steps: int) -> None:
        """The peer named the steps it may need in flight: take them as ``max_steps`` (with ``steps_from_peer``).

        A batch holds at least one step, so ``max_unacked`` is raised to
        match: the step bound is the one that counts.
        """
        if self.steps_from_peer:
            self.max_steps = peer_steps
            self.max_unacked = max(self.max_unacked, peer_steps)

    def take_seq(self) -> int:
        """Number the next batch."""
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return seq

    def add(self, batch: Batch) -> None:
        """Keep a numbered batch until its ``ACK``."""
        self.pending.append(batch)
        self.pending_steps += batch.steps
        self.pending_bytes += batch.nbytes

    def acknowledge(self, seq: int) -> Optional[Batch]:
        """The peer confirmed ``seq``: the batch it confirms, or ``None`` if it was confirmed before.

        A batch resent after a reconnect may be confirmed twice; that is not an error.

        Raises:
            UnexpectedMessage: ``seq`` was never sent (code ``unexpected_message``).
        """
        for i, batch in enumerate(self.pending):
            if batch.seq == seq:
                del self.pending[i]
                self.pending_steps -= batch.steps
                self.pending_bytes -= batch.nbytes
                batch.acked = True
                return batch
        if 0 < seq < self.next_seq:
            return None
        raise UnexpectedMessage(
            f"acknowledged seq {seq}, which was never sent (last sent: {self.next_seq - 1})",
            code=ErrorCode.UNEXPECTED_MESSAGE,
        )

    def clear(self) -> list[Batch]:
        """Give up every pending batch; return them (for a warning)."""
        dropped = list(self.pending)
        self.pending.clear()
        self.pending_steps = self.pending_bytes = 0
        return dropped


def seq_range(batches: Iterable[Batch]) -> str:
    """``"3"``, ``"3..7"`` or ``"-"``: the seqs of ``batches``, for log lines."""
    seqs = [b.seq for b in batches if b.seq is not None]
    if not seqs:
        return "-"
    return str(seqs[0]) if len(seqs) == 1 else f"{seqs[0]}..{seqs[-1]}"
