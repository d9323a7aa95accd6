/**
 * Drawing actions from the policy's distribution inputs, as RLlib's torch distributions do, and their log-probabilities.
 *
 * Categorical (logits) for a Discrete space, diagonal Gaussian (means, then
 * log-stds) for a Box. The action recorded is the sampled one; a Box action
 * the env applies is unsquashed or clipped to the bounds
 * ({@link actionForEnv}, RLlib's `normalize_actions`/`clip_actions`).
 */

import { UsageError } from "./errors.js";

const HALF_LOG_TWO_PI = 0.9189385332046727; // 0.5 * log(2 pi)

/** A small seeded generator (sfc32) of doubles in [0, 1); `seed` undefined: seeded at random. */
export class Random {
  constructor(seed) {
    let s = seed === undefined ? Math.floor(Math.random() * 2 ** 32) : Number(seed) >>> 0;
    const next32 = () => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next32();
    this.b = next32();
    this.c = next32();
    this.d = next32();
    this.spare = null;
  }

  /** A uniform double in [0, 1). */
  next() {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t / 4294967296;
  }

  /** A standard normal draw (Box-Muller). */
  normal() {
    if (this.spare !== null) {
      const z = this.spare;
      this.spare = null;
      return z;
    }
    let u = 0;
    while (u === 0) u = this.next();
    const r = Math.sqrt(-2 * Math.log(u));
    const theta = 2 * Math.PI * this.next();
    this.spare = r * Math.sin(theta);
    return r * Math.cos(theta);
  }
}

function checkedMax(values, what) {
  if (values.length === 0) throw new UsageError(`no ${what} to sample from`);
  let largest = -Infinity;
  for (const x of values) {
    if (!Number.isFinite(x)) throw new UsageError(`the policy put out a non-finite ${what} (NaN or inf in the observation or the weights)`);
    if (x > largest) largest = x;
  }
  return largest;
}

/** log-probability of `action` under Categorical(logits). */
export function categoricalLogp(logits, action) {
  if (!(Number.isInteger(action) && action >= 0 && action < logits.length)) {
    throw new UsageError(`action ${action} is not in 0..${logits.length - 1}`);
  }
  const largest = checkedMax(logits, "logit");
  let total = 0;
  for (const x of logits) total += Math.exp(x - largest);
  return Math.fround(logits[action] - largest - Math.log(total));
}

/** A draw from Categorical(logits): {action, logp}. */
export function sampleCategorical(logits, random) {
  const largest = checkedMax(logits, "logit");
  const cumulative = new Float64Array(logits.length);
  let total = 0;
  for (let i = 0; i < logits.length; i++) cumulative[i] = total += Math.exp(logits[i] - largest);
  const u = random.next() * total;
  let action = 0;
  while (action + 1 < logits.length && cumulative[action] <= u) action++;
  return { action, logp: Math.fround(logits[action] - largest - Math.log(total)) };
}

/** The most likely class, logp 0 (what RLlib's greedy pass records). */
export function greedyCategorical(logits) {
  checkedMax(logits, "logit");
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
  return { action: best, logp: 0 };
}

/** log-probability of `action` under the diagonal Gaussian of `distInputs` (means, then log-stds). */
export function gaussianLogp(distInputs, action) {
  const size = distInputs.length / 2;
  if (action.length !== size) throw new UsageError(`a Box action of ${action.length} values, expected ${size}`);
  let logp = 0;
  for (let i = 0; i < size; i++) {
    const logStd = distInputs[size + i];
    const z = (action[i] - distInputs[i]) / Math.exp(logStd);
    logp += -0.5 * z * z - logStd - HALF_LOG_TWO_PI;
  }
  return Math.fround(logp);
}

/** A draw from the diagonal Gaussian: {action: Float32Array, logp}. */
export function sampleGaussian(distInputs, random) {
  checkedMax(distInputs, "mean or log-std");
  const size = distInputs.length / 2;
  const action = new Float32Array(size);
  for (let i = 0; i < size; i++) action[i] = distInputs[i] + Math.exp(distInputs[size + i]) * random.normal();
  return { action, logp: gaussianLogp(distInputs, action) };
}

/** The Gaussian's means, logp 0. */
export function greedyGaussian(distInputs) {
  checkedMax(distInputs, "mean or log-std");
  return { action: Float32Array.from(distInputs.subarray(0, distInputs.length / 2)), logp: 0 };
}

/**
 * A sampled action as the env applies it (RLlib's NormalizeAndClipActions).
 *
 * A Box action is unsquashed from [-1, 1] to the bounds with `normalize`
 * (left alone when a bound is infinite), else clipped with `clip`; a
 * Discrete action is returned as it is.
 */
export function actionForEnv(space, action, { normalize = true, clip = false } = {}) {
  if (space?.kind !== "box") return action;
  const { low, high } = space;
  if (normalize) {
    if (![...low, ...high].every(Number.isFinite)) return action;
    return Float32Array.from(action, (x, i) => Math.min(Math.max(low[i] + ((x + 1) * (high[i] - low[i])) / 2, low[i]), high[i]));
  }
  if (clip) return Float32Array.from(action, (x, i) => Math.min(Math.max(x, low[i]), high[i]));
  return action;
}

/**
 * One step's action from the policy's distribution inputs, as RLlib's exploration (or greedy) pass takes it.
 * @returns {{action: number | Float32Array, forEnv: number | Float32Array, logp: number, distInputs: Float32Array}}
 *   `action` as recorded for the learner, `forEnv` as the env applies it ({@link actionForEnv})
 */
export function drawAction(space, distInputs, { explore, random, normalize = true, clip = false }) {
  const box = space.kind === "box";
  let drawn;
  if (box) drawn = explore ? sampleGaussian(distInputs, random) : greedyGaussian(distInputs);
  else drawn = explore ? sampleCategorical(distInputs, random) : greedyCategorical(distInputs);
  const forEnv = box ? actionForEnv(space, drawn.action, { normalize, clip }) : drawn.action;
  return { action: drawn.action, forEnv, logp: drawn.logp, distInputs };
}
