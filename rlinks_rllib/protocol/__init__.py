"""The RLlink wire protocol, sans I/O: bytes in, messages out, and back.

Nothing here opens a socket, starts a thread or imports Ray. See
``docs/PROTOCOL.md`` for the specification this package implements.
"""

from .errors import (
    ERROR_CODES,
    AuthFailed,
    DecodeError,
    FrameError,
    FrameTooLarge,
    InvalidMessage,
    ProtocolError,
    UnsafePayload,
    UnsupportedMessage,
)
from .extensions import EXTENSIONS_VERSION, Extension, Offer, make_offer, negotiate, parse_offer
from .framing import FrameDecoder, encode_frame, encode_message, encode_message_parts, parse_header
from .limits import DEFAULT_MAX_FRAME_BYTES, HANDSHAKE_MAX_FRAME_BYTES, HEADER_BYTES, MAX_BODY_BYTES
from .messages import OLD_API_TYPES, MessageType, validate_message

__all__ = [
    "AuthFailed",
    "DEFAULT_MAX_FRAME_BYTES",
    "HANDSHAKE_MAX_FRAME_BYTES",
    "ERROR_CODES",
    "EXTENSIONS_VERSION",
    "HEADER_BYTES",
    "MAX_BODY_BYTES",
    "OLD_API_TYPES",
    "DecodeError",
    "Extension",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
    "InvalidMessage",
    "MessageType",
    "Offer",
    "ProtocolError",
    "UnsafePayload",
    "UnsupportedMessage",
    "encode_frame",
    "encode_message",
    "encode_message_parts",
    "make_offer",
    "negotiate",
    "parse_header",
    "parse_offer",
    "validate_message",
]
