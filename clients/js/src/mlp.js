/**
 * RLlib's default MLP RLModule (PPO, APPO, IMPALA on a vector observation) run in plain JavaScript.
 *
 * The forward pass of the actor: the encoder (`encoder.actor_encoder.net.mlp.*`,
 * or `encoder.encoder.net.mlp.*` with shared layers), then the pi head
 * (`pi.net.mlp.*`): Linear layers `y = x W^T + b` (torch's [out, in]), an
 * optional LayerNorm after each, the model config's activations between.
 * Its output is the action distribution's inputs: logits for a Discrete
 * space, means and log-stds (clamped to `pi.log_std_clip_param_const`, or
 * the free `pi.log_std`) for a Box. The same computation as the Python
 * client's `mlp.read_network` and the C++ client's Network, held to the
 * vectors in tests/vectors/policy/.
 */

import { UnsupportedModel } from "./errors.js";

const LAYER_NORM_EPSILON = 1e-3; // RLlib's TorchMLP builds nn.LayerNorm(eps=0.001)
const ENCODER_PREFIXES = ["encoder.encoder.net.mlp.", "encoder.actor_encoder.net.mlp."];
const PI_PREFIX = "pi.net.mlp.";
const PI_LOG_STD = "pi.log_std";
const PI_LOG_STD_CLIP = "pi.log_std_clip_param_const";
/** Critic and target networks, in a full (not inference-only) state: the actor does not need them. */
const IGNORED_PREFIXES = ["vf.", "encoder.critic_encoder.", "_old_encoder.", "_old_pi."];

const sigmoid = (x) => 0.5 * (1 + Math.tanh(0.5 * x));
const ACTIVATIONS = {
  linear: null,
  tanh: Math.tanh,
  relu: (x) => (x > 0 ? x : 0),
  elu: (x) => (x > 0 ? x : Math.expm1(x)),
  sigmoid,
  silu: (x) => x * sigmoid(x),
  swish: (x) => x * sigmoid(x),
};

function unsupported(what) {
  return new UnsupportedModel(
    `not one of RLlib's default MLP RLModules for a Discrete or Box action space: ${what} ` +
      "(served actions, or the Python client's ONNX policy, run any module)",
  );
}

function activationNamed(name) {
  const key = String(name).toLowerCase();
  if (!(key in ACTIVATIONS)) {
    throw new UnsupportedModel(`activation '${name}' is not one this client knows (${Object.keys(ACTIVATIONS).join(", ")})`);
  }
  return ACTIVATIONS[key];
}

/** The Linear [+ LayerNorm] layers under `prefix`, with `between` after all but the last and `last` after it. */
function readMlp(params, prefix, between, betweenName, last) {
  const entries = new Map();
  for (const [name, array] of params) {
    if (!name.startsWith(prefix)) continue;
    const [index, leaf, ...rest] = name.slice(prefix.length).split(".");
    if (!/^\d{1,5}$/.test(index) || (leaf !== "weight" && leaf !== "bias") || rest.length) {
      throw unsupported(`unexpected parameter '${name}'`);
    }
    const layer = entries.get(Number(index)) ?? {};
    layer[leaf] = array;
    entries.set(Number(index), layer);
  }
  if (entries.size === 0) throw unsupported(`no layers under '${prefix}'`);
  const end = Math.max(...entries.keys());
  const layers = [];
  let used = 0;
  let pos = 0;
  for (;;) {
    const weight = entries.get(pos)?.weight;
    if (weight === undefined || weight.shape.length !== 2) {
      throw unsupported(`expected a Linear layer at ${prefix}${pos} with '${betweenName}' activations between layers`);
    }
    const [outputs, inputs] = weight.shape;
    if (layers.length && inputs !== layers.at(-1).outputs) {
      throw unsupported(`${prefix}${pos}.weight takes ${inputs} inputs, but the layer before puts out ${layers.at(-1).outputs}`);
    }
    const dense = { outputs, inputs, weight: weight.toFloat32(), bias: null, normWeight: null, normBias: null };
    const bias = entries.get(pos).bias;
    if (bias !== undefined) {
      if (bias.shape.length !== 1 || bias.shape[0] !== outputs) throw unsupported(`${prefix}${pos}.bias does not have ${outputs} entries`);
      dense.bias = bias.toFloat32();
    }
    used++;
    pos++;
    const norm = entries.get(pos);
    if (norm?.weight !== undefined && norm.weight.shape.length === 1) {
      const fits = (a) => a !== undefined && a.shape.length === 1 && a.shape[0] === outputs;
      if (!fits(norm.weight) || !fits(norm.bias)) throw unsupported(`expected a LayerNorm of size ${outputs} at ${prefix}${pos}`);
      dense.normWeight = norm.weight.toFloat32();
      dense.normBias = norm.bias.toFloat32();
      used++;
      pos++;
    }
    const isLast = pos > end;
    dense.activation = isLast ? last : between;
    layers.push(dense);
    if (isLast) break;
    if (between !== null) pos++; // the activation's own slot in torch's Sequential
  }
  if (used !== entries.size) {
    throw unsupported(`parameters under '${prefix}' are not laid out as Linear layers with '${betweenName}' activations between them`);
  }
  return layers;
}

/** The actor of RLlib's default MLP module, from a weight set. */
export class Network {
  /**
   * @param {Map<string, import("./ndarray.js").NdArray>} params the weight set's parameters
   * @param {string} fcnetActivation model_config's `fcnet_activation`
   * @param {string} headFcnetActivation model_config's `head_fcnet_activation`
   * @param {import("./config.js").DiscreteSpace | import("./config.js").BoxSpace} space the action space
   * @throws {UnsupportedModel} not such a module for that space (the message says why)
   */
  constructor(params, fcnetActivation, headFcnetActivation, space) {
    const encoders = new Set();
    for (const name of params.keys()) {
      let known = name.startsWith(PI_PREFIX) || name === PI_LOG_STD || name === PI_LOG_STD_CLIP;
      known ||= IGNORED_PREFIXES.some((prefix) => name.startsWith(prefix));
      for (const prefix of ENCODER_PREFIXES) {
        if (name.startsWith(prefix)) {
          known = true;
          encoders.add(prefix);
        }
      }
      if (!known) throw unsupported(`unexpected parameter '${name.slice(0, 80)}'`);
    }
    if (encoders.size !== 1) throw unsupported(`expected MLP encoder parameters under exactly one of ${ENCODER_PREFIXES.join(" and ")}`);
    const activation = activationNamed(fcnetActivation);
    const headActivation = activationNamed(headFcnetActivation);
    const [encoder] = encoders;
    this.layers = readMlp(params, encoder, activation, fcnetActivation, activation);
    const pi = readMlp(params, PI_PREFIX, headActivation, headFcnetActivation, null);
    if (pi[0].inputs !== this.layers.at(-1).outputs) {
      throw unsupported(`the encoder puts out ${this.layers.at(-1).outputs} values but the pi head takes ${pi[0].inputs}`);
    }
    this.layers.push(...pi);
    this.observationSize = this.layers[0].inputs;
    this.boxSize = 0;
    this.freeLogStd = null;
    this.logStdClip = Infinity;
    const outputs = pi.at(-1).outputs;
    const freeLogStd = params.get(PI_LOG_STD);
    if (space.kind !== "box") {
      if (freeLogStd !== undefined) throw unsupported(`it has a free log-std ('${PI_LOG_STD}'), which belongs to a Box action space, not ${space}`);
      if (outputs !== space.n) throw unsupported(`the pi head puts out ${outputs} logits, but the action space ${space} needs ${space.n}`);
      this.outputSize = outputs;
      return;
    }
    const size = space.size;
    if (freeLogStd !== undefined && (outputs !== size || freeLogStd.shape.join() !== String(size))) {
      throw unsupported(`a pi head with ${outputs} outputs and a free log-std of ${freeLogStd.size} values does not fit ${space}`);
    }
    if (freeLogStd === undefined && outputs !== 2 * size) {
      throw unsupported(`the pi head puts out ${outputs} values, but ${space} needs ${2 * size} (mean and log-std)`);
    }
    const clip = params.get(PI_LOG_STD_CLIP);
    if (clip === undefined || clip.size !== 1) throw unsupported(`a Box action space needs a one-number '${PI_LOG_STD_CLIP}'`);
    this.boxSize = size;
    this.logStdClip = Math.fround(Number(clip.toFloat32()[0]));
    if (freeLogStd !== undefined) {
      this.freeLogStd = freeLogStd.toFloat32().map((x) => Math.min(Math.max(x, -this.logStdClip), this.logStdClip));
    }
    this.outputSize = 2 * size;
  }

  /**
   * The distribution inputs for one observation (float32 arithmetic where torch's is).
   * @param {ArrayLike<number>} observation `observationSize` numbers
   * @returns {Float32Array}
   */
  forward(observation) {
    let input = Float32Array.from(observation);
    for (const dense of this.layers) {
      const output = new Float32Array(dense.outputs);
      const { weight, bias, inputs } = dense;
      for (let o = 0; o < dense.outputs; o++) {
        let sum = bias === null ? 0 : bias[o];
        const row = o * inputs;
        for (let i = 0; i < inputs; i++) sum += weight[row + i] * input[i];
        output[o] = sum;
      }
      if (dense.normWeight !== null) {
        let mean = 0;
        for (const x of output) mean += x;
        mean /= output.length;
        let variance = 0;
        for (const x of output) variance += (x - mean) * (x - mean);
        variance /= output.length;
        const scale = 1 / Math.sqrt(variance + LAYER_NORM_EPSILON);
        for (let o = 0; o < output.length; o++) output[o] = (output[o] - mean) * scale * dense.normWeight[o] + dense.normBias[o];
      }
      if (dense.activation !== null) for (let o = 0; o < output.length; o++) output[o] = dense.activation(output[o]);
      input = output;
    }
    if (this.freeLogStd !== null) {
      const out = new Float32Array(2 * this.boxSize);
      out.set(input);
      out.set(this.freeLogStd, this.boxSize);
      return out;
    }
    for (let i = this.boxSize; i < 2 * this.boxSize; i++) input[i] = Math.min(Math.max(input[i], -this.logStdClip), this.logStdClip);
    return input;
  }
}
