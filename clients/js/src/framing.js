/**
 * RLlink framing: 8 ASCII decimal digits giving the body length, then the body (PROTOCOL.md section 2).
 *
 * {@link encodeMessage} turns a message into one whole frame; {@link FrameDecoder}
 * turns a byte stream, split anywhere, back into messages. No I/O: the
 * transports wrap them around their sockets. A WebSocket carries bodies
 * alone (one per binary message): {@link decodeMessage} reads one of those.
 */

import { decodeBody, encodeBody } from "./codec.js";
import { FrameError, FrameTooLarge, ProtocolError } from "./errors.js";
import { DEFAULT_MAX_FRAME_BYTES, HEADER_BYTES, MAX_BODY_BYTES } from "./limits.js";
import { validateMessage } from "./messages.js";

/**
 * The 8-byte header for a body of `size` bytes.
 * @throws {FrameTooLarge} more than 8 digits can say
 */
export function encodeHeader(size) {
  if (size > MAX_BODY_BYTES) {
    throw new FrameTooLarge(
      `message body is ${size} bytes; RLlink's 8-digit header allows at most ${MAX_BODY_BYTES}. ` +
        "Send fewer episodes or smaller observations per message.",
    );
  }
  const header = new Uint8Array(HEADER_BYTES);
  const digits = String(size).padStart(HEADER_BYTES, "0");
  for (let i = 0; i < HEADER_BYTES; i++) header[i] = digits.charCodeAt(i);
  return header;
}

/** Put the length header in front of an already packed body. */
export function encodeFrame(body) {
  const frame = new Uint8Array(HEADER_BYTES + body.length);
  frame.set(encodeHeader(body.length), 0);
  frame.set(body, HEADER_BYTES);
  return frame;
}

/**
 * A message's body (checked first), without the header: what a WebSocket message carries.
 * @throws {InvalidMessage|UnsupportedMessage} not a valid message
 * @throws {TypeError|UnsafePayload} a value can't go on the wire
 * @throws {FrameTooLarge} the body is longer than 99,999,999 bytes
 */
export function encodeMessageBody(message) {
  validateMessage(message);
  const body = encodeBody(message);
  encodeHeader(body.length);
  return body;
}

/** One whole frame (header and body) for `message`; the errors of {@link encodeMessageBody}. */
export function encodeMessage(message) {
  return encodeFrame(encodeMessageBody(message));
}

/**
 * The body length an 8-byte header declares: exactly eight bytes 0-9, no spaces, signs or underscores.
 * @throws {FrameError}
 */
export function parseHeader(header) {
  let size = 0;
  for (let i = 0; i < HEADER_BYTES; i++) {
    const c = header[i];
    if (header.length !== HEADER_BYTES || c < 0x30 || c > 0x39) {
      const shown = Array.from(header.subarray(0, HEADER_BYTES), (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`)).join("");
      throw new FrameError(`frame header must be ${HEADER_BYTES} ASCII digits, got '${shown}'`);
    }
    size = size * 10 + (c - 0x30);
  }
  return size;
}

/**
 * One received body (a WebSocket message, or a frame's body) as a checked message.
 * @throws {FrameTooLarge} longer than `maxFrameBytes`
 * @throws {FrameError} empty
 * @throws {DecodeError|UnsafePayload|InvalidMessage|UnsupportedMessage}
 */
export function decodeMessage(body, maxFrameBytes = DEFAULT_MAX_FRAME_BYTES) {
  if (body.length > maxFrameBytes) {
    throw new FrameTooLarge(`frame of ${body.length} bytes exceeds the limit of ${maxFrameBytes} bytes`);
  }
  if (body.length === 0) throw new FrameError("frame with an empty body");
  return validateMessage(decodeBody(body));
}

/**
 * Incremental decoder for a stream of RLlink frames.
 *
 * Feed it bytes as they arrive; it returns each complete message once, in
 * order. A body is collected in one buffer allocated from its header, so
 * the work is linear in the bytes fed however they are split. A header that
 * declares more than `maxFrameBytes` is refused before any body is
 * buffered. After an error the decoder is spent (the stream is out of
 * sync); every later call throws the same error. Arrays in the messages are
 * views of buffers the decoder never reuses.
 */
export class FrameDecoder {
  /** @param {number} [maxFrameBytes] largest body accepted (at most 99,999,999) */
  constructor(maxFrameBytes = DEFAULT_MAX_FRAME_BYTES) {
    if (!(maxFrameBytes > 0 && maxFrameBytes <= MAX_BODY_BYTES)) {
      throw new RangeError(`maxFrameBytes must be in 1..${MAX_BODY_BYTES}, got ${maxFrameBytes}`);
    }
    this.maxFrameBytes = maxFrameBytes;
    this._header = new Uint8Array(HEADER_BYTES);
    this._headerFilled = 0;
    this._body = null;
    this._filled = 0;
    this._error = null;
    /** Frames decoded so far. */
    this.frames = 0;
    /** Messages the `feed` that threw decoded before its error, in order. */
    this.beforeError = [];
  }

  /** Whether part of a frame has arrived but not all of it. */
  get inFrame() {
    return this._headerFilled > 0 || this._body !== null;
  }

  /**
   * Take more bytes of the stream; return the messages they complete.
   * @param {Uint8Array} data
   * @returns {object[]}
   * @throws {ProtocolError} see {@link decodeMessage} and {@link parseHeader}
   */
  feed(data) {
    if (this._error !== null) throw this._error;
    const messages = [];
    try {
      let pos = 0;
      const end = data.length;
      while (pos < end) {
        if (this._body !== null) {
          const take = Math.min(this._body.length - this._filled, end - pos);
          this._body.set(data.subarray(pos, pos + take), this._filled);
          this._filled += take;
          pos += take;
          if (this._filled === this._body.length) {
            const body = this._body;
            this._body = null;
            this._filled = 0;
            messages.push(this._decode(body));
          }
          continue;
        }
        const take = Math.min(HEADER_BYTES - this._headerFilled, end - pos);
        this._header.set(data.subarray(pos, pos + take), this._headerFilled);
        this._headerFilled += take;
        pos += take;
        if (this._headerFilled < HEADER_BYTES) continue;
        this._headerFilled = 0;
        const size = parseHeader(this._header);
        if (size > this.maxFrameBytes) {
          throw new FrameTooLarge(`frame of ${size} bytes exceeds the limit of ${this.maxFrameBytes} bytes`);
        }
        if (size === 0) throw new FrameError("frame with an empty body");
        this._body = new Uint8Array(size);
      }
    } catch (error) {
      if (error instanceof ProtocolError) {
        this._error = error;
        this.beforeError = messages;
      }
      throw error;
    }
    return messages;
  }

  /**
   * The peer closed the stream; complain if it left a frame unfinished.
   * @throws {FrameError}
   */
  eof() {
    if (!this.inFrame) return;
    const got = this._body === null ? this._headerFilled : HEADER_BYTES + this._filled;
    const expected = this._body === null ? "?" : String(HEADER_BYTES + this._body.length);
    throw new FrameError(`connection closed mid-frame after ${got} of ${expected} bytes`);
  }

  _decode(body) {
    const message = decodeMessage(body, this.maxFrameBytes);
    this.frames += 1;
    return message;
  }
}
