/**
 * Single-agent episodes on the wire (PROTOCOL.md section 7): what one env did, recorded step by step and sent as chunks.
 *
 * Each chunk is the map RLlib's `SingleAgentEpisode.get_state()` gives, in
 * the stacked form (`finalized: true`: one array per column): observations
 * `[T+1, obs]` float32 (or `[T+1, *shape]` in the Box's dtype: an image as uint8), actions `[T]` int64 (Discrete) or `[T, *shape]`
 * float32 (Box), rewards `[T]` float32, and the extra model outputs
 * (`action_logp` `[T]`, `action_dist_inputs` `[T, n]`). A running episode
 * cut at a batch boundary goes on in the next chunk with the same `id_`,
 * `t_started` = the old `t`, and the old chunk's last observation first
 * (RLlib's `episode.cut()`).
 */

import { float64 } from "./codec.js";
import { UsageError } from "./errors.js";
import { integerRange, NdArray } from "./ndarray.js";

/** Env steps per chunk at most (the runner's check allows 65,536). */
export const MAX_CHUNK_STEPS = 65536;

function buffer(data, finalized) {
  return { data, lookback: 0, finalized, space: null };
}

function now() {
  return performance.now() / 1000;
}

function newId() {
  const bytes = globalThis.crypto?.getRandomValues ? crypto.getRandomValues(new Uint8Array(16)) : Uint8Array.from({ length: 16 }, () => Math.floor(Math.random() * 256));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** A growable column of fixed-width rows (Float32 unless another typed array is given). */
class Column {
  constructor(width, TypedArray = Float32Array) {
    this.width = width;
    this.data = new TypedArray(64 * Math.max(width, 1));
    this.rows = 0;
  }

  push(values) {
    const width = Math.max(this.width, 1);
    if ((this.rows + 1) * width > this.data.length) {
      const grown = new this.data.constructor(this.data.length * 2);
      grown.set(this.data);
      this.data = grown;
    }
    if (typeof values === "number") this.data[this.rows * width] = values;
    else this.data.set(values, this.rows * width);
    this.rows++;
  }

  /** Keep only the last row. */
  keepLast() {
    const width = Math.max(this.width, 1);
    this.data.copyWithin(0, (this.rows - 1) * width, this.rows * width);
    this.rows = 1;
  }

  clear() {
    this.rows = 0;
  }

  /** A copy of the last row. */
  last() {
    const width = Math.max(this.width, 1);
    return this.data.slice((this.rows - 1) * width, this.rows * width);
  }

  array(shape) {
    return NdArray.from(this.data.slice(0, this.rows * Math.max(this.width, 1)), shape);
  }
}

/**
 * Records one env's episode and hands out its chunks.
 *
 * reset(obs) starts an episode; step(...) records one env step; a step that
 * terminates or truncates ends it; takeChunks() cuts a running episode and
 * returns every chunk finished since the last call.
 */
export class EpisodeBuilder {
  /**
   * @param {{observationSize: number, observationShape?: number[], observationType?: Function,
   *   boxActionShape?: number[] | null, distInputsSize?: number, stateShapes?: Record<string, number[]> | null,
   *   maxChunkSteps?: number}} options
   *   `observationShape` the Box's (default `[observationSize]`), `observationType` the typed array of its dtype
   *   (default Float32Array; not a 64-bit one); `boxActionShape` null for Discrete actions; `distInputsSize` 0 for no extra outputs;
   *   `stateShapes` a recurrent module's state shapes by state key, whose `stateOut` each step records (`state_out`)
   */
  constructor({ observationSize, observationShape = [observationSize], observationType = Float32Array, boxActionShape = null,
    distInputsSize = 0, stateShapes = null, maxChunkSteps = MAX_CHUNK_STEPS }) {
    if (!(observationSize >= 1)) throw new UsageError("observations need at least one value");
    if (observationShape.reduce((a, b) => a * b, 1) !== observationSize) throw new UsageError(`an observation of shape [${observationShape}] does not hold ${observationSize} values`);
    if (observationType === BigInt64Array || observationType === BigUint64Array) throw new UsageError("64-bit integer observations are not recorded by this client");
    this.observationSize = observationSize;
    this.observationShape = [...observationShape];
    this.observationRange = integerRange(observationType);
    this.boxShape = boxActionShape;
    this.boxSize = boxActionShape === null ? 0 : boxActionShape.reduce((a, b) => a * b, 1);
    this.distInputsSize = distInputsSize;
    this.maxChunkSteps = maxChunkSteps;
    this.observations = new Column(observationSize, observationType);
    this.actions = this.boxSize ? new Column(this.boxSize) : [];
    this.rewards = new Column(0);
    this.logp = new Column(0);
    this.distInputs = new Column(distInputsSize);
    /** A recurrent module's state_out per step, by state key: {shape, column}. */
    this.states = stateShapes === null ? null : Object.fromEntries(Object.entries(stateShapes).map(
      ([key, shape]) => [key, { shape: [...shape], column: new Column(shape.reduce((a, b) => a * b, 1)) }]));
    /** A continuing chunk's state_out of the step before it, by state key (RLlib's learner starts from it). */
    this.stateLookback = null;
    this.running = false;
    this.id = "";
    this.tStarted = 0;
    this.steps = 0;
    this.startTime = null;
    this.lastStepTime = null;
    this.finished = [];
    /** Env steps in the chunks finished and not yet taken. */
    this.finishedSteps = 0;
  }

  /** Env steps recorded and not yet handed out. */
  get pendingSteps() {
    return this.finishedSteps + this.steps;
  }

  /** Start an episode at `observation` (a running one ends as truncated); returns its id. */
  reset(observation) {
    if (this.running && this.steps > 0) this._finish(false, true);
    this.running = true;
    this.id = newId();
    this.tStarted = 0;
    this._clearSteps();
    this.observations.clear();
    this.observations.push(this._checkObservation(observation));
    this.stateLookback = null;
    this.startTime = now();
    this.lastStepTime = null;
    return this.id;
  }

  /**
   * Record one env step: the action taken (as recorded), the reward it got, the observation after it.
   * @param {{action: number | Float32Array, logp?: number, distInputs?: Float32Array}} taken
   */
  step(taken, reward, observation, terminated = false, truncated = false) {
    if (!this.running) throw new UsageError("step() needs a running episode: call reset() first");
    if (!Number.isFinite(reward)) throw new UsageError(`a reward must be a finite number, got ${reward}`);
    const next = this._checkObservation(observation);
    if (this.boxSize) {
      if (taken.action?.length !== this.boxSize) throw new UsageError(`a Box action needs ${this.boxSize} values`);
      this.actions.push(taken.action);
    } else {
      if (!Number.isInteger(taken.action)) throw new UsageError(`a Discrete action must be an int, got ${taken.action}`);
      this.actions.push(taken.action);
    }
    if (this.distInputsSize) {
      this.logp.push(taken.logp);
      this.distInputs.push(taken.distInputs);
    }
    if (this.states !== null) {
      for (const [key, { column }] of Object.entries(this.states)) {
        if (taken.stateOut?.[key]?.length !== column.width) throw new UsageError(`a recurrent step needs stateOut '${key}' of ${column.width} values`);
      }
      for (const [key, { column }] of Object.entries(this.states)) column.push(taken.stateOut[key]);
    }
    this.rewards.push(reward);
    this.observations.push(next);
    this.steps++;
    this.lastStepTime = now();
    if (terminated || truncated) {
      this._finish(terminated, truncated);
    } else if (this.steps >= this.maxChunkSteps) {
      this._cut();
    }
  }

  /** End the running episode where it stands (truncated). */
  truncate() {
    if (this.running && this.steps > 0) this._finish(false, true);
    this.running = false;
  }

  /** Every chunk finished since the last call, a running episode cut first. */
  takeChunks() {
    if (this.running && this.steps > 0) this._cut();
    const chunks = this.finished;
    this.finished = [];
    this.finishedSteps = 0;
    return chunks;
  }

  _checkObservation(observation) {
    if (observation?.length !== this.observationSize) {
      throw new UsageError(`an observation needs ${this.observationSize} numbers, got ${observation?.length}`);
    }
    if (this.observationRange !== null && !(observation instanceof this.observations.data.constructor)) {
      const [low, high] = this.observationRange;
      for (const x of observation) {
        if (!(Number.isInteger(x) && x >= low && x <= high)) throw new UsageError(`an observation of this space holds integers in ${low}..${high}, got ${x}`);
      }
    }
    return observation;
  }

  _clearSteps() {
    this.steps = 0;
    if (this.boxSize) this.actions.clear();
    else this.actions = [];
    this.rewards.clear();
    this.logp.clear();
    this.distInputs.clear();
    if (this.states !== null) for (const { column } of Object.values(this.states)) column.clear();
  }

  /** state_out's buffer: each state key's rows, after the step before this chunk's (its lookback) when it continues one. */
  _stateOutBuffer(steps) {
    const lookback = this.stateLookback === null ? 0 : 1;
    const data = {};
    for (const [key, { shape, column }] of Object.entries(this.states)) {
      const rows = new Float32Array((lookback + steps) * column.width);
      if (lookback) rows.set(this.stateLookback[key]);
      rows.set(column.data.subarray(0, steps * column.width), lookback * column.width);
      data[key] = NdArray.from(rows, [lookback + steps, ...shape]);
    }
    return { data, lookback, finalized: true, space: null };
  }

  _finish(terminated, truncated) {
    this._emit(terminated, truncated);
    this.stateLookback = null;
    this.running = false;
    this._clearSteps();
  }

  _cut() {
    this._emit(false, false);
    this.observations.keepLast();
    if (this.states !== null) this.stateLookback = Object.fromEntries(Object.entries(this.states).map(([key, { column }]) => [key, column.last()]));
    this.tStarted += this.steps;
    this._clearSteps();
    // The next chunk's clock starts where this one stopped, so chunk durations add up to the episode's.
    this.startTime = this.lastStepTime;
  }

  _emit(terminated, truncated) {
    const steps = this.steps;
    const actions = this.boxSize
      ? this.actions.array([steps, ...this.boxShape])
      : NdArray.from(BigInt64Array.from(this.actions, BigInt), [steps]);
    const extra = this.distInputsSize
      ? {
          action_logp: buffer(this.logp.array([steps]), true),
          action_dist_inputs: buffer(this.distInputs.array([steps, this.distInputsSize]), true),
        }
      : null;
    if (extra !== null && this.states !== null) extra.state_out = this._stateOutBuffer(steps);
    this.finished.push({
      id_: this.id,
      agent_id: null,
      module_id: null,
      multi_agent_episode_id: null,
      observations: buffer(this.observations.array([steps + 1, ...this.observationShape]), true),
      actions: buffer(actions, true),
      rewards: buffer(this.rewards.array([steps]), true),
      infos: buffer(Array.from({ length: steps + 1 }, () => ({})), false),
      extra_model_outputs: extra,
      is_terminated: terminated,
      is_truncated: truncated,
      t_started: this.tStarted,
      t: this.tStarted + steps,
      _observation_space: null,
      _action_space: null,
      _start_time: this.startTime === null ? null : float64(this.startTime),
      _last_step_time: this.lastStepTime === null ? null : float64(this.lastStepTime),
      custom_data: {},
    });
    this.finishedSteps += steps;
  }
}

/** Env steps in an episode state (its rewards' length less lookback). */
export function episodeSteps(state) {
  const rewards = state?.rewards;
  const data = rewards?.data;
  const size = Array.isArray(data) ? data.length : data instanceof NdArray && data.shape.length ? data.shape[0] : null;
  if (size === null || !Number.isInteger(rewards.lookback)) {
    throw new UsageError("an episode state needs a rewards buffer with data (a list or an array with a step axis) and lookback");
  }
  return Math.max(size - rewards.lookback, 0);
}
