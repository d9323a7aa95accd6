/**
 * The runner's description of itself in SET_CONFIG (PROTOCOL.md section 9), and the action spaces a local policy acts in.
 *
 * RLlib's own server sends only a pickle, which is never read here: against
 * it, a client is configured by hand (EnvClient's `actionSpace`,
 * `rolloutFragmentLength`, `fcnetActivation` options).
 */

import { InvalidMessage, UsageError } from "./errors.js";
import { isMap, NdArray } from "./ndarray.js";


/** The description's key holding the module's ONNX policy graph (PROTOCOL.md 10.7; Python's `POLICY_GRAPH_KEY`). */
export const POLICY_GRAPH_KEY = "policy_graph";
/**
 * The description's key for how many batches an off-policy client may have sent and not yet had confirmed: a
 * runner that paces its clients (`off_policy_backlog: pace`) names it (PROTOCOL.md 9; Python's `PACED_IN_FLIGHT_KEY`).
 */
const PACED_IN_FLIGHT_KEY = "paced_in_flight";

/** The runner's paced_in_flight; null when absent or not an int >= 1 (a runner's mistake never stalls its clients). */
function readPacedInFlight(description) {
  const value = description[PACED_IN_FLIGHT_KEY];
  return Number.isInteger(value) && value >= 1 ? value : null;
}

function malformed(why) {
  return new InvalidMessage(`malformed SET_CONFIG description: ${why}`);
}

/** A Discrete action space: actions 0..n-1. */
export class DiscreteSpace {
  constructor(n) {
    if (!(Number.isInteger(n) && n >= 1)) throw new UsageError("a Discrete action space needs an int n >= 1");
    this.kind = "discrete";
    this.n = n;
    Object.freeze(this);
  }

  toString() {
    return `Discrete(${this.n})`;
  }
}

/** A Box action space: `shape`, and bounds `low`/`high` (flat Float32Arrays, infinite where unbounded). */
export class BoxSpace {
  constructor(shape, low = [], high = []) {
    if (!Array.isArray(shape) || shape.length === 0 || shape.some((d) => !Number.isInteger(d) || d < 1)) {
      throw new UsageError("a Box action space needs a shape of positive ints");
    }
    this.kind = "box";
    this.shape = Object.freeze([...shape]);
    this.size = shape.reduce((a, b) => a * b, 1);
    this.low = bound(low, this.size, -Infinity, "low");
    this.high = bound(high, this.size, Infinity, "high");
    for (let i = 0; i < this.size; i++) {
      if (!(this.low[i] <= this.high[i])) throw new UsageError(`a Box action space has low > high (or NaN) at ${i}`);
    }
    Object.freeze(this);
  }

  toString() {
    return `Box(shape=[${this.shape}])`;
  }
}

function bound(values, size, fallback, which) {
  let flat = values instanceof NdArray ? Array.from(values.toFloat32()) : Array.from(values ?? [], (x) => (x === null ? fallback : Number(x)));
  if (flat.length === 0) flat = [fallback];
  if (flat.length === 1) flat = new Array(size).fill(flat[0]);
  if (flat.length !== size) throw new UsageError(`a Box's ${which} needs 1 or ${size} values, got ${flat.length}`);
  return Float32Array.from(flat);
}

function readShape(shape, what) {
  if (!Array.isArray(shape) || shape.some((d) => !Number.isInteger(d) || d < 0)) {
    throw malformed(`${what} needs 'shape', a list of ints >= 0`);
  }
  return shape;
}

/**
 * An action space from its SET_CONFIG description; null for one a local policy can't act in.
 * @throws {InvalidMessage} a malformed description
 */
export function readActionSpace(space, what = "action_space") {
  if (!isMap(space)) throw malformed(`${what} must be a map`);
  if (space.kind === "discrete") {
    if (!(Number.isInteger(space.n) && space.n >= 1)) throw malformed(`${what}: discrete needs an int n >= 1`);
    if (space.start !== undefined && space.start !== 0) return null;
    return new DiscreteSpace(space.n);
  }
  if (space.kind === "box") {
    const shape = readShape(space.shape, what);
    for (const which of ["low", "high"]) {
      const array = space[which];
      if (!(array instanceof NdArray) || !(array.shape.length === 0 || array.shape.join() === shape.join())) {
        throw malformed(`${what}: box '${which}' must be an array of its shape`);
      }
    }
    if (shape.length === 0 || shape.some((d) => d === 0)) return null;
    return new BoxSpace(shape, space.low, space.high);
  }
  if (typeof space.kind !== "string") throw malformed(`${what}: a space needs a str 'kind'`);
  return null;
}

/**
 * The runner's description, from a SET_CONFIG; null when it sends only RLlib's pickle.
 *
 * @returns {null | {algorithm: string, rolloutFragmentLength: number, onPolicy: boolean,
 *   modelConfig: object, observationSpace: object, actionSpace: object,
 *   observationSize: number | null, fcnetActivation: string, headFcnetActivation: string,
 *   policyGraph: Uint8Array | null, pacedInFlight: number | null, description: object}}
 * @throws {InvalidMessage} a malformed description
 */
export function readRunnerConfig(setConfig) {
  let description = setConfig.config;
  if (!isMap(description)) description = setConfig.rlinks_config;
  if (description === undefined || description === null) return null;
  if (!isMap(description)) throw malformed("it must be a map");
  const { algorithm, rollout_fragment_length: fragment, on_policy: onPolicy, model_config: model } = description;
  if (typeof algorithm !== "string") throw malformed("needs a str 'algorithm'");
  if (!(Number.isInteger(fragment) && fragment >= 0)) throw malformed("needs an int 'rollout_fragment_length'");
  if (typeof onPolicy !== "boolean") throw malformed("needs a bool 'on_policy'");
  if (!isMap(model)) throw malformed("needs a map 'model_config'");
  const observation = description.observation_space;
  if (!isMap(observation)) throw malformed("observation_space must be a map");
  readActionSpace(description.action_space);
  const activation = (key, fallback) => {
    const name = model[key];
    if (name === undefined) return fallback;
    if (name === null) return "linear";
    if (typeof name !== "string") throw malformed(`model_config '${key}' must be a str`);
    return name;
  };
  const shape = observation.kind === "box" ? readShape(observation.shape, "observation_space") : null;
  const graph = description[POLICY_GRAPH_KEY] ?? null;
  if (graph !== null && !(graph instanceof Uint8Array)) throw malformed(`'${POLICY_GRAPH_KEY}' must be bin (the ONNX model)`);
  return {
    algorithm,
    rolloutFragmentLength: fragment,
    onPolicy,
    modelConfig: model,
    observationSpace: observation,
    actionSpace: description.action_space,
    observationSize: shape === null ? null : shape.reduce((a, b) => a * b, 1),
    fcnetActivation: activation("fcnet_activation", "tanh"),
    headFcnetActivation: activation("head_fcnet_activation", "relu"),
    policyGraph: graph,
    pacedInFlight: readPacedInFlight(description),
    description,
  };
}
