"""One RLlink conversation as a state machine: bytes in, events out; send calls in, bytes out.

A :class:`Connection` holds every rule of the conversation between two peers
and none of the I/O. The code that owns the socket feeds it what arrives
(:meth:`Connection.receive_data`, or :meth:`~Connection.read_buffer` and
:meth:`~Connection.received_into` to read a large body in place), takes
events out one at a time (:meth:`~Connection.next_event`), and writes what
:meth:`~Connection.data_to_send` returns. Taking events one at a time matters:
a server answers an on-policy batch before the next message is judged, so a
message is legal or not by the state the conversation is in when it is read.

Three roles:

* ``CLIENT``, a simulator: sends ``PING`` (with its extension offer), then
  requests; reads replies, ``ACK``\\s and ``ERROR``.
* ``SERVER``, a runner: answers ``PING``, then the requests of a client.
* ``DIRECTORY``, the learner's one address: answers ``PING`` and ``GET_ENDPOINTS``.

States, the same words for both ends of a conversation::

    IDLE --PING--> GREETING --PONG--> READY <--SET_STATE-- AWAITING_WEIGHTS
                       |                ^  \\--EPISODES_AND_GET_STATE--^
                       |                |  \\--ACT--> AWAITING_ACTIONS
                       |                +------ACTIONS------/
                       +--PONG (auth)--> AUTHENTICATING --AUTH, AUTH_OK--> READY

    any state --ERROR sent or received, EOF, or a peer's violation--> CLOSED

(A server or directory goes from ``IDLE`` straight to ``READY`` or
``AUTHENTICATING`` when it answers the ``PING``: it has no ``GREETING``.)
In ``AWAITING_WEIGHTS`` a client has sent an on-policy batch and may send
nothing until its ``SET_STATE`` arrives, and in ``AWAITING_ACTIONS`` an ``ACT``
(``served_actions``) and nothing until its ``ACTIONS``; a server refuses
anything it sends meanwhile. Which message may arrive in which state is in the ``_accept_*``
methods, one per role.

Two kinds of error, as in ``h11``:

* :class:`~.errors.ProtocolError` (and subclasses) from :meth:`next_event`,
  :meth:`receive_data` and :meth:`receive_eof`: **the peer** broke the
  protocol. The connection is ``CLOSED``; a server should still send
  :meth:`send_error` with the error's ``code``, then close the socket.
* :class:`~.errors.LocalProtocolError` from a send call: **we** asked for
  something the conversation does not allow now. Nothing was queued.

No sockets, threads or clocks: deadlines are the driver's.
"""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

import numpy as np

from .auth import ClientAuth, ServerAuth
from .codec import Buffer
from .config import read_config
from .errors import (
    AuthFailed,
    ErrorCode,
    InvalidMessage,
    LocalProtocolError,
    ProtocolError,
    UnexpectedMessage,
    UnsupportedMessage,
)
from .extensions import Extension, Offer, make_offer, negotiate, parse_offer
from .framing import FrameDecoder, encode_message_parts, encode_set_state_parts, frame_parts
from .limits import DEFAULT_MAX_FRAME_BYTES, HANDSHAKE_MAX_FRAME_BYTES
from .messages import MessageType
from .messages import error as error_message
from .messages import ack as ack_message
from .messages import ping as ping_message
from .messages import pong as pong_message
from .samples import (FLUSH, MAX_SAMPLES_PER_MESSAGE, SAMPLES_WINDOW, EncodedSample, SampleError, encode_sample,
                      read_samples, read_samples_window, samples_body)
from .multi_agent import check_agent_ids, read_module_states, read_modules
from .served import ActRows, act_message, actions_message, read_act, read_actions
from .weights import read_state
from .window import AckWindow, Batch

__all__ = [
    "Role",
    "State",
    "Connection",
    "Event",
    "HandshakeDone",
    "ErrorReceived",
    "ConnectionClosed",
    "ConfigRequested",
    "ModulesRequested",
    "ModulesReceived",
    "StateRequested",
    "EpisodesReceived",
    "EndpointsRequested",
    "ConfigReceived",
    "StateReceived",
    "Acked",
    "EndpointsReceived",
    "ActReceived",
    "ActionsReceived",
    "SamplesReceived",
    "DIRECTORY_ROLE",
    "MAX_CLIENT_ID_CHARS",
]

#: The value of ``role`` in a directory's PONG offer.
DIRECTORY_ROLE = "directory"
#: Longest ``client_id`` a server takes from an offer; a longer one is ignored.
MAX_CLIENT_ID_CHARS = 64
#: Longest text of an ``ERROR`` we send (the peer puts it in logs).
MAX_ERROR_TEXT = 1000
#: Longest code and text of an ``ERROR`` we report (bounded: it ends up in logs and tracebacks).
MAX_PEER_CODE, MAX_PEER_TEXT = 64, 4096


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"
    DIRECTORY = "directory"


class State(enum.Enum):
    IDLE = "idle"
    GREETING = "greeting"
    AUTHENTICATING = "authenticating"
    READY = "ready"
    AWAITING_WEIGHTS = "awaiting_weights"
    AWAITING_ACTIONS = "awaiting_actions"
    CLOSED = "closed"


# --------------------------------------------------------------------------
# Events


@dataclass(frozen=True)
class HandshakeDone:
    """The handshake (and authentication, if any) is complete.

    Attributes:
        extensions: the extensions both sides agreed to.
        plain: the peer sent no ``rlinks`` offer (RLlib's own client or server).
        peer_agent: the peer's ``agent`` string ('' if none).
        peer_is_directory: (client) the peer is a directory, not a runner.
        client_id: (server) the id the client gave, if it gave a usable one.
    """

    extensions: frozenset[str]
    plain: bool
    peer_agent: str = ""
    peer_is_directory: bool = False
    client_id: Optional[str] = None


@dataclass(frozen=True)
class ErrorReceived:
    """The peer sent ``ERROR`` (it closes next); code and text are cut to a bounded length."""

    code: str
    message: str


@dataclass(frozen=True)
class ConnectionClosed:
    """The peer closed the stream between two frames."""


@dataclass(frozen=True)
class ConfigRequested:
    """(server) ``GET_CONFIG``: answer with :meth:`Connection.send_config`."""


@dataclass(frozen=True)
class StateRequested:
    """(server) ``GET_STATE``: answer with :meth:`Connection.send_state`."""


@dataclass(frozen=True)
class EpisodesReceived:
    """(server) A batch of episode chunks.

    Attributes:
        episodes: the wire episode states (maps; not checked further here).
        timesteps: the ``timesteps`` the client reported, if any.
        seq: the batch's number (``ack`` agreed), else ``None``.
        on_policy: ``EPISODES_AND_GET_STATE``: the client waits for a
            ``SET_STATE`` (:meth:`Connection.send_state`) and sends nothing else.
        frame_bytes: size of the frame it came in, header included.
    """

    episodes: list
    timesteps: Optional[int]
    seq: Optional[int]
    on_policy: bool
    frame_bytes: int


@dataclass(frozen=True)
class ModulesRequested:
    """(server) ``GET_MODULES``: answer with :meth:`Connection.send_modules`.

    Attributes:
        agents: the agent ids asked about (checked: 1 to ``MAX_AGENTS`` strings).
    """

    agents: list


@dataclass(frozen=True)
class ModulesReceived:
    """(client) ``MODULES``: agent id -> module id, for the agents of our ``GET_MODULES``."""

    modules: dict


@dataclass(frozen=True)
class EndpointsRequested:
    """(directory) ``GET_ENDPOINTS``: answer with :meth:`Connection.send_endpoints`."""


@dataclass(frozen=True)
class ConfigReceived:
    """(client) ``SET_CONFIG``.

    Attributes:
        description: the plain msgpack description (``protocol.config``), or
            ``None`` when the server sent only RLlib's pickle.
        pickled: the pickled ``AlgorithmConfig`` RLlib's server sends, if any;
            never unpickled here.
    """

    description: Optional[dict]
    pickled: Optional[bytes]


@dataclass(frozen=True)
class StateReceived:
    """(client) ``SET_STATE``: weights.

    Attributes:
        params: parameter name -> array (read-only views of the frame where large);
            with ``multi_agent`` agreed, module id -> such a map, for every module.
        seq_no: the learner's ``weights_seq_no``.
        want_steps: env steps the server wants next (``want_steps`` agreed), else ``None``.
        timestep: RLlib's env steps sampled when these weights came (``timestep`` agreed), else ``None``.
    """

    params: dict
    seq_no: int
    want_steps: Optional[int]
    timestep: Optional[int] = None


@dataclass(frozen=True)
class Acked:
    """(client) ``ACK``: ``batch`` is confirmed; ``None`` when ``seq`` was confirmed before (a resend).

    ``weights_seq_no``: the runner's weights version when it sent the ``ACK``
    (``weights_notice`` agreed), else ``None``.
    """

    seq: int
    batch: Optional[Batch]
    weights_seq_no: Optional[int] = None


@dataclass(frozen=True)
class EndpointsReceived:
    """(client) ``ENDPOINTS``: the directory's runners, least-loaded first, as sent."""

    endpoints: list


@dataclass(frozen=True)
class ActReceived:
    """(server) ``ACT``: observations to answer with :meth:`Connection.send_actions`.

    Attributes:
        rows: the checked columns (``protocol.served.ActRows``).
        frame_bytes: size of the frame it came in, header included.
    """

    rows: ActRows
    frame_bytes: int


@dataclass(frozen=True)
class ActionsReceived:
    """(client) ``ACTIONS``: ``actions[i]`` is for ``env[i]``, computed with weights ``weights_seq_no``."""

    env: list
    actions: Any
    weights_seq_no: int


@dataclass(frozen=True)
class SamplesReceived:
    """(server) ``SAMPLES`` (``samples``): plain dicts of arrays, checked (``protocol.samples``).

    Attributes:
        samples: the samples, in the order sent.
        seq: the message's number (``ack`` agreed), else ``None``.
        frame_bytes: size of the frame it came in, header included.
        flush: see below.
    """

    samples: list
    seq: Optional[int]
    frame_bytes: int
    #: The client sends nothing more until what it sent is confirmed (``samples`` may be empty then).
    flush: bool = False


Event = Union[
    HandshakeDone, ErrorReceived, ConnectionClosed, ConfigRequested, StateRequested, EpisodesReceived,
    EndpointsRequested, ConfigReceived, StateReceived, Acked, EndpointsReceived, ActReceived, ActionsReceived,
    ModulesRequested, ModulesReceived, SamplesReceived,
]

_SERVER_TO_CLIENT = frozenset(
    {MessageType.PONG, MessageType.SET_STATE, MessageType.SET_CONFIG, MessageType.ERROR, MessageType.ACK,
     MessageType.AUTH_OK, MessageType.ENDPOINTS, MessageType.ACTIONS, MessageType.MODULES}
)
#: Which reply each client request is owed.
_REPLY_TO = {
    MessageType.GET_CONFIG: MessageType.SET_CONFIG,
    MessageType.GET_STATE: MessageType.SET_STATE,
    MessageType.EPISODES_AND_GET_STATE: MessageType.SET_STATE,
    MessageType.GET_ENDPOINTS: MessageType.ENDPOINTS,
    MessageType.ACT: MessageType.ACTIONS,
    MessageType.GET_MODULES: MessageType.MODULES,
}
#: States in which a server may still answer what it owes, and a client take its replies.
_ANSWERED = frozenset({State.READY, State.AWAITING_WEIGHTS, State.AWAITING_ACTIONS})
#: A client in these states waits for one reply and may send nothing else.
_WAITING = {State.AWAITING_WEIGHTS: MessageType.SET_STATE, State.AWAITING_ACTIONS: MessageType.ACTIONS}


@dataclass
class _Received:
    message: dict
    frame_bytes: int


@dataclass
class _Outgoing:
    parts: list = field(default_factory=list)
    frames: int = 0

    def frame(self, parts: Iterable[Buffer]) -> None:
        self.parts.extend(parts)
        self.frames += 1

    def take(self) -> list:
        parts, self.parts = self.parts, []
        return parts


class Connection:
    """One side of one RLlink conversation.

    Args:
        role: which side this is.
        extensions: what we speak. A client offers these in its ``PING``; a
            server or directory agrees to the subset of a client's offer in
            these. ``auth`` is added when ``secret`` is given and must not be
            named here.
        agent: our ``agent`` string in offers (``"rlinks-rllib/0.1.0"``).
        secret: the normalized shared secret (``protocol.auth``); ``None``:
            no authentication. A server or directory with a secret answers
            nothing but the handshake until the client has proved it knows
            it; a client with a secret talks only to a peer (runner or
            directory) that proves it knows it.
        client_id: (client) the id sent in the offer, the same across reconnects.
        max_frame_bytes: largest frame accepted from the peer once the
            handshake is done (a server and a directory take at most
            ``HANDSHAKE_MAX_FRAME_BYTES`` before).
        window: (client) the batches awaiting an ``ACK``, shared by every
            connection of one client (see :class:`~.window.AckWindow`).
        columns: (server) decode ``EPISODES`` bodies a column at a time: a
            column sent as one array per step arrives as one stacked,
            ``finalized`` array (:mod:`.columns`); for a server that checks
            episodes with :func:`~.episodes.check_episode_state` next.
        samples_window: (server) the samples one client may leave unconfirmed,
            named in the ``PONG`` when ``samples`` is agreed (``protocol.samples``).
        body_alloc: where large frame bodies are read (see :class:`~.framing.FrameDecoder`).

    Raises:
        ValueError: ``auth`` named in ``extensions``, an unknown extension,
            or a bad ``max_frame_bytes``.
    """

    def __init__(
        self,
        role: Role,
        *,
        extensions: Iterable[Union[str, Extension]] = (),
        agent: str = "",
        secret: Optional[bytes] = None,
        client_id: Optional[str] = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        window: Optional[AckWindow] = None,
        columns: bool = False,
        samples_window: Optional[int] = None,
        body_alloc: Optional[Callable[[int], np.ndarray]] = None,
    ) -> None:
        names = {e.value if isinstance(e, Extension) else str(e) for e in extensions}
        unknown = names - {e.value for e in Extension}
        if unknown:
            raise ValueError(f"unknown extensions {sorted(unknown)}; known: {[e.value for e in Extension]}")
        if Extension.AUTH.value in names:
            raise ValueError("'auth' is offered when there is a secret; pass secret=, not the extension")
        if secret is not None:
            names.add(Extension.AUTH.value)
        self.role = role
        self.state = State.IDLE
        #: What we offer (client) or agree to at most (server, directory).
        self.our_extensions: frozenset[str] = frozenset(names)
        #: What both sides agreed to; empty until the handshake is done.
        self.extensions: frozenset[str] = frozenset()
        self.agent = agent
        self.client_id = client_id
        self.window = window if window is not None else AckWindow()
        self._samples_window = samples_window
        #: (client) The ``samples_window`` the server named in its ``PONG``, if any.
        self.peer_samples_window: Optional[int] = None
        #: Whether the peer offered extensions in its PING (a server answers keep-alives in kind).
        self.peer_offered = False
        self.peer_is_directory = False
        self._secret = secret
        self._client_auth: Optional[ClientAuth] = None
        self._server_auth: Optional[ServerAuth] = None
        self._max_frame_bytes = max_frame_bytes
        first_cap = max_frame_bytes if role is Role.CLIENT else min(HANDSHAKE_MAX_FRAME_BYTES, max_frame_bytes)
        self._decoder = FrameDecoder(first_cap, columns=columns, alloc=body_alloc)
        self._received: collections.deque[_Received] = collections.deque()
        self._error: Optional[ProtocolError] = None
        self._eof = False
        self._out = _Outgoing()
        #: Replies owed, oldest first: what the client waits for, what the server must send.
        self._owed: collections.deque[MessageType] = collections.deque()
        self._peer_agent = ""
        #: (client) The envs of the unanswered ACT that want an action, in order.
        self._act_envs: list[int] = []
        #: An ERROR was sent or received: the conversation is over.
        self._ended_by_error = False

    # ------------------------------------------------------------------
    # Introspection

    @property
    def handshaking(self) -> bool:
        """Whether the handshake is still under way (the peer is a stranger)."""
        return self.state in (State.IDLE, State.GREETING, State.AUTHENTICATING)

    def speaks(self, extension: Extension) -> bool:
        """Whether ``extension`` was agreed."""
        return extension.value in self.extensions

    @property
    def awaiting(self) -> Optional[MessageType]:
        """(client) The reply the oldest unanswered request waits for, if any."""
        return self._owed[0] if self._owed else None

    @property
    def in_frame(self) -> bool:
        """Whether part of a frame has arrived but not all of it."""
        return self._decoder.in_frame

    @property
    def events_waiting(self) -> bool:
        """Whether :meth:`next_event` has something to give without more bytes."""
        return bool(self._received) or self._error is not None or (self._eof and self.state is not State.CLOSED)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the unfinished frame held so far."""
        return self._decoder.buffered_bytes

    @property
    def frames_received(self) -> int:
        return self._decoder.frames

    @property
    def frames_sent(self) -> int:
        """Frames queued for the peer so far (``data_to_send`` hands them over)."""
        return self._out.frames

    # ------------------------------------------------------------------
    # Bytes in

    def receive_data(self, data: Buffer) -> None:
        """Take bytes from the peer; read the events with :meth:`next_event`.

        The messages decoded before a bad frame are delivered first; the
        error is raised by the :meth:`next_event` that reaches it.
        """
        if self._error is not None or self.state is State.CLOSED:
            return
        try:
            messages = self._decoder.feed(data)
        except ProtocolError as exc:
            self._queue(self._decoder.before_error)
            self._error = exc
            return
        self._queue(zip(messages, self._decoder.last_frame_sizes))

    def read_buffer(self) -> Optional[memoryview]:
        """Where the unfinished frame's body goes, for ``recv_into``; ``None``: read a chunk and :meth:`receive_data` it."""
        if self._error is not None or self.state is State.CLOSED:
            return None
        return self._decoder.next_read_buffer()

    def received_into(self, nbytes: int) -> None:
        """``nbytes`` were written into :meth:`read_buffer`."""
        try:
            messages = self._decoder.advance(nbytes)
        except ProtocolError as exc:
            self._error = exc
            return
        self._queue(zip(messages, self._decoder.last_frame_sizes))

    def receive_eof(self) -> None:
        """The peer closed its side; :meth:`next_event` ends with :class:`ConnectionClosed`.

        A stream that ends mid-frame raises :class:`~.errors.FrameError` from :meth:`next_event`.
        """
        if self._error is not None or self._eof:
            return
        self._eof = True
        try:
            self._decoder.eof()
        except ProtocolError as exc:
            self._error = exc

    def next_event(self) -> Optional[Event]:
        """The next event, or ``None`` until more bytes arrive.

        Raises:
            ProtocolError: the peer broke the protocol (the connection is now ``CLOSED``).
        """
        if self.state is State.CLOSED:
            # Over: nothing more is read, not even an error that came before or with the end.
            self._received.clear()
            self._error = None
            return None
        while self._received:
            item = self._received.popleft()
            try:
                event = self._accept(item.message, item.frame_bytes)
            except ProtocolError:
                self._fail()
                raise
            if event is not None:
                return event
        if self._error is not None:
            error = self._error
            self._fail()
            raise error
        if self._eof and self.state is not State.CLOSED:
            self.state = State.CLOSED
            return ConnectionClosed()
        return None

    def _queue(self, items: Iterable[tuple[dict, int]]) -> None:
        self._received.extend(_Received(message, size) for message, size in items)

    def _fail(self) -> None:
        # The stream is out of sync: whatever else arrives is not read.
        self.state = State.CLOSED
        self._received.clear()
        self._error = None

    # ------------------------------------------------------------------
    # Bytes out

    def data_to_send(self) -> list[Buffer]:
        """The frames queued by send calls since the last call, as buffers (header first each).

        Large arrays are views of the caller's memory: keep them unchanged
        until the buffers are written.
        """
        return self._out.take()

    def send_error(self, code: Union[ErrorCode, str], message: str) -> None:
        """Queue an ``ERROR`` and close: we end the conversation for cause.

        Allowed in any state once (after a peer's violation too, to say why).

        Raises:
            LocalProtocolError: an ``ERROR`` was sent or received already.
        """
        if self._ended_by_error:
            raise LocalProtocolError("an ERROR was already sent or received on this connection")
        self._ended_by_error = True
        self.state = State.CLOSED
        self._out.frame(encode_message_parts(error_message(str(code), message[:MAX_ERROR_TEXT])))

    # -- client ---------------------------------------------------------

    def start(self) -> None:
        """(client) Queue the ``PING`` that opens the handshake.

        Raises:
            LocalProtocolError: not a client, or already started.
        """
        self._require(Role.CLIENT, "start the handshake")
        if self.state is not State.IDLE:
            raise LocalProtocolError(f"the handshake was started already (state {self.state.value})")
        extra: dict[str, Any] = {}
        if self.client_id is not None:
            extra["client_id"] = self.client_id
        if self._secret is not None:
            self._client_auth = ClientAuth(self._secret)
            extra.update(self._client_auth.offer())
        self._send(ping_message(make_offer(self.our_extensions, agent=self.agent, **extra)))
        self.state = State.GREETING

    def send_get_config(self) -> None:
        """(client) Ask for the learner's setup; a :class:`ConfigReceived` follows."""
        self._request(MessageType.GET_CONFIG)

    def send_get_state(self) -> None:
        """(client) Ask for the current weights; a :class:`StateReceived` follows."""
        self._request(MessageType.GET_STATE)

    def send_get_modules(self, agents: list[str]) -> None:
        """(client) Ask which module acts for each of ``agents``; a :class:`ModulesReceived` follows.

        Raises:
            LocalProtocolError: ``multi_agent`` was not agreed, or ``agents`` is
                not 1 to ``MAX_AGENTS`` strings.
        """
        if not self.speaks(Extension.MULTI_AGENT):
            raise LocalProtocolError("GET_MODULES needs the multi_agent extension, which was not agreed")
        check_agent_ids(agents, LocalProtocolError)
        self._check_request(MessageType.GET_MODULES)
        self._send({"type": MessageType.GET_MODULES.value, "agents": list(agents)})
        self._after_request(MessageType.GET_MODULES)

    def send_get_endpoints(self) -> None:
        """(client) Ask a directory for its runners; an :class:`EndpointsReceived` follows.

        Raises:
            LocalProtocolError: the peer is not a directory.
        """
        if not self.peer_is_directory:
            raise LocalProtocolError("GET_ENDPOINTS goes to a directory; this peer is a runner")
        self._request(MessageType.GET_ENDPOINTS)

    def send_episodes(
        self,
        episodes: list,
        *,
        steps: int,
        timesteps: int,
        on_policy: bool,
        numbered: bool = True,
        keep_for_resend: bool = False,
    ) -> Batch:
        """(client) Queue a batch of episode chunks; return its record.

        With ``ack`` agreed and ``numbered``, the batch gets the window's next
        ``seq`` and stays in the window until its ``ACK``. ``on_policy``
        (``EPISODES_AND_GET_STATE``) asks for weights back: nothing more may
        be sent until :class:`StateReceived`.

        Args:
            episodes: wire episode states.
            steps: env steps in them (for the window's books).
            timesteps: the ``timesteps`` field to send.
            numbered: give it a ``seq`` (when ``ack`` is agreed). An empty
                on-policy batch that only asks for owed weights is not numbered.
            keep_for_resend: keep a copy of the frame in the window (the
                caller may reuse its arrays before the ``ACK`` comes).

        Raises:
            LocalProtocolError: not ready to send (handshake, or an on-policy batch
                unanswered), or the peer is a directory.
            FrameTooLarge: the batch does not fit one frame.
            TypeError, UnsafePayload: a value can't go on the wire.
        """
        kind = MessageType.EPISODES_AND_GET_STATE if on_policy else MessageType.EPISODES
        self._check_request(kind)
        message: dict[str, Any] = {"type": kind.value, "episodes": episodes, "timesteps": timesteps}
        seq = None
        if numbered and self.speaks(Extension.ACK):
            seq = self.window.next_seq
            message["seq"] = seq
        parts = encode_message_parts(message)
        if seq is not None:
            self.window.take_seq()
            if keep_for_resend:
                parts = [b"".join(parts)]
        batch = Batch(seq=seq, kind=kind, parts=parts, steps=steps)
        if seq is not None:
            self.window.add(batch)
        self._out.frame(parts)
        self._after_request(kind)
        return batch

    def send_samples(self, samples: list, *, keep_for_resend: bool = False) -> Batch:
        """(client) Queue a ``SAMPLES`` message (``samples``); return its record.

        Numbered and kept in the window until its ``ACK`` exactly as
        :meth:`send_episodes` does (with ``ack`` agreed); the ``steps`` of its
        record count the samples. No reply is owed. The samples are packed
        into buffers of their own here (:func:`~.samples.encode_sample`), so
        the record always holds what a resend needs (``keep_for_resend`` is
        kept for callers of the old signature).

        Raises:
            LocalProtocolError: ``samples`` not agreed, or not ready to send.
            SampleError: a sample is malformed (as a server would find it).
            FrameTooLarge: the samples do not fit one frame.
        """
        self._check_request(MessageType.SAMPLES)
        if not self.speaks(Extension.SAMPLES):
            raise LocalProtocolError("SAMPLES needs the samples extension, which the server did not agree to")
        samples = list(samples)
        if not 0 < len(samples) <= MAX_SAMPLES_PER_MESSAGE:
            raise SampleError(f"SAMPLES: 1 to {MAX_SAMPLES_PER_MESSAGE} samples a message, got {len(samples)}")
        return self.send_encoded_samples([encode_sample(sample) for sample in samples])

    def send_encoded_samples(self, samples: list[EncodedSample], *, flush: bool = False) -> Batch:
        """(client) :meth:`send_samples` for samples packed already (``protocol.samples.encode_sample``).

        Their buffers are the sender's own, so the record keeps them for a
        resend as they are. ``flush`` marks the message (the server hands a
        partial batch to its consumer now); with no samples it is a flush
        alone, not numbered, and needs a server that named a ``samples_window``.

        Raises:
            LocalProtocolError: ``samples`` not agreed, not ready to send, or a flush alone to a
                server that named no ``samples_window``.
            SampleError: no samples outside a flush, or more than a message holds.
            FrameTooLarge: the samples do not fit one frame.
        """
        self._check_request(MessageType.SAMPLES)
        if not self.speaks(Extension.SAMPLES):
            raise LocalProtocolError("SAMPLES needs the samples extension, which the server did not agree to")
        if flush and self.peer_samples_window is None:
            raise LocalProtocolError("a flush needs a server that named a samples_window (an older one refuses it)")
        numbered = bool(samples) and self.speaks(Extension.ACK)
        seq = self.window.next_seq if numbered else None
        parts = frame_parts(samples_body(samples, seq, flush))
        if numbered:
            self.window.take_seq()
        batch = Batch(seq=seq, kind=MessageType.SAMPLES, parts=parts, steps=len(samples),
                      nbytes=sum(sample.nbytes for sample in samples))
        if seq is not None:
            self.window.add(batch)
        self._out.frame(parts)
        return batch

    def send_act(self, env: Any, obs: Any, reward: Any, start: Any, terminated: Any, truncated: Any, *,
                 taken_mask: Any = None, taken: Any = None, train: Any = None, takeover: Any = None) -> None:
        """(client) Queue an ``ACT`` (``served_actions``); an :class:`ActionsReceived` follows.

        Columns of one length, one row per env (PROTOCOL.md 10.5). Nothing
        else may be sent until the ``ACTIONS`` arrives. ``taken_mask``/``taken``
        and ``train`` need ``served_taken`` (10.5.1), ``takeover`` needs ``takeover`` (10.8).

        Raises:
            LocalProtocolError: ``served_actions`` (or ``served_taken``) not agreed, or not ready to send.
            InvalidMessage: the columns are malformed (as a server would find them).
        """
        self._check_request(MessageType.ACT)
        if not self.speaks(Extension.SERVED_ACTIONS):
            raise LocalProtocolError("ACT needs the served_actions extension, which the server did not agree to")
        if (taken_mask is not None or train is not None) and not self.speaks(Extension.SERVED_TAKEN):
            raise LocalProtocolError("an ACT with taken actions or untrained episodes needs the served_taken "
                                     "extension, which the server did not agree to")
        if takeover is not None and not self.speaks(Extension.TAKEOVER):
            raise LocalProtocolError("an ACT with take-overs needs the takeover extension, which the server did "
                                     "not agree to")
        message = act_message(env, obs, reward, start, terminated, truncated, taken_mask=taken_mask, taken=taken,
                              train=train, takeover=takeover)
        rows = read_act(message)
        self._out.frame(encode_message_parts(message))
        self._act_envs = [e for e, wants in zip(rows.env, rows.wants_action) if wants]
        self._after_request(MessageType.ACT)

    def resend(self, batch: Batch) -> None:
        """(client) Queue a pending batch again, as first encoded (after a reconnect).

        Raises:
            LocalProtocolError: not ready, ``ack`` not agreed, or the batch is not pending.
        """
        self._check_request(batch.kind)
        if not self.speaks(Extension.ACK) or batch not in self.window.pending:
            raise LocalProtocolError("only a batch awaiting its ACK is sent again, to a peer that acknowledges")
        self._out.frame(batch.parts)
        self._after_request(batch.kind)

    # -- server and directory -------------------------------------------

    def send_config(self, frame: bytes) -> None:
        """(server) Answer ``GET_CONFIG`` with a ``SET_CONFIG`` frame encoded once for every client.

        Raises:
            LocalProtocolError: no ``GET_CONFIG`` is unanswered, or an earlier request is.
        """
        self._reply(MessageType.SET_CONFIG)
        self._out.frame([frame])

    def send_state(self, state_body: bytes, *, want_steps: Optional[int] = None,
                   timestep: Optional[int] = None) -> None:
        """(server) Answer ``GET_STATE`` or an on-policy batch with weights packed once per update.

        Args:
            state_body: the packed weight set (``framing.encode_body_once``).
            want_steps: env steps wanted next; required exactly when
                ``want_steps`` was agreed.
            timestep: RLlib's env steps sampled so far; required exactly
                when ``timestep`` was agreed.

        Raises:
            LocalProtocolError: no request for weights is unanswered (or an earlier request is), or
                ``want_steps`` or ``timestep`` given to a client that did not agree to it (or missing).
        """
        if self.speaks(Extension.WANT_STEPS) != (want_steps is not None):
            raise LocalProtocolError(
                "want_steps goes with SET_STATE exactly when the client agreed to it "
                f"(agreed: {self.speaks(Extension.WANT_STEPS)}, given: {want_steps})"
            )
        if self.speaks(Extension.TIMESTEP) != (timestep is not None):
            raise LocalProtocolError(
                "timestep goes with SET_STATE exactly when the client agreed to it "
                f"(agreed: {self.speaks(Extension.TIMESTEP)}, given: {timestep})"
            )
        self._reply(MessageType.SET_STATE)
        fields = {} if want_steps is None else {"want_steps": want_steps}
        if timestep is not None:
            fields["timestep"] = timestep
        self._out.frame(encode_set_state_parts(state_body, **fields))
        if self.state is State.AWAITING_WEIGHTS and MessageType.SET_STATE not in self._owed:
            self.state = State.READY

    def send_ack(self, seq: int, *, weights_seq_no: Optional[int] = None) -> None:
        """(server) Confirm batch ``seq``: RLlib has it.

        Args:
            weights_seq_no: the runner's weights version now; required exactly
                when ``weights_notice`` was agreed (a client that did not agree
                gets the plain ``ACK``, byte for byte).

        Raises:
            LocalProtocolError: the client did not agree to ``ack``, the handshake isn't done,
                or ``weights_seq_no`` given to a client that did not agree to ``weights_notice`` (or missing).
        """
        self._require(Role.SERVER, "acknowledge batches")
        if self.state not in _ANSWERED or not self.speaks(Extension.ACK):
            raise LocalProtocolError(f"ACK to a client that did not agree to 'ack' (state {self.state.value})")
        if self.speaks(Extension.WEIGHTS_NOTICE) != (weights_seq_no is not None):
            raise LocalProtocolError(
                "weights_seq_no goes with ACK exactly when the client agreed to weights_notice "
                f"(agreed: {self.speaks(Extension.WEIGHTS_NOTICE)}, given: {weights_seq_no})"
            )
        self._send(ack_message(seq, weights_seq_no))

    def send_actions(self, env: list, actions: Any, weights_seq_no: int) -> None:
        """(server) Answer the unanswered ``ACT``: ``actions[i]`` for ``env[i]``.

        Raises:
            LocalProtocolError: no ``ACT`` is unanswered.
        """
        self._reply(MessageType.ACTIONS)
        self._send(actions_message(env, actions, weights_seq_no))
        if self.state is State.AWAITING_ACTIONS:
            self.state = State.READY

    def send_modules(self, modules: dict[str, str]) -> None:
        """(server) Answer the unanswered ``GET_MODULES``.

        Raises:
            LocalProtocolError: no ``GET_MODULES`` is unanswered.
        """
        self._reply(MessageType.MODULES)
        self._send({"type": MessageType.MODULES.value, "modules": dict(modules)})

    def send_endpoints(self, endpoints: list) -> None:
        """(directory) Answer ``GET_ENDPOINTS``.

        Raises:
            LocalProtocolError: no ``GET_ENDPOINTS`` is unanswered.
        """
        self._reply(MessageType.ENDPOINTS)
        self._send({"type": MessageType.ENDPOINTS.value, "endpoints": endpoints})

    # ------------------------------------------------------------------
    # Sending, internals

    def _send(self, message: dict) -> None:
        self._out.frame(encode_message_parts(message))

    def _require(self, role: Role, what: str) -> None:
        if self.role is not role:
            raise LocalProtocolError(f"a {self.role.value} does not {what}")

    def _check_request(self, kind: MessageType) -> None:
        self._require(Role.CLIENT, f"send {kind.value}")
        if self.state in _WAITING:
            raise LocalProtocolError(f"{kind.value} before the {_WAITING[self.state].value} owed to us")
        if self.state is not State.READY:
            raise LocalProtocolError(f"{kind.value} in state {self.state.value}: the handshake is not done")
        if self.peer_is_directory and kind is not MessageType.GET_ENDPOINTS:
            raise LocalProtocolError(f"{kind.value} goes to a runner; this peer is a directory")

    def _request(self, kind: MessageType) -> None:
        self._check_request(kind)
        self._send({"type": kind.value})
        self._after_request(kind)

    def _after_request(self, kind: MessageType) -> None:
        reply = _REPLY_TO.get(kind)
        if reply is not None:
            self._owed.append(reply)
        if kind is MessageType.EPISODES_AND_GET_STATE:
            self.state = State.AWAITING_WEIGHTS
        elif kind is MessageType.ACT:
            self.state = State.AWAITING_ACTIONS

    def _reply(self, kind: MessageType) -> None:
        if self.role is Role.CLIENT:
            raise LocalProtocolError(f"a client does not send {kind.value}")
        if self.state not in _ANSWERED or kind not in self._owed:
            raise LocalProtocolError(f"{kind.value} that nobody asked for (state {self.state.value})")
        if kind is not self._owed[0]:
            # The client pairs replies with its requests by order alone.
            raise LocalProtocolError(f"{kind.value} before the {self._owed[0].value} asked for first")
        self._owed.popleft()

    # ------------------------------------------------------------------
    # Receiving: which message is legal when

    def _accept(self, message: dict, frame_bytes: int) -> Optional[Event]:
        kind = MessageType(message["type"])
        if self.role is Role.CLIENT:
            return self._accept_as_client(kind, message)
        if self.role is Role.SERVER:
            return self._accept_as_server(kind, message, frame_bytes)
        return self._accept_as_directory(kind, message)

    def _accept_as_client(self, kind: MessageType, message: dict) -> Optional[Event]:
        if kind is MessageType.ERROR:
            self.state = State.CLOSED
            self._ended_by_error = True  # the peer MUST NOT be answered
            return ErrorReceived(message["code"][:MAX_PEER_CODE], message["message"][:MAX_PEER_TEXT])
        if self.state is State.GREETING:
            if kind is not MessageType.PONG:
                raise self._unexpected(kind, "PONG (the handshake)")
            return self._on_pong(message)
        if self.state is State.AUTHENTICATING:
            if kind is not MessageType.AUTH_OK:
                raise self._unexpected(kind, "AUTH_OK (authentication)")
            assert self._client_auth is not None
            self._client_auth.confirm(message)
            self._client_auth = None
            return self._handshake_done(plain=False)
        if self.state not in _ANSWERED:
            raise self._unexpected(kind, "nothing (we have not sent PING)")
        if kind is MessageType.ACK and self.speaks(Extension.ACK):
            named = message.get("weights_seq_no") if self.speaks(Extension.WEIGHTS_NOTICE) else None
            return Acked(message["seq"], self.window.acknowledge(message["seq"]), named)
        if not self._owed or kind is not self._owed[0]:
            raise self._unexpected(kind, self._owed[0].value if self._owed else "nothing")
        self._owed.popleft()
        if kind is MessageType.SET_STATE:
            if self.state is State.AWAITING_WEIGHTS and MessageType.SET_STATE not in self._owed:
                self.state = State.READY
            if self.speaks(Extension.MULTI_AGENT):
                params, seq_no = read_module_states(message["state"])
            else:
                params, seq_no = read_state(message["state"])
            want = message.get("want_steps") if self.speaks(Extension.WANT_STEPS) else None
            timestep = message.get("timestep") if self.speaks(Extension.TIMESTEP) else None
            return StateReceived(params, seq_no, want, timestep)
        if kind is MessageType.ACTIONS:
            self.state = State.READY
            env, actions = read_actions(message, self._act_envs)
            self._act_envs = []
            return ActionsReceived(env, actions, message["weights_seq_no"])
        if kind is MessageType.MODULES:
            return ModulesReceived(read_modules(message["modules"]))
        if kind is MessageType.SET_CONFIG:
            description = read_config(message)
            raw = message["config"]
            return ConfigReceived(description, raw if type(raw) is bytes else None)
        return EndpointsReceived(message["endpoints"])

    def _on_pong(self, message: dict) -> Optional[Event]:
        offer = parse_offer(message)
        self.extensions = negotiate(offer, self.our_extensions)
        self.peer_is_directory = offer is not None and offer.extra.get("role") == DIRECTORY_ROLE
        self.peer_samples_window = None if offer is None else read_samples_window(offer.extra)
        if self.peer_samples_window is not None and Extension.SAMPLES.value in self.extensions:
            self.window.follow(self.peer_samples_window)
        self._peer_agent = "" if offer is None else offer.agent
        if self._client_auth is not None:
            self._send(self._client_auth.respond(offer))
            self.state = State.AUTHENTICATING
            return None  # AUTH_OK completes it
        self._client_auth = None
        return self._handshake_done(plain=offer is None)

    def _accept_handshake(self, kind: MessageType, message: dict) -> Optional[Event]:
        """(server, directory) ``PING``, then ``AUTH`` when we hold a secret; nothing else before."""
        if self.state is State.IDLE:
            if kind is not MessageType.PING:
                if self._secret is not None:
                    raise AuthFailed(f"expected PING (and authentication) first, got {kind.value}")
                raise UnsupportedMessage(f"expected PING as the first message, got {kind.value}")
            return self._on_ping(message)
        if kind is not MessageType.AUTH:
            raise AuthFailed(f"expected AUTH, got {kind.value}")
        assert self._server_auth is not None
        reply = self._server_auth.accept(message)
        self._server_auth = None
        event = self._handshake_done(plain=False)
        self._send(reply)
        return event

    def _accept_as_server(self, kind: MessageType, message: dict, frame_bytes: int) -> Optional[Event]:
        if self.state in (State.IDLE, State.AUTHENTICATING):
            return self._accept_handshake(kind, message)
        if kind in _SERVER_TO_CLIENT:
            raise UnsupportedMessage(f"{kind.value} is a server-to-client message")
        if kind is MessageType.AUTH:
            raise UnsupportedMessage("AUTH outside the handshake")
        if self.state in _WAITING:
            raise UnsupportedMessage(
                f"{kind.value} while waiting for {_WAITING[self.state].value}; wait for the reply first"
            )
        if kind is MessageType.PING:
            self._keep_alive()
            return None
        if kind is MessageType.GET_CONFIG:
            self._owed.append(MessageType.SET_CONFIG)
            return ConfigRequested()
        if kind is MessageType.GET_STATE:
            self._owed.append(MessageType.SET_STATE)
            return StateRequested()
        if kind in (MessageType.EPISODES, MessageType.EPISODES_AND_GET_STATE):
            on_policy = kind is MessageType.EPISODES_AND_GET_STATE
            if on_policy:
                self._owed.append(MessageType.SET_STATE)
                self.state = State.AWAITING_WEIGHTS
            seq = message.get("seq") if self.speaks(Extension.ACK) else None
            return EpisodesReceived(message["episodes"], message.get("timesteps"), seq, on_policy, frame_bytes)
        if kind is MessageType.GET_MODULES:
            if not self.speaks(Extension.MULTI_AGENT):
                raise UnsupportedMessage("GET_MODULES needs the multi_agent extension, which was not agreed")
            agents = check_agent_ids(message["agents"], InvalidMessage)
            self._owed.append(MessageType.MODULES)
            return ModulesRequested(agents)
        if kind is MessageType.SAMPLES:
            if not self.speaks(Extension.SAMPLES):
                raise UnsupportedMessage("SAMPLES needs the samples extension, which was not agreed")
            seq = message.get("seq") if self.speaks(Extension.ACK) else None
            flush = message.get(FLUSH, False)
            return SamplesReceived(read_samples(message["samples"], flush), seq, frame_bytes, flush)
        if kind is MessageType.ACT:
            if not self.speaks(Extension.SERVED_ACTIONS):
                raise UnsupportedMessage("ACT needs the served_actions extension, which was not agreed")
            rows = read_act(message, taken_agreed=self.speaks(Extension.SERVED_TAKEN),
                            takeover_agreed=self.speaks(Extension.TAKEOVER))
            self._owed.append(MessageType.ACTIONS)
            self.state = State.AWAITING_ACTIONS
            return ActReceived(rows, frame_bytes)
        raise UnsupportedMessage(f"{kind.value} is not something a runner answers")

    def _accept_as_directory(self, kind: MessageType, message: dict) -> Optional[Event]:
        if self.state in (State.IDLE, State.AUTHENTICATING):
            return self._accept_handshake(kind, message)
        if kind is MessageType.PING:
            self._keep_alive()
            return None
        if kind is MessageType.GET_ENDPOINTS and self.state is State.READY:
            self._owed.append(MessageType.ENDPOINTS)
            return EndpointsRequested()
        raise UnsupportedMessage(f"{kind.value} is not something a directory answers")

    def _on_ping(self, message: dict) -> Optional[Event]:
        offer = parse_offer(message)
        extra: dict[str, Any] = {}
        if self.role is Role.DIRECTORY:
            extra["role"] = DIRECTORY_ROLE
        if self._secret is not None:
            self._server_auth = ServerAuth(self._secret)
            extra.update(self._server_auth.challenge(offer))
        reply_offer = None
        client_id = None
        if offer is not None:
            self.peer_offered = True
            self.extensions = negotiate(offer, self.our_extensions)
            self._peer_agent = offer.agent
            given = offer.extra.get("client_id")
            if type(given) is str and 0 < len(given) <= MAX_CLIENT_ID_CHARS:
                client_id = given
            if self._samples_window is not None and Extension.SAMPLES.value in self.extensions:
                extra[SAMPLES_WINDOW] = self._samples_window
            reply_offer = make_offer(self.extensions, agent=self.agent, **extra)
        self.client_id = client_id
        self._send(pong_message(reply_offer))
        if self._server_auth is not None:
            self.state = State.AUTHENTICATING
            return None
        return self._handshake_done(plain=offer is None)

    def _keep_alive(self) -> None:
        # The agreement stands as made in the handshake.
        self._send(pong_message(make_offer(self.extensions, agent=self.agent) if self.peer_offered else None))

    def _handshake_done(self, *, plain: bool) -> HandshakeDone:
        self.state = State.READY
        self._decoder.max_frame_bytes = self._max_frame_bytes
        return HandshakeDone(
            extensions=self.extensions,
            plain=plain,
            peer_agent=self._peer_agent,
            peer_is_directory=self.peer_is_directory,
            client_id=self.client_id if self.role is not Role.CLIENT else None,
        )

    def _unexpected(self, kind: MessageType, waited_for: str) -> UnexpectedMessage:
        return UnexpectedMessage(f"sent {kind.value[:64]} while we waited for {waited_for}",
                                 code=ErrorCode.UNEXPECTED_MESSAGE)
