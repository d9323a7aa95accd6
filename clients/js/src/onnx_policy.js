/**
 * Any exported RLlib module run here as its ONNX policy graph (PROTOCOL.md 8.1), with onnxruntime-web.
 *
 * The JavaScript side of the Python client's `OnnxPolicy`: a runner that
 * agreed to `policy_graph` (section 10.7) sends its module's inference pass
 * once, in SET_CONFIG, with the weights as graph inputs named as in the
 * weight set, so every SET_STATE feeds the same session new arrays. The
 * graph's metadata entry `rlinks.policy` names its inputs and outputs
 * (rlinks_rllib/protocol/policy_graph.py); it is read here from the ONNX
 * bytes, checked as the Python side checks it, and a graph without it is
 * refused. Actions are drawn from `action_dist_inputs` as the default MLP's
 * are (sampling.js). It runs CNNs on images, Dict and Tuple observations,
 * and recurrent modules, whose state the caller carries ({@link OnnxPolicy#initialState},
 * `stateOut`).
 *
 * onnxruntime-web is an optional peer dependency, imported only when a graph
 * is loaded (under Node it runs its WebAssembly backend); any module with
 * onnxruntime's JavaScript API (`onnxruntime-node`, a page's global `ort`)
 * can be given instead.
 */

import { UnsupportedModel, UsageError } from "./errors.js";
import { integerRange, parseDtype } from "./ndarray.js";
import { drawAction, Random } from "./sampling.js";

/** The graph's metadata entry holding its interface (Python's `policy_graph.METADATA_KEY`). */
export const GRAPH_METADATA_KEY = "rlinks.policy";
/** The interface version this client reads (Python's `policy_graph.VERSION`). */
export const GRAPH_INTERFACE_VERSION = 1;
/** The npm package loaded when no runtime is given. */
export const ONNX_RUNTIME_PACKAGE = "onnxruntime-web";

/** numpy kinds and item sizes (a space's dtype, e.g. "|u1", "<f4") -> onnxruntime's tensor type names. */
const DTYPE_NAMES = {
  f4: "float32", f8: "float64", u1: "uint8", i1: "int8", u2: "uint16", i2: "int16", i4: "int32", u4: "uint32",
  i8: "int64", u8: "uint64", b1: "bool",
};
/** onnxruntime's tensor type names -> the tensor type and the typed array holding it. */
const TENSOR_TYPES = {
  float32: ["float32", Float32Array], float64: ["float64", Float64Array],
  uint8: ["uint8", Uint8Array], int8: ["int8", Int8Array], uint16: ["uint16", Uint16Array], int16: ["int16", Int16Array],
  int32: ["int32", Int32Array], uint32: ["uint32", Uint32Array], int64: ["int64", BigInt64Array], uint64: ["uint64", BigUint64Array],
  bool: ["bool", Uint8Array],
};

let loaded = null;

/**
 * onnxruntime-web, imported once.
 * @throws {UnsupportedModel} it is not installed (the message says what to install)
 */
export async function loadOnnxRuntime() {
  loaded ??= import(ONNX_RUNTIME_PACKAGE).then(
    (ort) => {
      if (ort.env?.wasm && typeof process !== "undefined" && process.versions?.node) ort.env.wasm.numThreads = 1;
      return ort;
    },
    (error) => {
      loaded = null;
      throw new UnsupportedModel(
        `the runner's module runs here only as its policy graph, which needs ${ONNX_RUNTIME_PACKAGE} ` +
          `(npm install ${ONNX_RUNTIME_PACKAGE}, or pass the onnxRuntime option): ${error.message}`,
      );
    },
  );
  return loaded;
}

// ---------------------------------------------------------------------------
// The interface in the graph's metadata

/**
 * The ONNX model's `metadata_props` (ModelProto field 14), read from its protobuf bytes.
 * Only the top level is walked; the graph itself is skipped over.
 * @param {Uint8Array} bytes
 * @returns {Map<string, string>}
 * @throws {UnsupportedModel} not an ONNX model's protobuf
 */
export function readGraphMetadata(bytes) {
  const reader = new ProtoReader(bytes);
  const props = new Map();
  while (!reader.done) {
    const [field, wire] = reader.tag();
    if (field === 14 && wire === 2) {
      const entry = new ProtoReader(reader.bytes());
      let key = "";
      let value = "";
      while (!entry.done) {
        const [f, w] = entry.tag();
        if (f === 1 && w === 2) key = entry.text();
        else if (f === 2 && w === 2) value = entry.text();
        else entry.skip(w);
      }
      props.set(key, value);
    } else {
      reader.skip(wire);
    }
  }
  return props;
}

class ProtoReader {
  constructor(bytes) {
    this.buf = bytes;
    this.pos = 0;
  }

  get done() {
    return this.pos >= this.buf.length;
  }

  varint() {
    let value = 0;
    for (let shift = 0; shift < 64; shift += 7) {
      if (this.pos >= this.buf.length) throw notOnnx("a varint runs past the end");
      const byte = this.buf[this.pos++];
      value += (byte & 0x7f) * 2 ** shift;
      if (byte < 0x80) return value;
    }
    throw notOnnx("a varint is longer than 10 bytes");
  }

  tag() {
    const tag = this.varint();
    return [Math.floor(tag / 8), tag % 8];
  }

  bytes() {
    const length = this.varint();
    if (this.pos + length > this.buf.length) throw notOnnx("a field runs past the end");
    const out = this.buf.subarray(this.pos, this.pos + length);
    this.pos += length;
    return out;
  }

  text() {
    return new TextDecoder().decode(this.bytes());
  }

  skip(wire) {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) this.bytes();
    else if (wire === 5) this.pos += 4;
    else throw notOnnx(`wire type ${wire}`);
    if (this.pos > this.buf.length) throw notOnnx("a field runs past the end");
  }
}

function notOnnx(why) {
  return new UnsupportedModel(`the policy graph is not an ONNX model (${why})`);
}

/** `['camera'][0]`: a key path as Python indexes it (the graph's input names follow Python's repr). */
function formatPath(path) {
  return path.map((part) => (typeof part === "number" ? `[${part}]` : `[${pythonRepr(part)}]`)).join("");
}

function pythonRepr(text) {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  const escaped = text.replaceAll("\\", "\\\\").replaceAll(quote, `\\${quote}`).replaceAll("\n", "\\n").replaceAll("\r", "\\r").replaceAll("\t", "\\t");
  return `${quote}${escaped}${quote}`;
}

/** The leaves of a space description in leaf order (Python's `spaces.leaves`): [{path, space}]. */
export function spaceLeaves(space, path = []) {
  if (space?.kind === "dict") return Object.entries(space.spaces ?? {}).flatMap(([key, sub]) => spaceLeaves(sub, [...path, key]));
  if (space?.kind === "tuple") return (space.spaces ?? []).flatMap((sub, i) => spaceLeaves(sub, [...path, i]));
  return [{ path, space }];
}

/**
 * The graph's interface, checked against its inputs as Python's `read_interface` checks it.
 * @param {string | undefined} text the metadata entry's JSON
 * @param {readonly string[]} inputNames the graph's inputs
 * @throws {UnsupportedModel} missing, of another version, malformed, or naming inputs the graph lacks
 */
export function readGraphInterface(text, inputNames) {
  const refuse = (why) => new UnsupportedModel(`the policy graph's interface ${why}`);
  if (text === undefined) throw refuse(`is missing (no '${GRAPH_METADATA_KEY}' metadata: it was not exported for rlinks)`);
  let face;
  try {
    face = JSON.parse(text);
  } catch {
    throw refuse("is not JSON");
  }
  if (face === null || typeof face !== "object" || face.version !== GRAPH_INTERFACE_VERSION) {
    throw refuse(`is not of version ${GRAPH_INTERFACE_VERSION}`);
  }
  const lists = ["observation_inputs", "state_keys", "state_inputs", "state_outputs", "parameters"];
  for (const key of lists) {
    if (!Array.isArray(face[key]) || !face[key].every((name) => typeof name === "string")) throw refuse(`needs '${key}', a list of strings`);
  }
  const leaves = spaceLeaves(face.observation_space);
  for (const { path, space } of leaves) {
    if (!["box", "discrete", "multi_binary", "multi_discrete"].includes(space?.kind)) {
      throw refuse(`has an observation space leaf${formatPath(path)} this client can't feed (kind ${JSON.stringify(space?.kind)})`);
    }
    if (space.kind === "box" && boxDtype(space.dtype) === null) throw refuse(`has a Box of dtype ${JSON.stringify(space.dtype)}`);
  }
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  if (!same(face.observation_inputs, leaves.map(({ path }) => `obs${formatPath(path)}`))) {
    throw refuse("has observation inputs that don't follow its observation space");
  }
  if (!same(face.state_inputs, face.state_keys.map((k) => `state_in${formatPath([k])}`))
    || !same(face.state_outputs, face.state_keys.map((k) => `state_out${formatPath([k])}`))) {
    throw refuse("has state inputs and outputs that don't follow its state keys");
  }
  const initial = face.initial_state;
  if (initial === null || typeof initial !== "object" || Object.keys(initial).sort().join("\0") !== [...face.state_keys].sort().join("\0")) {
    throw refuse("doesn't give every state key's initial state");
  }
  const present = new Set(inputNames);
  const missing = [...face.observation_inputs, ...face.state_inputs, ...face.parameters].find((name) => !present.has(name));
  if (missing !== undefined) throw refuse(`names an input ${JSON.stringify(missing)} the graph has no`);
  return { ...face, leaves };
}

// ---------------------------------------------------------------------------
// The policy

function product(shape) {
  return shape.reduce((a, b) => a * b, 1);
}

function leafShape(space) {
  if (space.kind === "discrete") return [];
  if (space.kind === "multi_discrete") return [space.nvec.length];
  return space.shape;
}

/** The tensor type name of a Box's numpy dtype string; null for one onnxruntime has no tensor of (or big-endian). */
function boxDtype(str) {
  try {
    const dtype = parseDtype(str);
    return dtype.bigEndian && dtype.itemsize > 1 ? null : DTYPE_NAMES[`${dtype.kind}${dtype.itemsize}`] ?? null;
  } catch {
    return null;
  }
}

function leafDtype(space) {
  return space.kind === "box" ? boxDtype(space.dtype) : space.kind === "multi_binary" ? "int8" : "int64";
}

function flatValues(value) {
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return [Number(value)];
  if (ArrayBuffer.isView(value)) return value;
  if (Array.isArray(value)) return value.flat(Infinity);
  return null;
}

/**
 * The graph of an exported module behind the same calls as {@link LocalPolicy}; make one with {@link OnnxPolicy.create}.
 */
export class OnnxPolicy {
  /**
   * Load a graph and its first weights.
   * @param {Uint8Array} graph the ONNX bytes from SET_CONFIG's `policy_graph`
   * @param {{params: Map, seqNo: number}} weights a weight set ({@link readWeightSet})
   * @param {{space, explore?: boolean, seed?: number, normalizeActions?: boolean, clipActions?: boolean,
   *   onnxRuntime?: object}} options `space` the action space; `onnxRuntime` a module with onnxruntime's API
   *   (default: onnxruntime-web, imported now)
   * @throws {UnsupportedModel} no runtime, a graph the runtime can't load or without an rlinks interface,
   *   or weights that lack a parameter the graph reads or have another shape
   */
  static async create(graph, weights, options) {
    const ort = options.onnxRuntime ?? (await loadOnnxRuntime());
    const text = readGraphMetadata(graph).get(GRAPH_METADATA_KEY);
    let session;
    try {
      session = await ort.InferenceSession.create(graph);
    } catch (error) {
      throw new UnsupportedModel(`onnxruntime can't load the policy graph: ${error.message}`);
    }
    try {
      return new OnnxPolicy(ort, session, readGraphInterface(text, session.inputNames), weights, options);
    } catch (error) {
      await session.release();
      throw error;
    }
  }

  /** @private use {@link OnnxPolicy.create} */
  constructor(ort, session, face, weights, { space, explore = true, seed, normalizeActions = true, clipActions = false }) {
    this.ort = ort;
    this.session = session;
    this.interface = face;
    this.space = space;
    this.explore = explore;
    this.normalizeActions = normalizeActions;
    this.clipActions = clipActions;
    this.random = new Random(seed);
    this.seqNo = 0;
    this.params = null;
    /** The observation space (its description as in SET_CONFIG, arrays as lists). */
    this.observationSpace = face.observation_space;
    /** Values of the action distribution's inputs per step: n logits, or means and log-stds. */
    this.outputSize = space.kind === "box" ? 2 * space.size : space.n;
    this._shapes = new Map((session.inputMetadata ?? []).map((m) => [m.name, m.isTensor ? m.shape : null]));
    this._leaves = face.leaves.map(({ path, space: leaf }) => {
      const shape = leafShape(leaf);
      const dtype = leafDtype(leaf);
      const type = TENSOR_TYPES[dtype];
      return { path, space: leaf, shape, size: product(shape), type, range: dtype === "bool" ? [0, 1] : integerRange(type[1]) };
    });
    this.setWeights(weights);
  }

  /** Whether the module is recurrent: each step takes the state the last one gave. */
  get stateful() {
    return this.interface.state_keys.length > 0;
  }

  /** A plain Box observation's shape (null for a Dict or Tuple). */
  get observationShape() {
    return this.observationSpace.kind === "box" ? [...this.observationSpace.shape] : null;
  }

  /** The typed array a plain Box observation's values are held in (its dtype's: Uint8Array for images); null for a Dict or Tuple. */
  get observationType() {
    return this.observationSpace.kind === "box" ? this._leaves[0].type[1] : null;
  }

  /** Values per observation of a plain Box (null for a Dict or Tuple). */
  get observationSize() {
    return this.observationSpace.kind === "box" ? product(this.observationSpace.shape) : null;
  }

  /** A recurrent module's state shapes by state key (one agent, no batch axis); {} when stateless. */
  get stateShapes() {
    return Object.fromEntries(this.interface.state_keys.map((key) => [key, arrayShape(this.interface.initial_state[key])]));
  }

  /** The state a recurrent module starts an episode with, by state key (one agent, no batch axis); {} when stateless. */
  initialState() {
    return Object.fromEntries(this.interface.state_keys.map((key) => [key, Float32Array.from(this.interface.initial_state[key].flat(Infinity))]));
  }

  /**
   * Feed the graph a newer weight set (one older than the one loaded, but for 0, is ignored); the old one
   * stays if this one doesn't fit.
   * @throws {UnsupportedModel} a parameter the graph reads is missing or has another shape
   */
  setWeights(weights) {
    if (this.params !== null && weights.seqNo !== 0 && weights.seqNo < this.seqNo) return;
    const fresh = {};
    for (const name of this.interface.parameters) {
      const array = weights.params.get(name);
      if (array === undefined) throw new UnsupportedModel(`the weights lack '${name}', which the policy graph reads`);
      const want = this._shapes.get(name);
      if (want && (want.length !== array.shape.length || want.some((d, i) => typeof d === "number" && d !== array.shape[i]))) {
        throw new UnsupportedModel(`weight '${name}' has shape [${array.shape}], the policy graph takes [${want}]`);
      }
      fresh[name] = new this.ort.Tensor("float32", array.toFloat32(), [...array.shape]);
    }
    this.params = fresh;
    this.seqNo = weights.seqNo;
  }

  /**
   * The module's `action_dist_inputs` for a batch of observations (and, recurrent, of states).
   * @param {Array<unknown>} observations one per row: a flat array or typed array for a plain space,
   *   an object (Dict) or array (Tuple) of them for a nested one
   * @param {Array<Record<string, ArrayLike<number>>>} [states] a recurrent module's state per row (default: initial)
   * @returns {Promise<{distInputs: Float32Array[], stateOut: Array<Record<string, Float32Array>> | null}>}
   * @throws {UsageError} an observation that doesn't fit the space (the message names the key path), a state that lacks a key
   */
  async forward(observations, states) {
    const batch = observations.length;
    if (batch === 0) throw new UsageError("forward() needs at least one observation");
    const feeds = { ...this.params };
    for (const [i, leaf] of this._leaves.entries()) {
      feeds[this.interface.observation_inputs[i]] = this._leafTensor(leaf, observations);
    }
    if (this.stateful) {
      const rows = states ?? Array.from({ length: batch }, () => this.initialState());
      for (const [i, key] of this.interface.state_keys.entries()) {
        const first = rows[0]?.[key];
        if (first === undefined) throw new UsageError(`the state lacks '${key}'`);
        const size = first.length;
        const data = new Float32Array(batch * size);
        rows.forEach((row, r) => {
          if (row[key]?.length !== size) throw new UsageError(`state '${key}' of row ${r} has ${row[key]?.length} values, not ${size}`);
          data.set(row[key], r * size);
        });
        const shape = this.interface.initial_state[key];
        feeds[this.interface.state_inputs[i]] = new this.ort.Tensor("float32", data, [batch, ...arrayShape(shape)]);
      }
    }
    const outputs = await this.session.run(feeds);
    const logits = outputs[this.interface.output ?? "action_dist_inputs"] ?? outputs[this.session.outputNames[0]];
    const width = logits.data.length / batch;
    if (width !== this.outputSize) {
      throw new UnsupportedModel(`the policy graph puts out ${width} values per step, the action space ${this.space} needs ${this.outputSize}`);
    }
    const data = Float32Array.from(logits.data);
    const distInputs = Array.from({ length: batch }, (_, r) => data.slice(r * width, (r + 1) * width));
    if (!this.stateful) return { distInputs, stateOut: null };
    const stateOut = Array.from({ length: batch }, () => ({}));
    for (const [i, key] of this.interface.state_keys.entries()) {
      const out = outputs[this.interface.state_outputs[i]].data;
      const size = out.length / batch;
      for (let r = 0; r < batch; r++) stateOut[r][key] = Float32Array.from(out.subarray(r * size, (r + 1) * size));
    }
    return { distInputs, stateOut };
  }

  /**
   * One step of the policy for one observation (and, recurrent, the state the last step gave: default initial).
   * @returns {Promise<{action: number | Float32Array, forEnv: number | Float32Array, logp: number,
   *   distInputs: Float32Array, stateOut: Record<string, Float32Array> | null}>}
   *   `action` as recorded for the learner, `forEnv` as the env applies it
   */
  async act(observation, state) {
    const { distInputs: [distInputs], stateOut } = await this.forward([observation], state === undefined ? undefined : [state]);
    const drawn = drawAction(this.space, distInputs, {
      explore: this.explore, random: this.random, normalize: this.normalizeActions, clip: this.clipActions,
    });
    return { ...drawn, stateOut: stateOut?.[0] ?? null };
  }

  /** Free the session's memory (WebAssembly's, under onnxruntime-web). */
  async release() {
    await this.session.release();
  }

  _leafTensor({ path, space, shape, size, type: [tensorType, TypedArray], range }, observations) {
    const where = `observation${formatPath(path)}`;
    const data = new TypedArray(observations.length * size);
    const big = TypedArray === BigInt64Array || TypedArray === BigUint64Array;
    observations.forEach((observation, r) => {
      let node = observation;
      for (const part of path) {
        node = node?.[part];
        if (node === undefined) throw new UsageError(`${where}: missing`);
      }
      const values = flatValues(node);
      if (values === null || values.length !== size) {
        throw new UsageError(`${where}: needs ${size} values (shape [${shape}]), got ${values === null ? typeof node : values.length}`);
      }
      for (let i = 0; i < size; i++) {
        const x = Number(values[i]);
        if (range !== null) {
          const [low, high] = space.kind === "discrete" ? [space.start ?? 0, (space.start ?? 0) + space.n - 1] : range;
          if (!Number.isInteger(x) || x < low || x > high) throw new UsageError(`${where}: ${x} is not an integer in ${low}..${high}`);
        } else if (!Number.isFinite(x)) {
          throw new UsageError(`${where}: NaN or infinity`);
        }
        data[r * size + i] = big ? BigInt(x) : x;
      }
    });
    return new this.ort.Tensor(tensorType, data, [observations.length, ...shape]);
  }
}

function arrayShape(nested) {
  const shape = [];
  for (let node = nested; Array.isArray(node); node = node[0]) shape.push(node.length);
  return shape;
}
