"""Large byte buffers used again once nothing refers to them: fresh memory costs more than the copy into it.

Two places fill a large buffer for every large message: an actor copies
each array it puts (the caller may reuse its own at once) and keeps the
copy until the dataset confirms it, and a receiver reads each large frame
body into a buffer of its own, which the arrays it decodes are views of.
Fresh memory for each costs more than the copy: the kernel maps and zeroes
every 4 KB page on first touch (0.45 ms for a 480x640x3 image, against
0.04 ms to copy into memory used before; a dataset's process spent 0.2 ms
of its 0.55 ms a camera sample on it). So those buffers come from a
:class:`BufferPool`: one handed out is free again once no message, window,
decoded array or tensor holds it, which its reference count tells without
any bookkeeping in the paths that hold it.

Bounded: at most ``max_bytes`` of buffers are kept for reuse; past that a
buffer is handed out fresh and left to the allocator. No I/O, no clocks.
"""

from __future__ import annotations

import collections
import sys
import threading

import numpy as np

__all__ = ["BufferPool", "MIN_POOLED_BYTES"]

#: Smaller buffers come from the allocator (its own free lists serve them without page faults).
MIN_POOLED_BYTES = 256 * 1024

#: ``sys.getrefcount`` of a buffer held by the pool alone: its deque, the loop's name and the call's argument.
_ONLY_OURS = 3


class BufferPool:
    """Hands out uninitialized 1-D ``uint8`` arrays, reusing the ones nobody refers to any more.

    Safe from any thread.

    Args:
        max_bytes: the most bytes of buffers kept for reuse.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._kept: dict[int, collections.deque[np.ndarray]] = {}
        self._kept_bytes = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """A buffer of ``size`` bytes; its contents are whatever they were (the caller fills it)."""
        if size < MIN_POOLED_BYTES:
            return np.empty(size, np.uint8)
        with self._lock:
            kept = self._kept.setdefault(size, collections.deque())
            for _ in range(len(kept)):
                buffer = kept[0]
                kept.rotate(-1)
                if sys.getrefcount(buffer) == _ONLY_OURS:
                    return buffer
            buffer = np.empty(size, np.uint8)
            if self._kept_bytes + size <= self.max_bytes:
                kept.append(buffer)
                self._kept_bytes += size
            return buffer
