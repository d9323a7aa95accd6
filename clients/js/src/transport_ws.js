/**
 * RLlink over WebSocket: one binary message per RLlink frame body (no 8-digit header: WebSocket frames it).
 *
 * In a browser the page's own `WebSocket`; under Node the `ws` package (an
 * optional dependency: `npm install ws`), since Node 20 has no WebSocket
 * client without a flag. A text message is a protocol error.
 *
 * A learner that refuses a page's origin (not in its ws_allowed_origins)
 * lets the upgrade through and closes at once with 1008 (policy violation)
 * and a reason naming the origin and the setting: a browser hands the page
 * that close, where it hides an HTTP answer. Any close 1008 is thrown as
 * {@link ConnectFailed}, which no retry or connect wait gets past. A learner
 * that refuses the upgrade itself answers an HTTP status with its reason
 * (400; 403 from an older rlinks for an origin): under Node that answer is
 * read and thrown as ConnectFailed too; a browser's WebSocket is told no
 * reason (the client's error then names the page's origin and the flag that
 * lets it in).
 */

import { ConnectFailed, ConnectionLost, FrameError, ProtocolError, UsageError } from "./errors.js";
import { decodeMessage } from "./framing.js";
import { connectError, Transport } from "./transport.js";

async function webSocketClass() {
  if (typeof globalThis.WebSocket === "function") return globalThis.WebSocket;
  try {
    return (await import("ws")).default;
  } catch {
    throw new UsageError("this JavaScript runtime has no WebSocket: under Node, install the 'ws' package (npm install ws)");
  }
}

/** The WebSocket close code of a server that refuses a client as it is (RFC 6455 7.4.1). */
const POLICY_VIOLATION = 1008;
/** The most of a refused upgrade's HTTP answer read for its reason. */
const MAX_REFUSAL_BYTES = 4096;

/** Under Node's `ws`: the refused upgrade's status and reason, then `reject` with a ConnectFailed saying them. */
function readRefusal(address, request, response, reject) {
  const parts = [];
  let size = 0;
  const done = () => {
    const text = new TextDecoder().decode(Buffer.concat(parts)).trim().replace(/^rlinks: /, "");
    reject(new ConnectFailed(`${address} refused the WebSocket upgrade: HTTP ${response.statusCode}${text ? `: ${text}` : ""}`));
    request.destroy();
  };
  response.on("data", (chunk) => {
    if (size < MAX_REFUSAL_BYTES) parts.push(chunk.subarray(0, MAX_REFUSAL_BYTES - size));
    size += chunk.length;
  });
  response.on("end", done);
  response.on("error", done);
}

export class WebSocketTransport extends Transport {
  constructor(address, socket, maxFrameBytes) {
    super(address);
    this.socket = socket;
    socket.onmessage = (event) => {
      if (this.closed) return;
      try {
        if (typeof event.data === "string") throw new FrameError("a text WebSocket message: RLlink bodies travel as binary messages");
        this._deliver([decodeMessage(new Uint8Array(event.data), maxFrameBytes)]);
      } catch (error) {
        if (!(error instanceof ProtocolError)) throw error;
        this._violation(error);
      }
    };
    socket.onclose = (event) => {
      // 1008, policy violation: the server refuses us as we are (an origin it does not allow): no retry helps.
      const refused = event.code === POLICY_VIOLATION;
      const said = `(WebSocket close ${event.code}${event.reason ? `: ${event.reason}` : ""})`;
      const what = refused && this.received === 0 ? "refused the WebSocket connection" : "closed the connection";
      const text = `${address} ${what} ${said}`;
      this._closed(refused ? new ConnectFailed(text) : new ConnectionLost(text));
    };
    socket.onerror = () => this._closed(new ConnectionLost(`connection to ${address} lost`));
  }

  /** `origin`: the Origin header to send under Node (a browser sends its page's own). */
  static async open(address, { connectTimeoutMs, maxFrameBytes, tls: certificates = {}, origin }) {
    const WebSocket = await webSocketClass();
    const url = `${address.scheme}://${address.host.includes(":") ? `[${address.host}]` : address.host}:${address.port}${address.path}`;
    return new Promise((resolve, reject) => {
      // A browser's WebSocket checks wss:// against the system's CAs; the ws package takes ours.
      const browser = WebSocket === globalThis.WebSocket;
      const socket = browser ? new WebSocket(url)
        : new WebSocket(url, { ...certificates, minVersion: "TLSv1.2", ...(origin ? { origin } : {}) });
      socket.binaryType = "arraybuffer";
      const timer = setTimeout(() => {
        socket.close();
        reject(new ConnectionLost(`could not connect to ${address} within ${connectTimeoutMs / 1000} s`));
      }, connectTimeoutMs);
      socket.onerror = (event) => {
        clearTimeout(timer);
        reject(connectError(address, event?.error));  // a browser's event carries no error: the address alone
      };
      socket.onclose = socket.onerror;
      socket.on?.("unexpected-response", (request, response) => {
        clearTimeout(timer);
        readRefusal(address, request, response, reject);
      });
      socket.onopen = () => {
        clearTimeout(timer);
        resolve(new WebSocketTransport(address, socket, maxFrameBytes));
      };
    });
  }

  async send(body, timeoutMs) {
    if (this.closed) throw this._closedWith;
    this._sendNow(body);
    // The browser's WebSocket says nothing when a message is written: wait until its buffer drains.
    const drained = (async () => {
      while (this.socket.bufferedAmount > 0 && !this.closed) await new Promise((r) => setTimeout(r, 5));
      if (this.closed) {
        // A refusal (close 1008) says more than "lost", and no retry gets past it.
        if (this._closedWith instanceof ConnectFailed) throw this._closedWith;
        throw new ConnectionLost(`connection to ${this.address} lost while sending`);
      }
    })();
    return this._writeTimeout(drained, timeoutMs);
  }

  _sendNow(body) {
    this.socket.send(body);
  }

  // The `ws` package can stop reading (a browser's WebSocket can't: the server only answers what we ask).
  _pause() {
    this.socket.pause?.();
  }

  _resume() {
    this.socket.resume?.();
  }

  _destroy() {
    try {
      this.socket.close();
    } catch {
      // Closing a socket that never opened.
    }
  }
}
