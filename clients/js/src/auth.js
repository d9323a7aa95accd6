/**
 * The `auth` extension (PROTOCOL.md 10.3): both peers prove they know a shared secret, which never crosses the wire.
 *
 *     PING {rlinks: {extensions: [.., "auth"], auth_nonce: Nc}}  -->
 *                                                               <--  PONG {rlinks: {.., auth_nonce: Ns}}
 *     AUTH {proof: HMAC-SHA256(K, "rlinks-auth-v1" 0 "client" 0 Nc Ns)}  -->
 *                                                               <--  AUTH_OK {proof: HMAC(K, .."server"..)}
 *
 * HMAC and randomness come from Web Crypto (`globalThis.crypto`: Node 20 and
 * every browser, which gives it only to secure contexts: https:// pages and
 * localhost). The secret is stripped of surrounding whitespace and encoded as
 * UTF-8, as Python's `normalize_secret` does.
 */

import { AuthFailed, UsageError } from "./errors.js";
import { Extension } from "./extensions.js";

export const NONCE_KEY = "auth_nonce";
export const NONCE_BYTES = 32;
export const PROOF_BYTES = 32;
export const MIN_SECRET_BYTES = 16;
export const MAX_SECRET_BYTES = 4096;
/** The environment variable both sides read the secret from. */
export const SECRET_ENV = "RLINKS_SECRET";

const LABEL = new TextEncoder().encode("rlinks-auth-v1");

function webCrypto() {
  const crypto = globalThis.crypto;
  if (!crypto?.subtle) {
    throw new UsageError("authentication needs Web Crypto (crypto.subtle): in a browser, serve the page over https:// or from localhost");
  }
  return crypto;
}

/**
 * The secret as the bytes both sides feed to HMAC.
 * @param {string|Uint8Array} secret
 * @throws {UsageError} shorter than 16 or longer than 4096 bytes
 */
export function normalizeSecret(secret) {
  let bytes = typeof secret === "string" ? new TextEncoder().encode(secret) : secret;
  if (!(bytes instanceof Uint8Array)) throw new UsageError("an rlinks secret must be a string or a Uint8Array");
  const space = (b) => b === 0x20 || (b >= 0x09 && b <= 0x0d);
  let start = 0;
  let end = bytes.length;
  while (start < end && space(bytes[start])) start++;
  while (end > start && space(bytes[end - 1])) end--;
  bytes = bytes.slice(start, end);
  if (bytes.length < MIN_SECRET_BYTES) {
    throw new UsageError(
      `the rlinks secret is ${bytes.length} bytes; at least ${MIN_SECRET_BYTES} are needed. Make one with: openssl rand -hex 32`,
    );
  }
  if (bytes.length > MAX_SECRET_BYTES) throw new UsageError(`the rlinks secret is longer than ${MAX_SECRET_BYTES} bytes`);
  return bytes;
}

/** 32 fresh random bytes. */
export function randomNonce() {
  return webCrypto().getRandomValues(new Uint8Array(NONCE_BYTES));
}

/**
 * HMAC-SHA256 of "rlinks-auth-v1" 0 role 0 clientNonce serverNonce under `secret`.
 * @param {Uint8Array} secret normalized
 * @param {"client"|"server"} role
 * @returns {Promise<Uint8Array>}
 */
export async function proof(secret, role, clientNonce, serverNonce) {
  const { subtle } = webCrypto();
  const key = await subtle.importKey("raw", secret, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const roleBytes = new TextEncoder().encode(role);
  const message = new Uint8Array(LABEL.length + 1 + roleBytes.length + 1 + clientNonce.length + serverNonce.length);
  let at = 0;
  for (const part of [LABEL, [0], roleBytes, [0], clientNonce, serverNonce]) {
    message.set(part, at);
    at += part.length;
  }
  return new Uint8Array(await subtle.sign("HMAC", key, message));
}

/** Compare two proofs in time independent of where they differ. */
export function sameProof(a, b) {
  if (!(a instanceof Uint8Array) || !(b instanceof Uint8Array) || a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

/**
 * The server's nonce from its PONG answer.
 * @throws {AuthFailed} the server did not agree to `auth`, or sent no 32-byte nonce
 */
export function serverNonce(answer, address) {
  if (answer === null || !answer.extensions.has(Extension.AUTH)) {
    throw new AuthFailed(
      `${address} did not agree to authenticate; this client has a secret and talks only to a server ` +
        "that proves it knows it (is the server's auth on?)",
    );
  }
  const nonce = answer.extra[NONCE_KEY];
  if (!(nonce instanceof Uint8Array) || nonce.length !== NONCE_BYTES) {
    throw new AuthFailed(`${address} sent no ${NONCE_BYTES}-byte '${NONCE_KEY}' (msgpack bin)`);
  }
  return nonce;
}
