"""msgpack's own C implementation, bound where msgpack-numpy can't reach it.

``msgpack_numpy.patch()``, which RLlib calls whenever it touches msgpack,
swaps ``msgpack.Packer``/``unpackb``/``Unpacker`` for wrappers that unpickle
object arrays. The codec and the column reader take msgpack's classes from
here, bound at import, so that patch can never reach them.
"""

from __future__ import annotations

import struct

try:
    from msgpack._cmsgpack import Packer, Unpacker, unpackb
except ImportError:  # pragma: no cover - msgpack built without its C extension
    from msgpack.fallback import Packer, Unpacker, unpackb

__all__ = ["Packer", "Unpacker", "unpackb", "bin_header"]


def bin_header(size: int) -> bytes:
    """The msgpack ``bin`` header of a ``size``-byte value."""
    if size < 1 << 8:
        return struct.pack(">BB", 0xC4, size)
    if size < 1 << 16:
        return struct.pack(">BH", 0xC5, size)
    return struct.pack(">BI", 0xC6, size)
