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

#: Bodies at least this long, when the receiver may share them, are read so
#: that arrays of at least ``ZERO_COPY_MIN_BYTES`` are views of the body
#: rather than copies (see ``codec.decode_body``). Below it, copying is cheap
#: and msgpack's C unpacker is faster than the Python reader that can share.
#: The reader costs ~25 us a body (a few dozen objects); copying costs ~3 us
#: per 100 KB warm and several times that into fresh pages, so from about
#: half a MiB sharing wins, and a 480x640x3 camera sample (0.92 MB) shares.
#: A busy body (an episode batch of many small arrays) gives up after 64
#: objects and goes to C: no measurable cost (PERFORMANCE.md, samples).
ZERO_COPY_MIN_BODY_BYTES = 512 * 1024

#: Cap on a frame's body until the handshake (and authentication) is done.
#: A PING, an AUTH and their offers fit in a few hundred bytes; a stranger
#: must not make the receiver reserve ``max_frame_bytes`` before saying who
#: it is.
HANDSHAKE_MAX_FRAME_BYTES = 64 * 1024

#: Deepest nesting of the free-form values an extension offer may carry.
MAX_OFFER_DEPTH = 8
