/** RLlink over TCP (Node's `node:net`), or TLS 1.2+ for tls:// (`node:tls`): the byte stream of 8-digit frames. */

import net from "node:net";
import tls from "node:tls";

import { ConnectionLost, ProtocolError } from "./errors.js";
import { encodeHeader, FrameDecoder } from "./framing.js";
import { connectError, Transport } from "./transport.js";

export class TcpTransport extends Transport {
  constructor(address, socket, maxFrameBytes) {
    super(address);
    this.socket = socket;
    this.decoder = new FrameDecoder(maxFrameBytes);
    socket.on("data", (chunk) => {
      let messages;
      try {
        messages = this.decoder.feed(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      } catch (error) {
        if (!(error instanceof ProtocolError)) throw error;
        this._violation(error, this.decoder.beforeError);
        return;
      }
      this._deliver(messages);
    });
    socket.on("end", () => {
      let why = "";
      try {
        this.decoder.eof();
      } catch (error) {
        why = `: ${error.message}`;
      }
      this._closed(new ConnectionLost(`${address} closed the connection${why}`));
    });
    socket.on("error", (error) => this._closed(new ConnectionLost(`connection to ${address} lost: ${error.message}`)));
    socket.on("close", () => this._closed(new ConnectionLost(`${address} closed the connection`)));
  }

  /** Connect (and finish the TLS handshake for tls://), within `connectTimeoutMs`. */
  static open(address, { connectTimeoutMs, maxFrameBytes, tls: certificates = {} }) {
    const secure = address.scheme === "tls";
    return new Promise((resolve, reject) => {
      const socket = secure
        ? tls.connect({
            host: address.host,
            port: address.port,
            servername: net.isIP(address.host) ? undefined : address.host,
            minVersion: "TLSv1.2",
            ...certificates,
          })
        : net.connect({ host: address.host, port: address.port });
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new ConnectionLost(`could not connect to ${address} within ${connectTimeoutMs / 1000} s`));
      }, connectTimeoutMs);
      socket.once("error", (error) => {
        clearTimeout(timer);
        reject(connectError(address, error));
      });
      socket.once(secure ? "secureConnect" : "connect", () => {
        clearTimeout(timer);
        socket.setNoDelay(true);
        resolve(new TcpTransport(address, socket, maxFrameBytes));
      });
    });
  }

  async send(body, timeoutMs) {
    if (this.closed) throw this._closedWith;
    const written = new Promise((resolve, reject) => {
      this._sendNow(body, (error) => (error ? reject(new ConnectionLost(`connection to ${this.address} lost while sending: ${error.message}`)) : resolve()));
    });
    return this._writeTimeout(written, timeoutMs);
  }

  _sendNow(body, callback) {
    this.socket.cork();
    this.socket.write(encodeHeader(body.length));
    this.socket.write(body, callback);
    this.socket.uncork();
  }

  _pause() {
    this.socket.pause();
  }

  _resume() {
    this.socket.resume();
  }

  _destroy() {
    this.socket.destroy();
  }
}
