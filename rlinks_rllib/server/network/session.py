"""One connected client: the asyncio side of one :class:`~rlinks_rllib.protocol.connection.Connection`.

A :class:`Session` is the asyncio protocol object of one TCP connection and
holds only what needs I/O: the transport, the peer's address, the deadlines
(handshake, frame, idle), pausing and resuming reads, and the bound on what
may be queued for a slow reader. Every rule of the conversation (the
handshake and its authentication, the frame cap before and after it,
keep-alive PONGs, which message is legal when) is the Connection's: the
session feeds it the bytes it reads, handles its events one at a time
through the :class:`SessionHost` that owns it, and writes what it has to
send. Nothing a client sends can raise out of a session: every failure ends
that one connection with an ``ERROR`` and is logged and counted.

States are the Connection's (``Connection.state``, see its module)::

    IDLE --PING--> READY <--SET_STATE (now, or when new weights come)-- AWAITING_WEIGHTS
      |              ^  \\--EPISODES_AND_GET_STATE-----------------------------^
      |              |  \\--ACT (served_actions)--> AWAITING_ACTIONS
      |              +----ACTIONS (after inference; on-policy maybe after new weights)--/
      +--PING (auth)--> AUTHENTICATING --AUTH (proof checked)--+

    any state --ERROR sent, EOF, or the client's violation--> CLOSED

With authentication on (:mod:`rlinks_rllib.protocol.auth`), a connection
answers only PING and then AUTH; anything else, or a wrong proof, ends it
with ``ERROR auth_failed`` before another message is read. Until the
handshake is done, frames are capped at ``HANDSHAKE_MAX_FRAME_BYTES`` and
reads go through a small buffer, so a stranger costs the runner little;
after it, a large body is read straight into its final buffer.

A client may speak RLlink over WebSocket on the same port (PROTOCOL.md
16): the first bytes tell (:class:`~rlinks_rllib.protocol.websocket.FirstBytes`), and
an upgrade's bytes go through a :class:`~.websocket.ServerWebSocket`, which
feeds the Connection whole frames and turns what it queues into binary
messages; the deadlines, limits and the Connection's rules are the same.

The session sees the server only through :class:`SessionHost`; the server
asks the session to send weights (:meth:`Session.send_weights`), actions
(:meth:`Session.send_actions`) and confirmations (:meth:`Session.send_ack`)
and never changes its state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional, Protocol, Union

from ...protocol.codec import Buffer
from ...protocol.connection import (
    ActReceived,
    Connection,
    ConfigRequested,
    ModulesRequested,
    EpisodesReceived,
    HandshakeDone,
    Role,
    State,
    StateRequested,
)
from ..._version import SERVER_AGENT
from ...protocol.errors import ErrorCode, ProtocolError
from ...protocol.extensions import Extension
from ...protocol.limits import HANDSHAKE_MAX_FRAME_BYTES
from ...protocol.websocket import FirstBytes
from ..errors import IngestError
from ..settings import RLinkSettings
from .deadlines import DeadlineQueue
from .stats import LogLimiter, ServerStats
from .websocket import ServerWebSocket
from .writer import SharedWriter

__all__ = ["Session", "SessionHost"]

logger = logging.getLogger("rlinks_rllib.server")

#: Size of the read buffer a server shares among its sessions (:attr:`SessionHost.read_buffer`).
READ_BUFFER_BYTES = 256 * 1024
_HANDSHAKE_READ_CHUNK = 4096


class SessionHost(Protocol):
    """What a session needs from the server that owns it (:class:`~.listener.RLinkServer`).

    Called on the server's loop thread only.
    """

    settings: RLinkSettings
    stats: ServerStats
    log_limiter: LogLimiter
    #: Extensions a session agrees to at most (``auth`` is implied by a secret).
    extensions: frozenset[str]
    #: The shared secret a client must prove it knows; ``None``: no authentication.
    auth_secret: Optional[bytes]
    #: Where every session reads small frames and headers (``READ_BUFFER_BYTES``):
    #: one buffer for all, since each read is consumed before the loop reads again.
    read_buffer: memoryview
    #: When to look at each session's deadlines: the host calls
    #: :meth:`Session.check_deadlines` for those due, and only those.
    deadlines: DeadlineQueue

    @property
    def weights_seq_no(self) -> int:
        """The version of the weights the runner serves now (named in ``ACK`` under ``weights_notice``)."""

    def session_opened(self, session: "Session") -> bool:
        """A connection was made; ``False``: too many clients, the session refuses it (and is counted)."""

    def session_ready(self, session: "Session") -> None:
        """``session`` finished its handshake (``client_id`` is final)."""

    def session_closed(self, session: "Session") -> None:
        """``session`` is gone (called once, also for a refused one); forget its promises."""

    def config_frame(self, with_graph: bool = False) -> bytes:
        """The ``SET_CONFIG`` frame, encoded once for every client (and once more with the policy graph)."""

    def modules_for(self, agents: list[str]) -> dict[str, str]:
        """``GET_MODULES``: the module of each agent (``multi_agent``).

        Raises:
            IngestError: an agent the mapping does not know.
        """

    def state_requested(self, session: "Session") -> None:
        """``GET_STATE``: answer with :meth:`Session.send_weights`.

        Raises:
            IngestError: the runner can't answer (it has no weights).
        """

    def episodes_received(self, session: "Session", event: EpisodesReceived) -> None:
        """Take a batch in. For an on-policy one, answer with :meth:`Session.send_weights`, now or later.

        Raises:
            IngestError: the batch breaks a limit or an episode is not acceptable.
        """

    def act_received(self, session: "Session", event: ActReceived) -> None:
        """Record an ``ACT``'s rows; answer with :meth:`Session.send_actions`, now or later.

        Raises:
            IngestError: the observations don't fit the runner's space, a row
                breaks the episode rules, or a limit is exceeded; nothing of
                the ``ACT`` is recorded.
        """


class Session(asyncio.BufferedProtocol):
    """The server's side of one client connection.

    Args:
        host: the server that owns it.
        number: the server's count of connections; names the client until it
            gives a ``client_id`` of its own.
    """

    def __init__(self, host: SessionHost, number: int) -> None:
        self.host = host
        settings = host.settings
        self.conn = Connection(Role.SERVER, extensions=host.extensions, agent=SERVER_AGENT,
                               secret=host.auth_secret, max_frame_bytes=settings.max_frame_bytes, columns=True)
        self.peer = "?"
        self.client_id = f"conn-{number}"
        #: Weights version the client holds: what its next batch is sampled with.
        self.weights_seq_no = 0
        self.opened_at = time.monotonic()
        self.last_activity = self.opened_at
        self.frame_started_at: Optional[float] = None
        self.reading_paused = False
        #: The host's count of messages acted on when one of this client's last was; the
        #: client that waited longest is resumed first when a full inbox drains.
        self.last_turn = 0
        self._transport: Optional[asyncio.Transport] = None
        self._writer: Optional[SharedWriter] = None
        #: Where the next read lands, unless a large body is under way: a small part of the
        #: shared buffer until the handshake is done, so a stranger costs the runner little.
        self._chunk = host.read_buffer[:_HANDSHAKE_READ_CHUNK]
        self._gave_body_buffer = False
        #: Frames of the Connection's counts already added to the server's stats.
        self._frames_in = self._frames_out = 0
        #: The transport is closed (or closing) and the host was told: nothing more happens here.
        self._closed = False
        #: Until the first bytes tell RLlink from a WebSocket upgrade (PROTOCOL.md 16); then ``None``.
        self._first: Optional[FirstBytes] = FirstBytes()
        #: The WebSocket this client's RLlink travels in, if it upgraded.
        self._ws: Optional[ServerWebSocket] = None

    # -- what the server may ask ------------------------------------------

    @property
    def ready(self) -> bool:
        """Handshake done and still open: the client may send and be answered."""
        return not self._closed and self.conn.state in (State.READY, State.AWAITING_WEIGHTS, State.AWAITING_ACTIONS)

    @property
    def closed(self) -> bool:
        """The connection is closed or closing, and the host was told."""
        return self._closed

    def speaks(self, extension: Extension) -> bool:
        """Whether the client agreed to ``extension``."""
        return self.conn.speaks(extension)

    def send_weights(self, state_body: bytes, seq_no: int, want_steps: Optional[int],
                     timestep: Optional[int] = None) -> None:
        """Answer the client's request for weights (``GET_STATE`` or an on-policy batch).

        Args:
            state_body: the packed weight set (shared by every client; not copied).
            seq_no: its version, which the client's next batch is sampled with.
            want_steps: env steps to ask for; exactly when the client speaks ``want_steps``.
            timestep: RLlib's env steps sampled so far; sent only to a client that speaks ``timestep``.
        """
        if self._closed or self.conn.state is State.CLOSED:
            return
        self.conn.send_state(state_body, want_steps=want_steps,
                             timestep=timestep if self.speaks(Extension.TIMESTEP) else None)
        self.weights_seq_no = seq_no
        self._watch()  # READY again: the idle deadline runs
        self._flush()

    def send_actions(self, env: list, actions: Any, seq_no: int) -> None:
        """Answer the client's ``ACT``: ``actions[i]`` for ``env[i]``, computed with weights ``seq_no``."""
        if self._closed or self.conn.state is State.CLOSED:
            return
        self.conn.send_actions(env, actions, seq_no)
        self._watch()
        self._flush()

    def send_ack(self, seq: int) -> None:
        """Confirm batch ``seq``: RLlib has it (a client that does not take ACKs is skipped).

        A client that agreed to ``weights_notice`` is told the runner's weights
        version with it, so it asks for new weights as soon as there are some.
        """
        if not self.ready or not self.conn.speaks(Extension.ACK):
            return
        named = self.host.weights_seq_no if self.conn.speaks(Extension.WEIGHTS_NOTICE) else None
        self.conn.send_ack(seq, weights_seq_no=named)
        self._flush()

    def fail(self, code: Union[ErrorCode, str], reason: str) -> None:
        """Send ``ERROR`` and close: the client did something we can't accept (or we are stopping)."""
        if self._closed:
            return
        if code == ErrorCode.SHUTTING_DOWN:
            # The normal end of a run: the client is told, nothing went wrong.
            self._log_close(reason)
        else:
            self.host.stats.count_error(code)
            self._log_close(f"ERROR {code}: {reason}", level=logging.WARNING)
        self.conn.send_error(code, reason)
        if self._ws is not None:
            self._ws.close(code, reason)
        self._flush(check_limit=False)
        self._close()

    def pause_reading(self) -> None:
        """Read nothing more, and act on no more of what was read, until resumed.

        Messages already read but not acted on wait in the connection's
        buffer (one read's worth at most), so a paused client adds nothing
        to the host past the message that paused it; :meth:`act_on_waiting`
        takes them up once reading is resumed.
        """
        if not self.reading_paused and self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
            self.reading_paused = True

    def resume_reading(self) -> None:
        if self.reading_paused and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
            self.reading_paused = False
            self.last_activity = time.monotonic()
            self._watch()

    @property
    def messages_waiting(self) -> bool:
        """Whether messages read before a pause wait to be acted on (see :meth:`act_on_waiting`)."""
        return self.conn.events_waiting

    def act_on_waiting(self) -> None:
        """Act on the messages read before a pause, if reading is not paused (again)."""
        if not self.reading_paused and not self._closed:
            self._handle_events()

    def check_deadlines(self, now: float) -> None:
        """Close the connection if a deadline passed; else file it under its next one.

        The host calls this when the time the session filed itself under
        (:attr:`SessionHost.deadlines`) has come. While reading is paused no
        deadline counts; resuming files the session again.
        """
        settings = self.host.settings
        if self._closed or self.reading_paused:
            return
        conn = self.conn
        if conn.handshaking and now - self.opened_at > settings.handshake_timeout_s:
            self.fail(ErrorCode.LIMIT_EXCEEDED,
                      f"handshake not done within {settings.handshake_timeout_s:g} s of connecting")
        elif self.frame_started_at is not None and now - self.frame_started_at > settings.frame_timeout_s:
            buffered = conn.buffered_bytes if self._ws is None else self._ws.buffered_bytes
            self.fail(
                ErrorCode.LIMIT_EXCEEDED,
                f"a frame took longer than {settings.frame_timeout_s:g} s to arrive ({buffered:,} bytes so far)",
            )
        elif conn.state is State.READY and now - self.last_activity > settings.idle_timeout_s:
            self.fail(ErrorCode.LIMIT_EXCEEDED, f"idle for more than {settings.idle_timeout_s:g} s")
        else:
            self._watch()

    def next_deadline(self) -> Optional[float]:
        """The earliest time a deadline of this connection could pass, as things stand; ``None``: none runs.

        Reads only move the idle deadline later; what moves a deadline
        earlier (connecting, a frame starting, READY again after weights or
        actions, reading resumed) files the session again (:meth:`_watch`).
        """
        if self._closed or self.reading_paused:
            return None
        settings, conn = self.host.settings, self.conn
        at = None
        if conn.handshaking:
            at = self.opened_at + settings.handshake_timeout_s
        elif conn.state is State.READY:
            at = self.last_activity + settings.idle_timeout_s
        if self.frame_started_at is not None:
            frame_at = self.frame_started_at + settings.frame_timeout_s
            at = frame_at if at is None else min(at, frame_at)
        return at

    def _watch(self) -> None:
        """File this session under its next deadline (no-op if it is filed under that or earlier)."""
        at = self.next_deadline()
        if at is not None:
            self.host.deadlines.schedule(self, at)

    # -- asyncio protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._writer = SharedWriter(transport)  # type: ignore[arg-type]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if not self.host.session_opened(self):
            self.fail(ErrorCode.LIMIT_EXCEEDED, f"this runner already serves {self.host.settings.max_clients} clients")
        else:
            self._watch()  # the handshake deadline

    def pause_writing(self) -> None:
        if self._writer is not None:
            self._writer.pause()

    def resume_writing(self) -> None:
        if self._writer is not None:
            self._writer.resume()

    def get_buffer(self, sizehint: int) -> memoryview:
        body = self.conn.read_buffer()
        self._gave_body_buffer = body is not None
        return body if body is not None else self._chunk

    def buffer_updated(self, nbytes: int) -> None:
        now = self.last_activity = time.monotonic()
        conn = self.conn
        self.host.stats.bytes_in += nbytes
        if self._gave_body_buffer:
            conn.received_into(nbytes)
            if conn.in_frame:
                # More of a large body: nothing to act on until it is all here.
                self._frame_going(now)
                return
        elif self._first is not None or self._ws is not None:
            self._websocket_or_first_bytes(self._chunk[:nbytes], now)
            return
        else:
            # The decoder copies what it keeps: the shared buffer is free again on return.
            conn.receive_data(self._chunk[:nbytes])
        if conn.in_frame:
            self._frame_going(now)
        else:
            self.frame_started_at = None
        self._handle_events()

    def _websocket_or_first_bytes(self, data: memoryview, now: float) -> None:
        """The stream's first bytes (RLlink or a WebSocket upgrade?), or bytes of a WebSocket."""
        if self._first is not None:
            start = self._first.feed(data)
            if start is None:
                return  # a prefix of "GET ": too soon to tell (the handshake deadline runs)
            websocket, self._first = self._first.websocket, None
            if not websocket:
                self.conn.receive_data(start)
                if self.conn.in_frame:
                    self._frame_going(now)
                self._handle_events()
                return
            settings = self.host.settings
            self._ws = ServerWebSocket(
                self.conn, server="runner", allowed_origins=settings.ws_allowed_origins,
                max_message_bytes=settings.max_frame_bytes,
                handshake_max_bytes=min(HANDSHAKE_MAX_FRAME_BYTES, settings.max_frame_bytes))
            data = memoryview(start)
        ws = self._ws
        try:
            ws.receive_data(data)
        except Exception:  # noqa: BLE001 - a bug of ours must still end only this connection
            logger.exception("rlinks: client %s (%s): internal error in the WebSocket layer", self.client_id, self.peer)
            self.fail(ErrorCode.SERVER_ERROR, "internal error in the runner")
            return
        if ws.in_message:
            self._frame_going(now)
        else:
            self.frame_started_at = None
        self._handle_events()

    def _frame_going(self, now: float) -> None:
        if self.frame_started_at is None:
            self.frame_started_at = now
            self._watch()  # the frame deadline may come before the one filed

    def eof_received(self) -> bool:
        if self._ws is not None:
            self._ws.receive_eof()
        else:
            self.conn.receive_eof()
        self._handle_events(eof=True)
        return False  # let asyncio close the transport

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if not self._closed:
            self._log_close(f"connection lost ({exc})" if exc else "client closed the connection")
            self._close()

    # -- events -----------------------------------------------------------

    def _handle_events(self, *, eof: bool = False) -> None:
        """Act on every event the bytes so far complete, one at a time, then write the replies."""
        conn = self.conn
        stats = self.host.stats
        try:
            # At the end of the stream nothing more will be read: what came is acted on, paused or not.
            while not self._closed and (eof or not self.reading_paused):
                event = conn.next_event()
                if event is None:
                    if self._ws is not None and self._ws.error is not None:
                        raise self._ws.error  # the WebSocket layer's refusal, after the messages before it
                    break
                kind = type(event)
                if kind is EpisodesReceived:
                    self.host.episodes_received(self, event)
                elif kind is ActReceived:
                    self.host.act_received(self, event)
                elif kind is StateRequested:
                    self.host.state_requested(self)
                elif kind is ConfigRequested:
                    conn.send_config(self.host.config_frame(self.speaks(Extension.POLICY_GRAPH)))
                elif kind is ModulesRequested:
                    conn.send_modules(self.host.modules_for(event.agents))
                elif kind is HandshakeDone:
                    self._handshake_done(event)
                # ConnectionClosed: connection_lost follows.
        except ProtocolError as exc:
            if eof:
                # The stream ended mid-frame: nobody is left to tell.
                stats.count_error(exc.code)
                self._log_close(str(exc))
            else:
                self.fail(exc.code, str(exc))
        except IngestError as exc:
            self.fail(exc.code, str(exc))
        except Exception:  # noqa: BLE001 - a bug of ours must still end only this connection
            logger.exception("rlinks: client %s (%s): internal error", self.client_id, self.peer)
            self.fail(ErrorCode.SERVER_ERROR, "internal error in the runner")
        frames = conn.frames_received
        stats.frames_in += frames - self._frames_in
        self._frames_in = frames
        self._flush()
        if self._ws is not None and self._ws.finished and not self._closed:
            self._websocket_ended()

    def _websocket_ended(self) -> None:
        """The WebSocket layer is done (an upgrade refused, a close frame answered): close the socket."""
        ws = self._ws
        assert ws is not None
        if ws.refusal is not None:
            self.host.stats.count_error(ws.refusal_code)
            self._log_close(f"WebSocket upgrade refused: {ws.refusal}", level=logging.WARNING)
        else:
            self._log_close(f"client closed the WebSocket ({ws.close_text or 'no close frame'})")
        self._close()

    def _handshake_done(self, event: HandshakeDone) -> None:
        if event.client_id is not None:
            self.client_id = event.client_id
        self._chunk = self.host.read_buffer
        self.host.session_ready(self)
        self._watch()  # READY: the idle deadline runs
        ws = self._ws
        logger.info(
            "client %s connected from %s%s (%s; extensions: %s)", self.client_id, self.peer,
            "" if ws is None else " over WebSocket" + (f", a page of {ws.origin}" if ws.origin else ""),
            event.peer_agent or "plain RLlink", ", ".join(sorted(event.extensions)) or "none",
        )

    # -- output -----------------------------------------------------------

    def _flush(self, *, check_limit: bool = True) -> None:
        """Write what the Connection queued; shared buffers (weights) are not copied."""
        parts: list[Buffer] = self.conn.data_to_send() if self._ws is None else self._ws.data_to_send()
        if not parts:
            return
        transport, writer = self._transport, self._writer
        if transport is None or writer is None or transport.is_closing():
            return
        stats = self.host.stats
        stats.bytes_out += writer.write(parts)
        frames = self.conn.frames_sent
        stats.frames_out += frames - self._frames_out
        self._frames_out = frames
        if check_limit:
            queued = writer.queued
            if queued > self.host.settings.max_write_buffer_bytes:
                self.fail(ErrorCode.LIMIT_EXCEEDED, f"client reads too slowly: {queued:,} bytes queued for it")

    def _close(self) -> None:
        """Close after flushing what was written; the host forgets the session's promises."""
        self._closed = True
        self.host.deadlines.discard(self)  # no deadline of a closed session is looked at again
        if self._transport is not None:
            if self._writer is not None:
                self._writer.flush_for_close()
            self._transport.close()
        self.host.session_closed(self)

    def _log_close(self, reason: str, level: int = logging.INFO) -> None:
        if level >= logging.WARNING and not self.host.log_limiter.allow():
            return  # a flood of rejections must not flood the log; the limiter reports the count
        logger.log(level, "client %s (%s) disconnected: %s", self.client_id, self.peer, reason)
