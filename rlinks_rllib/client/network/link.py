"""One client conversation: a protocol Connection driven over a blocking Transport.

A :class:`Link` is what :class:`~.connection.RLinkClient` and
:func:`~.directory.ask_directory` have in common: it writes what the
:class:`~rlinks_rllib.protocol.connection.Connection` queues, reads until the
event a caller waits for arrives (within ``timeout``), does the handshake,
and turns everything else that can arrive into the client's errors:

* an ``ERROR`` from the server: :class:`ServerError` (:class:`AuthenticationFailed`
  for ``auth_failed``);
* the end of the stream: :class:`ConnectionLost`;
* a peer's :class:`~rlinks_rllib.protocol.errors.ProtocolError`:
  :class:`ProtocolViolation` with its ``code``, or :class:`AuthenticationFailed`
  when the server did not prove it knows the secret.

``ACK``\\s may arrive during any wait; each goes to the ``on_ack`` callback.
Which message is legal when, and what an ``ACK`` confirms, is the
Connection's business; a Link only words the outcome.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional, TypeVar

from ...protocol.connection import (
    Acked,
    Connection,
    ConnectionClosed,
    ErrorReceived,
    HandshakeDone,
    State,
)
from ...protocol.errors import (
    AuthFailed,
    ErrorCode,
    FrameError,
    FrameTooLarge,
    InvalidMessage,
    ProtocolError,
    UnexpectedMessage,
    UnsupportedMessage,
)
from ...protocol.weights import WeightsError
from ..errors import AuthenticationFailed, ClientError, ConnectionLost, ProtocolViolation, ServerError, ServerTimeout
from .address import Address
from .transport import MAX_POLL_READS, Transport

__all__ = ["Link", "server_error"]

E = TypeVar("E")

#: What the handshake waits for, and the hint when it waits in vain.
_PONG = "PONG (the handshake)"
_PONG_HINT = ("; the server took the connection but did not answer. RLlib's own server serves "
              "one client at a time: is another client connected to it?")
_AUTH_OK = "AUTH_OK (authentication)"


def server_error(event: ErrorReceived) -> ServerError:
    """The client's error for the server's ``ERROR`` (already cut to a bounded length by the Connection)."""
    if event.code == ErrorCode.AUTH_FAILED.value:
        return AuthenticationFailed(f"the server refused us: {event.message}")
    return ServerError(event.code, event.message)


class Link:
    """A :class:`Connection` (client role) over a :class:`Transport`, with bounded waits.

    Args:
        transport: the open socket.
        conn: a fresh client Connection (nothing sent yet).
        timeout: seconds any one wait may take (a reply, a write).
        on_ack: called with every :class:`~rlinks_rllib.protocol.connection.Acked`
            event, whatever the Link was waiting for at the time.
        log: where debug lines go.
    """

    def __init__(
        self,
        transport: Transport,
        conn: Connection,
        *,
        timeout: float,
        on_ack: Callable[[Acked], None] = lambda event: None,
        log: Optional[logging.Logger] = None,
    ) -> None:
        self.transport = transport
        self.conn = conn
        self.timeout = timeout
        self._on_ack = on_ack
        self._log = log if log is not None else logging.getLogger(__name__)
        #: What the Connection queued on its own (the AUTH of the handshake), not written yet.
        self._unsent: list = []

    @property
    def address(self) -> Address:
        return self.transport.address

    def close(self) -> None:
        """Close the socket (the one call allowed from another thread)."""
        self.transport.close()

    # ------------------------------------------------------------------
    # The handshake

    def handshake(self) -> HandshakeDone:
        """Send ``PING`` with our offer, answer the server's challenge if we have a secret, wait for the end.

        Raises:
            ServerTimeout: the server sent no ``PONG`` (or ``AUTH_OK``) within ``timeout``.
            AuthenticationFailed: the server refused our proof, or could not
                prove it knows the secret (or does not authenticate at all).
            ServerError, ConnectionLost, ProtocolViolation, TLSFailed: see the module docs.
        """
        self.conn.start()
        self.write("PING")
        done = self._wait(HandshakeDone, _PONG, hint=_PONG_HINT)
        if done is None:  # the server challenged us: our AUTH is queued
            self.write("AUTH")
            done = self.wait_for(HandshakeDone, _AUTH_OK)
        self._log.debug(
            "connected to %s (%s; extensions: %s)", self.address,
            "plain RLlink" if done.plain else done.peer_agent or "rlinks", sorted(done.extensions) or "none",
        )
        return done

    # ------------------------------------------------------------------
    # Bytes out

    def write(self, what: str) -> None:
        """Write everything the Connection has queued, within ``timeout``.

        Raises:
            ServerTimeout: the server stopped reading.
            ServerError: the write failed, and the server had said why
                (``ERROR``) before it closed.
            ConnectionLost: the write failed.
        """
        parts, self._unsent = self._unsent + self.conn.data_to_send(), []
        try:
            self.transport.write(parts, timeout=self.timeout, what=what)
        except ConnectionLost as exc:
            self.transport.read_after_failed_write(self.conn)
            error = self._error_in_flight()
            if error is not None:
                raise error from exc
            raise

    def _error_in_flight(self) -> Optional[ServerError]:
        while True:
            try:
                event = self.conn.next_event()
            except ProtocolError as exc:
                self._log.debug("%s sent invalid RLlink before closing: %s", self.address, exc)
                return None
            if isinstance(event, Acked):
                self._on_ack(event)
            elif isinstance(event, ErrorReceived):
                return server_error(event)
            else:
                return None

    # ------------------------------------------------------------------
    # Bytes in

    def wait_for(self, kind: type[E], what: str, hint: str = "") -> E:
        """Read until an event of ``kind`` arrives (``Acked`` events on the way go to ``on_ack``).

        Args:
            what: what we wait for, for messages ("SET_STATE (after GET_STATE)").
            hint: added to the :class:`ServerTimeout` message.

        Raises:
            ServerTimeout: nothing of ``kind`` within ``timeout``.
            ServerError, ConnectionLost, ProtocolViolation, AuthenticationFailed, TLSFailed.
        """
        event = self._wait(kind, what, hint)
        while event is None:
            self.write(f"our answer (while we waited for {what})")
            event = self._wait(kind, what, hint)
        return event

    def _wait(self, kind: type[E], what: str, hint: str = "") -> Optional[E]:
        """:meth:`wait_for`, but ``None`` as soon as the Connection has queued something to send on its own.

        (The ``AUTH`` that answers the server's challenge in the handshake.)
        """
        deadline = time.monotonic() + self.timeout
        while True:
            event = self._next_event(what)
            if event is None:
                queued = self.conn.data_to_send()
                if queued:
                    self._unsent.extend(queued)
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._timeout(what, hint)
                try:
                    self.transport.read_into(self.conn, timeout=remaining, what=what,
                                             handshaking=self.conn.handshaking)
                except TimeoutError:
                    raise self._timeout(what, hint) from None
            elif isinstance(event, kind):
                return event
            elif not isinstance(event, Acked):
                raise ProtocolViolation(f"{self.address} sent {type(event).__name__} while we waited for {what}")

    def poll(self, what: str = "the next call") -> None:
        """Take in what arrived since the last call without waiting: ``ACK``\\s, an ``ERROR``, the end.

        Raises:
            ServerError, ConnectionLost, ProtocolViolation: what arrived says the conversation is over.
        """
        self._drain_events(what)
        transport = self.transport
        for _ in range(MAX_POLL_READS):
            if transport.at_eof or not transport.readable() or not transport.read_into(self.conn, timeout=0.0,
                                                                                       what=what):
                return
            self._drain_events(what)

    def _drain_events(self, what: str) -> None:
        while True:
            event = self._next_event(what)
            if event is None:
                return
            if not isinstance(event, Acked):
                raise ProtocolViolation(f"{self.address} sent {type(event).__name__} while we waited for {what}")

    def _next_event(self, what: str) -> object:
        """The Connection's next event, with ``ACK``\\s accounted for and the conversation's end raised."""
        state, handshaking = self.conn.state, self.conn.handshaking
        try:
            event = self.conn.next_event()
        except ProtocolError as exc:
            if isinstance(exc, AuthFailed):
                raise self._auth_failed(exc, state) from None
            raise self._violation(exc, state, what) from exc
        if isinstance(event, Acked):
            self._on_ack(event)
        elif isinstance(event, ErrorReceived):
            raise server_error(event)
        elif isinstance(event, ConnectionClosed):
            raise ConnectionLost(
                f"{self.address} closed the connection while we waited for {what}"
                f"{self.transport.eof_hint(handshaking)}"
            )
        return event

    # ------------------------------------------------------------------
    # Wording

    def _timeout(self, what: str, hint: str) -> ServerTimeout:
        return ServerTimeout(f"no {what} from {self.address} within {self.timeout:g} s{hint}")

    def _auth_failed(self, exc: AuthFailed, state: State) -> AuthenticationFailed:
        if state is State.AUTHENTICATING:
            return AuthenticationFailed(f"{self.address}: {exc}; is it the learner you meant?")
        return AuthenticationFailed(
            f"{self.address}: {exc}; this client has a secret and talks only to a server that "
            "proves it knows it (is the server's auth on?)"
        )

    def _violation(self, exc: ProtocolError, state: State, what: str) -> ClientError:
        address = self.address
        if isinstance(exc, FrameError) and self.transport.at_eof:
            # Events are taken as they come, so a frame error after the end
            # of the stream is the unfinished frame the end cut off.
            return ConnectionLost(f"{address} closed the connection while we waited for {what}: {exc}")
        if isinstance(exc, UnexpectedMessage):
            return ProtocolViolation(f"{address} {exc}", code=exc.code)
        if isinstance(exc, WeightsError):
            return ProtocolViolation(f"{address} sent malformed weights: {exc}", code=exc.code)
        if state is State.GREETING and isinstance(exc, InvalidMessage) and not isinstance(exc, UnsupportedMessage):
            return ProtocolViolation(f"{address} sent a malformed PONG: {exc}", code=exc.code)
        hint = ""
        if isinstance(exc, FrameTooLarge):
            hint = " (raise the client's max_frame_bytes if the learner's weights are that large)"
        elif isinstance(exc, FrameError) and self.conn.frames_received == 0:
            hint = f"; is {address} an RLlink learner's port?"
        return ProtocolViolation(f"{address} sent invalid RLlink: {exc}{hint}", code=exc.code)
