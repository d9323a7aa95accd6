"""A server that takes plain samples (``SAMPLES``) from actors and hands them to one consumer.

The consumer is a training loop of the user's own (:class:`~rlinks_rllib.dataset.torch_dataset.RLinkDataset`
reads from here), not an RLlib algorithm: actors ``put`` dicts of arrays,
the consumer :meth:`SampleServer.take`\\ s them, and a model trained on them is
published back (:meth:`SampleServer.publish_weights`) for actors to fetch
with ``GET_STATE``.

Delivery is that of episodes to a runner (PROTOCOL.md 10.2, 10.10):

* Every message goes into a bounded :class:`~rlinks_rllib.server.network.inbox.Inbox` (samples and
  bytes). While it is full, the server stops reading from its actors, so
  TCP pushes back on them and their ``put`` waits; nothing is dropped.
* ``ACK {seq}`` goes to an actor when the consumer has *taken* its message
  (:meth:`SampleServer.take`), or, for a consumer that confirms later
  (:meth:`SampleServer.receive`, then :meth:`SampleServer.confirm` once its
  loop is done with them: ``RLinkDataset``), when it says so; never when it
  merely arrived. A server that dies loses nothing an actor believes
  delivered; a reliable actor resends the rest after reconnecting, and a
  resent ``seq`` is recognised (confirmed again, never queued twice).
* A consumer that confirms late names its ``window`` in the handshake (the
  samples one actor may leave unconfirmed, PROTOCOL.md 10.10), and learns
  from a :class:`Received` marked ``flush`` (an actor's ``flush()``) or
  ``ended`` (its connection closed) that no more is coming from that actor
  for now: it hands on a partial batch rather than wait to fill it.

One thread per connection (bounded by ``max_clients``) drives a protocol
:class:`~rlinks_rllib.protocol.connection.Connection`; a large body is read straight
into its final buffer. Bad input from one actor ends that connection with
an ``ERROR`` and a log line; other actors are unaffected.

EnvClient simulators connect too when the server is told what they look
like (``model``, a :class:`~.simulator_model.SimulatorModel`, and ``episodes``,
an :class:`~.episodes.EpisodeReader`): ``GET_CONFIG`` is answered with
the description a runner sends (off-policy; RLlib's default MLP or the policy
graph of the model synced), waiting for the first model synced, and
``EPISODES`` are checked as a runner checks them and queued beside samples,
one item per chunk, with the same ``seq``, ``ACK`` and back-pressure. A
server not told so refuses both with ``ERROR unsupported_message``.

With TLS (``tls_cert_file``) that thread also runs the TLS handshake, bounded
by ``handshake_timeout``. An OpenSSL connection must not be read and written
from two threads at once, and the consumer's thread writes ``ACK`` messages while
the connection's thread reads: so a TLS socket is non-blocking and every call
on it (handshake, read, write) is made under the session's lock, waiting in
``select()`` outside it. Plain TCP keeps blocking writes and lock-free reads.

RLlink over WebSocket (PROTOCOL.md 16) comes in on the same port, after TLS
if TLS is on (``ws://``, ``wss://``), as to a runner: the first bytes tell
(:class:`~rlinks_rllib.protocol.websocket.FirstBytes`), and an upgrade's bytes go
through a :class:`~rlinks_rllib.server.network.websocket.ServerWebSocket` (the upgrade, the
``ws_allowed_origins`` check, one RLlink message per binary message) to the
same Connection. The consumer's thread writes its ``ACK`` through that
WebSocket too, so with WebSocket every call on it is made under the
session's lock, reads included; its messages are copied once (no reading
straight into a body buffer, which stays plain RLlink's).
"""

from __future__ import annotations

import collections
import logging
import select
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from .._version import SERVER_AGENT
from ..protocol.auth import Secret, normalize_secret
from ..protocol.buffers import BufferPool
from ..protocol.connection import (
    ConfigRequested,
    ConnectionClosed,
    Connection,
    EpisodesReceived,
    ErrorReceived,
    HandshakeDone,
    Role,
    SamplesReceived,
    StateRequested,
)
from ..protocol.errors import ErrorCode, LocalProtocolError, ProtocolError
from ..protocol.extensions import Extension
from ..protocol.framing import encode_body_once
from ..protocol.limits import DEFAULT_MAX_FRAME_BYTES, HANDSHAKE_MAX_FRAME_BYTES
from ..protocol.websocket import FirstBytes
from ..protocol.weights import build_state
from ..server.errors import IngestError
from ..server.network.inbox import Batch, Inbox
from ..server.network.stats import LogLimiter
from ..server.network.tls import tls_server_context
from ..server.network.websocket import ServerWebSocket
from ..server.settings import is_loopback
from .episodes import EpisodeReader
from .simulator_model import SimulatorModel

__all__ = ["SampleServer", "SampleStats", "Received", "LearnerNode", "SAMPLE_EXTENSIONS"]

logger = logging.getLogger("rlinks_rllib.server.samples")

#: What a sample server agrees to: confirmed delivery and plain samples.
SAMPLE_EXTENSIONS = (Extension.ACK.value, Extension.SAMPLES.value)
#: How often a blocked thread looks again whether the server is stopping.
_POLL_S = 0.2
#: Seconds one write to an actor may take.
_SEND_TIMEOUT_S = 30.0
#: Bytes read at once for small frames and headers. A large frame's first read
#: lands here and is copied into its body buffer; the rest is read straight
#: into that buffer, so this stays small next to an image (0.9 MB).
_READ_BYTES = 64 * 1024
#: The most bytes of frame bodies kept for reuse.
MAX_POOLED_BODY_BYTES = 256 * 1024 * 1024
#: Frames smaller than this are written as one buffer (header and body joined).
_COALESCE_BYTES = 64 * 1024
#: Seconds a connection whose TLS handshake failed is drained before it is closed.
_LINGER_S = 1.0
#: Clients whose highest seqs are remembered (for resends after a reconnect).
_HELD_SEQ_MAX = 65536
#: Seconds a simulator's ``GET_CONFIG`` waits for the first model to be synced (a client waits 120 s by default).
FIRST_MODEL_WAIT_S = 120.0
#: What the refusal of a simulator says to a server that was not told the simulators' spaces.
_NO_SIMULATORS = ("this sample server was not told what its simulators look like: make the dataset with "
                  "RLinkDataset(..., spaces=(observation_space, action_space)) or env=...")


@dataclass
class Received(Batch):
    """One ``SAMPLES`` or ``EPISODES`` message taken from the inbox (``episodes`` holds its samples or chunks).

    :meth:`SampleServer.confirm` confirms it to its actor. A message with no
    samples is a marker: the actor flushed, or its connection ended.
    """

    seq: Optional[int] = None
    #: It holds episode chunks (``EPISODES``), not plain samples.
    chunks: bool = False
    #: The actor sends nothing more until what it sent is confirmed (its ``flush()``).
    flush: bool = False
    #: The actor's connection ended after this (a marker with no samples).
    ended: bool = False

    @property
    def marker(self) -> bool:
        """A flush alone, or an ended connection: no samples, only news."""
        return not self.episodes and (self.flush or self.ended)


@dataclass
class SampleStats:
    """Counters of a :class:`SampleServer` (read them from any thread; they only grow)."""

    connections: int = 0
    messages: int = 0
    samples_received: int = 0
    samples_taken: int = 0
    duplicates: int = 0
    refused: int = 0
    bytes_received: int = 0
    tls_handshakes_failed: int = 0
    episodes_received: int = 0
    episodes_taken: int = 0


def _coalesced(parts: list) -> list:
    """``parts`` with the small ones joined: one write, one segment, per small frame (an ACK)."""
    if len(parts) < 2 or sum(len(memoryview(part).cast("B")) for part in parts) > _COALESCE_BYTES:
        return parts
    return [b"".join(parts)]


def _wait_ready(sock: socket.socket, want_write: bool, timeout: float) -> None:
    """Wait up to ``timeout`` s for ``sock`` to be writable (``want_write``) or readable.

    A socket another thread closed meanwhile returns at once: the caller's
    next call on it, under the session's lock, sees ``closed``.
    """
    socks = [sock]
    try:
        select.select([] if want_write else socks, socks if want_write else [], [], timeout)
    except (OSError, ValueError):  # closed: fileno() is -1 or no longer open
        return


class _Session:
    """One actor's connection: its socket, its Connection, and a lock for writes from two threads.

    With TLS (``tls``) or WebSocket (:attr:`ws`) the lock covers reads too (see the module's docstring).
    """

    def __init__(self, sock: socket.socket, peer: Any, conn: Connection, *, tls: bool = False) -> None:
        self.sock = sock
        self.tls = tls
        # An ACK is a small frame written as header and body: with Nagle's algorithm the body
        # waits for the actor's delayed ACK of the header (40 ms on Linux) before it leaves.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            sock.setblocking(False)
        else:
            sock.settimeout(_SEND_TIMEOUT_S)  # a peer that stops reading can't hold a write forever
        self.peer = peer
        self.conn = conn
        self.client_id = f"anon-{uuid.uuid4().hex[:12]}"
        self.lock = threading.Lock()
        self.closed = False
        #: TLS only: a write timed out mid-record; the reader thread ends the connection.
        self.broken = False
        #: TLS only: the handshake is done (before it, an ``ERROR`` can't be sent: the socket is just closed).
        self.tls_ready = False
        #: Until the first bytes tell RLlink from a WebSocket upgrade (PROTOCOL.md 16); then ``None``.
        self.first: Optional[FirstBytes] = FirstBytes()
        #: The WebSocket the actor's RLlink travels in, if it upgraded (set under :attr:`lock`).
        self.ws: Optional[ServerWebSocket] = None

    def flush_locked(self) -> None:
        """Send what the connection has to send (the caller holds :attr:`lock`).

        Raises:
            OSError: the peer is gone; TimeoutError: it read nothing for ``_SEND_TIMEOUT_S``.
        """
        parts = self.conn.data_to_send() if self.ws is None else self.ws.data_to_send()
        for part in _coalesced(parts):
            if self.tls:
                self._send_tls_locked(part)
            else:
                self.sock.sendall(part)

    def _send_tls_locked(self, data: Any) -> None:
        view = memoryview(data).cast("B")  # counted in bytes, whatever the buffer's items
        deadline = time.monotonic() + _SEND_TIMEOUT_S
        while view:
            try:
                view = view[self.sock.send(view):]
                continue
            except (ssl.SSLWantWriteError, BlockingIOError):
                wait_write = True
            except ssl.SSLWantReadError:  # a TLS 1.3 key update: the peer's record first
                wait_write = False
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the actor read nothing for {_SEND_TIMEOUT_S:g} s")
            _wait_ready(self.sock, wait_write, left)

    def send_ack(self, seq: int) -> None:
        """Confirm ``seq``; a connection that just went away is left to its reader thread."""
        with self.lock:
            if self.closed:
                return
            try:
                self.conn.send_ack(seq)
                self.flush_locked()
            except (OSError, LocalProtocolError) as exc:
                # A TLS write that timed out left part of a record on the stream: nothing more can be said on it.
                # (Any other failure: the reader still takes what the actor sent before it went.)
                if self.tls and isinstance(exc, TimeoutError):
                    self.broken = True
                logger.debug("samples: ACK %d to %s not sent: %s", seq, self.client_id, exc)


class SampleServer:
    """Listens for actors on ``host:port`` and queues their samples for :meth:`take`.

    Args:
        host, port: where to listen (port 0: one the OS picks; see :attr:`port`).
        max_clients: connections held at once; one more gets ``ERROR limit_exceeded``.
        max_buffer_samples, max_buffer_bytes: what the inbox holds before reading pauses.
        max_frame_bytes: largest frame an actor may send.
        handshake_timeout: seconds a new connection has to finish its TLS handshake and its ``PING``.
        secret: shared secret (``protocol.auth``) actors must prove they know; ``None``: none.
        tls_cert_file: PEM certificate chain of the server; setting it switches TLS on (actors
            connect to ``tls://HOST:PORT``).
        tls_key_file: PEM private key of that certificate (``None`` if it is in ``tls_cert_file``).
        tls_client_ca_file: PEM CA bundle; when set, every actor must present a certificate it signed.
        model, episodes: what EnvClient simulators run and how their episodes are read (both or
            neither); ``None``: simulators are refused.
        window: the samples one actor may leave unconfirmed, named in the handshake, for a
            consumer that confirms late (:meth:`receive`); ``None``: names none (actors keep
            their own default window; :meth:`take` confirms on taking).
        ws_allowed_origins: the runner's setting of that name (``server/settings.py``, same
            default): the page origins whose WebSocket upgrade is let in (``"*"``: any); an
            ``Origin`` not among them is closed with 1008 and why. An actor that is a program (``ws://`` from
            Python, Node) sends no ``Origin`` and is always let in.

    Raises:
        ValueError: a bound is not positive, a TLS file is given without ``tls_cert_file``, the
            secret is too short or too long, or ``ws_allowed_origins`` is not a list of origins.
        OSError: the port is taken, or a TLS file can't be read.
        ssl.SSLError: a TLS file is not a valid PEM certificate or key, or the key doesn't match.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_clients: int = 64,
        max_buffer_samples: int = 256,
        max_buffer_bytes: int = 512 * 1024 * 1024,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        handshake_timeout: float = 10.0,
        secret: Optional[Secret] = None,
        tls_cert_file: Optional[str] = None,
        tls_key_file: Optional[str] = None,
        tls_client_ca_file: Optional[str] = None,
        model: Optional[SimulatorModel] = None,
        episodes: Optional[EpisodeReader] = None,
        window: Optional[int] = None,
        ws_allowed_origins: Iterable[str] = (),
    ) -> None:
        if (model is None) != (episodes is None):
            raise ValueError("give model and episodes together (simulators need both) or neither")
        if (tls_key_file or tls_client_ca_file) and not tls_cert_file:
            raise ValueError("tls_key_file and tls_client_ca_file need tls_cert_file")
        for name, value in (("max_clients", max_clients), ("max_buffer_samples", max_buffer_samples),
                            ("max_buffer_bytes", max_buffer_bytes), ("max_frame_bytes", max_frame_bytes),
                            ("window", 1 if window is None else window)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        origins = None if isinstance(ws_allowed_origins, str) else tuple(ws_allowed_origins)
        if origins is None or not all(isinstance(origin, str) and origin for origin in origins):
            raise ValueError(f"ws_allowed_origins must be a list of origins, got {ws_allowed_origins!r}")
        self.ws_allowed_origins = origins
        self.host = host
        self.max_clients = max_clients
        self.max_frame_bytes = max_frame_bytes
        self.handshake_timeout = handshake_timeout
        self.window = window
        self.stats = SampleStats()
        self._secret = None if secret is None else normalize_secret(secret)
        self._ssl = tls_server_context(tls_cert_file, tls_key_file, tls_client_ca_file) if tls_cert_file else None
        self._room = threading.Condition()
        self.inbox = Inbox(max_buffer_samples, max_buffer_bytes, on_drained=self._drained)
        #: Large frame bodies, reused once the loop let go of every array in them (protocol/buffers.py).
        self._bodies = BufferPool(min(max_buffer_bytes, MAX_POOLED_BODY_BYTES))
        self._lock = threading.Lock()
        self._sessions: set[_Session] = set()
        self._by_client: dict[str, _Session] = {}
        #: client_id -> (highest seq queued, highest seq taken and confirmed).
        self._seqs: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self._state_body = encode_body_once(build_state({}, 0))
        self._weights_version = 0
        self.model = model
        self._episodes = episodes
        self._extensions = SAMPLE_EXTENSIONS if model is None else (*SAMPLE_EXTENSIONS, Extension.POLICY_GRAPH.value)
        #: Notified when a model is published (a simulator's GET_CONFIG waits for the first).
        self._published = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._log_limiter = LogLimiter()
        self._listener = socket.create_server((host, port), backlog=128)
        self.port: int = self._listener.getsockname()[1]
        self._listener.settimeout(_POLL_S)  # accept() wakes to see stop(); closing alone doesn't wake it
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept_forever, name=f"rlinks-samples-{self.port}",
                                               daemon=True)

    # ------------------------------------------------------------------
    # Life cycle

    @property
    def address(self) -> str:
        """``HOST:PORT`` for actors."""
        return f"{self.host}:{self.port}"

    @property
    def tls(self) -> bool:
        """Whether actors must connect with ``tls://``."""
        return self._ssl is not None

    def start(self) -> "SampleServer":
        if not is_loopback(self.host):
            if self._secret is None:
                logger.warning("rlinks: the sample server listens on %s, BEYOND LOOPBACK, WITHOUT AUTHENTICATION: "
                               "anyone who can reach the port can feed your training loop. Set RLINKS_SECRET "
                               "(docs/SECURITY.md)", self.address)
            elif self._ssl is None:
                logger.warning("rlinks: the sample server listens on %s beyond loopback without TLS: anyone on "
                               "the network path can read the samples and the model; set tls_cert_file "
                               "(docs/SECURITY.md)",
                               self.address)
        self._accept_thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listener and every connection (actors get ``ERROR shutting_down``); wait for the threads."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self.inbox.close()
        with self._room:
            self._room.notify_all()
        with self._published:
            self._published.notify_all()
        self._listener.close()
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            self._end(session, ErrorCode.SHUTTING_DOWN, "the sample server is stopping")
        deadline = time.monotonic() + timeout
        for thread in [self._accept_thread, *self._threads]:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> "SampleServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------
    # The consumer's side

    def take(self, max_wait: float) -> list[dict[str, Any]]:
        """The oldest message's samples or episode chunks (at least one message once any is there),
        confirmed to their actor.

        Waits up to ``max_wait`` seconds; returns ``[]`` if nothing came (or
        the server is stopping). Chunks are dicts with a ``"kind"``
        (``dataset/episodes.py``); plain samples are as the actor put them.
        """
        samples: list[dict[str, Any]] = []
        for message in self.receive(max_wait):
            samples.extend(message.episodes)
            self.confirm(message)
        return samples

    def receive(self, max_wait: float) -> list[Received]:
        """The oldest messages (at least one sample's worth once any is there, and markers), unconfirmed.

        Waits up to ``max_wait`` seconds for a sample or a marker; returns
        ``[]`` if none came (or the server is stopping). Each must be given
        to :meth:`confirm` once the consumer is done with it; one that never
        is stays unconfirmed, and its actor sends it again to the next server.
        """
        messages: list[Received] = []
        for batch in self.inbox.take(1, max_wait):
            assert isinstance(batch, Received)
            if batch.chunks:
                self.stats.episodes_taken += batch.steps
            else:
                self.stats.samples_taken += batch.steps
            messages.append(batch)
        return messages

    def confirm(self, message: Received) -> None:
        """Confirm ``message`` to its actor (``ACK``); a marker or an unnumbered message needs none."""
        if message.seq is not None:
            self._confirm(message.client, message.seq)

    def publish_weights(self, params: Mapping[str, Any], version: Optional[int] = None, *,
                        graph: Optional[bytes] = None) -> int:
        """Make ``params`` (name -> numeric numpy array) what ``GET_STATE`` answers; returns its version.

        ``version`` defaults to the last one plus 1. The weight set is packed
        once here; every actor's ``SET_STATE`` carries the same bytes. With
        simulators (``model``), the first weights fix the model's form (with
        ``graph``, the policy graph of a module that is not RLlib's default
        MLP) and simulators waiting for their config get it now.

        Raises:
            WeightsError: a name or array is not a weight (``protocol.weights``).
            ValueError: the simulators can't run these weights (``SimulatorModel.accept``).
        """
        with self._lock:
            version = self._weights_version + 1 if version is None else version
            body = encode_body_once(build_state(params, version))
            if self.model is not None:
                self.model.accept(params, graph)
            self._state_body, self._weights_version = body, version
            self._published.notify_all()
        return version

    @property
    def weights_version(self) -> int:
        """The version of the last published weights (0: none yet)."""
        return self._weights_version

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping.is_set()

    @property
    def clients(self) -> int:
        """Connections open now."""
        with self._lock:
            return len(self._sessions)

    # ------------------------------------------------------------------
    # Network threads

    def _accept_forever(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, peer = self._listener.accept()
            except TimeoutError:
                continue  # look at the stop flag again
            except OSError:
                if self._stopping.is_set():
                    return
                logger.exception("samples: accept failed on port %d", self.port)
                time.sleep(_POLL_S)
                continue
            conn = Connection(Role.SERVER, extensions=self._extensions, agent=SERVER_AGENT, secret=self._secret,
                              max_frame_bytes=self.max_frame_bytes, columns=self._episodes is not None,
                              samples_window=self.window, body_alloc=self._bodies.take)
            session = _Session(sock, peer, conn, tls=self._ssl is not None)
            with self._lock:
                full = len(self._sessions) >= self.max_clients
                if not full:
                    self._sessions.add(session)
                    self.stats.connections += 1
            if full:
                self.stats.refused += 1
                self._end(session, ErrorCode.LIMIT_EXCEEDED, f"the sample server holds {self.max_clients} "
                                                            "connections already (max_clients)")
                continue
            thread = threading.Thread(target=self._serve, args=(session,), name=f"rlinks-samples-{peer}",
                                      daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()

    def _serve(self, session: _Session) -> None:
        reason = "closed"
        try:
            if session.tls and not self._tls_handshake(session):
                return
            reason = self._read_loop(session)
        except (ProtocolError, IngestError) as exc:
            self.stats.refused += 1
            if self._log_limiter.allow():
                logger.warning("samples: client %s (%s) refused: %s: %s", session.client_id, session.peer,
                               exc.code, exc)
            self._end(session, exc.code, str(exc))
            reason = f"refused ({exc.code})"
        except OSError as exc:
            reason = f"connection error: {exc}"
        except Exception:
            logger.exception("samples: client %s (%s): internal error", session.client_id, session.peer)
            self._end(session, ErrorCode.SERVER_ERROR, "internal error in the sample server")
        finally:
            self._close(session)
            logger.debug("samples: client %s (%s) disconnected: %s", session.client_id, session.peer, reason)

    def _read_loop(self, session: _Session) -> str:
        conn, sock = session.conn, session.sock
        small = bytearray(_READ_BYTES)
        handshake_by = time.monotonic() + self.handshake_timeout
        while not self._stopping.is_set():
            if session.broken:
                return "a write to the actor failed"
            if conn.handshaking and time.monotonic() > handshake_by:
                self._end(session, ErrorCode.LIMIT_EXCEEDED, f"no handshake within {self.handshake_timeout:g} s")
                return "handshake timeout"
            # WebSocket (or not told yet): every read lands in ``small``, and the WebSocket copies it.
            stream = session.first is not None or session.ws is not None
            if session.tls:
                target = None if stream else conn.read_buffer()
                n = self._recv_tls(session, small if target is None else target)
                if n is None:
                    continue
            else:
                readable, _, _ = select.select([sock], [], [], _POLL_S)
                if not readable:
                    continue
                target = None if stream else conn.read_buffer()
                n = sock.recv_into(small if target is None else target)
                if target is not None and 0 < n < len(target):
                    n += self._fill(sock, target[n:])
            if stream:
                self._stream_bytes(session, memoryview(small)[:n])
            elif not n:
                conn.receive_eof()
            elif target is not None:
                conn.received_into(n)
            else:
                conn.receive_data(memoryview(small)[:n])
            ended = self._handle_events(session)
            if ended:
                return ended
        return "server stopping"

    @staticmethod
    def _fill(sock: socket.socket, view: memoryview) -> int:
        """Read into ``view`` until it is full or the actor closes; the bytes read.

        The rest of a large body comes in chunks of what the socket holds
        (64 KB and up): reading them here, without a trip through the loop
        and the Connection for each, is most of a camera sample's cost on
        this side. Each wait is bounded by the socket's timeout
        (``_SEND_TIMEOUT_S``: an actor that stops mid-frame for that long is
        gone), and a stop closes the socket under it.

        Raises:
            OSError: the connection failed, or stayed silent mid-frame for the timeout.
        """
        got, size = 0, len(view)
        while got < size:
            n = sock.recv_into(view[got:])
            if not n:
                break
            got += n
        return got

    def _stream_bytes(self, session: _Session, data: memoryview) -> None:
        """The stream's first bytes (RLlink or a WebSocket upgrade?), or bytes of a WebSocket; empty: its end.

        Raises:
            ProtocolError: the Connection refused what came (plain RLlink, as always).
        """
        first = session.first
        if first is not None:
            start = first.feed(data) if data else b""
            if start is None:
                return  # a prefix of "GET ": too soon to tell (the handshake deadline runs)
            session.first = None
            if not first.websocket:
                if start:
                    session.conn.receive_data(start)
                else:
                    session.conn.receive_eof()  # gone before saying anything (or a prefix of "GET " only)
                return
            ws = ServerWebSocket(session.conn, server="dataset", allowed_origins=self.ws_allowed_origins,
                                 max_message_bytes=self.max_frame_bytes,
                                 handshake_max_bytes=min(HANDSHAKE_MAX_FRAME_BYTES, self.max_frame_bytes))
            with session.lock:
                session.ws = ws
            data = memoryview(start)
        ws = session.ws
        assert ws is not None
        with session.lock:  # the consumer's thread writes ACKs through the same WebSocket
            if data:
                ws.receive_data(data)
            else:
                ws.receive_eof()

    def _websocket_ended(self, session: _Session) -> str:
        """The WebSocket layer is done (an upgrade refused, a close frame answered): why, logged if refused."""
        ws = session.ws
        assert ws is not None
        if ws.refusal is None:
            return f"client closed the WebSocket ({ws.close_text or 'no close frame'})"
        self.stats.refused += 1
        if self._log_limiter.allow():
            logger.warning("samples: client %s (%s) refused: WebSocket upgrade refused: %s", session.client_id,
                           session.peer, ws.refusal)
        return f"WebSocket upgrade refused ({ws.refusal_code})"

    def _tls_handshake(self, session: _Session) -> bool:
        """Run the TLS handshake on ``session``'s socket; ``False`` if it failed (counted and logged).

        Bounded by ``handshake_timeout``; every SSL call is made under the
        session's lock, the waiting outside it.
        """
        assert self._ssl is not None
        deadline = time.monotonic() + self.handshake_timeout
        try:
            with session.lock:
                if session.closed:
                    return False
                session.sock = self._ssl.wrap_socket(session.sock, server_side=True, do_handshake_on_connect=False)
            while not self._stopping.is_set():
                with session.lock:
                    if session.closed:
                        return False
                    try:
                        session.sock.do_handshake()
                        session.tls_ready = True
                        return True
                    except ssl.SSLWantReadError:
                        want_write = False
                    except ssl.SSLWantWriteError:
                        want_write = True
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no TLS handshake within {self.handshake_timeout:g} s")
                _wait_ready(session.sock, want_write, min(left, _POLL_S))
        except OSError as exc:  # ssl.SSLError (a bad certificate, not TLS at all), the timeout, a reset
            self.stats.tls_handshakes_failed += 1
            if self._log_limiter.allow():
                logger.warning("samples: TLS handshake with %s failed: %s", session.peer, exc)
            self._linger(session)
        return False

    @staticmethod
    def _linger(session: _Session) -> None:
        """Half-close, then read and drop what the peer still sends, for at most ``_LINGER_S``.

        Closing with its bytes unread (the ``PING`` right after a TLS 1.3
        handshake) would reset the connection, and the peer would lose the
        TLS alert that says why it was refused (no client certificate).
        """
        sock = session.sock
        deadline = time.monotonic() + _LINGER_S
        try:
            sock.shutdown(socket.SHUT_WR)  # an SSLSocket drops its TLS state here: plain reads from now on
            while not session.closed and time.monotonic() < deadline:
                try:
                    if not sock.recv(_READ_BYTES):
                        return
                except BlockingIOError:
                    _wait_ready(sock, False, max(0.0, min(_POLL_S, deadline - time.monotonic())))
        except OSError as exc:
            logger.debug("samples: %s gone after its failed TLS handshake: %s", session.peer, exc)

    @staticmethod
    def _recv_tls(session: _Session, buffer: memoryview | bytearray) -> Optional[int]:
        """Bytes read into ``buffer`` (0: the actor closed), or ``None`` if none came within ``_POLL_S``."""
        with session.lock:
            if session.closed:
                return 0
            try:
                return session.sock.recv_into(buffer)
            except ssl.SSLWantReadError:
                want_write = False
            except ssl.SSLWantWriteError:  # a renegotiation or key update wants to write first
                want_write = True
        _wait_ready(session.sock, want_write, _POLL_S)
        return None

    def _handle_events(self, session: _Session) -> Optional[str]:
        """Handle every event read so far; the reason the conversation ended, if it did."""
        conn = session.conn
        while True:
            with session.lock:
                event = conn.next_event()
                ws = session.ws
                if event is None:
                    if ws is not None and ws.error is not None:
                        raise ws.error  # the WebSocket layer's refusal, after the messages before it
                    session.flush_locked()  # what the connection answered by itself (PONG with AUTH's challenge)
                    if ws is None or not ws.finished:
                        return None
            if event is None:
                return self._websocket_ended(session)
            if isinstance(event, SamplesReceived):
                self._received(session, event.samples, event.seq, event.frame_bytes, flush=event.flush)
            elif isinstance(event, EpisodesReceived):
                self._episodes_received(session, event)
            elif isinstance(event, HandshakeDone):
                self._handshake_done(session, event)
            elif isinstance(event, StateRequested):
                with session.lock:
                    conn.send_state(self._state_body)
                    session.flush_locked()
            elif isinstance(event, ConfigRequested):
                frame = self._config_frame(session)
                with session.lock:
                    conn.send_config(frame)
                    session.flush_locked()
            elif isinstance(event, (ConnectionClosed, ErrorReceived)):
                if ws is not None:
                    with session.lock:
                        session.flush_locked()  # the answer to the actor's close frame (RFC 6455)
                return f"{event}"
            else:
                self._end(session, ErrorCode.UNSUPPORTED_MESSAGE,
                          f"{type(event).__name__}: a sample server takes SAMPLES, EPISODES, GET_CONFIG and "
                          "GET_STATE only")
                return "unsupported request"
            with session.lock:
                session.flush_locked()

    def _handshake_done(self, session: _Session, event: HandshakeDone) -> None:
        with session.lock:
            session.flush_locked()
        if event.client_id is not None:
            session.client_id = event.client_id
        with self._lock:
            self._by_client[session.client_id] = session

    def _config_frame(self, session: _Session) -> bytes:
        """The ``SET_CONFIG`` frame for ``session``, once a model was synced (waiting for it, bounded).

        Raises:
            IngestError: no simulators here (``unsupported_message``), or no model within
                :data:`FIRST_MODEL_WAIT_S` (``limit_exceeded``).
        """
        if self.model is None:
            raise IngestError(_NO_SIMULATORS, code=ErrorCode.UNSUPPORTED_MESSAGE)
        deadline = time.monotonic() + FIRST_MODEL_WAIT_S
        with self._published:
            while not self.model.ready:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping.is_set():
                    raise IngestError(f"no model was synced within {FIRST_MODEL_WAIT_S:g} s: the training loop "
                                      "calls RLinkSyncModel(dataset).sync(module) before simulators can act",
                                      code=ErrorCode.LIMIT_EXCEEDED)
                self._published.wait(min(left, _POLL_S))
            return self.model.config_frame(with_graph=session.conn.speaks(Extension.POLICY_GRAPH))

    def _episodes_received(self, session: _Session, event: EpisodesReceived) -> None:
        """Check a simulator's episodes as a runner does and queue their chunks; answer an on-policy batch.

        Raises:
            IngestError: no simulators here, or a chunk is malformed (the whole message is refused).
        """
        if self._episodes is None:
            raise IngestError(_NO_SIMULATORS, code=ErrorCode.UNSUPPORTED_MESSAGE)
        chunks = self._episodes(event.episodes)
        self._received(session, chunks, event.seq, event.frame_bytes, episodes=True)
        if event.on_policy:
            # The dataset has no update to wait for: the newest weights at once.
            with session.lock:
                session.conn.send_state(self._state_body)
                session.flush_locked()

    def _received(self, session: _Session, items: list, seq: Optional[int], frame_bytes: int, *,
                  episodes: bool = False, flush: bool = False) -> None:
        """Queue a message once (a resend is confirmed again or left to its first copy); pause while full.

        A resent message that is a flush still passes its flush on (as a marker).
        """
        self.stats.messages += 1
        self.stats.bytes_received += frame_bytes
        client = session.client_id
        if not items:  # a flush alone
            self._mark(client, flush=True)
            return
        if seq is not None:
            with self._lock:
                held, confirmed = self._seqs.get(client, (0, 0))
            if seq <= held:
                self.stats.duplicates += 1
                if seq <= confirmed:
                    session.send_ack(seq)
                if flush:
                    self._mark(client, flush=True)
                return  # still in the inbox: its ACK comes when it is taken
            with self._lock:
                self._seqs[client] = (seq, confirmed)
                self._seqs.move_to_end(client)
                while len(self._seqs) > _HELD_SEQ_MAX:
                    self._seqs.popitem(last=False)
        if episodes:
            self.stats.episodes_received += len(items)
        else:
            self.stats.samples_received += len(items)
        # A message of empty chunks only is queued too: confirmed in its turn, after what came before it.
        batch = Received(episodes=items, steps=len(items), nbytes=frame_bytes,
                         weights_seq_no=self._weights_version, client=client, seq=seq, chunks=episodes, flush=flush)
        if self.inbox.put(batch):
            # Full: read nothing more from this actor until the consumer takes (TCP pushes back).
            with self._room:
                while self.inbox.full() and not self._stopping.is_set():
                    self._room.wait(_POLL_S)

    def _mark(self, client: str, *, flush: bool = False, ended: bool = False) -> None:
        """Queue a marker (no samples): ``client`` flushed, or its connection ended."""
        self.inbox.put(Received(episodes=[], steps=0, nbytes=0, weights_seq_no=self._weights_version, client=client,
                                flush=flush, ended=ended))

    def _drained(self) -> None:
        with self._room:
            self._room.notify_all()

    def _confirm(self, client: str, seq: int) -> None:
        with self._lock:
            held, confirmed = self._seqs.get(client, (seq, 0))
            self._seqs[client] = (max(held, seq), max(confirmed, seq))
            session = self._by_client.get(client)
        if session is not None:
            # Between connections, the actor resends it and is confirmed then.
            session.send_ack(seq)

    def _end(self, session: _Session, code: Any, reason: str) -> None:
        """Send ``ERROR`` (if none was yet) and close the socket."""
        with session.lock:
            if not session.closed and (session.tls_ready or not session.tls):
                try:
                    session.conn.send_error(code, reason)
                    if session.ws is not None:
                        session.ws.close(code, reason)  # before the upgrade is done: an HTTP answer instead
                    session.flush_locked()
                except (OSError, LocalProtocolError):
                    pass  # the peer is gone or was told already; the socket is closed next either way
        self._close(session)

    def _close(self, session: _Session) -> None:
        with session.lock:
            if session.closed:
                return
            session.closed = True
            try:
                session.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already disconnected
            session.sock.close()
        with self._lock:
            self._sessions.discard(session)
            if self._by_client.get(session.client_id) is session:
                del self._by_client[session.client_id]
            ended = session.client_id in self._seqs
        if ended and not self._stopping.is_set():
            self._mark(session.client_id, ended=True)


class LearnerNode:
    """Seed 001's learner: ``LearnerNode(port=..., reliable=True, retry_attempts=3).receive()``.

    A :class:`SampleServer` on ``port`` whose :meth:`receive` returns one
    sample at a time. Delivery is always confirmed (``ack``); ``reliable``
    and ``retry_attempts`` are the actors' business here (their
    ``ActorNode`` reconnects and resends) and are kept for seed code only.

    Raises:
        ValueError: ``retry_attempts`` is negative.
    """

    def __init__(self, port: int = 5555, host: str = "127.0.0.1", *, reliable: bool = True,
                 retry_attempts: int = 3, **server_options: Any) -> None:
        if type(retry_attempts) is not int or retry_attempts < 0:
            raise ValueError(f"retry_attempts must be an int >= 0, got {retry_attempts!r}")
        self.reliable = reliable
        self.retry_attempts = retry_attempts
        self.server = SampleServer(host, port, **server_options).start()
        self._ready: collections.deque[dict[str, Any]] = collections.deque()

    @property
    def address(self) -> str:
        return self.server.address

    def receive(self, timeout: float = 30.0) -> dict[str, Any]:
        """The next sample (a dict) any actor sent.

        Raises:
            TimeoutError: nothing came within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while not self._ready:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no sample arrived on port {self.server.port} within {timeout:g} s")
            self._ready.extend(self.server.take(left))
        return self._ready.popleft()

    def close(self) -> None:
        self.server.stop()
