"""RLlink over WebSocket, sans I/O: one RLlink message per binary WebSocket message (PROTOCOL.md 16).

A browser can't open a TCP socket, so a runner's port (and the directory's)
also takes an HTTP/1.1 upgrade to WebSocket (RFC 6455). RFC 6455 itself is
the ``websockets`` package's sans-I/O protocol layer
(:class:`websockets.protocol.Protocol`); RLlink is still the
:class:`~.connection.Connection`'s. What lies between them is here, once for
both ends:

* :class:`FirstBytes`: tells the two apart on a shared port by the first
  bytes of the stream (an RLlink frame starts with 8 ASCII digits, an
  upgrade with ``GET``).
* :class:`MessageChannel`: carries one Connection over one WebSocket
  protocol object once the opening handshake is done. The payload of a
  binary message is exactly one frame's *body* (the msgpack or JSON bytes,
  without the 8-digit header: WebSocket frames it); the channel puts the
  header back in front and feeds the Connection, and cuts the Connection's
  frames into bodies to send. A text message, or any violation of RFC 6455
  (a message over the size cap, fragmented or not, included), is a
  :class:`~.errors.ProtocolError` the driver answers like any other: an
  RLlink ``ERROR``, then a WebSocket close with a code and the reason.

The opening handshake differs by side and lives with the drivers
(``server/network/websocket.py``, ``client/network/websocket.py``). No sockets, threads or
clocks here.
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

from websockets.exceptions import PayloadTooBig
from websockets.frames import CloseCode, Frame, Opcode
from websockets.protocol import CLIENT, OPEN, Protocol

from .codec import Buffer
from .connection import Connection
from .errors import ErrorCode, FrameError, FrameTooLarge, ProtocolError
from .framing import encode_frame, parse_header
from .limits import HEADER_BYTES

__all__ = ["UPGRADE_START", "FirstBytes", "MessageChannel", "split_frames", "close_code", "MAX_CLOSE_REASON_BYTES"]

#: How an HTTP/1.1 upgrade request starts (an RLlink frame starts with a digit).
UPGRADE_START = b"GET "
#: A close frame's reason: 125 bytes of payload less the 2-byte code.
MAX_CLOSE_REASON_BYTES = 123

#: The WebSocket close code that goes with an RLlink error code (1008, policy violation, for the rest).
_CLOSE_CODES = {
    ErrorCode.FRAME_TOO_LARGE.value: CloseCode.MESSAGE_TOO_BIG,
    ErrorCode.SHUTTING_DOWN.value: CloseCode.GOING_AWAY,
    ErrorCode.SERVER_ERROR.value: CloseCode.INTERNAL_ERROR,
}


def close_code(code: Union[ErrorCode, str]) -> int:
    """The WebSocket close code for an RLlink ``ERROR`` code."""
    return _CLOSE_CODES.get(str(code), CloseCode.POLICY_VIOLATION)


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame can carry (whole UTF-8 characters)."""
    raw = text.encode()
    if len(raw) <= MAX_CLOSE_REASON_BYTES:
        return text
    return raw[: MAX_CLOSE_REASON_BYTES - 3].decode(errors="ignore") + "..."


class FirstBytes:
    """Holds a stream's first bytes until they tell an RLlink stream from a WebSocket upgrade.

    At most ``len(UPGRADE_START) - 1`` bytes are held: the first byte that
    differs from ``GET `` decides for RLlink (the Connection then judges the
    bytes, and refuses what is not a frame as it always has).
    """

    __slots__ = ("_held", "websocket")

    def __init__(self) -> None:
        self._held = b""
        #: ``True``: an upgrade; ``False``: RLlink (or garbage); ``None``: not told yet.
        self.websocket: Optional[bool] = None

    def feed(self, data: Buffer) -> Optional[bytes]:
        """Take more of the stream; return every byte so far once it is told (``None`` until then)."""
        held = self._held + bytes(data)
        n = min(len(held), len(UPGRADE_START))
        if held[:n] != UPGRADE_START[:n]:
            self.websocket = False
        elif n == len(UPGRADE_START):
            self.websocket = True
        else:
            self._held = held
            return None
        self._held = b""
        return held


def split_frames(parts: Iterable[Buffer]) -> list[Buffer]:
    """The bodies of the whole frames in ``parts`` (a Connection's ``data_to_send()``), in order.

    A body that lies within one part is a view of it (no copy); one spread
    over several parts is joined.

    Raises:
        FrameError: ``parts`` end inside a frame (a Connection never queues half a frame).
    """
    bodies: list[Buffer] = []
    header = bytearray()
    body: list[memoryview] = []
    wanted = 0
    for part in parts:
        view = memoryview(part).cast("B")
        pos, end = 0, len(view)
        while pos < end:
            if wanted == 0:
                take = min(HEADER_BYTES - len(header), end - pos)
                header += view[pos : pos + take]
                pos += take
                if len(header) == HEADER_BYTES:
                    wanted = parse_header(header)
                    header.clear()
                continue
            take = min(wanted, end - pos)
            body.append(view[pos : pos + take])
            pos += take
            wanted -= take
            if wanted == 0:
                bodies.append(body[0] if len(body) == 1 else b"".join(body))
                body = []
    if header or body:
        raise FrameError("the frames to send end inside a frame")
    return bodies


class MessageChannel:
    """One :class:`~.connection.Connection` carried over one open WebSocket (see the module docstring).

    Args:
        ws: the ``websockets`` protocol object of this connection, either
            side; a subclass may be handed it before its opening handshake
            is done and take that handshake's events in :meth:`_handshake_event`.
        conn: the RLlink conversation.
        max_message_bytes: the largest message taken once the RLlink
            handshake is done (the Connection's ``max_frame_bytes``).
        handshake_max_bytes: the largest message taken before it (a
            stranger must not make us buffer ``max_message_bytes``).
    """

    def __init__(self, ws: Protocol, conn: Connection, *, max_message_bytes: int,
                 handshake_max_bytes: Optional[int] = None) -> None:
        self.ws = ws
        self.conn = conn
        self._max_message_bytes = max_message_bytes
        self._handshake_max_bytes = handshake_max_bytes or max_message_bytes
        #: The parts of a fragmented binary message received so far.
        self._fragments: list[bytes] = []
        self._fragment_bytes = 0
        #: What the WebSocket layer itself found wrong; the driver raises it after the Connection's events.
        self.error: Optional[ProtocolError] = None
        #: Whether the opening handshake let the connection open (a subclass that takes it sets this).
        self.opened = ws.state is OPEN
        #: Written before anything else the WebSocket layer has queued.
        self._out: list[bytes] = []
        #: WebSocket output held back behind our last words: the WebSocket layer failed the connection.
        self._held: list[bytes] = []
        self._failed = False
        self._set_cap()

    # -- introspection -----------------------------------------------------

    @property
    def in_message(self) -> bool:
        """Whether part of a message has arrived but not all of it (for the frame deadline)."""
        return bool(self.ws.reader.buffer) or bool(self._fragments)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the unfinished message held so far."""
        return len(self.ws.reader.buffer) + self._fragment_bytes

    @property
    def finished(self) -> bool:
        """The WebSocket layer is done: the driver closes the socket once it has written :meth:`data_to_send`."""
        return self.ws.eof_sent

    @property
    def close_text(self) -> str:
        """What the peer's close frame said, for a log line ('' if none came)."""
        close = self.ws.close_rcvd
        return "" if close is None else str(close)

    # -- bytes in ---------------------------------------------------------------

    def receive_data(self, data: Buffer) -> None:
        """Take bytes from the socket; whole binary messages go to the Connection."""
        if self.ws.eof_sent or self.ws.reader.eof:
            return  # the WebSocket layer is done: nothing more is read
        self._set_cap()  # the Connection may have finished its handshake since the last bytes
        # (Typed bytes | bytearray, but its reader only appends the data to a bytearray: a view of the
        # driver's read buffer saves copying every byte once more.)
        self.ws.receive_data(data)  # type: ignore[arg-type]
        self._take_events()

    def receive_eof(self) -> None:
        """The socket's peer closed its side (a message it left unfinished is a :class:`~.errors.FrameError`)."""
        unfinished = self.in_message and not self.ws.eof_sent
        self.ws.receive_eof()
        self._take_events()
        if unfinished and self.error is None:
            self.error = FrameError(f"the connection ended inside a WebSocket message ({self.buffered_bytes:,} "
                                    "bytes of it had come)")
        self.conn.receive_eof()

    def _take_events(self) -> None:
        ws = self.ws
        for event in ws.events_received():
            if not isinstance(event, Frame):
                self._handshake_event(event)
            elif self.error is not None or not self.opened:
                continue  # after a refusal (or a refused upgrade) nothing more is read
            elif event.opcode is Opcode.BINARY or event.opcode is Opcode.CONT and self._fragments:
                self._message_part(event)
            elif event.opcode is Opcode.TEXT or event.opcode is Opcode.CONT:
                self.error = FrameError("a text WebSocket message: RLlink messages travel as binary messages")
            elif event.opcode is Opcode.CLOSE:
                self.conn.receive_eof()
        if ws.parser_exc is not None and self.error is None and not isinstance(ws.parser_exc, EOFError):
            # (The end of the stream is the Connection's to report, and receive_eof's to word.)
            self.error = self._wording(ws.parser_exc)
        if self.error is not None and ws.state is not OPEN and not self._failed:
            # The WebSocket layer failed the connection (its close frame is queued): our ERROR goes first.
            self._failed = True
            # (b"" is the end of the stream, as websockets says it; it keeps _held non-empty even so.)
            self._held = ws.data_to_send() or [b""]
        self._set_cap()

    def _message_part(self, frame: Frame) -> None:
        if frame.fin and not self._fragments:
            self.conn.receive_data(encode_frame(frame.data))
            return
        self._fragments.append(frame.data)
        self._fragment_bytes += len(frame.data)
        if frame.fin:
            body, self._fragments, self._fragment_bytes = b"".join(self._fragments), [], 0
            self.conn.receive_data(encode_frame(body))

    def _handshake_event(self, event: object) -> None:
        """An HTTP request or response of the opening handshake (the subclass of each side takes it)."""
        raise FrameError(f"unexpected {type(event).__name__} on an open WebSocket")

    @staticmethod
    def _wording(exc: Exception) -> ProtocolError:
        if isinstance(exc, PayloadTooBig):
            return FrameTooLarge(f"WebSocket message too large: {exc}")
        return FrameError(f"invalid WebSocket framing: {exc}")

    def _set_cap(self) -> None:
        # The Connection refuses a larger frame anyway; this keeps the WebSocket layer from buffering it first.
        cap = self._handshake_max_bytes if self.conn.handshaking else self._max_message_bytes
        self.ws.max_message_size = cap

    # -- bytes out --------------------------------------------------------------

    def close(self, code: Union[ErrorCode, str], reason: str) -> None:
        """After the Connection's ``ERROR``: close the WebSocket with the matching code and ``reason``."""
        self._pump()
        if self.ws.state is OPEN:
            self.ws.send_close(close_code(code), close_reason(reason))

    def data_to_send(self) -> list[bytes]:
        """What to write now: the Connection's frames as binary messages, then the WebSocket layer's own.

        An empty item is the end of the stream (``SEND_EOF``): dropped here;
        :attr:`finished` tells the driver to close the socket.
        """
        self._pump()
        out, self._out = self._out, []
        out += self._held
        self._held = []
        out += self.ws.data_to_send()
        return [chunk for chunk in out if chunk]

    def _pump(self) -> None:
        """Move the Connection's queued frames into the WebSocket (or ahead of a close already queued)."""
        parts = self.conn.data_to_send()
        if not parts:
            return
        ws = self.ws
        if ws.state is OPEN:
            for body in split_frames(parts):
                ws.send_binary(body)
        elif self._held:
            # The WebSocket layer failed the connection; its close frame waits in _held: the ERROR goes first.
            mask = ws.side is CLIENT
            self._out += [Frame(Opcode.BINARY, bytes(body)).serialize(mask=mask, extensions=ws.extensions)
                          for body in split_frames(parts)]
        # Otherwise the WebSocket is closed or never opened: nobody reads what is left.
