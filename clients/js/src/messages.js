/**
 * RLlink message types, the fields each must carry, and constructors (PROTOCOL.md section 5).
 *
 * A message is a plain object with a string `type`. {@link validateMessage}
 * checks the fields its type requires and leaves every other key alone, so
 * a peer can extend a message and older peers ignore it. The names are
 * Python's `MessageType`; tests/test_js_client.py holds this list to it.
 */

import { InvalidMessage, UnsupportedMessage } from "./errors.js";
import { isMap, NdArray, typeName } from "./ndarray.js";

/** Every message type name, spelled as on the wire. */
export const MessageType = Object.freeze({
  PING: "PING",
  EPISODES: "EPISODES",
  GET_STATE: "GET_STATE",
  GET_CONFIG: "GET_CONFIG",
  EPISODES_AND_GET_STATE: "EPISODES_AND_GET_STATE",
  PONG: "PONG",
  SET_STATE: "SET_STATE",
  SET_CONFIG: "SET_CONFIG",
  ACTION_SPACE: "ACTION_SPACE",
  OBSERVATION_SPACE: "OBSERVATION_SPACE",
  GET_WORKER_ARGS: "GET_WORKER_ARGS",
  GET_WEIGHTS: "GET_WEIGHTS",
  REPORT_SAMPLES: "REPORT_SAMPLES",
  START_EPISODE: "START_EPISODE",
  GET_ACTION: "GET_ACTION",
  LOG_ACTION: "LOG_ACTION",
  LOG_RETURNS: "LOG_RETURNS",
  END_EPISODE: "END_EPISODE",
  ERROR: "ERROR",
  ACK: "ACK",
  AUTH: "AUTH",
  AUTH_OK: "AUTH_OK",
  GET_ENDPOINTS: "GET_ENDPOINTS",
  ENDPOINTS: "ENDPOINTS",
  ACT: "ACT",
  ACTIONS: "ACTIONS",
  GET_MODULES: "GET_MODULES",
  MODULES: "MODULES",
  /** Client -> server: plain samples for a training loop's dataset (`samples`; not sent by this client yet). */
  SAMPLES: "SAMPLES",
});

/** RLlib's old API stack: recognised, always refused. */
export const OLD_API_TYPES = Object.freeze(
  new Set([
    "ACTION_SPACE", "OBSERVATION_SPACE", "GET_WORKER_ARGS", "GET_WEIGHTS", "REPORT_SAMPLES",
    "START_EPISODE", "GET_ACTION", "LOG_ACTION", "LOG_RETURNS", "END_EPISODE",
  ]),
);

const KNOWN = new Set(Object.values(MessageType));

// Field checks: a name each, as in the error messages.
const isInt = (v) => (typeof v === "number" && Number.isInteger(v)) || typeof v === "bigint";
const is = {
  int: isInt,
  bin: (v) => v instanceof Uint8Array,
  map: isMap,
  list: (v) => Array.isArray(v),
  str: (v) => typeof v === "string",
  ndarray: (v) => v instanceof NdArray && !v.scalar,
};

const REQUIRED = {
  PING: {}, PONG: {}, GET_CONFIG: {}, GET_STATE: {}, GET_ENDPOINTS: {},
  SET_CONFIG: { config: ["bin", "map"] },
  SET_STATE: { state: ["map"] },
  EPISODES: { episodes: ["list"] },
  EPISODES_AND_GET_STATE: { episodes: ["list"] },
  ERROR: { code: ["str"], message: ["str"] },
  ACK: { seq: ["int"] },
  AUTH: { proof: ["bin"] },
  AUTH_OK: { proof: ["bin"] },
  ENDPOINTS: { endpoints: ["list"] },
  ACT: {
    env: ["list"], obs: ["ndarray", "list"], reward: ["ndarray", "list"], start: ["ndarray", "list"],
    terminated: ["ndarray", "list"], truncated: ["ndarray", "list"],
  },
  ACTIONS: { env: ["list"], actions: ["ndarray", "list"], weights_seq_no: ["int"] },
  GET_MODULES: { agents: ["list"] },
  MODULES: { modules: ["map"] },
  SAMPLES: { samples: ["list"] },
};
const OPTIONAL = {
  PING: { rlinks: ["map"] },
  PONG: { rlinks: ["map"] },
  SET_CONFIG: { rlinks_config: ["map"] },
  SET_STATE: { want_steps: ["int"] },
  EPISODES: { timesteps: ["int"], seq: ["int"] },
  EPISODES_AND_GET_STATE: { timesteps: ["int"], seq: ["int"] },
  SAMPLES: { seq: ["int"] },
};

function checkField(type, message, name, kinds) {
  const value = message[name];
  if (!kinds.some((kind) => is[kind](value))) {
    throw new InvalidMessage(`${type}: field '${name}' must be ${kinds.join(" or ")}, got ${typeName(value)}`);
  }
  if (kinds.includes("int") && isInt(value) && value < 0) {
    throw new InvalidMessage(`${type}: field '${name}' must not be negative, got ${value}`);
  }
}

/**
 * The type of a decoded message.
 * @throws {InvalidMessage} not a map, or no str `type`
 * @throws {UnsupportedMessage} an unknown type, or one of RLlib's old API stack
 */
export function messageType(message) {
  if (!isMap(message)) throw new InvalidMessage(`a message must be a msgpack map, got ${typeName(message)}`);
  const name = message.type;
  if (typeof name !== "string") throw new InvalidMessage("a message must have a str field 'type'");
  if (!KNOWN.has(name)) throw new UnsupportedMessage(`unknown message type ${JSON.stringify(name.slice(0, 64))}`);
  if (OLD_API_TYPES.has(name)) {
    throw new UnsupportedMessage(
      `${name} belongs to RLlib's old API stack and is not supported; ` +
        "send EPISODES / EPISODES_AND_GET_STATE and compute actions on the client",
    );
  }
  return name;
}

/**
 * Check that `message` is a known, current message with the fields its type needs; returns it.
 * @throws {InvalidMessage} a required field missing or of the wrong type
 * @throws {UnsupportedMessage} an unknown or old-API type
 */
export function validateMessage(message) {
  const type = messageType(message);
  for (const [name, kinds] of Object.entries(REQUIRED[type])) {
    if (!(name in message)) throw new InvalidMessage(`${type}: missing required field '${name}'`);
    checkField(type, message, name, kinds);
  }
  for (const [name, kinds] of Object.entries(OPTIONAL[type] ?? {})) {
    if (name in message) checkField(type, message, name, kinds);
  }
  if (type === MessageType.EPISODES || type === MessageType.EPISODES_AND_GET_STATE) {
    message.episodes.forEach((episode, i) => {
      if (!isMap(episode)) {
        throw new InvalidMessage(`${type}: episodes[${i}] must be a map, got ${typeName(episode)}`);
      }
    });
  }
  return message;
}

/** A message of `type` with `fields` after it. */
export function makeMessage(type, fields = {}) {
  return { type, ...fields };
}

/** An ERROR: sent just before closing a connection for cause. */
export function errorMessage(code, message) {
  return { type: MessageType.ERROR, code, message };
}
