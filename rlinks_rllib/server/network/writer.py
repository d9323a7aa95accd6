"""Writing one session's frames without copying the weights that every session shares.

An asyncio transport (Python 3.11) copies into a ``bytearray`` of its own
whatever a ``write`` can't send at once. For a weight set sent to many
clients that is one copy of the set per client that is not reading this
very moment: 64 clients and a 50 MB set make 3.2 GB of copies. A
:class:`SharedWriter` hands the transport a large part a slice at a time,
the next slice only once the transport has drained below its low-water mark
(``resume_writing``), so each session holds views of the one shared set and
at most a slice of copies.

Small parts are joined into one write (headers, small messages), and
everything keeps its order: once a large part waits, what comes after it
waits behind it.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Iterable, Optional, Union

__all__ = ["SharedWriter"]

Buffer = Union[bytes, memoryview]

#: Parts smaller than this are joined into one write; larger ones are handed
#: over a slice at a time.
COALESCE_BYTES = 16 * 1024
#: What one slice of a large part hands the transport (it copies what the
#: socket does not take at once).
SLICE_BYTES = 256 * 1024
#: The transport's flow-control marks: high enough that the socket never runs
#: dry between two slices, low enough that a slow client holds little.
HIGH_WATER_BYTES = 512 * 1024
LOW_WATER_BYTES = 128 * 1024


class SharedWriter:
    """The output side of one transport: small parts joined, large ones paced (see the module docstring).

    Args:
        transport: the session's transport; its protocol calls :meth:`pause`
            and :meth:`resume` from ``pause_writing``/``resume_writing``.
    """

    __slots__ = ("_transport", "_waiting", "_waiting_bytes", "_paused")

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        transport.set_write_buffer_limits(high=HIGH_WATER_BYTES, low=LOW_WATER_BYTES)
        #: Parts not yet handed to the transport; ``None`` while there are none
        #: (an empty deque still holds a block: ~0.8 KB for each of 10,000 idle sessions).
        self._waiting: Optional[collections.deque[memoryview]] = None
        self._waiting_bytes = 0
        self._paused = False

    @property
    def queued(self) -> int:
        """Bytes not yet handed to the socket: the transport's buffer and the parts waiting here."""
        return self._transport.get_write_buffer_size() + self._waiting_bytes

    def write(self, parts: Iterable[Buffer]) -> int:
        """Queue ``parts`` in order; return their size in bytes."""
        written = 0
        small: list[Buffer] = []
        for part in parts:
            size = len(part) if isinstance(part, bytes) else part.nbytes
            written += size
            if size < COALESCE_BYTES:
                small.append(part)
                continue
            if small:
                self._add(b"".join(small))
                small = []
            self._add(part)
        if small:
            self._add(small[0] if len(small) == 1 else b"".join(small))
        self._pump()
        return written

    def pause(self) -> None:
        """The transport's buffer is above its high-water mark: hold the rest."""
        self._paused = True

    def resume(self) -> None:
        """The transport drained below its low-water mark: hand it the next slice."""
        self._paused = False
        self._pump()

    def flush_for_close(self) -> None:
        """Hand the transport everything still waiting (it copies), so closing it sends it all first."""
        while self._waiting:
            self._transport.write(self._waiting.popleft())
        self._waiting, self._waiting_bytes = None, 0

    def _add(self, part: Buffer) -> None:
        view = memoryview(part)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if self._waiting is None:
            self._waiting = collections.deque()
        self._waiting.append(view)
        self._waiting_bytes += view.nbytes

    def _pump(self) -> None:
        transport, waiting = self._transport, self._waiting
        if waiting is None:
            return
        while waiting and not self._paused and not transport.is_closing():
            part = waiting[0]
            if part.nbytes > SLICE_BYTES:
                waiting[0] = part[SLICE_BYTES:]
                part = part[:SLICE_BYTES]
            else:
                waiting.popleft()
            self._waiting_bytes -= part.nbytes
            transport.write(part)  # may call pause() before it returns
        if not waiting:
            self._waiting = None
