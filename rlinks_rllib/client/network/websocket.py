"""The client's side of RLlink over WebSocket (``ws://``, ``wss://``; PROTOCOL.md 16).

A :class:`ClientWebSocket` is what a :class:`~.transport.Transport` puts
between its socket and the Connection when its address is a ``ws://`` or
``wss://`` one: the upgrade request and its answer, then each RLlink frame
the Connection queues as one binary message, and each message that arrives
as a frame for the Connection (through
:class:`~rlinks_rllib.protocol.websocket.MessageChannel`). RFC 6455 itself is
``websockets``' :class:`~websockets.client.ClientProtocol`; the socket,
TLS and every deadline stay the Transport's.

A refused upgrade (HTTP 400 for a request the server can't read; HTTP 403
from an older rlinks for a page origin it does not allow) is
:class:`~rlinks_rllib.client.errors.ConnectFailed`, not retried: the next attempt would be
refused the same way. So is a WebSocket the server closes with 1008
(policy violation) before it has sent any RLlink message: how a runner or
a dataset refuses a page's origin now (upgraded, then closed with the
reason, which a browser can read where it hides an HTTP answer). A runner
that is full (``max_clients``) refuses a connection before it reads a byte,
so its answer to the upgrade is an RLlink ``ERROR``: that is
:class:`~rlinks_rllib.client.errors.ServerError`, as over TCP.
"""

from __future__ import annotations

from typing import Iterable, Optional

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidStatus
from websockets.frames import Close, CloseCode, Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.uri import parse_uri

from ...protocol.codec import Buffer
from ...protocol.connection import MAX_PEER_CODE, MAX_PEER_TEXT, Connection
from ...protocol.errors import ProtocolError
from ...protocol.framing import FrameDecoder
from ...protocol.limits import HEADER_BYTES, MAX_BODY_BYTES
from ...protocol.websocket import MessageChannel, split_frames
from ..errors import ConnectFailed, ConnectionLost, ProtocolViolation, ServerError
from .address import Address

__all__ = ["ClientWebSocket"]

#: Bytes of a refusal's body quoted in the error.
_QUOTED_BODY_CHARS = 300
#: The first bytes of the server's answer kept, to read an RLlink ERROR sent in place of HTTP.
_KEPT_ANSWER_BYTES = 4096


class ClientWebSocket:
    """One client connection's WebSocket layer: the upgrade, then messages (see the module docstring).

    Args:
        address: a ``ws://`` or ``wss://`` address (the ``Host`` header and request path ``/``).
        origin: the ``Origin`` header to send; ``None`` (a program, not a page): none.
    """

    def __init__(self, address: Address, *, origin: Optional[str] = None) -> None:
        host = f"[{address.host}]" if ":" in address.host else address.host
        self.address = address
        # The WebSocket layer takes any message RLlink's header could describe; the Connection applies
        # its own max_frame_bytes to the frame the message becomes.
        self.ws = ClientProtocol(parse_uri(f"{address.scheme}://{host}:{address.port}/"), origin=origin,
                                 max_size=MAX_BODY_BYTES)
        self.ws.send_request(self.ws.connect())
        self._response: Optional[Response] = None
        self._channel: Optional[MessageChannel] = None
        self._answer_start = b""

    # -- the upgrade ----------------------------------------------------------------

    def upgrade_request(self) -> list[bytes]:
        """The HTTP request to write first."""
        return self.ws.data_to_send()

    @property
    def open(self) -> bool:
        """The server answered the upgrade with 101: messages may flow."""
        return self._response is not None

    def receive_upgrade(self, data: bytes) -> None:
        """Take bytes of the server's answer to the upgrade (``b""``: the server closed).

        Raises:
            ConnectFailed: the server refused the upgrade (or upgraded and closed
                at once with 1008), or did not answer with HTTP.
            ServerError: the server answered with an RLlink ``ERROR`` (it was full).
            ProtocolViolation: the server sent a message before we spoke.
        """
        ws = self.ws
        if len(self._answer_start) < _KEPT_ANSWER_BYTES:
            self._answer_start += data[: _KEPT_ANSWER_BYTES - len(self._answer_start)]
        if self._answer_start[:HEADER_BYTES].isdigit():
            # An RLlink frame, not HTTP (a full runner's ERROR): read it as one once it is whole.
            refusal = _rlink_error(self._answer_start)
            if refusal is not None:
                raise refusal
        if data:
            ws.receive_data(data)
        else:
            ws.receive_eof()
        for event in ws.events_received():
            if isinstance(event, Response):
                self._response = event
            elif isinstance(event, Frame) and event.opcode is Opcode.CLOSE and ws.close_rcvd is not None:
                raise self._closed_at_once(ws.close_rcvd)  # with its 101: nothing of RLlink came
            else:
                raise ProtocolViolation(f"{self.address} sent a WebSocket message before the client spoke")
        exc = ws.handshake_exc
        if exc is not None:
            if isinstance(exc, InvalidStatus):
                response = exc.response
                body = response.body.decode(errors="replace").strip()[:_QUOTED_BODY_CHARS]
                raise ConnectFailed(f"{self.address} refused the WebSocket upgrade: HTTP {response.status_code} "
                                    f"{response.reason_phrase}{': ' + body if body else ''}")
            refusal = _rlink_error(self._answer_start)
            if refusal is not None:
                raise refusal
            raise ConnectFailed(f"{self.address} did not accept a WebSocket upgrade ({exc}); is it an rlinks "
                                "runner or directory? (RLlib's own server speaks plain TCP only: tcp://)")
        if not data and self._response is None:
            raise ConnectFailed(f"{self.address} closed the connection before answering the WebSocket upgrade")

    # -- messages ---------------------------------------------------------------------

    def frames(self, parts: Iterable[Buffer]) -> list[bytes]:
        """The bytes to write for the RLlink frames in ``parts``: one binary message each."""
        ws = self.ws
        for body in split_frames(parts):
            ws.send_binary(body)
        return ws.data_to_send()

    def receive(self, conn: Connection, data: bytes) -> list[bytes]:
        """Feed ``data`` to ``conn`` as whole frames; return what the WebSocket layer answers (pongs, a close).

        Raises:
            ProtocolViolation: the server broke RFC 6455 or sent a text message.
            ConnectFailed: the server closed with 1008 before sending any RLlink message (it refused us).
        """
        channel = self._channel_for(conn)
        channel.receive_data(data)
        if channel.error is not None:
            raise ProtocolViolation(f"{self.address} sent invalid WebSocket data: {channel.error}",
                                    code=channel.error.code)
        close = self.ws.close_rcvd
        if close is not None and close.code == CloseCode.POLICY_VIOLATION and conn.frames_received == 0:
            raise self._closed_at_once(close)
        return [chunk for chunk in self.ws.data_to_send() if chunk]

    def receive_eof(self, conn: Connection) -> None:
        """The server closed the socket."""
        self._channel_for(conn).receive_eof()

    def close_frame(self) -> list[bytes]:
        """The bytes of a normal close (1000), ``[]`` if a close was already sent or the upgrade never finished."""
        if self.ws.state is not State.OPEN:
            return []
        self.ws.send_close(CloseCode.NORMAL_CLOSURE)
        return self.ws.data_to_send()

    @property
    def close_text(self) -> str:
        """The server's close code and reason, if it sent a close frame ('' otherwise)."""
        return self._channel.close_text if self._channel is not None else ""

    def _closed_at_once(self, close: Close) -> ConnectionError:
        """The error of a server that closed the WebSocket before sending any RLlink message.

        With 1008 (policy violation) it refused us as we are (a page origin it does not allow):
        :class:`~rlinks_rllib.client.errors.ConnectFailed`, never retried. Another code:
        :class:`~rlinks_rllib.client.errors.ConnectionLost`.
        """
        said = f"(WebSocket close {close.code}{': ' + close.reason if close.reason else ''})"
        if close.code == CloseCode.POLICY_VIOLATION:
            return ConnectFailed(f"{self.address} refused the WebSocket connection {said}")
        return ConnectionLost(f"{self.address} closed the WebSocket before answering {said}")

    def _channel_for(self, conn: Connection) -> MessageChannel:
        if self._channel is None or self._channel.conn is not conn:
            self._channel = MessageChannel(self.ws, conn, max_message_bytes=MAX_BODY_BYTES)
        return self._channel


def _rlink_error(answer: bytes) -> Optional[ServerError]:
    """The RLlink ``ERROR`` a server sent in place of an HTTP answer, if that is what ``answer`` starts with."""
    try:
        messages = FrameDecoder(validate=False).feed(answer)
    except ProtocolError:
        return None
    for message in messages:
        if isinstance(message, dict) and message.get("type") == "ERROR":
            return ServerError(str(message.get("code"))[:MAX_PEER_CODE], str(message.get("message"))[:MAX_PEER_TEXT])
    return None
