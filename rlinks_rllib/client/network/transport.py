"""The client's blocking socket: TCP or TLS, bytes out within a deadline, bytes into a Connection.

For a ``ws://`` or ``wss://`` address the same socket carries RLlink over
WebSocket: :class:`~.websocket.ClientWebSocket` sits between the socket and
the Connection (the upgrade, then one binary message per frame), and every
deadline and error here stays as it is.

A :class:`Transport` moves bytes and nothing else; which bytes are legal is
the business of the :class:`~rlinks_rllib.protocol.connection.Connection`
it reads into. What it does know is how sockets fail, so it turns their
``OSError``\\s into the client's errors, with the address and what was being
sent or awaited, and hints for the TLS mistakes people make (a ``tcp://``
address for a TLS port, a client certificate the server wants).

Every call is bounded: writes by a deadline, reads by the caller's timeout,
and each read by :data:`RECV_CHUNK` bytes (or the room left in the frame's body).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
import time

try:
    import ssl
except ImportError:  # pragma: no cover - Python built without OpenSSL
    ssl = None  # type: ignore[assignment]
from typing import Iterator, Optional, Sequence

from ...protocol.codec import Buffer
from ...protocol.connection import Connection
from ..errors import ConnectFailed, ConnectionLost, ServerTimeout, TLSFailed, TLSNotAvailable
from .address import Address
from .websocket import ClientWebSocket

__all__ = ["Transport", "tls_context", "RECV_CHUNK"]

#: Bytes asked of one ``recv`` when no frame body is being filled.
RECV_CHUNK = 64 * 1024
#: Non-blocking reads per poll; what is left waits for the next read.
MAX_POLL_READS = 64
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")
#: A link that died without a word (a cable pulled, a host cut off: no FIN, no RST) is found by
#: TCP itself: keep-alive probes after this many idle seconds, this often, this many times ...
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 5, 2, 3
#: ... and data we sent that stays unacknowledged this long (Linux ``TCP_USER_TIMEOUT``).
#: Either ends the connection (``ConnectionLost``), which a reliable client recovers from.
USER_TIMEOUT_S = 15
#: Time to write what the WebSocket layer answers on its own (a pong, the echo of a close).
WEBSOCKET_ANSWER_TIMEOUT_S = 5.0
#: How long ``close()`` waits for another thread's write (or its reading of a message) to end before it
#: leaves out the WebSocket close frame.
CLOSE_WAIT_S = 1.0
#: Handshake failures that mean "this is not the server you trust"; never retried.
_CERTIFICATE_ERRORS: tuple = (ssl.SSLCertVerificationError, ssl.CertificateError) if ssl is not None else ()

log = logging.getLogger(__name__)


def _iov_max() -> int:
    names = getattr(os, "sysconf_names", {})
    if "SC_IOV_MAX" in names:
        value = os.sysconf("SC_IOV_MAX")
        if value > 0:
            return value
    return 16  # POSIX's guaranteed minimum


_IOV_MAX = _iov_max()


def tls_context(
    address: Address,
    ca_file: Optional[str] = None,
    cert_file: Optional[str] = None,
    key_file: Optional[str] = None,
    server_name: Optional[str] = None,
) -> Optional["ssl.SSLContext"]:
    """The TLS context a ``tls://`` address needs; ``None`` for ``tcp://``.

    The server's certificate is checked against ``ca_file`` (the system's CAs
    if none) and TLS 1.2 is the oldest version spoken; ``cert_file`` (and
    ``key_file``, unless the key is in ``cert_file``) is the certificate we
    present to a server that asks for one.

    Raises:
        ValueError: TLS options for a ``tcp://`` address, or a key without a certificate.
        TLSNotAvailable: Python has no ``ssl`` module.
        OSError, ssl.SSLError: a file can't be read or is not valid PEM.
    """
    options = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file, "tls_server_name": server_name}
    if not address.tls:
        given = sorted(name for name, value in options.items() if value)
        if given:
            raise ValueError(f"{', '.join(given)} given for {address}; use a tls:// (or wss://) address for TLS")
        return None
    if ssl is None:
        raise TLSNotAvailable(f"{address} asks for TLS, but this Python was built without the ssl module")
    if key_file and not cert_file:
        raise ValueError("key_file needs cert_file")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file:
        context.load_cert_chain(cert_file, key_file or None)
    return context


def detect_dead_links(sock: socket.socket, *, user_timeout: bool = True) -> None:
    """Keep-alive probes on ``sock``, and with ``user_timeout`` a limit on unacknowledged data, as far as the
    OS offers them.

    A runner takes the probes without the user timeout: a peer that is alive
    but reads slowly (a paused simulator, a full window) must not be cut off,
    and one that went away during a partition is found by the probes.
    """
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    options = [("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
               ("TCP_KEEPCNT", KEEPALIVE_PROBES)]
    if user_timeout:
        options.append(("TCP_USER_TIMEOUT", USER_TIMEOUT_S * 1000))
    for name, value in options:
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


class Transport:
    """One open TCP (or TLS) connection to ``address``.

    Made by :meth:`open`. Not thread-safe, except :meth:`close`, which
    wakes a read or write blocked in another thread.

    Attributes:
        sock: the socket (an ``ssl.SSLSocket`` for TLS), for ``select``.
        address: where it is connected, for messages.
        at_eof: the peer closed its side (a read returned nothing).
    """

    def __init__(self, sock: socket.socket, address: Address) -> None:
        self.sock = sock
        self.address = address
        self.tls = ssl is not None and isinstance(sock, ssl.SSLSocket)
        self.at_eof = False
        #: The WebSocket layer of a ``ws://``/``wss://`` address, once upgraded; ``None``: plain RLlink.
        self.websocket: Optional[ClientWebSocket] = None
        #: Held while the WebSocket layer is used to write, so that close() from another thread stays out.
        self._writing = threading.Lock()
        #: The thread holding ``_writing`` (``None``: none): close() from it must not wait for itself.
        self._writer: Optional[int] = None
        #: Asks the kernel whether a read would find something, without one (see :meth:`readable`).
        self._poller: Optional["select.poll"] = None

    @classmethod
    def open(
        cls,
        address: Address,
        *,
        connect_timeout: float,
        ssl_context: Optional["ssl.SSLContext"] = None,
        server_name: Optional[str] = None,
    ) -> "Transport":
        """Connect (and do the TLS handshake when ``ssl_context`` is given), within ``connect_timeout`` each.

        ``TCP_NODELAY`` is set: frames are written whole, and a small reply
        must not wait for Nagle's algorithm. Keep-alive probes and (where
        the OS has them) a user timeout notice a dead link in seconds
        (:data:`KEEPALIVE_IDLE_S`, :data:`USER_TIMEOUT_S`): a reply that
        never comes from a live peer is :class:`ServerTimeout`, from a peer
        that can no longer be reached, :class:`ConnectionLost`.

        Raises:
            TLSFailed: the server's certificate is not trusted or not made out
                to ``server_name`` (retrying can't fix that).
            OSError: refused, unreachable, unknown host, timed out, or another
                TLS failure (worth another attempt).
        """
        sock = socket.create_connection((address.host, address.port), timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            detect_dead_links(sock)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_name or address.host)
        except _CERTIFICATE_ERRORS as exc:
            sock.close()
            raise TLSFailed(
                f"{address}: the server's certificate is not trusted: {exc}. "
                "Is ca_file the CA that signed it, and is it made out to this host name?"
            ) from exc
        except BaseException:
            sock.close()
            raise
        transport = cls(sock, address)
        if address.websocket:
            try:
                transport._upgrade(connect_timeout)
            except BaseException:
                sock.close()
                raise
        return transport

    def _upgrade(self, timeout: float) -> None:
        """Ask for RLlink over WebSocket and read the 101, within ``timeout`` (PROTOCOL.md 16).

        Raises:
            ConnectFailed: the server refused the upgrade or is not a WebSocket server.
            OSError: the socket failed or the answer did not come in time (worth another attempt).
        """
        websocket = ClientWebSocket(self.address)
        deadline = time.monotonic() + timeout
        try:
            self.write(websocket.upgrade_request(), timeout=timeout, what="the WebSocket upgrade")
        except (ConnectionLost, ServerTimeout) as exc:
            raise ConnectionError(str(exc)) from exc
        while not websocket.open:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.address} did not answer the WebSocket upgrade within {timeout:g} s")
            self.sock.settimeout(remaining)
            websocket.receive_upgrade(self.sock.recv(RECV_CHUNK))
        self.websocket = websocket

    def close(self) -> None:
        """Close the socket, waking a call blocked on it in another thread (``close()`` alone doesn't).

        Over WebSocket a normal close (1000) goes first, so the server knows
        we meant to leave; best effort, without waiting for the server's
        answer. Another thread in the middle of a write, or reading a message
        (which may need an answer written), is waited for up to
        ``CLOSE_WAIT_S`` (the close frame must not land inside its message);
        a longer write, or a close from the writing thread itself (a signal
        handler), goes without the close frame.
        """
        if (self.websocket is not None and not self.at_eof and self._writer != threading.get_ident()
                and self._writing.acquire(timeout=CLOSE_WAIT_S)):
            try:
                self._write_bytes(self.websocket.close_frame(), timeout=WEBSOCKET_ANSWER_TIMEOUT_S,
                                  what="a WebSocket close")
            except (ConnectionLost, ServerTimeout) as exc:
                log.debug("%s: no WebSocket close sent: %s", self.address, exc)
            finally:
                self._writing.release()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:
            log.debug("shutdown of the connection to %s: %s (not connected any more)", self.address, exc)
        self.sock.close()

    # ------------------------------------------------------------------
    # Bytes out

    def write(self, parts: Sequence[Buffer], *, timeout: float, what: str) -> None:
        """Write one frame's buffers, however many calls it takes, within ``timeout`` seconds.

        Plain TCP hands the kernel up to ``IOV_MAX`` buffers per ``sendmsg``
        (large arrays go out without a copy); TLS joins them into one buffer
        first, since a TLS socket has no ``sendmsg`` and one record per small
        part would cost more than the copy.

        Raises:
            ServerTimeout: the server took less than the frame in ``timeout`` (it stopped reading).
            ConnectionLost: the connection failed; the server may have said
                why first (see :meth:`read_after_failed_write`).
        """
        with self._write_turn():
            if self.websocket is not None:
                parts = self.websocket.frames(parts)
            self._write_bytes(parts, timeout=timeout, what=what)

    @contextlib.contextmanager
    def _write_turn(self) -> Iterator[None]:
        """Hold ``_writing``, noting which thread does (see :meth:`close`)."""
        with self._writing:
            self._writer = threading.get_ident()
            try:
                yield
            finally:
                self._writer = None

    def _write_bytes(self, parts: Sequence[Buffer], *, timeout: float, what: str) -> None:
        views = []
        for part in parts:
            view = memoryview(part)
            if view.format != "B" or view.ndim != 1:
                view = view.cast("B")
            if len(view):
                views.append(view)
        if self.tls and len(views) > 1:
            views = [memoryview(b"".join(views))]
        use_sendmsg = _HAS_SENDMSG and not self.tls
        deadline = time.monotonic() + timeout
        i = 0
        while i < len(views):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._send_timeout(what, timeout)
            try:
                self.sock.settimeout(remaining)
                written = self.sock.sendmsg(views[i : i + _IOV_MAX]) if use_sendmsg else self.sock.send(views[i])
            except TimeoutError as exc:
                if exc.errno is None:  # our deadline, not the kernel's ETIMEDOUT (a dead link)
                    raise self._send_timeout(what, timeout) from None
                raise ConnectionLost(f"connection to {self.address} lost while sending {what}: {exc}") from exc
            except OSError as exc:
                raise ConnectionLost(f"connection to {self.address} lost while sending {what}: {exc}") from exc
            while written:
                size = len(views[i])
                if written >= size:
                    written -= size
                    i += 1
                else:
                    views[i] = views[i][written:]
                    written = 0

    def _send_timeout(self, what: str, timeout: float) -> ServerTimeout:
        return ServerTimeout(f"{self.address} did not take our {what} within {timeout:g} s (it stopped reading)")

    # ------------------------------------------------------------------
    # Bytes in

    def readable(self) -> bool:
        """Whether a read would not wait: bytes (or the end, or an error) arrived, or TLS holds some decrypted.

        One ``poll`` system call, where a non-blocking read that finds nothing
        costs a raised and caught ``BlockingIOError`` too; a ``True`` may still
        read nothing (a partial TLS record), which :meth:`read_into` reports.
        """
        if self.tls and self.sock.pending():
            return True
        if self._poller is None:
            if not hasattr(select, "poll"):  # pragma: no cover - Windows: let the read find out
                return True
            self._poller = select.poll()
            self._poller.register(self.sock, select.POLLIN | select.POLLPRI)
        return bool(self._poller.poll(0))

    def read_into(self, conn: Connection, *, timeout: float, what: str, handshaking: bool = False) -> bool:
        """One read into ``conn``: ``False`` if there was nothing to read (``timeout=0`` polls).

        A large frame body is read in place (``recv_into`` the Connection's
        :meth:`~Connection.read_buffer`); anything else in chunks of
        :data:`RECV_CHUNK`. When the peer has closed, ``conn`` is told
        (:meth:`~Connection.receive_eof`) and :attr:`at_eof` is set.

        Raises:
            TimeoutError: nothing came within ``timeout`` (> 0); the caller words it.
            TLSFailed: (``handshaking``) the TLS layer failed: typically the
                server wants a client certificate we did not send.
            ConnectionLost: the connection was reset or failed.
            ConnectFailed: over WebSocket, the server refused us (close 1008 before any message).
        """
        body = conn.read_buffer()
        try:
            self.sock.settimeout(timeout)
            if body is not None:
                received = self.sock.recv_into(body)
                if received:
                    conn.received_into(received)
            else:
                data = self.sock.recv(RECV_CHUNK)
                received = len(data)
                if received and self.websocket is not None:
                    self._websocket_data(conn, data, what)
                elif received:
                    conn.receive_data(data)
        except BlockingIOError:
            return False
        except TimeoutError as exc:
            if exc.errno is None:  # our deadline, not the kernel's ETIMEDOUT (a dead link)
                raise
            raise ConnectionLost(f"connection to {self.address} lost while waiting for {what}: {exc}") from exc
        except ConnectFailed:
            raise  # the server closed the WebSocket with 1008 before any message: it refused us (websocket.py)
        except OSError as exc:
            if ssl is not None and isinstance(exc, (ssl.SSLWantReadError, ssl.SSLWantWriteError)):
                return False  # no whole TLS record yet
            if (ssl is not None and handshaking and isinstance(exc, ssl.SSLError)
                    and not isinstance(exc, ssl.SSLEOFError)):
                raise TLSFailed(
                    f"{self.address} ended the TLS session while we waited for {what}: {exc}. "
                    "Does it require a client certificate (cert_file/key_file) signed by a CA it trusts?"
                ) from exc
            raise ConnectionLost(f"connection to {self.address} lost while waiting for {what}: {exc}") from exc
        if not received:
            self.at_eof = True
            if self.websocket is not None:
                self.websocket.receive_eof(conn)
            else:
                conn.receive_eof()
        return True

    def _websocket_data(self, conn: Connection, data: bytes, what: str) -> None:
        """Bytes of a WebSocket: whole messages to ``conn``; the WebSocket layer's answers (pongs) written."""
        assert self.websocket is not None
        with self._write_turn():
            answers = self.websocket.receive(conn, data)
            if not answers:
                return
            try:
                self._write_bytes(answers, timeout=WEBSOCKET_ANSWER_TIMEOUT_S,
                                  what=f"a WebSocket answer (while we waited for {what})")
            except (ConnectionLost, ServerTimeout) as exc:
                # Best effort: after the server's close (its ERROR is already in conn) the socket may be gone;
                # what conn holds decides how the conversation ended.
                log.debug("%s: no WebSocket answer sent: %s", self.address, exc)

    def read_after_failed_write(self, conn: Connection) -> None:
        """After a failed write: read into ``conn`` what the server sent before it closed, if anything.

        A server that refuses a frame (too large, a bad episode) sends an
        ``ERROR`` saying why and closes without reading the rest, so our write
        fails; that ``ERROR`` is worth more than "connection reset". Best
        effort, without waiting (at most :data:`MAX_POLL_READS` reads): a
        failure here leaves the write's own error to be reported.
        """
        try:
            for _ in range(MAX_POLL_READS):
                if self.at_eof or not self.read_into(conn, timeout=0.0, what="the server's last words"):
                    return
        except (ConnectionLost, TLSFailed) as exc:
            log.debug("nothing more to read from %s after a failed send: %s", self.address, exc)

    def eof_hint(self, handshaking: bool) -> str:
        """Why a server may have closed the connection before the handshake was done ('' after it)."""
        if self.websocket is not None and self.websocket.close_text:
            return f" (WebSocket close: {self.websocket.close_text})"
        if not handshaking:
            return ""
        if self.tls:
            return " (right after the TLS handshake: does it require a client certificate, cert_file/key_file?)"
        return " (before answering our PING: does it speak TLS? then connect to tls://...)"
