"""The one address simulators need: a directory of the learner's runners.

Ray places EnvRunners on nodes of its choosing, each on its own port. A
simulator outside the cluster is given one well-known address instead (the
driver's base port), asks it where to go, and goes to the least-loaded live
runner; when its runner goes away it asks again.

The directory speaks RLlink framing. A client that offers the ``endpoints``
extension in its ``PING`` learns from the ``PONG`` that this is a directory
(``"role": "directory"``) and sends ``GET_ENDPOINTS``; the answer is
``ENDPOINTS`` with every runner, least-loaded first. A plain RLlib client
that connects here by mistake gets an ``ERROR`` naming the runners' ports.

It guards its door as a runner does: with a shared secret it answers
nothing but the handshake until the client has proved it knows the secret
(``auth``, PROTOCOL.md §10.3), and with a certificate it speaks only TLS.
Like a runner's port it takes RLlink over WebSocket too (PROTOCOL.md 16),
with the same origin check.
The learner builds it from the runners' own settings
(:meth:`Directory.from_settings`), so one secret and one CA cover every port.

The learner feeds the directory with :meth:`Directory.update` after every
training iteration; between updates it counts its own referrals, so a burst
of new simulators spreads over the runners instead of piling onto one.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Iterable, Optional

from ..._version import SERVER_AGENT
from ...protocol import Extension, ProtocolError, UnsupportedMessage, encode_message
from ...protocol import messages as msgs
from ...protocol.connection import Connection, EndpointsRequested, Role, State
from ...protocol.errors import ErrorCode
from ...protocol.limits import HANDSHAKE_MAX_FRAME_BYTES
from ...protocol.websocket import FirstBytes
from ..settings import RLinkSettings
from .listener import server_ssl_context
from .websocket import ServerWebSocket

__all__ = ["Directory", "Endpoint"]

logger = logging.getLogger("rlinks_rllib.server")

_MAX_MESSAGE_BYTES = 64 * 1024
_CONNECTION_DEADLINE_S = 10.0
_MAX_CONNECTIONS = 1024


@dataclass
class Endpoint:
    """One runner as the directory knows it."""

    worker_index: int
    host: str
    port: int
    clients: int = 0
    #: Seconds its clients have sent nothing (the runner's ``quiet_s``); the learner's, not on the wire.
    quiet_s: float = 0.0

    def as_wire(self) -> dict:
        return {"worker_index": self.worker_index, "host": self.host, "port": self.port, "clients": self.clients}


class Directory:
    """A small RLlink server that answers ``GET_ENDPOINTS`` on the learner's base port.

    Args:
        host: address to listen on (the runners' host setting).
        port: the well-known port (0: any free port).
        ssl_context: a server-side TLS context (``listener.server_ssl_context``); ``None``: plain TCP.
        secret: the normalized shared secret clients must prove they know; ``None``: anyone may ask.
        handshake_timeout_s: time a connection has for its TLS handshake.
        ws_allowed_origins: the page origins a WebSocket upgrade may come from (the runners' setting).

    Raises:
        OSError: the port can't be bound.
    """

    def __init__(self, host: str, port: int, *, ssl_context: Optional[ssl.SSLContext] = None,
                 secret: Optional[bytes] = None, handshake_timeout_s: float = _CONNECTION_DEADLINE_S,
                 ws_allowed_origins: Iterable[str] = ()) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(socket.SOMAXCONN)
            self._sock.setblocking(False)
        except OSError as exc:
            self._sock.close()
            raise OSError(exc.errno, f"rlinks directory: cannot listen on {host}:{port}: {exc.strerror}") from exc
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._ssl = ssl_context
        self._secret = secret
        self._handshake_timeout_s = handshake_timeout_s
        self._ws_allowed_origins = tuple(ws_allowed_origins)
        self._endpoints: list[Endpoint] = []
        self._lock = threading.Lock()
        self._connections = 0
        self._loop = asyncio.new_event_loop()
        self._server: Optional[asyncio.base_events.Server] = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlinks-directory", daemon=True)

    @classmethod
    def from_settings(cls, settings: RLinkSettings) -> "Directory":
        """The directory for runners with these settings: their host, base port, TLS and secret.

        Raises:
            OSError: the port can't be bound, or a TLS or secret file can't be read.
            ssl.SSLError: a TLS file is not valid.
            ValueError: ``auth="on"`` without a secret, or a malformed secret.
        """
        return cls(settings.host, settings.port, ssl_context=server_ssl_context(settings),
                   secret=settings.auth_secret(), handshake_timeout_s=settings.handshake_timeout_s,
                   ws_allowed_origins=settings.ws_allowed_origins)

    def start(self, timeout: float = 10.0) -> "Directory":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("rlinks directory did not start")
        logger.info("rlinks directory on %s:%d (%s, %s)", *self.address, "TLS" if self._ssl else "plain TCP",
                    "shared-secret authentication" if self._secret is not None else "no authentication")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
        self._sock.close()

    def update(self, endpoints: list[Endpoint]) -> None:
        """The runners and how many clients each serves now (any thread)."""
        with self._lock:
            self._endpoints = [Endpoint(e.worker_index, e.host, e.port, e.clients) for e in endpoints]

    def endpoints(self) -> list[Endpoint]:
        """The runners, least-loaded first."""
        with self._lock:
            return sorted(self._endpoints, key=lambda e: (e.clients, e.worker_index))

    def _refer(self) -> list[dict]:
        with self._lock:
            ranked = sorted(self._endpoints, key=lambda e: (e.clients, e.worker_index))
            if ranked:
                ranked[0].clients += 1  # until the next update says otherwise
            return [e.as_wire() for e in ranked]

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        tls = {"ssl": self._ssl, "ssl_handshake_timeout": self._handshake_timeout_s} if self._ssl else {}
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, sock=self._sock, **tls))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            # Conversations still open end here, while the loop can still close their sockets.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        try:
            if self._connections > _MAX_CONNECTIONS:
                writer.write(encode_message(msgs.error(ErrorCode.LIMIT_EXCEEDED.value, "directory busy; try again")))
                return
            await asyncio.wait_for(self._converse(reader, writer), _CONNECTION_DEADLINE_S)
        except (asyncio.TimeoutError, ConnectionError) as exc:
            logger.info("rlinks directory: connection ended: %r", exc)
        except asyncio.CancelledError:
            # The directory is stopping (see _run); a cancelled handler would make asyncio log a traceback.
            logger.debug("rlinks directory: connection closed as the directory stops")
        finally:
            self._connections -= 1
            writer.close()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Drive one :class:`Connection` in the directory role until the client leaves or errs."""
        conn = Connection(Role.DIRECTORY, extensions=[Extension.ENDPOINTS], agent=SERVER_AGENT,
                          secret=self._secret, max_frame_bytes=_MAX_MESSAGE_BYTES)
        first, ws = FirstBytes(), None
        while True:
            data: Optional[bytes] = await reader.read(65536)
            if data and first.websocket is None:
                data = first.feed(data)
                if data is None:
                    continue  # a prefix of "GET ": too soon to tell
                if first.websocket:
                    # (Its origins are the runners' setting: a refused page is told so.)
                    ws = ServerWebSocket(conn, server="runner", allowed_origins=self._ws_allowed_origins,
                                         max_message_bytes=_MAX_MESSAGE_BYTES,
                                         handshake_max_bytes=min(HANDSHAKE_MAX_FRAME_BYTES, _MAX_MESSAGE_BYTES))
            if ws is not None and data:
                ws.receive_data(data)
            elif ws is not None:
                ws.receive_eof()
            elif data:
                conn.receive_data(data)
            else:
                conn.receive_eof()
            refusal = None
            try:
                while (event := conn.next_event()) is not None:
                    if isinstance(event, EndpointsRequested):
                        conn.send_endpoints(self._refer())
                if ws is not None and ws.error is not None:
                    raise ws.error
            except UnsupportedMessage:
                # (With a secret, only a client that proved it knows it gets this far.)
                where = ", ".join(f"{e.host}:{e.port}" for e in self.endpoints()) or "none yet"
                refusal = (ErrorCode.UNSUPPORTED_MESSAGE,
                           f"this is the rlinks directory, not a runner; connect to a runner ({where}) "
                           "or use an rlinks client, which asks here where to go")
            except ProtocolError as exc:
                logger.warning("rlinks directory: refused %s: %s (%s)", writer.get_extra_info("peername"),
                               exc, exc.code)
                refusal = (exc.code, str(exc))
            if refusal is not None:
                conn.send_error(*refusal)
                if ws is not None:
                    ws.close(*refusal)
            for part in conn.data_to_send() if ws is None else ws.data_to_send():
                writer.write(part)
            await writer.drain()
            if ws is not None and ws.refusal is not None and ws.finished:
                logger.warning("rlinks directory: WebSocket upgrade from %s refused: %s",
                               writer.get_extra_info("peername"), ws.refusal)
            if not data or conn.state is State.CLOSED or ws is not None and ws.finished:
                return
