/**
 * Where a client connects: `host:port` or `tcp://host:port` (plain RLlink over TCP, Node only),
 * `tls://host:port` (the same over TLS, Node only), `ws://host:port[/path]` or `wss://...` (RLlink over
 * WebSocket, browsers and Node).
 */

import { UsageError } from "./errors.js";

const SCHEMES = new Set(["tcp", "tls", "ws", "wss"]);

/** @returns {{scheme: "tcp"|"tls"|"ws"|"wss", host: string, port: number, path: string, toString(): string}} */
export function parseAddress(text) {
  if (typeof text !== "string" || !text) throw new UsageError("an address is 'host:port', 'tcp://host:port' or 'ws://host:port'");
  let scheme = "tcp";
  let rest = text;
  const sep = text.indexOf("://");
  if (sep >= 0) {
    scheme = text.slice(0, sep).toLowerCase();
    rest = text.slice(sep + 3);
  }
  if (!SCHEMES.has(scheme)) {
    throw new UsageError(`unknown scheme '${scheme}' in ${JSON.stringify(text)}: use tcp://, tls://, ws:// or wss://`);
  }
  const slash = rest.indexOf("/");
  const path = slash >= 0 ? rest.slice(slash) : "/";
  const hostPort = slash >= 0 ? rest.slice(0, slash) : rest;
  const match = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(hostPort);
  if (!match || Number(match[2]) < 1 || Number(match[2]) > 65535) {
    throw new UsageError(`${JSON.stringify(text)} is not host:port (port 1 to 65535)`);
  }
  return makeAddress(scheme, match[1].replace(/^\[|\]$/g, ""), Number(match[2]), path);
}

/** An address of the same scheme as `like`, at another host and port (a runner the directory named). */
export function makeAddress(scheme, host, port, path = "/") {
  const shown = host.includes(":") ? `[${host}]` : host;
  return Object.freeze({
    scheme,
    host,
    port,
    path,
    toString: () => (scheme === "tcp" ? `${shown}:${port}` : `${scheme}://${shown}:${port}${path === "/" ? "" : path}`),
  });
}
