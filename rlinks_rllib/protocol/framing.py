"""RLlink framing: 8 ASCII decimal digits giving the body length, then the body.

:func:`encode_message` turns a message into one whole frame.
:class:`FrameDecoder` turns a byte stream, split anywhere, back into messages.
Neither does any I/O; the server and client wrap them around their sockets.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from .codec import Buffer, decode_body, encode_body
from .errors import FrameError, FrameTooLarge, ProtocolError
from .limits import DEFAULT_MAX_FRAME_BYTES, HEADER_BYTES, MAX_BODY_BYTES
from .messages import MessageType, validate_message

__all__ = [
    "encode_message",
    "encode_message_parts",
    "frame_parts",
    "encode_frame",
    "encode_body_once",
    "encode_set_state_parts",
    "parse_header",
    "FrameDecoder",
]


def _header(body_len: int) -> bytes:
    if body_len > MAX_BODY_BYTES:
        raise FrameTooLarge(
            f"message body is {body_len:,} bytes; RLlink's 8-digit header allows at most "
            f"{MAX_BODY_BYTES:,}. Send fewer episodes or smaller observations per message."
        )
    return b"%08d" % body_len


def encode_message_parts(message: dict) -> list[Buffer]:
    """One frame as a list of buffers (header first), for ``socket.sendmsg``.

    Large arrays are views of the caller's memory: the caller must not change
    them until the buffers are sent.

    Raises:
        InvalidMessage, UnsupportedMessage: ``message`` is not a valid message.
        FrameTooLarge: the body would need more than 8 digits of length.
        TypeError, UnsafePayload: a value can't go on the wire.
    """
    validate_message(message)
    return frame_parts(encode_body(message))


def frame_parts(body: list[Buffer]) -> list[Buffer]:
    """A body packed elsewhere (a list of buffers) as one frame: the header, then the body's buffers.

    Raises:
        FrameTooLarge: the body would need more than 8 digits of length.
    """
    size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in body)
    return [_header(size), *body]


def encode_message(message: dict) -> bytes:
    """One whole frame (header and body) for ``message``.

    Raises:
        InvalidMessage, UnsupportedMessage: ``message`` is not a valid message.
        FrameTooLarge: the body would need more than 8 digits of length.
        TypeError, UnsafePayload: a value can't go on the wire.
    """
    return b"".join(encode_message_parts(message))


def encode_frame(body: Buffer) -> bytes:
    """Put the length header in front of an already packed body.

    Raises:
        FrameTooLarge: the body would need more than 8 digits of length.
    """
    return _header(len(body)) + bytes(body)


def encode_body_once(value: Any) -> bytes:
    """Pack a value once, to splice into many frames with :func:`encode_set_state_parts`.

    Raises:
        TypeError, UnsafePayload: a value can't go on the wire.
    """
    return b"".join(encode_body(value))


def encode_set_state_parts(state_body: bytes, **fields: Any) -> list[Buffer]:
    """A ``SET_STATE`` frame around an already packed ``state`` (see :func:`encode_body_once`).

    Lets a server pack a weight set once per update and send the very same
    bytes to every client, each with its own small ``fields`` (``want_steps``).
    The frame is byte for byte what :func:`encode_message` would make of
    ``{"type": "SET_STATE", **fields, "state": state}``.

    Raises:
        FrameTooLarge: the body would need more than 8 digits of length.
    """
    head = {"type": MessageType.SET_STATE.value, **fields}
    validate_message({**head, "state": {}})
    prefix = b"".join(
        [_map_header(len(head) + 1)]
        + [b"".join(encode_body(k)) + b"".join(encode_body(v)) for k, v in head.items()]
        + encode_body("state")
    )
    return [_header(len(prefix) + len(state_body)), prefix, state_body]


def _map_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x80 | count])
    return b"\xde" + count.to_bytes(2, "big")


def parse_header(header: Buffer) -> int:
    """The body length an 8-byte header declares.

    Stricter than RLlib's ``int()``: exactly eight bytes ``0``-``9``, no
    spaces, signs or underscores.

    Raises:
        FrameError: the header is not 8 ASCII digits.
    """
    raw = bytes(header)
    if len(raw) != HEADER_BYTES or not raw.isdigit():
        raise FrameError(f"frame header must be {HEADER_BYTES} ASCII digits, got {raw[:HEADER_BYTES]!r}")
    return int(raw)


class FrameDecoder:
    """Incremental decoder for a stream of RLlink frames.

    Feed it bytes as they arrive; it returns each complete message once, in
    order. Total work is linear in the bytes fed, however they are split: a
    body is collected in one buffer allocated (not zero-filled) from its
    header, and when a fed chunk holds a whole frame it is decoded straight
    from the chunk.

    Large arrays of a large frame (see :func:`~.codec.decode_body`'s
    ``share``) are read-only views into the frame rather than copies, where
    that is safe: when the body sits in the decoder's own buffer (which it
    never reuses), or in an immutable ``bytes`` object that was fed. A frame
    decoded straight from a fed ``bytearray`` or ``memoryview`` is copied out
    of it, since the caller may reuse that buffer.

    A frame whose header declares more than ``max_frame_bytes`` is refused as
    soon as its header is read, before any of its body is buffered. After any
    :class:`ProtocolError` the decoder is spent: the stream is out of sync and
    the connection must be closed; every later call raises the same error.

    Args:
        max_frame_bytes: largest body accepted (at most 99,999,999).
        validate: check each message with :func:`validate_message`; switch off
            only to look at raw messages (tests, tools).
        columns: decode ``EPISODES`` bodies a column at a time (see
            :func:`~.codec.decode_body`); for a server, which checks the
            episodes with :func:`~.episodes.check_episode_state` next.
        alloc: where a large body goes: an uninitialized 1-D ``uint8`` array
            of the size asked, never handed out again while anything refers
            to it (``protocol.buffers.BufferPool.take``); ``None``: a new one.
    """

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *, validate: bool = True, columns: bool = False,
        alloc: Optional[Callable[[int], np.ndarray]] = None,
    ) -> None:
        if not 0 < max_frame_bytes <= MAX_BODY_BYTES:
            raise ValueError(f"max_frame_bytes must be in 1..{MAX_BODY_BYTES}, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._validate = validate
        self._columns = columns
        self._alloc = alloc
        self._header = bytearray()
        # The body being collected: a writable view of an uninitialized
        # uint8 array (every byte is written before the body is decoded).
        self._body: memoryview | None = None
        self._filled = 0
        self._error: ProtocolError | None = None
        #: Frames decoded so far.
        self.frames = 0
        #: Bytes fed so far.
        self.bytes_in = 0
        #: Size of the last frame decoded, header included (0 before the first).
        self.last_frame_bytes = 0
        #: Sizes of the frames (header included) whose messages the latest
        #: :meth:`feed` or :meth:`advance` returned, in the same order.
        self.last_frame_sizes: tuple[int, ...] = ()
        #: (message, frame size) pairs the :meth:`feed` that raised decoded
        #: before its error, in order.
        self.before_error: list[tuple[dict[str, Any], int]] = []

    @property
    def in_frame(self) -> bool:
        """Whether part of a frame has arrived but not all of it."""
        return bool(self._header) or self._body is not None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the unfinished frame held so far."""
        return len(self._header) + self._filled

    @property
    def expected_bytes(self) -> int | None:
        """Body length of the unfinished frame, once its header is in."""
        return None if self._body is None else len(self._body)

    def feed(self, data: Buffer) -> list[dict[str, Any]]:
        """Take more bytes of the stream; return the messages they complete.

        Raises:
            FrameError: a header is not 8 ASCII digits.
            FrameTooLarge: a header declares more than ``max_frame_bytes``.
            DecodeError, UnsafePayload: a body is not a safe msgpack map.
            InvalidMessage, UnsupportedMessage: a message fails validation.
        """
        if self._error is not None:
            raise self._error
        if type(data) is bytes:
            view, immutable = memoryview(data), True
        else:
            view = memoryview(data).cast("B")
            immutable = type(view.obj) is bytes
        self.bytes_in += len(view)
        messages: list[dict[str, Any]] = []
        sizes: list[int] = []
        self.last_frame_sizes = ()
        try:
            pos, end = 0, len(view)
            while pos < end:
                if self._body is not None:
                    take = min(len(self._body) - self._filled, end - pos)
                    self._body[self._filled : self._filled + take] = view[pos : pos + take]
                    self._filled += take
                    pos += take
                    if self._filled == len(self._body):
                        messages.append(self._decode_own_body())
                        sizes.append(self.last_frame_bytes)
                    continue
                take = min(HEADER_BYTES - len(self._header), end - pos)
                self._header += view[pos : pos + take]
                pos += take
                if len(self._header) < HEADER_BYTES:
                    continue
                size = self._start_body()
                if end - pos >= size:
                    # The whole body is in this chunk: decode it in place.
                    messages.append(self._decode(view[pos : pos + size], share=immutable))
                    sizes.append(self.last_frame_bytes)
                    pos += size
                else:
                    self._body = memoryview(np.empty(size, np.uint8) if self._alloc is None else self._alloc(size))
        except ProtocolError as exc:
            self._error = exc
            # What this call decoded before the error, for a receiver that
            # delivers a stream's valid messages before giving up on it.
            self.before_error = list(zip(messages, sizes))
            raise
        self.last_frame_sizes = tuple(sizes)
        return messages

    def next_read_buffer(self) -> memoryview | None:
        """The unfilled part of the current body, for ``socket.recv_into``.

        Lets an I/O layer read a large body straight into its final buffer.
        Call :meth:`advance` with the number of bytes written. ``None`` when no
        body is in progress (read a small chunk and :meth:`feed` it instead).
        """
        if self._body is None or self._error is not None:
            return None
        return self._body[self._filled :]

    def advance(self, nbytes: int) -> list[dict[str, Any]]:
        """Account for ``nbytes`` written into :meth:`next_read_buffer`.

        Raises:
            The same errors as :meth:`feed`.
        """
        if self._body is None or not 0 <= nbytes <= len(self._body) - self._filled:
            raise ValueError("advance() without a matching next_read_buffer()")
        self._filled += nbytes
        self.bytes_in += nbytes
        self.last_frame_sizes = ()
        if self._filled < len(self._body):
            return []
        try:
            message = self._decode_own_body()
        except ProtocolError as exc:
            self._error = exc
            raise
        self.last_frame_sizes = (self.last_frame_bytes,)
        return [message]

    def eof(self) -> None:
        """The peer closed the stream; complain if it left a frame unfinished.

        Raises:
            FrameError: the stream ended mid-frame.
        """
        if self.in_frame:
            if self._body is None:
                got, expected = len(self._header), "?"
            else:
                got, expected = HEADER_BYTES + self._filled, f"{HEADER_BYTES + len(self._body):,}"
            raise FrameError(f"connection closed mid-frame after {got:,} of {expected} bytes")

    def _start_body(self) -> int:
        size = parse_header(self._header)
        self._header.clear()
        if size > self.max_frame_bytes:
            raise FrameTooLarge(
                f"frame of {size:,} bytes exceeds the limit of {self.max_frame_bytes:,} bytes"
            )
        if size == 0:
            raise FrameError("frame with an empty body")
        return size

    def _decode_own_body(self) -> dict[str, Any]:
        # The buffer is handed over whole and never written again, so arrays
        # may be views of it (read-only ones: the view given out is).
        body, self._body, self._filled = self._body.toreadonly(), None, 0
        return self._decode(body, share=True)

    def _decode(self, body: Buffer, *, share: bool) -> dict[str, Any]:
        size = HEADER_BYTES + len(body)
        message = decode_body(body, share=share, columns=self._columns)
        self.frames += 1
        self.last_frame_bytes = size
        if self._validate:
            return validate_message(message)
        return message
