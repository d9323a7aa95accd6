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

The learner feeds the directory with :meth:`Directory.update` after every
training iteration; between updates it counts its own referrals, so a burst
of new simulators spreads over the runners instead of piling onto one.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from dataclasses import dataclass
from typing import Optional

from .._version import SERVER_AGENT
from ..protocol import Extension, ProtocolError, UnsupportedMessage, encode_message
from ..protocol import messages as msgs
from ..protocol.connection import Connection, EndpointsRequested, Role, State
from ..protocol.errors import ErrorCode

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

    def as_wire(self) -> dict:
        return {"worker_index": self.worker_index, "host": self.host, "port": self.port, "clients": self.clients}


class Directory:
    """A small RLlink server that answers ``GET_ENDPOINTS`` on the learner's base port.

    Args:
        host: address to listen on (the runners' host setting).
        port: the well-known port (0: any free port).

    Raises:
        OSError: the port can't be bound.
    """

    def __init__(self, host: str, port: int) -> None:
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
        self._endpoints: list[Endpoint] = []
        self._lock = threading.Lock()
        self._connections = 0
        self._loop = asyncio.new_event_loop()
        self._server: Optional[asyncio.base_events.Server] = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlinks-directory", daemon=True)

    def start(self, timeout: float = 10.0) -> "Directory":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("rlinks directory did not start")
        logger.info("rlinks directory on %s:%d", *self.address)
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
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, sock=self._sock))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
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
        finally:
            self._connections -= 1
            writer.close()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Drive one :class:`Connection` in the directory role until the client leaves or errs."""
        conn = Connection(Role.DIRECTORY, extensions=[Extension.ENDPOINTS], agent=SERVER_AGENT,
                          max_frame_bytes=_MAX_MESSAGE_BYTES)
        while True:
            data = await reader.read(65536)
            if data:
                conn.receive_data(data)
            else:
                conn.receive_eof()
            try:
                while (event := conn.next_event()) is not None:
                    if isinstance(event, EndpointsRequested):
                        conn.send_endpoints(self._refer())
            except UnsupportedMessage:
                where = ", ".join(f"{e.host}:{e.port}" for e in self.endpoints()) or "none yet"
                conn.send_error(
                    ErrorCode.UNSUPPORTED_MESSAGE,
                    f"this is the rlinks directory, not a runner; connect to a runner ({where}) "
                    "or use an rlinks client, which asks here where to go",
                )
            except ProtocolError as exc:
                conn.send_error(exc.code, str(exc))
            for part in conn.data_to_send():
                writer.write(part)
            await writer.drain()
            if not data or conn.state is State.CLOSED:
                return
