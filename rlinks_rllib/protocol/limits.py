"""Numbers the wire format fixes, and the defaults of the limits a receiver applies.

The wire-format numbers follow from RLlib's framing and can't change without
breaking compatibility. The defaults are what :class:`~.framing.FrameDecoder`
and the server use unless told otherwise; ``docs/PROTOCOL.md`` lists them.
"""

from __future__ import annotations

#: Length of the ASCII-decimal header in front of every frame body.
HEADER_BYTES = 8

#: The largest body an 8-digit header can describe.
MAX_BODY_BYTES = 10**HEADER_BYTES - 1

#: Default cap on one frame's body. A 16-image batch of 480x640x3 uint8
#: observations is ~15 MB; 64 MiB leaves room for that and for large weights.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024

#: Arrays whose data is at least this long are written to the frame without an
#: intermediate copy (see ``codec.encode_body``); smaller ones are packed in C.
ZERO_COPY_MIN_BYTES = 4096
