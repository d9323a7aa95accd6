"""RLinkClient: a simulator's connection to an RLlib learner.

One blocking TCP connection that speaks RLlink: the handshake (with our
extensions offered, and plain RLlink when the server is RLlib's own), the
learner's config, weights, and batches of episodes. Every wait is bounded by
``timeout``; connecting is retried with exponential backoff and full jitter.

Delivery
--------

With the ``ack`` extension (our server) every batch carries a sequence number
``seq`` (1, 2, ... per ``client_id``) and the server answers ``ACK {seq}`` once
RLlib has taken the batch (the runner's ``sample()`` returned it). The client
keeps at most ``max_unacked`` batches unacknowledged and waits for ACKs when
that many are out, so the window also bounds how far a client runs ahead of
the learner.

With ``reliable=True`` a connection that drops during a call is reopened
(same ``client_id``, same backoff policy), the handshake is redone and every
unacknowledged batch is sent again in order. A runner drops a ``seq`` it
already holds, and a runner that was restarted never saw the confirmed ones
again, so each batch is trained on once (see ``docs/SECURITY.md`` for the
one window where a batch can be trained twice). Without ``ack`` (RLlib's own
server) nothing says what arrived: a batch whose bytes were not all written is
sent again, one that was written is not, so a batch in flight when the
connection drops may be lost but is never doubled.

Only network failures are retried: an ``ERROR`` from the server (except
``shutting_down``), a timeout, or bytes that aren't valid RLlink raise at once.

Security
--------

``tls://HOST:PORT`` speaks TLS: the server's certificate is checked against
``ca_file`` (the system's CAs if none) and the host name; ``cert_file`` and
``key_file`` present a client certificate to a server that asks for one.
With a shared secret (``secret=``, ``secret_file=`` or ``$RLINKS_SECRET``)
the client and server prove to each other that they know it before
anything else is said (``protocol/auth.py``); a server that can't prove it
is refused with :class:`AuthenticationFailed`.
"""

from __future__ import annotations

import collections
import functools
import importlib.metadata
import logging
import math
import os
import random
import socket
import time

try:
    import ssl
except ImportError:  # pragma: no cover - Python built without OpenSSL
    ssl = None  # type: ignore[assignment]
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

import numpy as np

from ..protocol.auth import SECRET_ENV, ClientAuth, load_secret, normalize_secret
from ..protocol.episodes import episode_len
from ..protocol.errors import AuthFailed, FrameError, FrameTooLarge, ProtocolError
from ..protocol.extensions import Extension, make_offer, negotiate, parse_offer
from ..protocol.config import read_config
from ..protocol.framing import FrameDecoder, encode_message_parts
from ..protocol.limits import DEFAULT_MAX_FRAME_BYTES, MAX_BODY_BYTES
from ..protocol.messages import MessageType
from ..protocol.weights import read_state
from .address import Address, AddressLike, parse_address
from .errors import (
    AuthenticationFailed,
    ClientClosed,
    ClientError,
    ConnectFailed,
    ConnectionLost,
    PickledConfigRefused,
    ProtocolViolation,
    ServerError,
    ServerTimeout,
    TLSFailed,
    TLSNotAvailable,
)

__all__ = ["RLinkClient", "WeightsUpdate", "ClientStats", "DEFAULT_EXTENSIONS", "backoff_delay"]

#: What the client offers in its PING unless told otherwise.
DEFAULT_EXTENSIONS = (Extension.WANT_STEPS.value, Extension.ACK.value, Extension.ENDPOINTS.value)

#: The ``ERROR`` code after which reliable mode reconnects instead of raising.
_RECONNECT_CODES = frozenset({"shutting_down"})

_RECV_CHUNK = 64 * 1024
#: Non-blocking reads per drain; whatever is left waits for the next read.
_MAX_DRAIN_READS = 64
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")
_MAX_SERVER_TEXT = 4096

T = TypeVar("T")


def _iov_max() -> int:
    names = getattr(os, "sysconf_names", {})
    if "SC_IOV_MAX" in names:
        value = os.sysconf("SC_IOV_MAX")
        if value > 0:
            return value
    return 16  # POSIX's guaranteed minimum


_IOV_MAX = _iov_max()

#: Handshake failures that mean "this is not the server you trust"; never retried.
_CERTIFICATE_ERRORS: tuple = (ssl.SSLCertVerificationError, ssl.CertificateError) if ssl is not None else ()


@functools.lru_cache(maxsize=1)
def _agent() -> str:
    try:
        version = importlib.metadata.version("rlinks-rllib")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"  # running from a source tree that isn't installed
    return f"rlinks-rllib-client/{version}"


def backoff_delay(failures: int, initial: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait after ``failures`` failed attempts (0 for the first failure).

    Exponential backoff with full jitter: uniform in ``[0, min(cap,
    initial * 2**failures)]``, so many clients of a restarted learner don't
    all come back at the same instant.
    """
    return rng.uniform(0.0, min(cap, initial * 2.0 ** min(failures, 64)))


@dataclass(frozen=True)
class WeightsUpdate:
    """Weights from a ``SET_STATE``.

    Attributes:
        params: parameter name -> numpy array (read-only views of the frame).
        seq_no: the learner's ``weights_seq_no``; 0 means "no number yet".
        want_steps: env steps the server wants before the next on-policy
            batch (``want_steps`` extension); ``None`` when not negotiated.
    """

    params: dict[str, np.ndarray]
    seq_no: int
    want_steps: Optional[int] = None


@dataclass(frozen=True)
class ClientStats:
    """Counters since the client was made (a snapshot; see :attr:`RLinkClient.stats`)."""

    #: Batches (EPISODES / EPISODES_AND_GET_STATE) written in full at least once.
    batches_sent: int = 0
    #: Env steps in those batches.
    steps_sent: int = 0
    #: Batches the server acknowledged (``ack`` extension only).
    batches_acked: int = 0
    #: Env steps in those batches.
    steps_acked: int = 0
    #: Extra sends of a batch after a reconnect.
    batches_resent: int = 0
    #: Connections reopened after the first.
    reconnects: int = 0
    #: Batches sent and not acknowledged yet.
    unacked: int = 0


@dataclass(eq=False)
class _Batch:
    seq: Optional[int]
    kind: MessageType
    parts: list
    steps: int
    #: Generation of the connection it was last written on in full; 0: never.
    sent_on: int = 0
    sends: int = 0
    acked: bool = False


@dataclass
class _Counters:
    sent: int = 0
    steps: int = 0
    acked: int = 0
    steps_acked: int = 0
    resent: int = 0
    reconnects: int = 0


class RLinkClient:
    """A blocking connection to an RLlib learner (our server or RLlib's own).

    Not thread-safe: use one client per thread. Ray is never imported, except
    to unpickle RLlib's config when ``unsafe_allow_pickle`` asks for it.

    Example::

        with RLinkClient("localhost:5555", reliable=True) as client:
            config = client.get_config()
            weights = client.get_state()
            ...
            weights = client.send_episodes_and_get_state([episode])

    Args:
        address: ``"HOST:PORT"``, ``"tcp://HOST:PORT"``, ``"[::1]:PORT"`` or a
            ``(host, port)`` tuple (see :func:`~.address.parse_address`).
        timeout: seconds any one wait may take: for a reply (on-policy, that
            includes the learner's training step), for the server to take a
            message, for room in the ``max_unacked`` window.
        connect_timeout: seconds for one TCP connection attempt.
        retry_attempts: connection attempts per :meth:`connect`, and (reliable
            mode) reconnections per call.
        backoff_initial, backoff_cap: the backoff between attempts (seconds);
            see :func:`backoff_delay`.
        reliable: reconnect and resend when the connection drops mid-call.
        max_unacked: batches that may await an ACK at once.
        extensions: extension names to offer; the server agrees to a subset.
        max_frame_bytes: largest frame accepted from the server.
        unsafe_allow_pickle: let :meth:`get_config` unpickle RLlib's pickled
            config. **Unsafe**: unpickling runs code the server chooses; only
            for a server you trust entirely. Needs Ray installed.
        logger: where warnings (reconnects, possibly lost batches) go.
        secret: the shared secret (str or bytes, at least 16 bytes). ``None``:
            read ``secret_file``, else ``$RLINKS_SECRET``, else authenticate
            nobody. With a secret, only a server that proves it knows the
            same secret is talked to.
        secret_file: a file holding the secret (instead of ``secret``).
        ca_file: PEM bundle of the CAs that may sign the server's certificate
            (``tls://`` only; default: the system's trusted CAs).
        cert_file, key_file: PEM client certificate and its key, for a server
            that requires client certificates (``key_file`` may be omitted if
            the key is in ``cert_file``).
        tls_server_name: the name the server's certificate must carry, if not
            the host of ``address`` (e.g. connecting through a tunnel).

    Raises:
        ValueError: an argument is out of range, the address is malformed,
            TLS options are given for a ``tcp://`` address, or the secret is
            too short.
        OSError: ``secret_file`` or a TLS file can't be read.
        ssl.SSLError: a TLS file is not valid PEM.
        TLSNotAvailable: ``address`` asks for TLS and Python has no ``ssl``.
    """

    def __init__(
        self,
        address: AddressLike,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        retry_attempts: int = 5,
        backoff_initial: float = 0.2,
        backoff_cap: float = 10.0,
        reliable: bool = False,
        max_unacked: int = 16,
        extensions: Iterable[str] = DEFAULT_EXTENSIONS,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        unsafe_allow_pickle: bool = False,
        logger: Optional[logging.Logger] = None,
        secret: Optional[str | bytes] = None,
        secret_file: Optional[str] = None,
        ca_file: Optional[str] = None,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
        tls_server_name: Optional[str] = None,
    ) -> None:
        self.address: Address = parse_address(address)
        #: The address given; if it turns out to be a directory, every
        #: (re)connect asks it again which runner to use.
        self.given_address: Address = self.address
        self._is_directory = False
        self._uses_directory = False
        self._ssl_context = _check_transport(self.address, ca_file, cert_file, key_file, tls_server_name)
        self._tls_server_name_given = tls_server_name
        self._tls_server_name = tls_server_name or self.address.host
        if secret is not None and secret_file is not None:
            raise ValueError("pass secret or secret_file, not both")
        self._secret: Optional[bytes] = normalize_secret(secret) if secret is not None else load_secret(secret_file)
        self.timeout = _positive("timeout", timeout)
        self.connect_timeout = _positive("connect_timeout", connect_timeout)
        self.retry_attempts = _count("retry_attempts", retry_attempts)
        self.backoff_initial = _non_negative("backoff_initial", backoff_initial)
        self.backoff_cap = _non_negative("backoff_cap", backoff_cap)
        self.max_unacked = _count("max_unacked", max_unacked)
        if type(max_frame_bytes) is not int or not 0 < max_frame_bytes <= MAX_BODY_BYTES:
            raise ValueError(f"max_frame_bytes must be an int in 1..{MAX_BODY_BYTES:,}, got {max_frame_bytes!r}")
        self.max_frame_bytes = max_frame_bytes
        names = {e.value if isinstance(e, Extension) else e for e in extensions}
        unknown = names - {e.value for e in Extension}
        if unknown:
            raise ValueError(f"unknown extensions {sorted(map(str, unknown))}; known: {[e.value for e in Extension]}")
        if Extension.AUTH.value in names:
            raise ValueError(f"'auth' is offered when there is a secret: pass secret=, secret_file= or set ${SECRET_ENV}")
        self.extensions: frozenset[str] = frozenset(names)
        self.reliable = bool(reliable)
        self.unsafe_allow_pickle = bool(unsafe_allow_pickle)
        self._log = logger if logger is not None else logging.getLogger(__name__)

        self._client_id = uuid.uuid4().hex
        self._rng = random.Random()
        self._sleep: Callable[[float], None] = time.sleep
        self._sock: Optional[socket.socket] = None
        self._decoder: Optional[FrameDecoder] = None
        self._inbox: collections.deque[dict] = collections.deque()
        self._generation = 0
        self._handshaken = False
        self._closed = False
        self._plain = False
        self._agreed: frozenset[str] = frozenset()
        self._server_agent = ""
        self._next_seq = 1
        self._pending: collections.deque[_Batch] = collections.deque()
        self._counters = _Counters()
        self._warned_no_ack = False
        self._in_handshake = False

    # ------------------------------------------------------------------
    # Properties

    @property
    def client_id(self) -> str:
        """This client's id (uuid4 hex), sent in every handshake; the same across reconnects."""
        return self._client_id

    @property
    def connected(self) -> bool:
        """Whether a handshaken connection is open now."""
        return self._sock is not None

    @property
    def server_extensions(self) -> frozenset[str]:
        """Extensions agreed in the last handshake (empty for RLlib's own server).

        Raises:
            ClientError: no handshake has happened yet.
        """
        self._require_handshake()
        return self._agreed

    @property
    def is_plain_rllib(self) -> bool:
        """Whether the server answered a bare ``PONG`` (RLlib's own server).

        Raises:
            ClientError: no handshake has happened yet.
        """
        self._require_handshake()
        return self._plain

    @property
    def authenticated(self) -> bool:
        """Whether this client authenticates (and requires the server to) with a shared secret."""
        return self._secret is not None

    @property
    def tls(self) -> bool:
        """Whether the connection is TLS."""
        return self._ssl_context is not None

    @property
    def server_agent(self) -> str:
        """The server's ``agent`` string from the last handshake ('' if it sent none)."""
        return self._server_agent

    @property
    def stats(self) -> ClientStats:
        """A snapshot of the delivery counters."""
        c = self._counters
        return ClientStats(
            batches_sent=c.sent,
            steps_sent=c.steps,
            batches_acked=c.acked,
            steps_acked=c.steps_acked,
            batches_resent=c.resent,
            reconnects=c.reconnects,
            unacked=len(self._pending),
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self.connected else "not connected")
        return f"<RLinkClient {self.address} {state} client_id={self._client_id[:8]}>"

    # ------------------------------------------------------------------
    # Lifecycle

    def __enter__(self) -> "RLinkClient":
        return self.connect()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Wait for outstanding ACKs (when leaving normally), then close."""
        try:
            if exc_type is None and self._pending and not self._closed:
                self.flush()
        finally:
            self.close()

    def connect(self) -> "RLinkClient":
        """Open the connection and do the handshake, unless already connected.

        Other calls connect on their own; call this to fail early.

        Raises:
            ConnectFailed: no attempt of ``retry_attempts`` succeeded.
            ServerTimeout: the server took the connection but sent no ``PONG``.
            ServerError: the server refused us with ``ERROR``.
            ProtocolViolation: the server's answer is not valid RLlink.
            ClientClosed: :meth:`close` was called.
        """
        self._check_open()
        if self._sock is None:
            try:
                self._connect()
            except BaseException:
                self._discard_connection()
                raise
        return self

    def close(self) -> None:
        """Close the connection for good. Unacknowledged batches are given up (with a warning).

        The one method that may be called from another thread: a call blocked
        on the connection, or a reliable client between reconnection
        attempts, then stops with :class:`ClientClosed` (or :class:`ConnectionLost`).
        """
        if self._closed:
            return
        self._closed = True
        if self._pending:
            self._log.warning(
                "closing the connection to %s with %d batch(es) not acknowledged (seq %s); "
                "call flush() first to wait for them",
                self.address, len(self._pending), _seq_range(self._pending),
            )
            self._pending.clear()
        self._discard_connection()

    # ------------------------------------------------------------------
    # Calls

    def get_config(self) -> Any:
        """The learner's setup: the ``SET_CONFIG`` description map (see ``protocol.config``).

        When the server sends only RLlib's pickled ``AlgorithmConfig`` (RLlib's
        own server), that pickle is refused unless the client was made with
        ``unsafe_allow_pickle=True``; then the unpickled object is returned.

        Raises:
            PickledConfigRefused: only a pickle is on offer and pickle is off.
            ClientError: unpickling was allowed but Ray is not installed.
            ConnectFailed, ConnectionLost, ServerTimeout, ServerError,
            ProtocolViolation, ClientClosed: see :meth:`connect` and the class docs.
        """

        def op() -> dict:
            self._drain()
            self._send_message({"type": MessageType.GET_CONFIG.value}, "GET_CONFIG")
            return self._await(MessageType.SET_CONFIG, "SET_CONFIG (after GET_CONFIG)")

        message = self._run("get_config", op)
        try:
            config = read_config(message)
        except ProtocolError as exc:
            raise ProtocolViolation(f"{self.address} sent a malformed SET_CONFIG: {exc}", code=exc.code) from exc
        if config is not None:
            return config
        raw = message["config"]
        if not self.unsafe_allow_pickle:
            raise PickledConfigRefused(
                f"{self.address} offers its config only as a Python pickle ({len(raw):,} bytes; "
                "RLlib's own server does this). Unpickling runs code chosen by the server, so it is off. "
                "Use an rlinks-rllib learner, or pass unsafe_allow_pickle=True for a server you fully trust."
            )
        return _unpickle_config(raw)

    def get_state(self) -> WeightsUpdate:
        """The learner's current weights.

        Raises:
            ConnectFailed, ConnectionLost, ServerTimeout, ServerError,
            ProtocolViolation, ClientClosed.
        """

        def op() -> dict:
            self._drain()
            self._send_message({"type": MessageType.GET_STATE.value}, "GET_STATE")
            return self._await(MessageType.SET_STATE, "SET_STATE (after GET_STATE)")

        return self._weights(self._run("get_state", op))

    def send_episodes(self, episodes: Iterable[Any], timesteps: Optional[int] = None) -> Optional[int]:
        """Send a batch of episode chunks (off-policy); returns its ``seq`` (``None`` without ``ack``).

        Returns once the batch is written; its ACK is read during later calls
        or by :meth:`flush`. Waits (bounded by ``timeout``) while
        ``max_unacked`` batches are unacknowledged.

        Args:
            episodes: episode states (``protocol.episodes.build_episode_state``),
                or objects with a ``get_state()`` that returns one.
            timesteps: env steps to report; the sum of the chunks' lengths by default.

        Raises:
            ValueError: an episode is malformed (``protocol.episodes.EpisodeError``).
            TypeError, UnsafePayload: a value can't go on the wire.
            FrameTooLarge: the batch is too big for one frame; send fewer episodes.
            ConnectFailed, ConnectionLost, ServerTimeout, ServerError,
            ProtocolViolation, ClientClosed.
        """
        states, steps, timesteps = self._prepare(episodes, timesteps)
        self._run("send_episodes", self._make_room)
        batch = self._enqueue(MessageType.EPISODES, states, steps, timesteps)

        def op() -> None:
            self._drain()
            if batch.sent_on != self._generation:
                self._send_batch(batch)

        self._run("send_episodes", op)
        return batch.seq

    def send_episodes_and_get_state(self, episodes: Iterable[Any], timesteps: Optional[int] = None) -> WeightsUpdate:
        """Send an on-policy batch and wait for the weights trained on it.

        ``timeout`` must cover the learner's training step.

        Raises:
            The same as :meth:`send_episodes`.
        """
        what = "send_episodes_and_get_state"
        kind = MessageType.EPISODES_AND_GET_STATE
        states, steps, timesteps = self._prepare(episodes, timesteps)
        self._run(what, self._make_room)
        batch = self._enqueue(MessageType.EPISODES_AND_GET_STATE, states, steps, timesteps)

        def op() -> dict:
            self._drain()
            if batch.sent_on != self._generation:
                if batch.sent_on and batch.seq is None:
                    # Written in full on a connection that then dropped, and
                    # nothing says whether it arrived: don't risk a duplicate.
                    self._send_message({"type": MessageType.GET_STATE.value}, "GET_STATE")
                elif batch.acked:
                    # Confirmed (RLlib has it) before the connection dropped;
                    # sending it again could train on it twice (a restarted
                    # runner can't know it). Ask for the weights it is owed:
                    # an empty batch without seq waits for them like any other.
                    self._send_message(
                        {"type": kind.value, "episodes": [], "timesteps": 0}, f"{kind.value} (empty)"
                    )
                else:
                    self._send_batch(batch)
            return self._await(
                MessageType.SET_STATE,
                "SET_STATE (after our on-policy batch)",
                hint="; on-policy, this includes the learner's training step: raise `timeout` if it takes longer",
            )

        return self._weights(self._run(what, op))

    def flush(self) -> None:
        """Wait until every batch sent so far is acknowledged (no-op without ``ack``).

        Raises:
            ServerTimeout: no ACK came within ``timeout``.
            ConnectFailed, ConnectionLost, ServerError, ProtocolViolation, ClientClosed.
        """
        self._check_open()
        if not self._pending:
            return

        def op() -> None:
            self._drain()
            while self._pending:
                self._await(None, f"ACK ({len(self._pending)} batch(es) unacknowledged, seq {_seq_range(self._pending)})")

        self._run("flush", op)

    # ------------------------------------------------------------------
    # Retry and reconnection

    def _run(self, what: str, op: Callable[[], T]) -> T:
        """Run ``op`` on a live connection; in reliable mode, reconnect and rerun it after a drop.

        ``op`` must be safe to run again: it checks what the reconnection
        already resent. Any exception closes the connection, since the stream
        may be mid-frame or a reply may still be on its way.
        """
        self._check_open()
        recoveries = 0
        while True:
            try:
                if self._sock is None:
                    self._connect()
                return op()
            except (ConnectionLost, ServerError) as exc:
                self._discard_connection()
                if self._closed:
                    raise ClientClosed(f"{what}: the client was closed") from exc
                if not self._recoverable(exc):
                    raise
                if recoveries >= self.retry_attempts:
                    raise ConnectionLost(
                        f"{what}: the connection to {self.address} kept dropping; "
                        f"gave up after {recoveries} reconnection(s). Last error: {exc}"
                    ) from exc
                if not self._warned_no_ack and Extension.ACK.value not in self._agreed:
                    self._warned_no_ack = True
                    self._log.warning(
                        "%s does not acknowledge batches (plain RLlink): a batch in flight when "
                        "the connection dropped may be lost", self.address,
                    )
                self._log.warning("connection to %s lost during %s (%s); reconnecting", self.address, what, exc)
                self._sleep(backoff_delay(recoveries, self.backoff_initial, self.backoff_cap, self._rng))
                recoveries += 1
            except BaseException:
                self._discard_connection()
                raise

    def _recoverable(self, exc: ClientError) -> bool:
        if not self.reliable:
            return False
        if isinstance(exc, ServerError):
            return exc.code in _RECONNECT_CODES
        return True

    def _connect(self) -> None:
        """Open a connection and handshake, retrying with backoff; then resend pending batches."""
        last: Optional[BaseException] = None
        for attempt in range(self.retry_attempts):
            if attempt:
                self._sleep(backoff_delay(attempt - 1, self.backoff_initial, self.backoff_cap, self._rng))
            self._check_open()
            if self._uses_directory:
                self.address = self.given_address
            try:
                self._open()
                self._handshake()
                self._via_directory()
                if self._handshaken:
                    self._counters.reconnects += 1
                self._handshaken = True
                self._after_handshake()
                return
            except ServerError as exc:
                if exc.code not in _RECONNECT_CODES:
                    raise
                last = exc
            except ConnectionLost as exc:
                last = exc
            except ClientError:
                raise
            except _CERTIFICATE_ERRORS as exc:
                raise TLSFailed(
                    f"{self.address}: the server's certificate is not trusted: {exc}. "
                    "Is ca_file the CA that signed it, and is it made out to this host name?"
                ) from exc
            except OSError as exc:  # refused, unreachable, DNS, connect timeout
                last = exc
            self._discard_connection()
            self._log.debug("connection attempt %d/%d to %s failed: %s", attempt + 1, self.retry_attempts, self.address, last)
        raise ConnectFailed(
            f"could not connect to {self.address} after {self.retry_attempts} attempt(s): {last}; "
            "is the learner running and is the port right?"
        ) from last

    def _via_directory(self) -> None:
        """If we reached a directory, ask it for the runners and connect to the first that answers.

        Runners come least-loaded first; one that refuses or fails its
        handshake is skipped, so a client finds a live runner on its own.

        Raises:
            ConnectionLost: the directory lists no runner, or none answered.
        """
        if not self._is_directory:
            return
        self._uses_directory = True
        self._send_message({"type": MessageType.GET_ENDPOINTS.value}, "GET_ENDPOINTS")
        reply = self._await(MessageType.ENDPOINTS, "ENDPOINTS (from the directory)")
        self._discard_connection()
        tried: list[str] = []
        for entry in reply["endpoints"]:
            if not (isinstance(entry, dict) and type(entry.get("host")) is str and type(entry.get("port")) is int):
                continue
            self.address = Address(entry["host"], entry["port"], self.given_address.tls)
            self._tls_server_name = self._tls_server_name_given or entry["host"]
            try:
                self._open()
                self._handshake()
            except (OSError, ConnectionLost) as exc:
                tried.append(f"{self.address} ({exc})")
                self._discard_connection()
                continue
            self._log.info("directory %s sent us to runner %s", self.given_address, self.address)
            return
        raise ConnectionLost(
            f"the directory at {self.given_address} lists no runner that answers"
            + (f": {'; '.join(tried)}" if tried else " yet")
        )

    def _open(self) -> None:
        sock = socket.create_connection((self.address.host, self.address.port), timeout=self.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl_context is not None:
                # The TLS handshake runs here, bounded by connect_timeout.
                sock = self._ssl_context.wrap_socket(sock, server_hostname=self._tls_server_name)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._decoder = FrameDecoder(self.max_frame_bytes)
        self._inbox.clear()
        self._agreed = frozenset()
        self._generation += 1

    def _handshake(self) -> None:
        auth = ClientAuth(self._secret) if self._secret is not None else None
        offered = self.extensions | {Extension.AUTH.value} if auth is not None else self.extensions
        offer = make_offer(offered, agent=_agent(), client_id=self._client_id, **(auth.offer() if auth else {}))
        self._in_handshake = True
        try:
            self._send_message({"type": MessageType.PING.value, "rlinks": offer}, "PING")
            reply = self._await(
                MessageType.PONG,
                "PONG (the handshake)",
                hint="; the server took the connection but did not answer. RLlib's own server serves "
                "one client at a time: is another client connected to it?",
            )
            try:
                server_offer = parse_offer(reply)
            except ProtocolError as exc:
                raise ProtocolViolation(f"{self.address} sent a malformed PONG: {exc}", code=exc.code) from exc
            self._plain = server_offer is None
            self._agreed = negotiate(server_offer, offered)
            self._server_agent = "" if server_offer is None else server_offer.agent
            self._is_directory = server_offer is not None and server_offer.extra.get("role") == "directory"
            if auth is not None and not self._is_directory:
                self._authenticate(auth, server_offer)
        finally:
            self._in_handshake = False
        self._log.debug(
            "connected to %s (%s; extensions: %s)", self.address,
            "plain RLlink" if self._plain else self._server_agent or "rlinks", sorted(self._agreed) or "none",
        )

    def _authenticate(self, auth: ClientAuth, server_offer: Any) -> None:
        """Answer the server's challenge and check its proof.

        Raises:
            AuthenticationFailed: the server does not authenticate, refused our
                proof, or could not prove it knows the secret.
        """
        try:
            answer = auth.respond(server_offer)
        except AuthFailed as exc:
            raise AuthenticationFailed(
                f"{self.address}: {exc}; this client has a secret and talks only to a server that "
                "proves it knows it (is the server's auth on?)"
            ) from None
        self._send_message(answer, "AUTH")
        reply = self._await(MessageType.AUTH_OK, "AUTH_OK (authentication)")
        try:
            auth.confirm(reply)
        except AuthFailed as exc:
            raise AuthenticationFailed(f"{self.address}: {exc}; is it the learner you meant?") from None

    def _after_handshake(self) -> None:
        if not self._pending:
            return
        if Extension.ACK.value not in self._agreed:
            self._log.warning(
                "%s no longer acknowledges batches; %d unacknowledged batch(es) (seq %s) may be lost",
                self.address, len(self._pending), _seq_range(self._pending),
            )
            self._pending.clear()
            return
        for batch in self._pending:
            self._send_batch(batch)

    def _discard_connection(self) -> None:
        sock, self._sock = self._sock, None
        self._decoder = None
        self._inbox.clear()
        if sock is not None:
            try:
                # Wakes a call blocked on this socket in another thread (close() alone doesn't).
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected any more: nothing to wake
            sock.close()
        if self._pending and not self.reliable:
            self._log.warning(
                "connection to %s closed with %d batch(es) not acknowledged (seq %s); they may be lost "
                "(reliable=True resends them)", self.address, len(self._pending), _seq_range(self._pending),
            )
            self._pending.clear()

    # ------------------------------------------------------------------
    # Batches

    def _prepare(self, episodes: Iterable[Any], timesteps: Optional[int]) -> tuple[list, int, int]:
        states = []
        for i, episode in enumerate(episodes):
            if not isinstance(episode, Mapping) and callable(getattr(episode, "get_state", None)):
                episode = episode.get_state()
            if not isinstance(episode, dict):
                raise TypeError(f"episodes[{i}] must be an episode state dict, got {type(episode).__name__}")
            states.append(episode)
        steps = sum(episode_len(state) for state in states)
        if timesteps is None:
            timesteps = steps
        elif type(timesteps) is not int or timesteps < 0:
            raise ValueError(f"timesteps must be a non-negative int, got {timesteps!r}")
        return states, steps, timesteps

    def _enqueue(self, kind: MessageType, states: list, steps: int, timesteps: int) -> _Batch:
        message: dict[str, Any] = {"type": kind.value, "episodes": states, "timesteps": timesteps}
        acked = Extension.ACK.value in self._agreed
        if acked:
            message["seq"] = self._next_seq
        parts = encode_message_parts(message)
        seq = None
        if acked:
            seq, self._next_seq = self._next_seq, self._next_seq + 1
            if self.reliable:
                # A copy: the caller may reuse its arrays before the ACK comes.
                parts = [b"".join(parts)]
        batch = _Batch(seq=seq, kind=kind, parts=parts, steps=steps)
        if acked:
            self._pending.append(batch)
        return batch

    def _make_room(self) -> None:
        self._drain()
        while len(self._pending) >= self.max_unacked:
            self._await(
                None,
                f"ACK ({len(self._pending)} batches unacknowledged, max_unacked={self.max_unacked})",
            )

    def _send_batch(self, batch: _Batch) -> None:
        self._send_parts(batch.parts, batch.kind.value)
        batch.sent_on = self._generation
        batch.sends += 1
        if batch.sends == 1:
            self._counters.sent += 1
            self._counters.steps += batch.steps
        else:
            self._counters.resent += 1
        if not self.reliable:
            batch.parts = []  # never resent; let the arrays go

    def _on_ack(self, seq: int) -> None:
        for i, batch in enumerate(self._pending):
            if batch.seq == seq:
                del self._pending[i]
                batch.acked = True
                self._counters.acked += 1
                self._counters.steps_acked += batch.steps
                return
        if 0 < seq < self._next_seq:
            # Acknowledged before; a resend after a reconnect gets a second ACK.
            self._log.debug("duplicate ACK for seq %d from %s", seq, self.address)
            return
        raise ProtocolViolation(
            f"{self.address} acknowledged seq {seq}, which was never sent (last sent: {self._next_seq - 1})"
        )

    def _weights(self, message: dict) -> WeightsUpdate:
        try:
            params, seq_no = read_state(message["state"])
        except ValueError as exc:
            raise ProtocolViolation(f"{self.address} sent malformed weights: {exc}", code="invalid_message") from exc
        want = message.get("want_steps") if Extension.WANT_STEPS.value in self._agreed else None
        return WeightsUpdate(params=params, seq_no=seq_no, want_steps=want)

    # ------------------------------------------------------------------
    # Bytes

    def _send_message(self, message: dict, what: str) -> None:
        self._send_parts(encode_message_parts(message), what)

    def _send_parts(self, parts: list, what: str) -> None:
        """Write one frame's buffers, however many calls it takes, within ``timeout``."""
        sock = self._live_socket()
        views = []
        for part in parts:
            view = memoryview(part)
            if view.format != "B" or view.ndim != 1:
                view = view.cast("B")
            if len(view):
                views.append(view)
        use_sendmsg = _HAS_SENDMSG and self._ssl_context is None
        if self._ssl_context is not None and len(views) > 1:
            # TLS sockets have no sendmsg, and one TLS record per small part
            # would cost more than this copy (TLS copies while encrypting anyway).
            views = [memoryview(b"".join(views))]
        deadline = time.monotonic() + self.timeout
        i = 0
        while i < len(views):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._send_timeout(what)
            sock.settimeout(remaining)
            try:
                if use_sendmsg:
                    written = sock.sendmsg(views[i : i + _IOV_MAX])
                else:
                    written = sock.send(views[i])
            except TimeoutError:
                raise self._send_timeout(what) from None
            except OSError as exc:
                error = self._error_in_flight()
                if error is not None:
                    raise error from exc
                raise ConnectionLost(f"connection to {self.address} lost while sending {what}: {exc}") from exc
            while written:
                size = len(views[i])
                if written >= size:
                    written -= size
                    i += 1
                else:
                    views[i] = views[i][written:]
                    written = 0

    def _error_in_flight(self) -> Optional[ServerError]:
        """After a failed send: the ``ERROR`` the server sent before closing, if it is here.

        A server that refuses a frame (too large, bad episode) says why and
        closes without reading the rest, so our send fails; the reason is
        worth more than "connection reset". Best effort: any failure here
        leaves the send's own error to be raised.
        """
        sock, decoder = self._sock, self._decoder
        if sock is None or decoder is None:
            return None
        try:
            sock.settimeout(0.0)
            for _ in range(_MAX_DRAIN_READS):
                data = sock.recv(_RECV_CHUNK)
                if not data:
                    break
                self._inbox.extend(decoder.feed(data))
        except (OSError, ProtocolError) as exc:
            self._log.debug("nothing more to read from %s after a failed send: %s", self.address, exc)
        for message in self._inbox:
            if message["type"] == MessageType.ERROR.value:
                return _server_error(message)
        return None

    def _send_timeout(self, what: str) -> ServerTimeout:
        return ServerTimeout(
            f"{self.address} did not take our {what} within {self.timeout:g} s (it stopped reading)"
        )

    def _await(self, expect: Optional[MessageType], what: str, hint: str = "") -> Optional[dict]:
        """Read until a message of type ``expect`` arrives and return it.

        ACKs on the way are accounted for; ``ERROR`` raises
        :class:`ServerError`; anything else is a :class:`ProtocolViolation`.
        With ``expect=None``, return after the first ACK.
        """
        deadline = time.monotonic() + self.timeout
        while True:
            while not self._inbox:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ServerTimeout(f"no {what} from {self.address} within {self.timeout:g} s{hint}")
                self._live_socket().settimeout(remaining)
                try:
                    self._pump(what)
                except TimeoutError:
                    raise ServerTimeout(f"no {what} from {self.address} within {self.timeout:g} s{hint}") from None
            message = self._inbox.popleft()
            if expect is not None and message["type"] == expect.value:
                return message
            self._unsolicited(message, what)
            if expect is None:
                return None

    def _drain(self) -> None:
        """Take in whatever the server sent between calls (ACKs, an ERROR, EOF) without waiting."""
        while self._inbox:
            self._unsolicited(self._inbox.popleft(), "the next call")
        self._live_socket().settimeout(0.0)
        for _ in range(_MAX_DRAIN_READS):
            if not self._pump("the next call"):
                break
            while self._inbox:
                self._unsolicited(self._inbox.popleft(), "the next call")

    def _unsolicited(self, message: dict, what: str) -> None:
        kind = message["type"]
        if kind == MessageType.ACK.value and Extension.ACK.value in self._agreed:
            self._on_ack(message["seq"])
            return
        if kind == MessageType.ERROR.value:
            raise _server_error(message)
        raise ProtocolViolation(f"{self.address} sent {kind[:64]} while we waited for {what}")

    def _pump(self, what: str) -> bool:
        """One read from the socket into the decoder; ``False`` if a non-blocking read found nothing.

        Raises:
            TimeoutError: the socket's timeout passed (the caller words it).
            ConnectionLost: EOF (possibly mid-frame) or a socket error.
            ProtocolViolation: the bytes are not valid RLlink.
        """
        sock = self._live_socket()
        decoder = self._decoder
        assert decoder is not None
        body = decoder.next_read_buffer()
        try:
            if body is not None:
                received = sock.recv_into(body)
                messages = decoder.advance(received) if received else []
            else:
                data = sock.recv(_RECV_CHUNK)
                received = len(data)
                messages = decoder.feed(data) if received else []
        except BlockingIOError:
            return False
        except TimeoutError:
            raise
        except ProtocolError as exc:
            raise self._violation(exc, decoder) from exc
        except OSError as exc:
            if ssl is not None and isinstance(exc, (ssl.SSLWantReadError, ssl.SSLWantWriteError)):
                return False  # no whole TLS record yet
            if (ssl is not None and self._in_handshake and isinstance(exc, ssl.SSLError)
                    and not isinstance(exc, ssl.SSLEOFError)):
                raise TLSFailed(
                    f"{self.address} ended the TLS session while we waited for {what}: {exc}. "
                    "Does it require a client certificate (cert_file/key_file) signed by a CA it trusts?"
                ) from exc
            raise ConnectionLost(f"connection to {self.address} lost while waiting for {what}: {exc}") from exc
        if not received:
            try:
                decoder.eof()
            except FrameError as exc:
                raise ConnectionLost(f"{self.address} closed the connection while we waited for {what}: {exc}") from exc
            hint = ""
            if self._in_handshake and self._ssl_context is not None:
                hint = " (right after the TLS handshake: does it require a client certificate, cert_file/key_file?)"
            elif self._in_handshake:
                hint = " (before answering our PING: does it speak TLS? then connect to tls://...)"
            raise ConnectionLost(f"{self.address} closed the connection while we waited for {what}{hint}")
        self._inbox.extend(messages)
        return True

    def _violation(self, exc: ProtocolError, decoder: FrameDecoder) -> ProtocolViolation:
        hint = ""
        if isinstance(exc, FrameTooLarge):
            hint = f" (max_frame_bytes is {self.max_frame_bytes:,}; raise it if the learner's weights are that large)"
        elif isinstance(exc, FrameError) and decoder.frames == 0:
            hint = f"; is {self.address} an RLlink learner's port?"
        return ProtocolViolation(f"{self.address} sent invalid RLlink: {exc}{hint}", code=exc.code)

    def _live_socket(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionLost(f"not connected to {self.address}")
        return self._sock

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("this RLinkClient was closed; make a new one")

    def _require_handshake(self) -> None:
        if not self._handshaken:
            raise ClientError("no handshake yet: call connect() (or any other call) first")


def _check_transport(
    address: Address,
    ca_file: Optional[str],
    cert_file: Optional[str],
    key_file: Optional[str],
    server_name: Optional[str],
) -> Optional["ssl.SSLContext"]:
    """The TLS context a ``tls://`` address needs; ``None`` for ``tcp://``.

    Raises:
        ValueError: TLS options for a ``tcp://`` address, or a key without a certificate.
        TLSNotAvailable: Python has no ``ssl`` module.
        OSError, ssl.SSLError: a file can't be read or is not valid PEM.
    """
    options = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file, "tls_server_name": server_name}
    if not address.tls:
        given = sorted(name for name, value in options.items() if value)
        if given:
            raise ValueError(f"{', '.join(given)} given for {address}; use a tls:// address for TLS")
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


def _server_error(message: dict) -> ServerError:
    # Bounded: the text ends up in logs and tracebacks.
    code, text = message["code"][:64], message["message"][:_MAX_SERVER_TEXT]
    if code == AuthFailed.code:
        return AuthenticationFailed(f"the server refused us: {text}")
    return ServerError(code, text)


def _unpickle_config(raw: bytes) -> Any:
    try:
        import ray.rllib  # noqa: F401  (the pickle names RLlib's classes)
    except ImportError as exc:
        raise ClientError("unpickling RLlib's config needs ray[rllib] installed on this machine") from exc
    import pickle

    return pickle.loads(raw)  # unsafe by design: only with unsafe_allow_pickle=True


def _seq_range(batches: Iterable[_Batch]) -> str:
    seqs = [b.seq for b in batches if b.seq is not None]
    if not seqs:
        return "-"
    return str(seqs[0]) if len(seqs) == 1 else f"{seqs[0]}..{seqs[-1]}"


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
    return float(value)


def _count(name: str, value: int) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value
