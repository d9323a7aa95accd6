"""RLinkClient: a simulator's connection to an RLlib learner.

One blocking TCP connection that speaks RLlink: the handshake (with our
extensions offered, and plain RLlink when the server is RLlib's own), the
learner's config, weights, and batches of episodes. Every wait is bounded by
``timeout``; connecting is retried with exponential backoff and full jitter.
A client that has never reached its learner keeps trying for ``connect_wait``
seconds (60 by default, or ``$RLINKS_CONNECT_WAIT_S``): it may start first.

The rules of the conversation (what may be sent and received when, what the
offer holds, what an ``ACK`` confirms) are those of
:class:`~rlinks_rllib.protocol.connection.Connection`, one per TCP connection;
this module decides when to connect, reconnect and send a batch again.

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

The learner's end
-----------------

``ERROR shutting_down`` says the learner is stopping: its run ended, or it is
being restarted (a job stopped and resubmitted, an ``Algorithm`` restored from
a checkpoint), which look the same from here. A reliable client keeps trying
to reach it again for ``shutdown_grace`` seconds at most (30 s by default, or
``$RLINKS_SHUTDOWN_GRACE_S``; ``retry_attempts`` still counts too), then the
call raises :class:`ConnectFailed` saying the learner did not come back, caused
by that ``ERROR`` (:class:`~rlinks_rllib.client.env_client.EnvClient` ends quietly on it, as
:class:`TrainingEnded`). Raise it for learners that take longer to come back.

Served actions
--------------

With the ``served_actions`` extension (offered by default; rlinks' runner
agrees when it can compute actions for its model) :meth:`RLinkClient.act`
sends observations and gets the actions back: the runner runs the policy and
records the episodes itself (PROTOCOL.md 10.5). When a connection drops, the
runner closes every episode the client had open there (as truncated), so on
the next connection each such env starts again: its next row goes as a
``start`` row and a row that would have ended the lost episode is left out;
:attr:`ActionsReply.interrupted` names those envs. The caller's envs are not
touched; nothing needs resetting. (The C++ client does the same.)

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

import logging
import math
import pickle
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

import numpy as np

from ..._version import CLIENT_AGENT
from ...protocol.auth import SECRET_ENV, load_secret, normalize_secret
from ...protocol.connection import (
    Acked,
    ActionsReceived,
    ConfigReceived,
    Connection,
    HandshakeDone,
    ModulesReceived,
    Role,
    StateReceived,
)
from ...protocol.errors import ErrorCode, InvalidMessage
from ...protocol.extensions import Extension
from ...protocol.limits import DEFAULT_MAX_FRAME_BYTES, MAX_BODY_BYTES
from ...protocol.messages import MessageType
from ...protocol.multi_agent import chunk_steps
from ...protocol.samples import EncodedSample, encode_sample
from ...protocol.served import ActRows, act_message, read_act
from ...protocol.window import AckWindow, Batch, seq_range
from .address import Address, AddressLike, parse_address
from .directory import fetch_endpoints
from ..errors import (
    ClientClosed,
    ClientError,
    ConnectFailed,
    ConnectionLost,
    NoRunnerYet,
    NotAgreed,
    PickledConfigRefused,
    ProtocolViolation,
    ServerError,
)
from .link import Link
from .retry import (
    CONNECT_WAIT_ENV,
    SHUTDOWN_GRACE_ENV,
    ConnectWait,
    RetryPolicy,
    backoff_delay,
    connect_wait as _connect_wait,
    shutdown_grace as _shutdown_grace,
)
from .transport import Transport, tls_context

__all__ = [
    "RLinkClient", "WeightsUpdate", "WeightsNotice", "ActionsReply", "ClientStats", "DEFAULT_EXTENSIONS",
    "backoff_delay",
]

#: What the client offers in its PING unless told otherwise. Offering
#: ``served_actions`` costs nothing: a runner that can't serve does not agree.
DEFAULT_EXTENSIONS = (
    Extension.WANT_STEPS.value, Extension.ACK.value, Extension.ENDPOINTS.value, Extension.SERVED_ACTIONS.value,
    Extension.SERVED_TAKEN.value, Extension.TAKEOVER.value, Extension.TIMESTEP.value, Extension.WEIGHTS_NOTICE.value,
)

_ON_POLICY_HINT = "; on-policy, this includes the learner's training step: raise `timeout` if it takes longer"
_ACT_HINT = ("; on-policy, once the runner has its share of the update this includes the learner's training "
             "step: raise `timeout` if it takes longer")

T = TypeVar("T")


@dataclass(frozen=True)
class WeightsUpdate:
    """Weights from a ``SET_STATE``.

    Attributes:
        params: parameter name -> numpy array (read-only views of the frame).
        seq_no: the learner's ``weights_seq_no``; 0 means "no number yet".
        want_steps: env steps the server wants before the next on-policy
            batch (``want_steps`` extension); ``None`` when not negotiated.
        timestep: RLlib's env steps sampled when these weights came
            (``timestep`` extension, off-policy runners); ``None`` otherwise.
    """

    params: dict[str, np.ndarray]
    seq_no: int
    want_steps: Optional[int] = None
    timestep: Optional[int] = None


@dataclass(frozen=True)
class WeightsNotice:
    """The runner's weights version as its newest ``ACK`` named it (``weights_notice``).

    Attributes:
        seq_no: the ``weights_seq_no`` a ``GET_STATE`` would have got then.
        at: when the ``ACK`` was read (``time.monotonic()``).
    """

    seq_no: int
    at: float


@dataclass(frozen=True)
class ActionsReply:
    """The answer to one :meth:`RLinkClient.act`.

    Attributes:
        env: the envs of the rows that wanted an action (neither terminated
            nor truncated), in row order; ``actions[i]`` is ``env[i]``'s.
        actions: ``(m, *action_shape)`` in the action space's form (a
            ``Discrete`` as int64).
        weights_seq_no: the weights the actions were computed with (the last
            one seen when no ``ACT`` had to be sent).
        interrupted: envs whose open episode the runner had closed (as
            truncated) because a connection dropped, found when this call sent
            their rows on a new connection: a row that continued the episode
            went as a ``start`` row (a new episode begins at that
            observation), a row that ended it was left out. Informational:
            the envs themselves need no reset.
    """

    env: list[int]
    actions: np.ndarray
    weights_seq_no: int
    interrupted: list[int]

    def __len__(self) -> int:
        return len(self.env)


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
    #: ``ACT``\s answered (served actions).
    acts: int = 0
    #: Envs whose episode a dropped connection ended (see :attr:`ActionsReply.interrupted`).
    episodes_interrupted: int = 0


@dataclass
class _Counters:
    sent: int = 0
    steps: int = 0
    acked: int = 0
    steps_acked: int = 0
    resent: int = 0
    reconnects: int = 0
    acts: int = 0
    interrupted: int = 0


@dataclass
class _ActPlan:
    """What to send for one ``act`` call, given which envs have open or lost episodes on the runner.

    Attributes:
        rows: indices of the caller's rows to send (``None``: all, unchanged).
        start: the ``start`` flag of each row sent.
        wanting: the envs of the rows sent that want an action, in order.
        interrupted: envs whose lost episode this call restarts (or ends for good).
        open_after, lost_after: the sets once the ``ACT`` is answered.
    """

    rows: Optional[list[int]]
    start: np.ndarray
    wanting: list[int]
    interrupted: list[int]
    open_after: set[int]
    lost_after: set[int]


@dataclass(eq=False)
class _Job:
    """One call's batch, followed across reconnects.

    Attributes:
        batch: its record (replaced if it had to be encoded again on a new connection).
        states, timesteps, on_policy: what to encode it from again.
        queued_on: the connection whose output holds it, unwritten, right after :meth:`RLinkClient._queue`.
    """

    batch: Batch
    states: list
    timesteps: int
    on_policy: bool
    queued_on: int
    #: A ``SAMPLES`` message (``states`` holds the samples, packed), not episodes.
    samples: bool = False
    #: That message asks for a flush (PROTOCOL.md 10.10).
    flush: bool = False


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
        connect_wait: seconds the first connection keeps trying a learner
            that is not up yet (refused, or a directory with no runner yet),
            with one warning saying so and the backoff below; ``None``:
            ``$RLINKS_CONNECT_WAIT_S``, else 60 s. 0: ``retry_attempts``
            attempts and no more. Once connected, a drop is
            ``retry_attempts``' and ``shutdown_grace``'s business.
        backoff_initial, backoff_cap: the backoff between attempts (seconds);
            see :func:`backoff_delay`.
        reliable: reconnect and resend when the connection drops mid-call.
        shutdown_grace: (reliable mode) seconds to keep trying to reach the
            learner again after it said ``shutting_down`` (its run ended, or
            it is restarting); ``None``: ``$RLINKS_SHUTDOWN_GRACE_S``, else
            30 s. Past it the call raises ConnectFailed (see the module docs);
            the wait can run over by one connection attempt
            (``connect_timeout``). 0 gives up at once.
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
        ValueError: an argument is out of range (``shutdown_grace``,
            ``connect_wait`` and their variables included), the address is malformed,
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
        shutdown_grace: Optional[float] = None,
        connect_wait: Optional[float] = None,
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
        self._ssl_context = tls_context(self.address, ca_file, cert_file, key_file, tls_server_name)
        self._tls_server_name = tls_server_name
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
        names = frozenset(e.value if isinstance(e, Extension) else e for e in extensions)
        if Extension.AUTH.value in names:
            raise ValueError(f"'auth' is offered when there is a secret: pass secret=, secret_file= or set ${SECRET_ENV}")
        self.extensions: frozenset[str] = names
        self.reliable = bool(reliable)
        self.shutdown_grace = _shutdown_grace(shutdown_grace)
        self.connect_wait = _connect_wait(connect_wait)
        self.unsafe_allow_pickle = bool(unsafe_allow_pickle)
        self._log = logger if logger is not None else logging.getLogger(__name__)

        self._client_id = uuid.uuid4().hex
        self._retry = RetryPolicy(self.retry_attempts, self.backoff_initial, self.backoff_cap,
                                  shutdown_grace=self.shutdown_grace, connect_wait=self.connect_wait)
        #: Set by close(): ends a wait between reconnection attempts at once.
        self._closing = threading.Event()
        self._sleep: Callable[[float], None] = self._closing.wait
        #: The batches awaiting an ACK, across connections.
        self._window = AckWindow(self.max_unacked)
        self._counters = _Counters()
        self._new_connection()  # checks the extension names (ValueError)

        # The client's state: the live connection, if any; how many were
        # opened (a batch records the one it was written on); the last
        # completed handshake; whether the address is a directory; closed.
        self._link: Optional[Link] = None
        self._generation = 0
        self._server: Optional[HandshakeDone] = None
        self._uses_directory = False
        self._closed = False
        self._warned_no_ack = False
        #: The learner said ``shutting_down``: batches it never acknowledged will never be trained.
        self._learner_ended = False
        # Served actions: the envs with an episode open on the runner (as of
        # connection _open_generation), those whose episode a dropped
        # connection closed, and the weights of the last actions.
        self._open_envs: set[int] = set()
        self._lost_envs: set[int] = set()
        self._open_generation = 0
        self._actions_seq_no = 0
        #: The weights version the runner's newest ACK named (``weights_notice``).
        self._notice: Optional[WeightsNotice] = None

    # ------------------------------------------------------------------
    # Properties

    @property
    def client_id(self) -> str:
        """This client's id (uuid4 hex), sent in every handshake; the same across reconnects."""
        return self._client_id

    @property
    def connected(self) -> bool:
        """Whether a handshaken connection is open now."""
        return self._link is not None

    @property
    def server_extensions(self) -> frozenset[str]:
        """Extensions agreed in the last handshake (empty for RLlib's own server).

        Raises:
            ClientError: no handshake has happened yet.
        """
        return self._require_handshake().extensions

    @property
    def weights_notice(self) -> Optional[WeightsNotice]:
        """The runner's weights version named by its newest ``ACK`` (``weights_notice`` agreed), or ``None``.

        An off-policy client that runs the policy asks for weights when this
        names a newer version than it holds (the local inference's ``BackgroundSender``).
        """
        return self._notice

    @property
    def is_plain_rllib(self) -> bool:
        """Whether the server answered a bare ``PONG`` (RLlib's own server).

        Raises:
            ClientError: no handshake has happened yet.
        """
        return self._require_handshake().plain

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
        return self._server.peer_agent if self._server is not None else ""

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
            unacked=len(self._window.pending),
            acts=c.acts,
            episodes_interrupted=c.interrupted,
        )

    @property
    def _sock(self) -> Any:
        """The live connection's socket, or ``None`` (for ``select`` in tests)."""
        return self._link.transport.sock if self._link is not None else None

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
            if exc_type is None and self._window.pending and not self._closed:
                self.flush()
        finally:
            self.close()

    def connect(self) -> "RLinkClient":
        """Open the connection and do the handshake, unless already connected.

        Other calls connect on their own; call this to fail early.

        Raises:
            ConnectFailed: no attempt of ``retry_attempts`` succeeded (nor,
                the first time, any within ``connect_wait``).
            ServerTimeout: the server took the connection but sent no ``PONG``.
            ServerError: the server refused us with ``ERROR``.
            ProtocolViolation: the server's answer is not valid RLlink.
            ClientClosed: :meth:`close` was called.
        """
        self._check_open()
        if self._link is None:
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
        self._closing.set()
        if self._window.pending:
            self._give_up_pending("closing the connection to %s with %d batch(es) not acknowledged (seq %s); "
                                  "call flush() first to wait for them")
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
        reply = self._run("get_config", lambda: self._ask(
            Connection.send_get_config, "GET_CONFIG", ConfigReceived, "SET_CONFIG (after GET_CONFIG)"
        ))
        if reply.description is not None:
            return reply.description
        if reply.pickled is None:
            raise ProtocolViolation(
                f"{self.address} sent a SET_CONFIG with neither a description nor RLlib's pickle",
                code=ErrorCode.INVALID_MESSAGE.value,
            )
        if not self.unsafe_allow_pickle:
            raise PickledConfigRefused(
                f"{self.address} offers its config only as a Python pickle ({len(reply.pickled):,} bytes; "
                "RLlib's own server does this). Unpickling runs code chosen by the server, so it is off. "
                "Use an rlinks-rllib learner, or pass unsafe_allow_pickle=True for a server you fully trust."
            )
        return _unsafe_unpickle_config(reply.pickled)

    def get_state(self) -> WeightsUpdate:
        """The learner's current weights.

        Raises:
            ConnectFailed, ConnectionLost, ServerTimeout, ServerError,
            ProtocolViolation, ClientClosed.
        """
        return _weights(self._run("get_state", lambda: self._ask(
            Connection.send_get_state, "GET_STATE", StateReceived, "SET_STATE (after GET_STATE)"
        )))

    def get_modules(self, agents: Iterable[str]) -> dict[str, str]:
        """Which module acts for each of ``agents`` (``GET_MODULES``, ``multi_agent`` agreed).

        For a runner whose ``SET_CONFIG`` has no agent mapping table (it maps
        agents with a Python function): ask when an agent first appears.

        Raises:
            ServerError: an agent the runner's mapping does not know (``bad_episode``).
            ConnectFailed, ConnectionLost, ServerTimeout, ProtocolViolation, ClientClosed.
        """
        agents = list(agents)
        event = self._run("get_modules", lambda: self._ask(
            lambda conn: conn.send_get_modules(agents), "GET_MODULES", ModulesReceived, "MODULES (after GET_MODULES)"
        ))
        return event.modules

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
        job = self._queue(states, steps, timesteps, on_policy=False)
        self._run("send_episodes", lambda: self._deliver(job))
        return job.batch.seq

    def send_samples(self, samples: Iterable[Mapping[str, Any]]) -> Optional[int]:
        """Send plain samples, dicts of arrays (``SAMPLES``, the ``samples`` extension); returns its ``seq``.

        Delivered like :meth:`send_episodes`: numbered, kept until the
        consumer has taken them (``ACK``), resent after a reconnect (reliable
        mode). Waits (bounded by ``timeout``) while ``max_unacked`` messages
        are unacknowledged: a slow consumer slows the sender, nothing is dropped.

        Raises:
            NotAgreed: the server did not agree to ``samples`` (RLlib's runners don't).
            ValueError: a sample is malformed (``protocol.samples.SampleError``).
            FrameTooLarge: the samples don't fit one frame; send fewer at once.
            ConnectFailed, ConnectionLost, ServerTimeout, ServerError,
            ProtocolViolation, ClientClosed.
        """
        return self.send_encoded_samples([encode_sample(sample) for sample in samples])

    def send_encoded_samples(self, samples: list[EncodedSample], *, flush: bool = False) -> Optional[int]:
        """:meth:`send_samples` for samples packed already (``protocol.samples.encode_sample``).

        ``flush`` marks the message so the consumer hands a partial batch on
        now (PROTOCOL.md 10.10); with no samples it is a flush alone, sent
        only to a server that confirms late (it named a ``samples_window``),
        and returns ``None``. The window counts samples and bytes as well as
        messages where the server said so.

        Raises:
            As :meth:`send_samples`.
        """
        if samples:
            self._run("send_samples", self._make_room)
        if Extension.SAMPLES.value not in self._require_handshake().extensions:
            raise self._not_agreed(Extension.SAMPLES)
        conn = self._live().conn
        if not samples and conn.peer_samples_window is None:
            return None
        batch = conn.send_encoded_samples(samples, flush=flush and conn.peer_samples_window is not None)
        job = _Job(batch, samples, 0, False, queued_on=self._generation, samples=True, flush=flush)
        self._run("send_samples", lambda: self._deliver(job))
        return job.batch.seq

    def poll(self) -> None:
        """Read what the server sent since the last call (``ACK``\\ s) without waiting for more.

        A reliable client whose connection dropped reconnects here and resends what is pending.

        Raises:
            ConnectFailed, ConnectionLost, ServerError, ProtocolViolation, ClientClosed.
        """
        self._run("poll", lambda: self._live().poll())

    def wait_for_room(self) -> None:
        """Wait (bounded by ``timeout``) until the window has room for one more batch; connects if need be.

        Raises:
            ServerTimeout: no ``ACK`` made room within ``timeout`` (the connection is dropped;
                a reliable client resends what is pending on its next call).
            ConnectFailed, ConnectionLost, ServerError, ProtocolViolation, ClientClosed.
        """
        self._run("send_samples", self._make_room)

    @property
    def window(self) -> AckWindow:
        """The batches sent and not yet acknowledged, across connections, and the bounds on them."""
        return self._window

    def send_episodes_and_get_state(self, episodes: Iterable[Any], timesteps: Optional[int] = None) -> WeightsUpdate:
        """Send an on-policy batch and wait for the weights trained on it.

        ``timeout`` must cover the learner's training step.

        Raises:
            The same as :meth:`send_episodes`.
        """
        what = "send_episodes_and_get_state"
        states, steps, timesteps = self._prepare(episodes, timesteps)
        self._run(what, self._make_room)
        job = self._queue(states, steps, timesteps, on_policy=True)

        def op() -> StateReceived:
            self._deliver(job)
            return self._live().wait_for(StateReceived, "SET_STATE (after our on-policy batch)", hint=_ON_POLICY_HINT)

        return _weights(self._run(what, op, job))

    def act(self, env: Any, obs: Any, reward: Any, start: Any, terminated: Any, truncated: Any, *,
            taken_mask: Any = None, taken: Any = None, train: Any = None, takeover: Any = None) -> ActionsReply:
        """Send observations and get the runner's actions (``served_actions``, PROTOCOL.md 10.5).

        Columns of one length ``k``, one row per env stepped now. A ``start``
        row begins an episode (after a reset; its reward is ignored); any
        other row reports the env's last reward and the observation now; a
        ``terminated``/``truncated`` row carries the final observation and
        wants no action, and the same env's ``start`` row may follow in the
        same call. An env's first row, and its first row after an ending one,
        must be a ``start`` row. One ``ACT`` at a time: this returns when its
        ``ACTIONS`` arrived. On-policy, once the runner has its share of an
        update, the ``ACTIONS`` waits for the training step (new weights),
        so ``timeout`` must cover one.

        After a reconnect (``reliable=True``, or any call after a drop) the
        runner has closed this client's open episodes; the affected envs'
        rows are rewritten to start again and listed in
        :attr:`ActionsReply.interrupted` (see the module docs).

        Args:
            env: env ids (ints in 0..2**31-1), the client's names for its envs.
            obs: ``(k, *obs_shape)`` observations (an array, or a list of ``k``).
            reward: ``(k,)`` rewards of each env's last action (finite).
            start, terminated, truncated: ``(k,)`` booleans.
            taken_mask, taken: ``served_taken``: ``(k,)`` booleans marking the
                rows whose action the simulator takes itself, and ``(k, ...)``
                those actions as the env applies them (other rows' entries are
                ignored): recorded with the policy's log-probability of them,
                and answered with themselves.
            train: ``served_taken``: ``(k,)`` booleans, each row's episode is
                trained on (read on ``start`` rows; give every row its env's
                setting, so a start row rewritten after a reconnect keeps it).
            takeover: ``takeover``: ``(k,)`` booleans, the rows of ``taken_mask``
                where a person or a script acted instead of the policy (10.8).

        Returns:
            The actions for the rows that want one, in row order.

        Raises:
            ValueError: ``served_actions`` is not in the offered ``extensions``;
                the columns are malformed (lengths, flags, a NaN reward, an
                env id out of range, a row that both starts and ends); or a
                row that is not a ``start`` row is for an env with no open
                episode. Nothing is sent then.
            NotAgreed: the server did not agree to ``served_actions`` (RLlib's
                own server, or a runner that can't serve this model), or to
                ``served_taken`` when ``taken_mask`` or ``train`` is given.
            ServerTimeout: no ``ACTIONS`` within ``timeout``.
            ConnectFailed, ConnectionLost, ServerError, ProtocolViolation
            (an ``ACTIONS`` for the wrong envs), ClientClosed.
        """
        self._check_open()
        if Extension.SERVED_ACTIONS.value not in self.extensions:
            raise ValueError("act() needs the served_actions extension: offer it in `extensions`")
        if (taken_mask is not None or train is not None) and Extension.SERVED_TAKEN.value not in self.extensions:
            raise ValueError("act() with taken actions or untrained episodes needs the served_taken extension: "
                             "offer it in `extensions`")
        try:
            rows = read_act(act_message(env, obs, reward, start, terminated, truncated, taken_mask=taken_mask,
                                        taken=taken, train=train, takeover=takeover))
        except InvalidMessage as exc:
            raise ValueError(f"act(): {exc}") from None
        # The caller's mistakes are found here, before anything is sent; a
        # reconnect only moves envs from open to lost, which the plan treats
        # alike but for the rewriting.
        _plan_act(rows, self._open_envs, self._lost_envs)
        return self.act_rows(rows)

    def act_rows(self, rows: ActRows) -> ActionsReply:
        """:meth:`act` for rows already in :func:`~rlinks_rllib.protocol.served.read_act`'s form, unchecked.

        For a caller whose own bookkeeping builds well-formed rows (``EnvClient``'s
        served mode): the columns are not checked here a second time. Raises as :meth:`act`,
        but a malformed row is found only by the Connection (``InvalidMessage``) or the runner.
        """
        self._check_open()
        own = rows.taken_mask is not None or rows.train is not None
        # Connect first and check the agreement outside _run, which would
        # close a connection that is fine for everything else.
        if not self._run("act", self._serves_actions):
            raise self._not_agreed()
        if own and not self._run("act", self._takes_own_actions):
            raise self._not_agreed(Extension.SERVED_TAKEN)
        if rows.takeover is not None and not self._run("act", self._marks_takeovers):
            raise self._not_agreed(Extension.TAKEOVER)

        def op() -> ActionsReply:
            link = self._live()
            link.poll()
            if not self._serves_actions():  # a reconnect may have reached another runner
                raise self._not_agreed()
            if own and not self._takes_own_actions():
                raise self._not_agreed(Extension.SERVED_TAKEN)
            if self._open_generation != self._generation:
                # A new connection: the runner closed every episode open on the old one.
                self._lost_envs |= self._open_envs
                self._open_envs = set()
                self._open_generation = self._generation
            plan = _plan_act(rows, self._open_envs, self._lost_envs)
            seq_no = self._actions_seq_no
            envs: list[int] = []
            actions: np.ndarray = np.zeros((0,), np.int64)
            sent = rows if plan.rows is None else _kept(rows, plan.rows)
            if len(sent):
                link.conn.send_act(sent.env, sent.obs, sent.reward, plan.start, sent.terminated, sent.truncated,
                                   taken_mask=sent.taken_mask, taken=sent.taken, train=sent.train,
                                   takeover=sent.takeover)
                link.write("ACT")
                answer = link.wait_for(ActionsReceived, "ACTIONS (after our ACT)", hint=_ACT_HINT)
                envs, actions, seq_no = list(answer.env), np.asarray(answer.actions), int(answer.weights_seq_no)
                self._counters.acts += 1
                self._actions_seq_no = seq_no
            self._counters.interrupted += len(plan.interrupted)
            self._open_envs, self._lost_envs = plan.open_after, plan.lost_after
            return ActionsReply(envs, actions, seq_no, plan.interrupted)

        return self._run("act", op)

    def _serves_actions(self) -> bool:
        return Extension.SERVED_ACTIONS.value in self._require_handshake().extensions

    def _takes_own_actions(self) -> bool:
        return Extension.SERVED_TAKEN.value in self._require_handshake().extensions

    def _marks_takeovers(self) -> bool:
        return Extension.TAKEOVER.value in self._require_handshake().extensions

    def _not_agreed(self, extension: Extension = Extension.SERVED_ACTIONS) -> NotAgreed:
        who = "plain RLlink (RLlib's own server)" if self.is_plain_rllib else f"agent {self.server_agent!r}"
        if extension is Extension.TAKEOVER:
            return NotAgreed(f"{self.address} did not agree to takeover ({who}): it can't keep taken-over steps "
                             "out of on-policy updates; use log_action to record them as the policy's own",
                             extension.value)
        if extension is Extension.SERVED_TAKEN:
            return NotAgreed(f"{self.address} did not agree to served_taken: it records only the actions it "
                             f"computes ({who}); run the policy locally to log your own actions", extension.value)
        return NotAgreed(
            f"{self.address} did not agree to served_actions: it does not compute actions for its clients "
            f"({who}); run the policy locally and send episodes instead",
            Extension.SERVED_ACTIONS.value,
        )

    def flush(self) -> None:
        """Wait until every batch sent so far is acknowledged (no-op without ``ack``).

        Raises:
            ServerTimeout: no ACK came within ``timeout``.
            ConnectFailed, ConnectionLost, ServerError, ProtocolViolation, ClientClosed.
        """
        self._check_open()
        if not self._window.pending:
            return

        def op() -> None:
            link = self._live()
            pending = self._window.pending
            try:
                link.poll()
            except (ConnectionLost, ServerError):
                if not pending:
                    return  # every ACK came before the end (a dataset that confirms on closing): flushed
                raise
            while pending:
                link.wait_for(Acked, f"ACK ({len(pending)} batch(es) unacknowledged, seq {seq_range(pending)})")

        self._run("flush", op)

    # ------------------------------------------------------------------
    # Requests and batches (each an op of _run: safe to run again after a reconnect)

    def _ask(self, send: Callable[[Connection], None], sent: str, kind: type[T], what: str) -> T:
        link = self._live()
        link.poll()
        send(link.conn)
        link.write(sent)
        return link.wait_for(kind, what)

    def _make_room(self) -> None:
        link = self._live()
        link.poll()
        while self._window.full:
            link.wait_for(
                Acked,
                f"ACK ({len(self._window.pending)} batches unacknowledged, max_unacked={self.max_unacked})",
            )

    def _queue(self, states: list, steps: int, timesteps: int, *, on_policy: bool) -> _Job:
        """Encode a batch on the live connection (numbered if it acknowledges); nothing is written yet.

        Raises what encoding raises (FrameTooLarge, TypeError, UnsafePayload),
        with the connection left as it was.
        """
        batch = self._live().conn.send_episodes(
            states, steps=steps, timesteps=timesteps, on_policy=on_policy, keep_for_resend=self.reliable
        )
        return _Job(batch, states, timesteps, on_policy, queued_on=self._generation)

    def _deliver(self, job: _Job) -> None:
        """Get ``job``'s batch (or, on-policy, what stands for it) written on the live connection."""
        batch = job.batch
        if batch.sent_on == self._generation:
            return  # written on this connection, by us or by the reconnect
        link = self._live()
        if job.queued_on != self._generation:  # what was queued went with an older connection
            link.poll()
            if job.on_policy and batch.sent_on and batch.seq is None:
                # Written in full on a connection that then dropped, and
                # nothing says whether it arrived: don't risk a duplicate.
                link.conn.send_get_state()
                link.write("GET_STATE")
                return
            if job.on_policy and batch.acked:
                # Confirmed (RLlib has it) before the connection dropped;
                # sending it again could train on it twice (a restarted
                # runner can't know it). Ask for the weights it is owed:
                # an empty batch without seq waits for them like any other.
                link.conn.send_episodes([], steps=0, timesteps=0, on_policy=True, numbered=False)
                link.write(f"{batch.kind.value} (empty)")
                return
            if job.samples:
                flush = job.flush and link.conn.peer_samples_window is not None
                if not job.states and not flush:
                    return  # a flush alone, and this server takes none
                job.batch = link.conn.send_encoded_samples(job.states, flush=flush)
            else:
                job.batch = link.conn.send_episodes(
                    job.states, steps=batch.steps, timesteps=job.timesteps, on_policy=job.on_policy,
                    keep_for_resend=self.reliable,
                )
            job.batch.sends = batch.sends
            job.queued_on = self._generation
        link.write(job.batch.kind.value)
        self._written(job.batch)

    def _written(self, batch: Batch) -> None:
        batch.sent_on = self._generation
        batch.sends += 1
        if batch.sends == 1:
            self._counters.sent += 1
            self._counters.steps += batch.steps
        else:
            self._counters.resent += 1
        if not self.reliable:
            batch.parts = []  # never resent; let the arrays go

    def _on_ack(self, event: Acked) -> None:
        if event.weights_seq_no is not None:
            self._notice = WeightsNotice(event.weights_seq_no, time.monotonic())
        if event.batch is None:
            # Acknowledged before; a resend after a reconnect gets a second ACK.
            self._log.debug("duplicate ACK for seq %d from %s", event.seq, self.address)
            return
        self._counters.acked += 1
        self._counters.steps_acked += event.batch.steps

    # ------------------------------------------------------------------
    # Retry and reconnection

    def _run(self, what: str, op: Callable[[], T], job: Optional[_Job] = None) -> T:
        """Run ``op`` on a live connection; in reliable mode, reconnect and rerun it after a drop.

        ``op`` must be safe to run again: it checks what the reconnection
        already resent. ``job`` is the on-policy batch ``op`` waits on, if
        any (see :meth:`_resume`). Any exception closes the connection, since
        the stream may be mid-frame or a reply may still be on its way. A
        reconnection that fails raises ConnectFailed caused by the drop it was
        for: the learner's ``shutting_down`` once the call met one, which
        also bounds the reconnecting by ``shutdown_grace``.
        """
        self._check_open()
        recoveries = 0
        dropped: Optional[BaseException] = None
        ended: Optional[BaseException] = None  # the learner's shutting_down, once met
        give_up_at: Optional[float] = None  # then: when its grace is over
        while True:
            try:
                if self._link is None:
                    self._connect(job, give_up_at)
                return op()
            except (ConnectionLost, ServerError) as exc:
                self._learner_ended = self._learner_ended or self._retry.shutting_down(exc)
                self._discard_connection()
                if self._closed:
                    raise ClientClosed(f"{what}: the client was closed") from exc
                if not (self.reliable and self._retry.retryable(exc)):
                    raise
                if recoveries >= self._retry.attempts:
                    raise ConnectionLost(
                        f"{what}: the connection to {self.address} kept dropping; "
                        f"gave up after {recoveries} reconnection(s). Last error: {exc}"
                    ) from exc
                if not self._warned_no_ack and not self._acknowledged():
                    self._warned_no_ack = True
                    self._log.warning(
                        "%s does not acknowledge batches (plain RLlink): a batch in flight when "
                        "the connection dropped may be lost", self.address,
                    )
                wait = self._retry.delay(recoveries)
                if ended is None and self._retry.shutting_down(exc):
                    ended, give_up_at = exc, time.monotonic() + self._retry.shutdown_grace
                    self._log.warning("%s is shutting down (%s); trying to reach %s again for up to "
                                      "%g s (shutdown_grace)", self.address, exc, self._peer_noun,
                                      self._retry.shutdown_grace)
                else:
                    self._log.warning("connection to %s lost during %s (%s); reconnecting", self.address, what, exc)
                if give_up_at is not None:
                    left = give_up_at - time.monotonic()
                    if left <= 0:
                        raise self._not_back(recoveries, exc) from ended
                    wait = min(wait, left)
                self._sleep(wait)
                recoveries += 1
                dropped = exc
            except ConnectFailed as exc:
                self._discard_connection()
                if dropped is None and ended is None:
                    raise
                raise exc from (ended or dropped)
            except BaseException:
                self._discard_connection()
                raise

    def _connect(self, job: Optional[_Job] = None, give_up_at: Optional[float] = None) -> None:
        """Open a connection and handshake, retrying with backoff; then resend pending batches.

        ``give_up_at``: once the learner said ``shutting_down`` (in this call
        or an attempt here), the ``time.monotonic()`` after which no attempt
        starts (its ``shutdown_grace`` is over). Until the first handshake,
        a learner that is not up yet is waited for (``connect_wait``): the
        attempts go on past ``retry_attempts`` until it is over.

        Raises:
            ConnectFailed: no attempt succeeded (saying the learner did not
                come back, after a ``shutting_down``).
            ClientClosed, or an error no attempt would get past (authentication, TLS, ...).
        """
        last: Optional[BaseException] = None
        # The runner we were sent to and just lost: it may be cut off, so it is tried last.
        lost = self.address if self._uses_directory and self.address != self.given_address else None
        tried = 0
        ended: Optional[BaseException] = None  # a shutting_down met here
        first = self._server is None  # never reached the learner: it may not be up yet
        waiting = ConnectWait(self._retry.connect_wait if first else 0.0,
                              f"{self._peer_noun} at {self.given_address}", self._log)
        attempt = 0
        while attempt < self._retry.attempts or (waiting.waiting and give_up_at is None):
            if attempt:
                wait = self._retry.delay(attempt - 1)
                if give_up_at is not None:
                    left = give_up_at - time.monotonic()
                    if left <= 0:
                        break
                    wait = min(wait, left)
                elif attempt >= self._retry.attempts:  # only the wait keeps us here: one last try at its end
                    wait = min(wait, waiting.left())
                self._sleep(wait)
            self._check_open()
            tried += 1
            if self._uses_directory:
                self.address = self.given_address
            try:
                done = self._open()
                if done.peer_is_directory:
                    done = self._via_directory(lost)
                if self._server is not None:
                    self._counters.reconnects += 1
                self._server = done
                self._resume(job)
                return
            except (ClientError, OSError) as exc:
                if not self._retry.retryable(exc):
                    raise
                last = exc
                waiting.failed(exc)
                if ended is None and self._retry.shutting_down(exc):
                    ended = exc
                    if give_up_at is None:
                        give_up_at = time.monotonic() + self._retry.shutdown_grace
            self._discard_connection()
            self._log.debug("connection attempt %d/%d to %s failed: %s", attempt + 1, self._retry.attempts,
                            self.address, last)
            attempt += 1
        if give_up_at is not None:
            raise self._not_back(tried, last) from (ended or last)
        waited = (f" and {waiting.seconds:g} s (connect_wait, ${CONNECT_WAIT_ENV})"
                  if first and waiting.started else "")
        raise ConnectFailed(
            f"could not connect to {self.address} after {tried} attempt(s){waited}: {last}; "
            f"is {self._peer_noun} running and is the port right?"
        ) from last

    def _not_back(self, attempts: int, last: Optional[BaseException]) -> ConnectFailed:
        """The error of a call that gave up on a learner that said ``shutting_down``."""
        return ConnectFailed(
            f"{self._peer_noun} at {self.given_address} said it was shutting down and did not come back "
            f"({attempts} reconnection attempt(s); shutdown_grace={self._retry.shutdown_grace:g} s, "
            f"retry_attempts={self._retry.attempts}): its run has ended, or it restarts slower than that "
            f"(raise shutdown_grace, or ${SHUTDOWN_GRACE_ENV}, to wait longer). Last error: {last}"
        )

    def _new_connection(self) -> Connection:
        return Connection(
            Role.CLIENT, extensions=self.extensions, agent=CLIENT_AGENT, secret=self._secret,
            client_id=self._client_id, max_frame_bytes=self.max_frame_bytes, window=self._window,
        )

    def _open(self) -> HandshakeDone:
        """Connect to :attr:`address` and do the handshake; the connection is the client's live one from here."""
        transport = Transport.open(self.address, connect_timeout=self.connect_timeout,
                                   ssl_context=self._ssl_context, server_name=self._tls_server_name)
        self._link = Link(transport, self._new_connection(), timeout=self.timeout, on_ack=self._on_ack, log=self._log)
        self._generation += 1
        return self._link.handshake()

    def _via_directory(self, lost: Optional[Address] = None) -> HandshakeDone:
        """We reached a directory: ask it for the runners and connect to the first that answers.

        Runners come least-loaded first, except ``lost``, the runner whose
        connection just dropped, which comes last: the directory learns
        that a runner is cut off only after the learner's next iteration,
        and a connection to it would take its whole ``connect_timeout`` to
        fail. One that refuses or fails its handshake is skipped, so a
        client finds a live runner on its own.

        Raises:
            ConnectionLost: the directory lists no runner, or none answered.
        """
        self._uses_directory = True
        runners = fetch_endpoints(self._live())
        if lost is not None:
            runners.sort(key=lambda entry: (entry["host"], entry["port"]) == (lost.host, lost.port))
        self._discard_connection()
        tried: list[str] = []
        for entry in runners:
            # Over the directory's own transport: TLS or not, WebSocket or not.
            self.address = Address(entry["host"], entry["port"], self.given_address.tls, self.given_address.websocket)
            try:
                done = self._open()
            except (OSError, ConnectionLost) as exc:
                tried.append(f"{self.address} ({exc})")
                self._discard_connection()
                continue
            self._log.info("directory %s sent us to runner %s", self.given_address, self.address)
            return done
        raise NoRunnerYet(
            f"the directory at {self.given_address} lists no runner that answers"
            + (f": {'; '.join(tried)}" if tried else " yet")
        )

    def _resume(self, job: Optional[_Job]) -> None:
        """After a handshake: send every unacknowledged batch again, in order.

        An on-policy batch among them is owed a ``SET_STATE`` before anything
        else may be sent; unless it is ``job``'s (whose call waits for it),
        its weights went to the call that sent it first, so they are read and
        dropped here.
        """
        pending = self._window.pending
        if not pending:
            return
        if not self._acknowledged():
            self._log.warning(
                "%s no longer acknowledges batches; %d unacknowledged batch(es) (seq %s) may be lost",
                self.address, len(pending), seq_range(pending),
            )
            self._window.clear()
            return
        link = self._live()
        current = job.batch if job is not None and job.on_policy else None
        for batch in list(pending):
            if batch.acked:
                continue  # confirmed while an earlier one's weights were awaited
            link.conn.resend(batch)
            link.write(batch.kind.value)
            self._written(batch)
            if batch.kind is MessageType.EPISODES_AND_GET_STATE and batch is not current:
                link.wait_for(StateReceived, f"SET_STATE (owed for on-policy batch {batch.seq}, sent again)")

    def _acknowledged(self) -> bool:
        return self._server is not None and Extension.ACK.value in self._server.extensions

    def _discard_connection(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()
        if self._window.pending and not self.reliable:
            self._give_up_pending("connection to %s closed with %d batch(es) not acknowledged (seq %s); "
                                  "they may be lost (reliable=True resends them)")

    def _give_up_pending(self, warning: str) -> None:
        """Forget the unacknowledged batches, with ``warning`` (address, count, seqs) unless the learner ended.

        After the learner's ``shutting_down`` nothing is lost that could be
        saved: it trains no more, so that is said as information.
        """
        pending = self._window.pending
        if self._learner_ended:
            self._log.info("the learner at %s stopped before acknowledging %d batch(es) (seq %s): sent after its "
                           "last update, never trained", self.address, len(pending), seq_range(pending))
        else:
            self._log.warning(warning, self.address, len(pending), seq_range(pending))
        self._window.clear()

    # ------------------------------------------------------------------
    # Checks

    def _prepare(self, episodes: Iterable[Any], timesteps: Optional[int]) -> tuple[list, int, int]:
        states = []
        for i, episode in enumerate(episodes):
            if not isinstance(episode, Mapping) and callable(getattr(episode, "get_state", None)):
                episode = episode.get_state()
            if not isinstance(episode, dict):
                raise TypeError(f"episodes[{i}] must be an episode state dict, got {type(episode).__name__}")
            states.append(episode)
        steps = sum(chunk_steps(state) for state in states)
        if timesteps is None:
            timesteps = steps
        elif type(timesteps) is not int or timesteps < 0:
            raise ValueError(f"timesteps must be a non-negative int, got {timesteps!r}")
        return states, steps, timesteps

    def _live(self) -> Link:
        if self._link is None:
            raise ConnectionLost(f"not connected to {self.address}")
        return self._link

    @property
    def _peer_noun(self) -> str:
        """What the server is to the user, for messages: an actor's is a dataset, anyone else's a learner."""
        return "the dataset" if Extension.SAMPLES.value in self.extensions else "the learner"

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("this RLinkClient was closed; make a new one")

    def _require_handshake(self) -> HandshakeDone:
        if self._server is None:
            raise ClientError("no handshake yet: call connect() (or any other call) first")
        return self._server


def _plan_act(rows: Any, open_envs: set[int], lost_envs: set[int]) -> _ActPlan:
    """What to send for ``rows`` when the runner has episodes open for ``open_envs`` and
    closed those of ``lost_envs`` when a connection dropped (PROTOCOL.md 10.5: a row for an
    env with no open episode must be a ``start`` row).

    Raises:
        ValueError: a row that is not a ``start`` row for an env with no open (or lost) episode.
    """
    open_after, lost_after = set(open_envs), set(lost_envs)
    kept: list[int] = []
    kept_start: list[bool] = []
    wanting: list[int] = []
    interrupted: list[int] = []
    ends = (~rows.wants_action).tolist()  # Python bools: read row by row
    starts = rows.start.tolist()
    for row, env in enumerate(rows.env):
        start = starts[row]
        if env in lost_after:
            # Its episode was closed when a connection dropped: start it again
            # here, or leave out the row that would have ended it.
            lost_after.discard(env)
            interrupted.append(env)
            if not start and ends[row]:
                continue
            start = True
        elif not start and env not in open_after:
            raise ValueError(
                f"act(): row {row}: env {env} has no open episode (its first row, and its first row after "
                "one that ends its episode, must be a start row)"
            )
        if start:
            open_after.add(env)
        if ends[row]:
            open_after.discard(env)
        else:
            wanting.append(env)
        kept.append(row)
        kept_start.append(start)
    unchanged = len(kept) == len(rows) and not interrupted
    return _ActPlan(
        rows=None if unchanged else kept,
        start=rows.start if unchanged else np.asarray(kept_start, np.bool_),
        wanting=wanting, interrupted=interrupted, open_after=open_after, lost_after=lost_after,
    )


def _take(obs: Any, rows: list[int]) -> Any:
    """Rows ``rows`` of the observations (an array's, or a list's)."""
    if isinstance(obs, np.ndarray):
        return obs[rows]
    return [obs[i] for i in rows]


def _kept(rows: ActRows, keep: list[int]) -> ActRows:
    """Rows ``keep`` of ``rows`` (the plan left some out or rewrote them)."""

    def pick(column: Optional[np.ndarray]) -> Optional[np.ndarray]:
        return None if column is None else column[keep]

    return ActRows([rows.env[i] for i in keep], _take(rows.obs, keep), rows.reward[keep], rows.start[keep],
                   rows.terminated[keep], rows.truncated[keep], pick(rows.taken_mask),
                   None if rows.taken_mask is None else _take(rows.taken, keep), pick(rows.train),
                   pick(rows.takeover))


def _weights(event: StateReceived) -> WeightsUpdate:
    return WeightsUpdate(params=event.params, seq_no=event.seq_no, want_steps=event.want_steps,
                         timestep=event.timestep)


def _unsafe_unpickle_config(raw: bytes) -> Any:
    """RLlib's pickled ``AlgorithmConfig``, unpickled: **runs code the server chose** (``unsafe_allow_pickle``).

    Nothing here imports Ray: ``pickle`` imports the classes the pickle
    names, which are RLlib's, so Ray must be installed.

    Raises:
        ClientError: the pickle names Ray's classes and Ray is not installed.
    """
    try:
        return pickle.loads(raw)  # unsafe by design: only with unsafe_allow_pickle=True
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "ray":
            raise
        raise ClientError("unpickling RLlib's config needs ray[rllib] installed on this machine") from exc


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
