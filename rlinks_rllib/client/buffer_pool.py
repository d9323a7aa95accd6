"""Buffers for the copies of large arrays an actor sends, used again once nothing refers to them.

An actor copies each array it puts (the caller may reuse its own at once)
and keeps the copy until the dataset confirms it. Fresh memory for each
copy costs more than the copy: the kernel maps and zeroes every 4 KB page on
first touch (0.45 ms for a 480x640x3 image, against 0.04 ms to copy into
memory used before). So the copies come from here: a buffer handed out is
free again once no message, window or resend holds it, which its reference
count tells without any bookkeeping in the paths that hold it.

Bounded: at most ``max_bytes`` of buffers are kept for reuse; past that a
buffer is handed out fresh and left to the allocator.
"""

from __future__ import annotations

import collections
import sys
import threading

__all__ = ["BufferPool", "MIN_POOLED_BYTES"]

#: Smaller copies come from the allocator (its own free lists serve them without page faults).
MIN_POOLED_BYTES = 256 * 1024

#: ``sys.getrefcount`` of a buffer held by the pool's list alone: the list, the loop's name and the call's argument.
_ONLY_OURS = 3


class BufferPool:
    """Hands out ``bytearray`` buffers, reusing the ones nobody refers to any more.

    Args:
        max_bytes: the most bytes of buffers kept for reuse.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._kept: dict[int, collections.deque[bytearray]] = {}
        self._kept_bytes = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bytearray:
        """A buffer of ``size`` bytes (its contents are left as they were: the caller fills it)."""
        if size < MIN_POOLED_BYTES:
            return bytearray(size)
        with self._lock:
            kept = self._kept.setdefault(size, collections.deque())
            for _ in range(len(kept)):
                buffer = kept[0]
                kept.rotate(-1)
                if sys.getrefcount(buffer) == _ONLY_OURS:
                    return buffer
            buffer = bytearray(size)
            if self._kept_bytes + size <= self.max_bytes:
                kept.append(buffer)
                self._kept_bytes += size
            return buffer
