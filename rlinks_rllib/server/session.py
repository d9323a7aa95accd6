"""One connected client: its handshake, its messages, its deadlines.

A :class:`Session` is the asyncio protocol object of one TCP connection. It
feeds the bytes it reads to a :class:`~rlinks_rllib.protocol.FrameDecoder`,
acts on each message through the :class:`~.listener.RLinkServer` that owns
it, and closes the connection with an ``ERROR`` on anything it can't accept.
Nothing a client sends can raise out of a session: every failure ends that
one connection and is logged and counted.

States::

    handshake --PING--> ready --EPISODES_AND_GET_STATE (update complete)--> parked
        |                 ^  ^                                                |
        |                 |  +----------------- SET_STATE (new weights) ------+
        +--PING (auth)--> auth --AUTH (proof checked)

With authentication on (:mod:`rlinks_rllib.protocol.auth`), a connection
answers only PING and then AUTH; anything else, or a wrong proof, ends it
with ``ERROR auth_failed`` before another message is read. Until the
handshake is done, frames are capped at ``HANDSHAKE_MAX_FRAME_BYTES`` and
reads go through a small buffer, so a stranger costs the runner little.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import TYPE_CHECKING, Any

from ..protocol import (
    AuthFailed,
    Extension,
    FrameDecoder,
    MessageType,
    ProtocolError,
    UnsupportedMessage,
    encode_message,
    make_offer,
    negotiate,
    parse_offer,
)
from ..protocol import messages as msgs
from ..protocol.auth import ServerAuth
from ..protocol.codec import Buffer
from ..protocol.limits import HANDSHAKE_MAX_FRAME_BYTES

if TYPE_CHECKING:
    from .listener import RLinkServer

__all__ = ["Session", "SessionState", "IngestError"]

logger = logging.getLogger("rlinks_rllib.server")

_READ_CHUNK = 256 * 1024
_HANDSHAKE_READ_CHUNK = 4096
_MAX_CLIENT_ID = 64


class IngestError(ValueError):
    """Episodes that are well-formed RLlink but not acceptable to this runner.

    Attributes:
        code: the ``ERROR`` code to send (``bad_episode`` or ``limit_exceeded``).
    """

    def __init__(self, message: str, code: str = "bad_episode") -> None:
        super().__init__(message)
        self.code = code


class SessionState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTH = "auth"
    READY = "ready"
    PARKED = "parked"
    CLOSED = "closed"


_SERVER_TO_CLIENT = frozenset(
    {MessageType.PONG, MessageType.SET_STATE, MessageType.SET_CONFIG, MessageType.ERROR, MessageType.ACK,
     MessageType.AUTH_OK, MessageType.ENDPOINTS}
)
_HANDSHAKING = frozenset({SessionState.HANDSHAKE, SessionState.AUTH})


class Session(asyncio.BufferedProtocol):
    """The server's side of one client connection."""

    def __init__(self, server: "RLinkServer", number: int) -> None:
        self.server = server
        self.number = number
        self.state = SessionState.HANDSHAKE
        self.peer = "?"
        self.client_id = f"conn-{number}"
        self.extensions: frozenset[str] = frozenset()
        #: Weights version the client holds: what its next batch is sampled with.
        self.weights_seq_no = 0
        self.agent = ""
        #: Whether the client's PING carried an ``rlinks`` offer (a keep-alive PONG answers in kind).
        self.agent_offered = False
        self.opened_at = time.monotonic()
        self.last_activity = self.opened_at
        self.frame_started_at: float | None = None
        #: Size of the frame being handled, header included (the inbox counts it).
        self.frame_bytes = 0
        self.reading_paused = False
        self.batches_in = 0
        self.steps_in = 0
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(min(HANDSHAKE_MAX_FRAME_BYTES, server.settings.max_frame_bytes))
        self._chunk = bytearray(_HANDSHAKE_READ_CHUNK)
        self._gave_body_buffer = False
        self._auth: ServerAuth | None = None

    # -- asyncio protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.session_opened(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        body = self._decoder.next_read_buffer()
        self._gave_body_buffer = body is not None
        return body if body is not None else memoryview(self._chunk)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_activity = time.monotonic()
        self.server.stats.bytes_in += nbytes
        try:
            if self._gave_body_buffer:
                messages = self._decoder.advance(nbytes)
            else:
                messages = self._decoder.feed(memoryview(self._chunk)[:nbytes])
            self.frame_started_at = (self.frame_started_at or self.last_activity) if self._decoder.in_frame else None
            for message, size in zip(messages, self._decoder.last_frame_sizes):
                if self.state is SessionState.CLOSED:
                    return
                self.server.stats.frames_in += 1
                self.frame_bytes = size
                self._handle(message)
        except ProtocolError as exc:
            self.fail(exc.code, str(exc))
        except IngestError as exc:
            self.fail(exc.code, str(exc))

    def eof_received(self) -> bool:
        try:
            self._decoder.eof()
        except ProtocolError as exc:
            self._log_close(f"{exc}")
            self.server.stats.count_error(exc.code)
        return False  # let asyncio close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state is not SessionState.CLOSED:
            self._log_close(f"connection lost ({exc})" if exc else "client closed the connection")
        self.state = SessionState.CLOSED
        self.server.session_closed(self)

    # -- sending ----------------------------------------------------------

    def send(self, message: dict) -> None:
        """Send one message (a small one: it is packed here, for this client only)."""
        self.send_parts([encode_message(message)])

    def send_parts(self, parts: list[Buffer]) -> None:
        """Send a frame given as buffers; shared buffers (weights) are not copied."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        for part in parts:
            transport.write(part)
            self.server.stats.bytes_out += len(part) if isinstance(part, bytes) else part.nbytes
        self.server.stats.frames_out += 1
        queued = transport.get_write_buffer_size()
        if queued > self.server.settings.max_write_buffer_bytes:
            self.fail("limit_exceeded", f"client reads too slowly: {queued:,} bytes queued for it")

    def fail(self, code: str, reason: str) -> None:
        """Send ``ERROR`` and close: the client did something we can't accept."""
        if self.state is SessionState.CLOSED:
            return
        if code == "shutting_down":
            # The normal end of a run: the client is told, nothing went wrong.
            self._log_close(f"{reason}")
        else:
            self.server.stats.count_error(code)
            self._log_close(f"ERROR {code}: {reason}", level=logging.WARNING)
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(encode_message(msgs.error(code, reason[:1000])))
        self.close()

    def close(self) -> None:
        """Close after flushing what was written; the session forgets its promises."""
        if self.state is SessionState.CLOSED:
            return
        self.state = SessionState.CLOSED
        if self._transport is not None:
            self._transport.close()
        self.server.session_closed(self)

    def pause_reading(self) -> None:
        if not self.reading_paused and self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
            self.reading_paused = True

    def resume_reading(self) -> None:
        if self.reading_paused and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
            self.reading_paused = False
            self.last_activity = time.monotonic()

    # -- deadlines (called by the server's periodic check) -----------------

    def check_deadlines(self, now: float) -> None:
        settings = self.server.settings
        if self.state is SessionState.CLOSED or self.reading_paused:
            return
        if self.state in _HANDSHAKING and now - self.opened_at > settings.handshake_timeout_s:
            self.fail("limit_exceeded", f"handshake not done within {settings.handshake_timeout_s:g} s of connecting")
        elif self.frame_started_at is not None and now - self.frame_started_at > settings.frame_timeout_s:
            self.fail(
                "limit_exceeded",
                f"a frame took longer than {settings.frame_timeout_s:g} s to arrive "
                f"({self._decoder.buffered_bytes:,} bytes so far)",
            )
        elif self.state is SessionState.READY and now - self.last_activity > settings.idle_timeout_s:
            self.fail("limit_exceeded", f"idle for more than {settings.idle_timeout_s:g} s")

    # -- messages ---------------------------------------------------------

    def _handle(self, message: dict[str, Any]) -> None:
        kind = MessageType(message["type"])
        if self.state is SessionState.HANDSHAKE:
            if kind is not MessageType.PING:
                if self.server.auth_secret is not None:
                    raise AuthFailed(f"expected PING (and authentication) first, got {kind.value}")
                raise UnsupportedMessage(f"expected PING as the first message, got {kind.value}")
            self._on_first_ping(message)
            return
        if self.state is SessionState.AUTH:
            if kind is not MessageType.AUTH:
                raise AuthFailed(f"expected AUTH, got {kind.value}")
            assert self._auth is not None
            reply = self._auth.accept(message)
            self._auth = None
            self._handshake_done()
            self.send(reply)
            return
        if kind in _SERVER_TO_CLIENT:
            raise UnsupportedMessage(f"{kind.value} is a server-to-client message")
        if kind is MessageType.AUTH:
            raise UnsupportedMessage("AUTH outside the handshake")
        if self.state is SessionState.PARKED:
            raise UnsupportedMessage(f"{kind.value} while waiting for SET_STATE; wait for the reply first")
        if kind is MessageType.PING:
            # A keep-alive: the agreement stands as made in the handshake.
            self.send(msgs.pong(make_offer(self.extensions, agent=self.server.agent) if self.agent_offered else None))
        elif kind is MessageType.GET_CONFIG:
            self.send_parts([self.server.config_frame()])
        elif kind is MessageType.GET_STATE:
            self.server.send_weights(self)
        elif kind is MessageType.EPISODES:
            self._on_episodes(message, on_policy=False)
        elif kind is MessageType.EPISODES_AND_GET_STATE:
            self._on_episodes(message, on_policy=True)
        else:
            raise UnsupportedMessage(f"{kind.value} is not something a runner answers")

    def _on_first_ping(self, message: dict[str, Any]) -> None:
        offer = parse_offer(message)
        secret = self.server.auth_secret
        reply_offer = None
        extra: dict[str, Any] = {}
        if secret is not None:
            self._auth = ServerAuth(secret)
            extra = self._auth.challenge(offer)
        if offer is not None:
            self.agent_offered = True
            self.extensions = negotiate(offer, self.server.supported_extensions)
            self.agent = offer.agent
            client_id = offer.extra.get("client_id")
            if type(client_id) is str and 0 < len(client_id) <= _MAX_CLIENT_ID:
                self.client_id = client_id
            reply_offer = make_offer(self.extensions, agent=self.server.agent, **extra)
        if secret is not None:
            self.state = SessionState.AUTH
        else:
            self._handshake_done()
        self.send(msgs.pong(reply_offer))

    def _handshake_done(self) -> None:
        self.state = SessionState.READY
        self._decoder.max_frame_bytes = self.server.settings.max_frame_bytes
        self._chunk = bytearray(_READ_CHUNK)
        self.server.session_ready(self)
        logger.info(
            "client %s connected from %s (%s; extensions: %s)",
            self.client_id, self.peer, self.agent or "plain RLlink", ", ".join(sorted(self.extensions)) or "none",
        )

    def _on_episodes(self, message: dict[str, Any], *, on_policy: bool) -> None:
        seq = message.get("seq") if Extension.ACK.value in self.extensions else None
        if seq is not None and self.server.already_held(self.client_id, seq):
            # Resent after a reconnect. Already handed to RLlib: confirm it
            # again; still in the inbox: its ACK comes when sample() takes it.
            self.server.stats.duplicates += 1
            if self.server.already_confirmed(self.client_id, seq):
                self.send(msgs.ack(seq))
            if on_policy:
                self.server.after_on_policy_batch(self, 0)
            return
        steps = self.server.ingest(self, message["episodes"], seq=seq)
        if on_policy:
            self.server.after_on_policy_batch(self, steps)

    def _log_close(self, reason: str, level: int = logging.INFO) -> None:
        if level >= logging.WARNING and not self.server.log_limiter.allow():
            return  # a flood of rejections must not flood the log; the limiter reports the count
        logger.log(level, "client %s (%s) disconnected: %s", self.client_id, self.peer, reason)
