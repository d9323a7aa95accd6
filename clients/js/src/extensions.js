/**
 * Extension negotiation (PROTOCOL.md section 10): what a client offers in its PING and what the server agreed to.
 *
 * RLlib's own server ignores the `rlinks` key and answers a bare PONG: the
 * client then speaks plain RLlink and uses no extension. The names are
 * Python's `Extension`; tests/test_js_client.py holds this list to it.
 */

import { InvalidMessage } from "./errors.js";
import { isMap } from "./ndarray.js";

/** Version of the extension set as a whole. */
export const EXTENSIONS_VERSION = 1;
/** The key under which PING and PONG carry the offer. */
export const RLINKS_KEY = "rlinks";

/** Names of the extensions of version 1. */
export const Extension = Object.freeze({
  WANT_STEPS: "want_steps",
  ACK: "ack",
  AUTH: "auth",
  ENDPOINTS: "endpoints",
  SERVED_ACTIONS: "served_actions",
  /** ACT rows may carry the simulator's own action and say whether an episode is trained on (logAction). */
  SERVED_TAKEN: "served_taken",
  POLICY_GRAPH: "policy_graph",
  MULTI_AGENT: "multi_agent",
  /** Taken-over steps are marked (not used by this client yet). */
  TAKEOVER: "takeover",
  /** SET_STATE carries RLlib's step count, for exploration schedules (not used by this client yet). */
  TIMESTEP: "timestep",
  /** SAMPLES: plain dicts of arrays for a training loop's dataset (not used by this client yet). */
  SAMPLES: "samples",
  /** Every ACK carries the runner's weights version (not used by this client yet). */
  WEIGHTS_NOTICE: "weights_notice",
});

const MAX_NAMES = 64;
const MAX_NAME_CHARS = 64;
const MAX_AGENT_CHARS = 128;

/**
 * The `rlinks` map to put in a PING.
 * @param {Iterable<string>} extensions
 * @param {string} [agent] what software this is
 * @param {object} [extra] other keys (client_id, auth_nonce)
 */
export function makeOffer(extensions, agent = "", extra = {}) {
  const offer = { version: EXTENSIONS_VERSION, extensions: [...new Set(extensions)].sort() };
  if (agent) offer.agent = agent;
  return Object.assign(offer, extra);
}

/**
 * A PING's or PONG's offer: {version, extensions: Set, agent, extra}; null for a plain RLlink peer.
 * @throws {InvalidMessage} the offer is present but malformed
 */
export function parseOffer(message) {
  const raw = message[RLINKS_KEY];
  if (raw === undefined || raw === null) return null;
  if (!isMap(raw)) {
    throw new InvalidMessage("'rlinks' must be a map");
  }
  const { version, extensions = [], agent = "", ...extra } = raw;
  if (!Number.isInteger(version) || version < 1) throw new InvalidMessage("'rlinks.version' must be a positive int");
  if (!Array.isArray(extensions) || extensions.length > MAX_NAMES) {
    throw new InvalidMessage(`'rlinks.extensions' must be a list of at most ${MAX_NAMES} names`);
  }
  for (const name of extensions) {
    if (typeof name !== "string" || name.length === 0 || name.length > MAX_NAME_CHARS) {
      throw new InvalidMessage("'rlinks.extensions' must hold non-empty short strings");
    }
  }
  if (typeof agent !== "string") throw new InvalidMessage("'rlinks.agent' must be a string");
  return { version, extensions: new Set(extensions), agent: agent.slice(0, MAX_AGENT_CHARS), extra };
}

/** The extensions both sides speak: the server's answer cut down to what we offered. */
export function negotiate(answer, offered) {
  if (answer === null) return new Set();
  return new Set([...answer.extensions].filter((name) => offered.includes(name)));
}
