"""Every error this package raises about the network, its peers and its inputs.

One tree, rooted at :class:`RLinksError`, so a user catches everything from
us with one ``except``. Below it:

* :class:`ProtocolError` and its subclasses: **the peer** sent something that
  is not valid RLlink (or not legal at that point of the conversation).
* :class:`LocalProtocolError`: **we** (the caller of the protocol layer) asked
  to send something the conversation does not allow now: a bug in the
  caller, never the peer's fault.

Each :class:`ProtocolError` carries a machine-readable :class:`ErrorCode`,
which a server puts in the ``ERROR`` message it sends before closing a
connection for cause, so a peer in any language can tell the cases apart
without parsing English. The client (:mod:`rlinks_rllib.client.errors`), the
server and the learner application derive their own errors from
:class:`RLinksError` too.
"""

from __future__ import annotations

import enum

__all__ = [
    "RLinksError",
    "ErrorCode",
    "ERROR_CODES",
    "LocalProtocolError",
    "ProtocolError",
    "FrameError",
    "FrameTooLarge",
    "DecodeError",
    "UnsafePayload",
    "InvalidMessage",
    "UnsupportedMessage",
    "UnexpectedMessage",
    "AuthFailed",
]


class ErrorCode(str, enum.Enum):
    """Every error code, spelled as on the wire (``docs/PROTOCOL.md`` section 11)."""

    PROTOCOL_ERROR = "protocol_error"
    BAD_FRAME = "bad_frame"
    FRAME_TOO_LARGE = "frame_too_large"
    BAD_BODY = "bad_body"
    UNSAFE_PAYLOAD = "unsafe_payload"
    INVALID_MESSAGE = "invalid_message"
    UNSUPPORTED_MESSAGE = "unsupported_message"
    AUTH_FAILED = "auth_failed"
    #: A server limit tripped: too many connections, a deadline, a full write buffer.
    LIMIT_EXCEEDED = "limit_exceeded"
    #: An episode state broke the rules of the episode wire form.
    BAD_EPISODE = "bad_episode"
    #: The server failed; not the client's fault.
    SERVER_ERROR = "server_error"
    #: The server is stopping; reconnecting later may work.
    SHUTTING_DOWN = "shutting_down"
    #: Never sent: what our client reports when a server's message is a known
    #: type that is not legal at that point (a reply nobody asked for, an ACK
    #: for a batch never sent). A server that receives a message out of turn
    #: answers ``unsupported_message``, as RLlink always has.
    UNEXPECTED_MESSAGE = "unexpected_message"

    def __str__(self) -> str:
        return self.value


#: Every code an ``ERROR`` message may carry, for peers and docs.
ERROR_CODES = frozenset(code.value for code in ErrorCode if code is not ErrorCode.UNEXPECTED_MESSAGE)


class RLinksError(Exception):
    """Base of every error rlinks-rllib raises (but for mistakes in a caller's own arguments).

    Arguments a caller got wrong stay ``ValueError``/``TypeError``; some
    subclasses derive from one of those too, where that is what a caller
    would reach for first.
    """


class LocalProtocolError(RLinksError):
    """We tried to send something the conversation does not allow now.

    Raised by :class:`~.connection.Connection` send calls: a request before
    the handshake, a second on-policy batch before the first one's reply, an
    ``ACK`` to a peer that did not ask for them. The connection is unchanged
    (nothing was queued), so this is a bug in the caller, not a broken link.
    """


class ProtocolError(RLinksError):
    """The peer sent something that is not valid RLlink.

    The connection that produced it can't be trusted to be in sync any more;
    the caller should send an ``ERROR`` (see :func:`messages.error`) and close.
    """

    code = ErrorCode.PROTOCOL_ERROR.value


class FrameError(ProtocolError):
    """The 8-byte length header is not 8 ASCII digits, or the stream ended mid-frame."""

    code = ErrorCode.BAD_FRAME.value


class FrameTooLarge(FrameError):
    """A frame is longer than the receiver's ``max_frame_bytes`` (or than 8 digits can say)."""

    code = ErrorCode.FRAME_TOO_LARGE.value


class DecodeError(ProtocolError):
    """The frame body is not a msgpack map this protocol can decode."""

    code = ErrorCode.BAD_BODY.value


class UnsafePayload(DecodeError):
    """The body asks for something we never do with network data (pickle, object arrays)."""

    code = ErrorCode.UNSAFE_PAYLOAD.value


class InvalidMessage(ProtocolError):
    """The message is well-formed msgpack but a field is missing or of the wrong type."""

    code = ErrorCode.INVALID_MESSAGE.value


class UnsupportedMessage(InvalidMessage):
    """The message type is unknown, belongs to RLlib's old API stack, or is out of place."""

    code = ErrorCode.UNSUPPORTED_MESSAGE.value


class UnexpectedMessage(UnsupportedMessage):
    """A known message type that is not legal at this point of the conversation.

    Our client reports a server's reply nobody asked for (or an ``ACK`` for a
    batch never sent) with this; a server sends ``unsupported_message`` for a
    client's message out of turn, as RLlink always has.
    """

    def __init__(self, message: str, *, code: ErrorCode = ErrorCode.UNSUPPORTED_MESSAGE) -> None:
        super().__init__(message)
        self.code = code.value


class AuthFailed(ProtocolError):
    """The peer did not prove it knows the shared secret (see :mod:`.auth`).

    Raised for a missing or malformed challenge as well as for a wrong
    proof: a peer learns nothing from the message beyond "not accepted".
    """

    code = ErrorCode.AUTH_FAILED.value
