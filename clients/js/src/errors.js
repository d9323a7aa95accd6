/**
 * Every error this package throws, rooted at {@link RLinksError} (docs/PROTOCOL.md section 11).
 *
 * {@link ProtocolError} and its subclasses: the peer sent something that is
 * not valid RLlink; each carries the machine-readable code an ERROR message
 * uses. The codes are the Python package's `ErrorCode` members, spelled as on
 * the wire; tests/test_js_client.py holds this list to Python's.
 */

/** Every error code, spelled as on the wire. */
export const ErrorCode = Object.freeze({
  PROTOCOL_ERROR: "protocol_error",
  BAD_FRAME: "bad_frame",
  FRAME_TOO_LARGE: "frame_too_large",
  BAD_BODY: "bad_body",
  UNSAFE_PAYLOAD: "unsafe_payload",
  INVALID_MESSAGE: "invalid_message",
  UNSUPPORTED_MESSAGE: "unsupported_message",
  AUTH_FAILED: "auth_failed",
  LIMIT_EXCEEDED: "limit_exceeded",
  BAD_EPISODE: "bad_episode",
  SERVER_ERROR: "server_error",
  SHUTTING_DOWN: "shutting_down",
  /** Never sent: how this client reports a server's message out of turn. */
  UNEXPECTED_MESSAGE: "unexpected_message",
});

/** The codes an ERROR message may carry. */
export const ERROR_CODES = Object.freeze(
  new Set(Object.values(ErrorCode).filter((code) => code !== ErrorCode.UNEXPECTED_MESSAGE)),
);

/** Base of every error rlinks-client throws. */
export class RLinksError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Our own code asked to send something the conversation does not allow now (a bug, never sent). */
export class LocalProtocolError extends RLinksError {}

/** The peer sent something that is not valid RLlink; the connection can't be trusted any more. */
export class ProtocolError extends RLinksError {
  /** @param {string} message @param {string} [code] */
  constructor(message, code) {
    super(message);
    this.code = code ?? new.target.defaultCode;
  }
  static defaultCode = ErrorCode.PROTOCOL_ERROR;
}

/** The 8-byte header is not 8 ASCII digits, the body is empty, or the stream ended mid-frame. */
export class FrameError extends ProtocolError {
  static defaultCode = ErrorCode.BAD_FRAME;
}

/** A frame is longer than the receiver's limit (or than 8 digits can say). */
export class FrameTooLarge extends FrameError {
  static defaultCode = ErrorCode.FRAME_TOO_LARGE;
}

/** The body is not one msgpack value this protocol can decode. */
export class DecodeError extends ProtocolError {
  static defaultCode = ErrorCode.BAD_BODY;
}

/** The body asks for something never done with network data (object, structured arrays). */
export class UnsafePayload extends DecodeError {
  static defaultCode = ErrorCode.UNSAFE_PAYLOAD;
}

/** Not a map, no str type, or a required field missing or of the wrong type. */
export class InvalidMessage extends ProtocolError {
  static defaultCode = ErrorCode.INVALID_MESSAGE;
}

/** An unknown type, one of RLlib's old API stack, or a type out of place. */
export class UnsupportedMessage extends InvalidMessage {
  static defaultCode = ErrorCode.UNSUPPORTED_MESSAGE;
}

/** A known message type that is not legal now (a reply nobody asked for); code unexpected_message. */
export class UnexpectedMessage extends UnsupportedMessage {
  static defaultCode = ErrorCode.UNEXPECTED_MESSAGE;
}

/** The peer did not complete the `auth` exchange. */
export class AuthFailed extends ProtocolError {
  static defaultCode = ErrorCode.AUTH_FAILED;
}

// ---------------------------------------------------------------------------
// The client's own errors

/** The server sent ERROR {code, message}. The code stays text: a newer server may send new ones. */
export class ServerError extends RLinksError {
  constructor(code, text) {
    super(`the server sent ERROR ${code}: ${text}`);
    this.code = code;
    this.text = text;
  }
}

/** The learner ended the run (ERROR shutting_down, for good): the normal end of training. */
export class TrainingEnded extends ServerError {
  constructor(text) {
    super(ErrorCode.SHUTTING_DOWN, text);
  }
}

/** An open connection dropped, or the peer closed it. */
export class ConnectionLost extends RLinksError {}

/** No attempt to open a connection (and finish its handshake) succeeded. */
export class ConnectFailed extends RLinksError {}

/** A wait ran past its timeout. */
export class Timeout extends RLinksError {}

/** A call made, or waiting, after stop() or close(). */
export class ClientClosed extends RLinksError {}

/** A call out of order, or arguments of the wrong shape; the message says what to change. */
export class UsageError extends RLinksError {}

/** The server did not agree to an extension a call needs (served actions from RLlib's own server). */
export class NotAgreed extends RLinksError {}

/** The runner's module is not one this client can run locally (RLlib's default MLP). */
export class UnsupportedModel extends RLinksError {}
