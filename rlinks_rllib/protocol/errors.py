"""Errors raised by the RLlink protocol layer.

Every malformed input that reaches :mod:`rlinks_rllib.protocol` raises
:class:`ProtocolError` or one of its subclasses, and nothing else. Each class
carries a short machine-readable ``code`` which our server puts in the
``ERROR`` message it sends before closing a connection for cause, so a peer in
any language can tell the cases apart without parsing English.
"""

from __future__ import annotations

__all__ = [
    "ProtocolError",
    "FrameError",
    "FrameTooLarge",
    "DecodeError",
    "UnsafePayload",
    "InvalidMessage",
    "UnsupportedMessage",
    "AuthFailed",
    "ERROR_CODES",
]


class ProtocolError(Exception):
    """The peer sent something that is not valid RLlink.

    The connection that produced it can't be trusted to be in sync any more;
    the caller should send an ``ERROR`` (see :func:`messages.error`) and close.
    """

    code = "protocol_error"


class FrameError(ProtocolError):
    """The 8-byte length header is not 8 ASCII digits, or the stream ended mid-frame."""

    code = "bad_frame"


class FrameTooLarge(FrameError):
    """A frame is longer than the receiver's ``max_frame_bytes`` (or than 8 digits can say)."""

    code = "frame_too_large"


class DecodeError(ProtocolError):
    """The frame body is not a msgpack map this protocol can decode."""

    code = "bad_body"


class UnsafePayload(DecodeError):
    """The body asks for something we never do with network data (pickle, object arrays)."""

    code = "unsafe_payload"


class InvalidMessage(ProtocolError):
    """The message is well-formed msgpack but a field is missing or of the wrong type."""

    code = "invalid_message"


class UnsupportedMessage(InvalidMessage):
    """The message type is unknown, belongs to RLlib's old API stack, or is out of place."""

    code = "unsupported_message"


class AuthFailed(ProtocolError):
    """The peer did not prove it knows the shared secret (see :mod:`.auth`).

    Raised for a missing or malformed challenge as well as for a wrong
    proof: a peer learns nothing from the message beyond "not accepted".
    """

    code = "auth_failed"


#: Every code an ``ERROR`` message may carry, for peers and docs.
ERROR_CODES = frozenset(
    cls.code
    for cls in (
        ProtocolError,
        FrameError,
        FrameTooLarge,
        DecodeError,
        UnsafePayload,
        InvalidMessage,
        UnsupportedMessage,
        AuthFailed,
    )
) | {
    # Raised by the server layer, not by a parse error: listed here so all
    # codes live in one place.
    "limit_exceeded",
    "bad_episode",
    "server_error",
    "shutting_down",
}
