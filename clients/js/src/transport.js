/**
 * Transports: how a client's messages travel. The client code is the same over each.
 *
 * A transport is open once {@link openTransport} resolves. It takes message
 * bodies to send ({@link Transport#send}) and queues the checked messages it
 * receives for {@link Transport#next} / {@link Transport#poll}. TCP frames
 * each body with its 8-digit header (transport_tcp.js, `node:net`); a
 * WebSocket carries one body per binary message (transport_ws.js: the
 * browser's WebSocket, or the `ws` package under Node).
 *
 * What a peer gets wrong is a {@link ProtocolError}: the transport then sends
 * an ERROR saying why (best effort) and closes; a close is {@link ConnectionLost}.
 */

import { ConnectFailed, ConnectionLost, ProtocolError, Timeout, UsageError } from "./errors.js";
import { encodeMessageBody } from "./framing.js";
import { errorMessage } from "./messages.js";

/** Messages queued at most before the transport stops reading (the server only answers; this is a bound, not a buffer). */
export const MAX_QUEUED_MESSAGES = 64;

/** The common half of every transport: the queue of received messages and its waiters. */
export class Transport {
  constructor(address) {
    this.address = address;
    this._queue = [];
    this._waiter = null;
    /** Set once closed: the error the next read throws when the queue is empty. */
    this._closedWith = null;
    /** Frames (messages) received. */
    this.received = 0;
  }

  /** Whether the peer or we closed it. */
  get closed() {
    return this._closedWith !== null;
  }

  /**
   * The next message, waiting until `deadline` (ms since the epoch); null when none came by then.
   * @throws {ConnectionLost|ProtocolError} the connection closed (or the peer broke the protocol) and nothing is queued
   */
  async next(deadline) {
    for (;;) {
      const message = this.poll();
      if (message !== undefined) return message;
      const wait = deadline - Date.now();
      if (wait <= 0) return null;
      await new Promise((resolve) => {
        const timer = setTimeout(() => {
          this._waiter = null;
          resolve();
        }, wait);
        this._waiter = () => {
          clearTimeout(timer);
          this._waiter = null;
          resolve();
        };
      });
    }
  }

  /**
   * A queued message without waiting; undefined when none is.
   * @throws the close error once the queue is empty and the transport closed
   */
  poll() {
    if (this._queue.length > 0) {
      const message = this._queue.shift();
      if (this._queue.length === MAX_QUEUED_MESSAGES - 1) this._resume();
      return message;
    }
    if (this._closedWith !== null) throw this._closedWith;
    return undefined;
  }

  /** Send one message (checked first). */
  async sendMessage(message, timeoutMs) {
    return this.send(encodeMessageBody(message), timeoutMs);
  }

  // -- for the subclasses

  _deliver(messages) {
    for (const message of messages) {
      this._queue.push(message);
      this.received++;
    }
    if (this._queue.length >= MAX_QUEUED_MESSAGES) this._pause();
    this._waiter?.();
  }

  /** The peer broke the protocol: deliver what came before, tell it why, close. */
  _violation(error, before = []) {
    this._deliver(before);
    if (this._closedWith !== null) return;
    try {
      this._sendNow(encodeMessageBody(errorMessage(error.code, String(error.message).slice(0, 512))));
    } catch {
      // Best effort: the peer may be gone already.
    }
    const shown = new ProtocolError(
      `${this.address} sent invalid RLlink: ${error.message}${this.received === 0 ? "; is it an RLlink learner's port?" : ""}`,
      error.code,
    );
    this._closed(shown);
    this._destroy();
  }

  _closed(error) {
    if (this._closedWith === null) this._closedWith = error ?? new ConnectionLost(`${this.address} closed the connection`);
    this._waiter?.();
  }

  /** Close from our side; reads then throw ConnectionLost. */
  close() {
    this._closed(new ConnectionLost(`the connection to ${this.address} was closed`));
    this._destroy();
  }

  /** Rejects after `timeoutMs` with a Timeout saying the peer stopped reading. */
  _writeTimeout(promise, timeoutMs, what = "our message") {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Timeout(`${this.address} did not take ${what} within ${timeoutMs / 1000} s (it stopped reading)`)), timeoutMs);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
  }

  /* c8 ignore start */
  async send() {
    throw new UsageError("send() of an abstract transport");
  }
  _sendNow() {}
  _pause() {}
  _resume() {}
  _destroy() {}
  /* c8 ignore stop */
}

/**
 * Open a transport to `address` (see address.js) and return it once connected.
 * @param {{connectTimeoutMs: number, maxFrameBytes: number, tls?: {ca?, cert?, key?}}} options `tls`: PEM
 *   for tls:// and (under Node) wss://: the CA to check the server with, a client certificate and its key
 * @throws {ConnectionLost} the connection could not be made
 * @throws {UsageError} a transport this environment lacks (TCP in a browser)
 */
/**
 * Why a connection attempt failed, as the error a retry should see: a certificate the client does not
 * trust fails the same way every time (ConnectFailed, not retried), anything else may not (ConnectionLost).
 */
export function connectError(address, error) {
  const code = String(error?.code ?? "");
  if (/CERT|SIGNATURE|ALTNAME|ISSUER/.test(code)) {
    return new ConnectFailed(`could not connect to ${address}: the server's certificate is not trusted (${error.message})`);
  }
  return new ConnectionLost(`could not connect to ${address}${error?.message ? `: ${error.message}` : " (WebSocket)"}`);
}

export async function openTransport(address, options) {
  if (address.scheme === "tcp" || address.scheme === "tls") {
    if (typeof process === "undefined" || !process.versions?.node) {
      throw new UsageError(`${address} is a TCP stream, which a browser can't open: connect to ws://HOST:PORT (or wss://) instead`);
    }
    const { TcpTransport } = await import("./transport_tcp.js");
    return TcpTransport.open(address, options);
  }
  const { WebSocketTransport } = await import("./transport_ws.js");
  return WebSocketTransport.open(address, options);
}
