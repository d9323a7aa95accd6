"""The server's side of RLlink over WebSocket: the HTTP upgrade, the origin check, then messages.

A runner's session (``session.py``), the directory (``directory.py``) and
the dataset's sample server (``dataset/server.py``) hand a connection whose first
bytes are ``GET `` (see :class:`~rlinks_rllib.protocol.websocket.FirstBytes`)
to a :class:`ServerWebSocket`, and from then on feed it what they read and
write what it returns; the RLlink conversation stays their Connection's.

The upgrade is ``websockets``' :class:`~websockets.server.ServerProtocol`
(RFC 6455's checks: method, version, ``Upgrade``, ``Sec-WebSocket-Key``),
with our limits around it: the request may take at most
:data:`MAX_UPGRADE_BYTES` (431 past that), and what is not an HTTP request at
all gets a 400: each an HTTP answer the peer can read. An ``Origin`` header
must name an origin of the ``ws_allowed_origins`` setting (a request without
one, from Node or Python rather than a page, is let in); another origin is
let through the upgrade and then closed at once with close code 1008
(policy violation) and a reason that names the origin and the setting,
since a browser hides an HTTP refusal's status and body from the page, but
hands it a close frame's code and reason. The reason names the server whose
setting it is (``server``: "runner", "dataset"), as whoever makes the
:class:`ServerWebSocket` says. Nothing the page sends after the upgrade
reaches the RLlink Connection; the WebSocket is finished once the page
answers the close frame (or goes). Every refusal leaves a reason the driver
logs (:attr:`ServerWebSocket.refusal`). The handshake deadline of the
connection runs from its first byte, so it covers the upgrade and a page
that never answers the close.
"""

from __future__ import annotations

import http
import logging
from typing import Iterable, Optional, Union

from websockets.exceptions import InvalidMessage
from websockets.frames import CloseCode
from websockets.http11 import Request
from websockets.protocol import CONNECTING
from websockets.server import ServerProtocol

from ...protocol.connection import Connection
from ...protocol.errors import ErrorCode
from ...protocol.websocket import MAX_CLOSE_REASON_BYTES, MessageChannel

__all__ = ["ServerWebSocket", "MAX_UPGRADE_BYTES", "ANY_ORIGIN", "origin_refusal"]

#: Bytes the upgrade request may take (request line and headers); browsers send 0.5-2 KB.
MAX_UPGRADE_BYTES = 32 * 1024
#: The ``ws_allowed_origins`` entry that lets a page from any origin in.
ANY_ORIGIN = "*"
#: Where ``websockets`` logs each connection (open, closed, rejected): below our own line for each.
_LIBRARY_LOG = logging.getLogger("rlinks_rllib.server.websockets")
_LIBRARY_LOG.setLevel(logging.WARNING)
#: The HTTP answer to a connection ended before its upgrade was done (the handshake deadline, a stop).
_UPGRADE_STATUS = {
    ErrorCode.LIMIT_EXCEEDED.value: http.HTTPStatus.REQUEST_TIMEOUT,
    ErrorCode.SHUTTING_DOWN.value: http.HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.SERVER_ERROR.value: http.HTTPStatus.INTERNAL_SERVER_ERROR,
}


def origin_refusal(origin: str, server: str) -> str:
    """Why a page of ``origin`` is refused, within a close frame's reason (123 bytes of UTF-8).

    The setting is always named: a long origin is cut instead (whole characters, ``...`` after).
    """
    tail = f" is not in the {server}'s ws_allowed_origins setting"
    shown = repr(origin)
    room = MAX_CLOSE_REASON_BYTES - len("origin ") - len(tail.encode())
    if len(shown.encode()) > room:
        shown = shown.encode()[: room - 3].decode(errors="ignore") + "..."
    return f"origin {shown}{tail}"


class ServerWebSocket(MessageChannel):
    """One connection that asked to upgrade to WebSocket: the upgrade, then :class:`MessageChannel`.

    Args:
        conn: the connection's RLlink Connection (server or directory role).
        server: whose ``ws_allowed_origins`` setting ``allowed_origins`` is,
            as a refused page is told ("runner", "dataset").
        allowed_origins: the ``Origin`` values a page may connect from
            (:data:`ANY_ORIGIN`: any); a request without ``Origin`` is always let in.
        max_message_bytes: the largest message once the RLlink handshake is done.
        handshake_max_bytes: the largest message before it.
    """

    def __init__(self, conn: Connection, *, server: str, allowed_origins: Iterable[str], max_message_bytes: int,
                 handshake_max_bytes: int) -> None:
        allowed = tuple(allowed_origins)
        # (websockets' own check would answer HTTP 403, which a browser hides from the page: ours closes instead.)
        super().__init__(ServerProtocol(origins=None, max_size=handshake_max_bytes, logger=_LIBRARY_LOG), conn,
                         max_message_bytes=max_message_bytes, handshake_max_bytes=handshake_max_bytes)
        self.server = server
        #: The page origins let in (``None``: any).
        self.allowed_origins: Optional[frozenset[str]] = None if ANY_ORIGIN in allowed else frozenset(allowed)
        #: Why the upgrade was refused, for the log (``None``: not refused).
        self.refusal: Optional[str] = None
        #: The error code the refusal is counted under.
        self.refusal_code = ErrorCode.BAD_FRAME
        #: The page's origin, when the upgrade came from one.
        self.origin: Optional[str] = None
        self._upgrade_bytes = 0

    def receive_data(self, data) -> None:
        ws = self.ws
        if ws.state is CONNECTING and not ws.eof_sent:
            self._upgrade_bytes += len(data)
            if self._upgrade_bytes > MAX_UPGRADE_BYTES:
                self._refuse(http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                             f"the upgrade request is longer than {MAX_UPGRADE_BYTES:,} bytes")
                return
        super().receive_data(data)
        exc = ws.handshake_exc
        if not self.opened and exc is not None and self.refusal is None:
            if isinstance(exc, InvalidMessage):
                # Not an HTTP request at all: websockets just closes; say why first.
                self.refusal = f"not a valid HTTP upgrade request ({exc.__cause__ or exc})"
                self._out.append(ws.reject(http.HTTPStatus.BAD_REQUEST, f"rlinks: {self.refusal}\n").serialize())
            else:
                self.refusal = f"{type(exc).__name__}: {exc}"  # websockets answered it (414, 431)

    def _handshake_event(self, event: object) -> None:
        if not isinstance(event, Request):
            super()._handshake_event(event)
            return
        ws = self.ws
        origins = event.headers.get_all("Origin")  # (more than one: websockets' check refuses it with 400)
        self.origin = ", ".join(origins) if origins else None
        response = ws.accept(event)
        ws.send_response(response)
        if response.status_code != http.HTTPStatus.SWITCHING_PROTOCOLS:
            self.refusal = f"HTTP {response.status_code}: {response.body.decode(errors='replace').strip()}"
            return
        if self.origin is not None and self.allowed_origins is not None and self.origin not in self.allowed_origins:
            # A page of an origin not let in: upgraded, then closed with the reason (the page can read it).
            reason = origin_refusal(self.origin, self.server)
            self.refusal_code = ErrorCode.AUTH_FAILED
            self.refusal = f"{reason} (WebSocket close {int(CloseCode.POLICY_VIOLATION)})"
            ws.send_close(CloseCode.POLICY_VIOLATION, reason)
            return
        self.opened = True

    def receive_eof(self) -> None:
        if self.refusal is not None:
            self.ws.receive_eof()  # refused: the Connection heard nothing and is told nothing
            return
        super().receive_eof()

    def close(self, code: Union[ErrorCode, str], reason: str) -> None:
        """Close after the Connection's ``ERROR``; before the upgrade is done, an HTTP answer says why instead."""
        if self.ws.state is CONNECTING and not self.ws.eof_sent:
            status = _UPGRADE_STATUS.get(str(code), http.HTTPStatus.BAD_REQUEST)
            self.ws.send_response(self.ws.reject(status, f"rlinks: {reason}\n"))
        super().close(code, reason)

    def _refuse(self, status: http.HTTPStatus, reason: str) -> None:
        self.refusal = f"HTTP {status.value}: {reason}"
        self.ws.send_response(self.ws.reject(status, f"rlinks: {reason}\n"))
