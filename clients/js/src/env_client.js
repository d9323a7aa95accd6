/**
 * What a simulator's loop calls to train with an RLlib learner: act, report, and the rest is done for you.
 *
 * The JavaScript side of the Python `EnvClient` (docs/SIMULATOR.md), with
 * the same calls and meaning:
 *
 *     const client = new EnvClient("127.0.0.1:5555");
 *     await client.run(async () => {
 *       let obs = sim.reset();
 *       for (;;) {
 *         const action = await client.act(obs);          // the policy runs here
 *         const step = sim.step(action);
 *         await client.report(step.reward, step.obs, step.terminated, step.truncated);
 *         obs = step.terminated || step.truncated ? sim.reset() : step.obs;
 *       }
 *     });  // returns when the learner ends the run or stop() was called
 *
 * One object per connection. It owns the policy (RLlib's default MLP, run
 * here), the episode recording, the weights, sending, pacing, reconnects
 * and shutdown. On-policy (PPO), the report that completes the runner's
 * share of the next update sends it and waits for the weights trained on
 * it. Off-policy, a batch goes every `rollout_fragment_length` steps and the
 * weights are fetched every `weightsEveryMs`.
 *
 * Envs of one client take turns: each env goes act, report, act, ... and
 * the calls of different envs may come in any order (act env 0, act env 1,
 * report env 1, report env 0), but one at a time: await each call before
 * the next. A call made while another is running is refused (UsageError),
 * since an on-policy report may be waiting for new weights that the other
 * env's next action must be sampled with. Envs that step concurrently take
 * an EnvClient each (as the web game's carts do).
 *
 * Errors from any call: TrainingEnded (the learner ended the run: the normal
 * end), ClientClosed (after stop() or close()), ConnectFailed,
 * ConnectionLost, Timeout, ServerError, ProtocolError, UnsupportedModel (a
 * module this client can't run; the message says why), UsageError (calls
 * out of order or of the wrong size).
 */

import { Client, DEFAULT_EXTENSIONS } from "./client.js";
import { BoxSpace, DiscreteSpace, readActionSpace, readRunnerConfig } from "./config.js";
import { EpisodeBuilder } from "./episodes.js";
import { ClientClosed, ErrorCode, NotAgreed, ServerError, TrainingEnded, UnsupportedModel, UsageError } from "./errors.js";
import { Extension } from "./extensions.js";
import { OnnxPolicy } from "./onnx_policy.js";
import { LocalPolicy } from "./policy.js";
import { ServedInference } from "./served_inference.js";

const RETURNS_KEPT = 100;

const INFERENCE = ["auto", "local", "served"];

const DEFAULTS = {
  /** Where the actions come from: "auto" runs the policy here when this client can (RLlib's default MLP in
   * JavaScript; any other module on a Box observation as its ONNX policy graph, with onnxruntime-web), and asks
   * the runner otherwise; "local"; "served" (the runner computes them, PROTOCOL.md 10.5). */
  inference: "auto",
  /** Envs stepped by this client, ids 0..numEnvs-1. */
  numEnvs: 1,
  /** null: as the runner's algorithm says (PPO yes, APPO no). */
  onPolicy: null,
  /** Sample (false: the greedy action, logp 0). */
  explore: true,
  seed: undefined,
  /** Off-policy: least milliseconds between two weight fetches. */
  weightsEveryMs: 1000,
  /** How a Box action becomes the one the env applies (RLlib's normalize_actions / clip_actions). */
  normalizeActions: true,
  clipActions: false,
  /** Only for RLlib's own server, which describes itself only as a pickle (never read here). */
  actionSpace: null,
  rolloutFragmentLength: 500,
  fcnetActivation: "tanh",
  headFcnetActivation: "relu",
  /** The onnxruntime module that runs a policy graph (default: onnxruntime-web, imported when a graph comes). */
  onnxRuntime: null,
};

function sameObservation(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (Math.fround(a[i]) !== Math.fround(b[i])) return false;
  return true;
}

export class EnvClient {
  /**
   * @param {string} address the learner's directory (or a runner): `host:port`, `ws://host:port`
   * @param {object} [options] the options above, and Client's (timeoutMs, retryAttempts, secret, warn, ...);
   *   `reliable` defaults to true and `timeoutMs` to 120 s here
   */
  constructor(address, options = {}) {
    const { inference, numEnvs, onPolicy, explore, seed, weightsEveryMs, normalizeActions, clipActions, actionSpace,
      rolloutFragmentLength, fcnetActivation, headFcnetActivation, onnxRuntime, ...connection } = { ...DEFAULTS, ...options };
    if (!(Number.isInteger(numEnvs) && numEnvs >= 1)) throw new UsageError("numEnvs must be an int >= 1");
    if (!INFERENCE.includes(inference)) throw new UsageError(`inference must be one of ${INFERENCE.join(", ")}, got ${inference}`);
    this.options = { inference, numEnvs, onPolicy, explore, seed, weightsEveryMs, normalizeActions, clipActions, actionSpace,
      rolloutFragmentLength, fcnetActivation, headFcnetActivation, onnxRuntime };
    const extensions = [...DEFAULT_EXTENSIONS];
    if (inference !== "served") extensions.push(Extension.POLICY_GRAPH);
    if (inference !== "local") extensions.push(Extension.SERVED_ACTIONS, Extension.SERVED_TAKEN);
    this.client = new Client(address, { reliable: true, timeoutMs: 120_000, extensions, ...connection });
    /** "local" (the policy runs here) or "served" (the runner computes the actions), once connected. */
    this.mode = null;
    this.served = null;
    /** The runner's description (null: RLlib's own server), once connected. */
    this.config = null;
    this.policy = null;
    this.onPolicy = false;
    this._builders = [];
    this._lastObs = new Array(numEnvs).fill(null);
    this._taken = new Array(numEnvs).fill(null);
    /** A recurrent policy's state per env: what its next act() takes. */
    this._states = new Array(numEnvs).fill(undefined);
    this._returns = new Array(numEnvs).fill(0);
    this._episodeSteps = new Array(numEnvs).fill(0);
    this._wantSteps = 0;
    this._lastWeightsAt = 0;
    this._ready = null;
    this._ended = false;
    this._closed = false;
    /** A call is running (calls take turns: see the module's docs). */
    this._busy = false;
    this._counters = { steps: 0, episodes: 0, waitMs: 0 };
    this._recentReturns = [];
  }

  /** What the loop did and what the connection delivered. */
  get stats() {
    const n = this._recentReturns.length;
    return {
      ...this._counters,
      meanReturn: n ? this._recentReturns.reduce((a, b) => a + b, 0) / n : NaN,
      weightsSeqNo: this.served?.seqNo ?? this.policy?.seqNo ?? 0,
      delivery: this.client.stats,
    };
  }

  /** The runner connected to (a directory sends each connection to a live runner). */
  get address() {
    return this.client.address;
  }

  /** False once the learner ended the run, stop() was called, or the client closed. */
  get running() {
    return !this._ended && !this._closed && !this.client.stopped;
  }

  /** Connect, read the runner's config and weights, and build the policy; other calls do it when needed. */
  async connect() {
    await this._guarded(() => this._setup());
    return this;
  }

  /**
   * Run `loop` (the simulator's loop, calling act() and report()) and close: with a flush when it
   * returned, without when it threw. Returns "finished", "training_ended" (the learner ended the
   * run) or "stopped" (stop() was called); anything else is thrown, the client closed first.
   */
  async run(loop) {
    try {
      await loop(this);
    } catch (error) {
      await this.close({ flush: false });
      if (error instanceof TrainingEnded) return "training_ended";
      if (error instanceof ClientClosed && this.client.stopped) return "stopped";
      throw error;
    }
    await this.close();
    return this._ended ? "training_ended" : this.client.stopped ? "stopped" : "finished";
  }

  /**
   * The action for `obs` (a number for a Discrete space, a Float32Array for a Box, as the env applies it).
   * An env's first act() starts its episode; after that `obs` must be what the last report() gave.
   */
  async act(obs, env = 0) {
    return this._act(obs, env, undefined);
  }

  /**
   * Like act(), but the simulator chose `action` itself (a person, a script, a safety stop): the step is
   * recorded with that action, and the policy's log-probability of it, as RLlib's old `log_action` did.
   * Report its outcome as usual. Returns the action as recorded (a Box one clipped to its bounds).
   * Served actions only, from a runner that agreed to served_taken (NotAgreed otherwise); with the
   * policy run here, a UsageError.
   */
  async logAction(obs, action, env = 0) {
    if (action === undefined || action === null) throw new UsageError("logAction(obs, action): the action is missing");
    return this._act(obs, env, typeof action === "number" ? action : Float32Array.from(action));
  }

  async _act(obs, env, own) {
    return this._guarded(async () => {
      await this._setup();
      this._checkEnv(env);
      const what = own === undefined ? "act()" : "logAction()";
      if (this._taken[env] !== null) throw new UsageError(`${what} for env ${env} twice without report() between`);
      if (own !== undefined) this._checkServedTaken("logAction()");
      if (this.mode === "served") {
        this._checkContinues(env, obs);
        const action = await this.served.act(env, Float32Array.from(obs), own);
        this._taken[env] = true;
        return action;
      }
      // A share already complete (want_steps 0: none wanted from us this update) goes before the next step.
      await this._pace();
      const builder = this._builders[env];
      if (!builder.running) {
        this._startLocal(env, obs);
        this._returns[env] = 0;
      } else {
        this._checkContinues(env, obs);
      }
      this._lastObs[env] = Float32Array.from(obs);
      const taken = await this.policy.act(obs, this._states[env]);
      if (this.policy.stateful) this._states[env] = taken.stateOut;
      this._taken[env] = taken;
      return taken.forEnv;
    });
  }

  /**
   * The outcome of env's last action: its reward, the observation now, whether the episode ended.
   * On-policy, the report that completes the runner's share sends it and waits for the new weights.
   */
  async report(reward, nextObs, terminated = false, truncated = false, env = 0) {
    return this._guarded(async () => {
      await this._setup();
      this._checkEnv(env);
      const taken = this._taken[env];
      if (taken === null) throw new UsageError(`report() for env ${env} without its act() first`);
      if (!Number.isFinite(Number(reward))) throw new UsageError(`a reward must be a finite number, got ${reward}`);
      if (this.mode === "served") this.served.report(env, Number(reward), nextObs, terminated, truncated);
      else this._builders[env].step(taken, Number(reward), nextObs, terminated, truncated);
      this._taken[env] = null;
      this._lastObs[env] = terminated || truncated ? null : Float32Array.from(nextObs);
      this._counters.steps++;
      this._episodeSteps[env]++;
      this._returns[env] += Number(reward);
      if (terminated || truncated) this._episodeEnded(env);
      if (this.mode === "local") await this._pace();
    });
  }

  /**
   * Start a new episode at `obs` (a running one ends as truncated); optional before act().
   * `{train: false}` (as the second argument, or the third after `env`): the episode is played with the
   * policy and never trained on (an evaluation, a demo); the env's episodes stay so until one is started
   * with `train: true`. Served actions only, from a runner that agreed to served_taken.
   */
  async startEpisode(obs, env = 0, options = {}) {
    if (typeof env === "object" && env !== null) [env, options] = [0, env];
    const { train = true } = options;
    return this._guarded(async () => {
      await this._setup();
      this._checkEnv(env);
      if (!train) this._checkServedTaken("startEpisode() with train: false");
      if (this._episodeSteps[env] > 0) this._episodeEnded(env);
      if (this.mode === "served") {
        this.served.end(env);
        this.served.setTrain(env, train);
      } else this._startLocal(env, obs);
      this._taken[env] = null;
      this._returns[env] = 0;
      this._lastObs[env] = this.mode === "served" ? null : Float32Array.from(obs);
    });
  }

  /** End the running episode where it stands (truncated), e.g. when the game is abandoned. */
  async endEpisode(env = 0) {
    return this._guarded(async () => {
      await this._setup();
      this._checkEnv(env);
      if (this._episodeSteps[env] > 0) this._episodeEnded(env);
      if (this.mode === "served") this.served.end(env);
      else this._builders[env].truncate();
      this._taken[env] = null;
      this._lastObs[env] = null;
    });
  }

  /** Fetch the latest weights now. */
  async refreshWeights() {
    return this._guarded(async () => {
      await this._setup();
      if (this.mode === "local") await this._fetchWeights();
    });
  }

  /** End the loop: the next call, or one waiting now, throws ClientClosed; run() returns "stopped". */
  stop() {
    this.client.stop();
  }

  /**
   * Deliver what is due and wait for its ACKs (off-policy: the steps recorded; on-policy: only whole
   * shares are ever sent), then close. After stop(), or once the learner ended, closes without sending.
   */
  async close({ flush = true } = {}) {
    if (this._closed) return;
    try {
      if (flush && this.mode === "served" && !this._ended && !this.client.stopped) {
        await this.served.close(true);
        await this.client.flush();
      } else if (flush && this._ready !== null && !this._ended && !this.client.stopped && !this.onPolicy) {
        const chunks = this._takeChunks();
        if (chunks.length) await this.client.sendEpisodes(chunks);
        await this.client.flush();
      } else if (flush && this._ready !== null && !this._ended && !this.client.stopped) {
        await this.client.flush();
      }
    } catch (error) {
      if (!(error instanceof ServerError && error.code === ErrorCode.SHUTTING_DOWN) && !(error instanceof ClientClosed)) throw error;
    } finally {
      this._closed = true;
      this.client.close();
    }
  }

  // -------------------------------------------------------------------------

  async _guarded(body) {
    if (this._closed) throw new ClientClosed("this EnvClient was closed");
    if (this._busy) {
      throw new UsageError("a call while another call of this EnvClient is running: await each call before the next " +
        "(envs of one client take turns; envs that step concurrently take an EnvClient each)");
    }
    this._busy = true;
    try {
      return await body();
    } catch (error) {
      if (error instanceof ServerError && error.code === ErrorCode.SHUTTING_DOWN && !(error instanceof TrainingEnded)) {
        this._ended = true;
        throw new TrainingEnded(error.text);
      }
      throw error;
    } finally {
      this._busy = false;
    }
  }

  _setup() {
    this._ready ??= this._connectAndBuild().catch((error) => {
      this._ready = null;
      throw error;
    });
    return this._ready;
  }

  async _connectAndBuild() {
    const o = this.options;
    await this.client.connect();
    if (o.inference === "served") this._checkServed(); // before asking anything of a runner that can't
    this.config = readRunnerConfig(await this.client.getConfig());
    if (this.config !== null) {
      this._space = readActionSpace(this.config.actionSpace);
      this.onPolicy = o.onPolicy ?? this.config.onPolicy;
      this._fragment = this.config.rolloutFragmentLength;
    } else {
      const given = o.actionSpace;
      this._space = given === null || given instanceof DiscreteSpace || given instanceof BoxSpace ? given : readActionSpace(given);
      this.onPolicy = o.onPolicy ?? true;
      this._fragment = o.rolloutFragmentLength;
    }
    if (o.inference !== "served") {
      try {
        await this._buildLocal();
        this.mode = "local";
        this._followPacing();
        return;
      } catch (error) {
        if (!(error instanceof UnsupportedModel) || o.inference === "local") throw error;
        this.client.options.warn(`${error.message}; the runner computes the actions`);
      }
    }
    this._buildServed();
    this.mode = "served";
  }

  async _buildLocal() {
    const o = this.options;
    const space = this._space;
    if (space === null && this.config === null) {
      throw new UsageError(`${this.client.address} describes itself only as RLlib's pickle: give the actionSpace (and rolloutFragmentLength, fcnetActivation) options`);
    }
    if (space === null) throw new UnsupportedModel(`this client can't act in the runner's action space (kind ${JSON.stringify(this.config.actionSpace?.kind)})`);
    const update = await this.client.getState();
    this.policy = await this._localPolicy(space, update.weights);
    if (this.config?.observationSize != null && this.config.observationSize !== this.policy.observationSize) {
      throw new UnsupportedModel(`the module takes ${this.policy.observationSize} inputs but the observation space has ${this.config.observationSize} numbers`);
    }
    this._wantSteps = update.wantSteps ?? this._fragment;
    this._lastWeightsAt = Date.now();
    this._builders = Array.from({ length: o.numEnvs }, () => new EpisodeBuilder({
      observationSize: this.policy.observationSize,
      observationShape: this.policy.observationShape ?? undefined,
      observationType: this.policy.observationType ?? undefined,
      boxActionShape: space.kind === "box" ? [...space.shape] : null,
      distInputsSize: this.policy.outputSize,
      stateShapes: this.policy.stateful ? this.policy.stateShapes : null,
    }));
  }

  /**
   * RLlib's default MLP (LocalPolicy) on a vector observation, else the runner's policy graph (OnnxPolicy),
   * as the Python client's `policy_for` picks.
   * @throws {UnsupportedModel} neither can run the module here (the message says why and what would)
   */
  async _localPolicy(space, weights) {
    const o = this.options;
    const observation = this.config?.observationSpace;
    const vector = this.config === null || (observation.kind === "box" && observation.shape.length === 1 && !this.config.modelConfig.use_lstm);
    const options = { space, explore: o.explore, seed: o.seed, normalizeActions: o.normalizeActions, clipActions: o.clipActions };
    let why = "it is not RLlib's default MLP on a vector observation";
    if (vector) {
      try {
        return new LocalPolicy(weights, {
          ...options,
          fcnetActivation: this.config?.fcnetActivation ?? o.fcnetActivation,
          headFcnetActivation: this.config?.headFcnetActivation ?? o.headFcnetActivation,
        });
      } catch (error) {
        if (!(error instanceof UnsupportedModel) || !this.config?.policyGraph) throw error;
        why = error.message;
      }
    }
    const graph = this.config?.policyGraph ?? null;
    if (graph === null) {
      throw new UnsupportedModel(
        `the runner's module runs here only as its policy graph (${why}), and ${this.client.address} sent none ` +
          "(it did not agree to policy_graph: not an rlinks runner, or its policy_graph setting is off)",
      );
    }
    const policy = await OnnxPolicy.create(graph, weights, { ...options, onnxRuntime: o.onnxRuntime ?? undefined });
    const refuse = (what) => {
      void policy.release();
      return new UnsupportedModel(`this client's EnvClient records ${what} (its OnnxPolicy runs the graph for a loop of your own)`);
    };
    if (policy.observationShape === null) throw refuse("only Box observations, not Dict or Tuple ones");
    if (policy.observationType === BigInt64Array || policy.observationType === BigUint64Array) throw refuse("no 64-bit integer observations");
    return policy;
  }

  /**
   * Off-policy, a runner that paces its clients takes about `pacedInFlight` batches of each at its next sample():
   * keep no more than that sent and unconfirmed (the client's maxUnacked), so each batch is sampled with the
   * weights that came with the last ACK, not maxUnacked batches ahead with old ones (as the Python client does).
   */
  _followPacing() {
    const paced = this.config?.pacedInFlight ?? null;
    const connection = this.client.options;
    if (!this.onPolicy && paced !== null && paced < connection.maxUnacked) connection.maxUnacked = paced;
  }

  _buildServed() {
    this._checkServed();
    const observation = this.config?.observationSpace;
    if (observation?.kind !== "box") throw new UnsupportedModel("served actions from this client need a Box observation space");
    this.served = new ServedInference(this.client, observation.shape, this._space, this.options.numEnvs, this.client.options.warn);
  }

  _checkServed() {
    if (!this.client.agreed(Extension.SERVED_ACTIONS)) {
      throw new NotAgreed(
        `${this.client.address} did not agree to served_actions: it does not compute actions for its clients ` +
          `(${this.client.plainRllib ? "plain RLlink" : `agent '${this.client.serverAgent}'`})` +
          (this.options.inference === "served" ? "; run the policy locally (inference 'auto')" : ""),
      );
    }
  }

  /** Actions of the simulator's own and untrained episodes: served, by a runner that agreed to served_taken. */
  _checkServedTaken(what) {
    if (this.mode !== "served") {
      throw new UsageError(`${what} needs served actions (the inference option "served"): this client records only the actions of the policy it runs`);
    }
    if (!this.client.agreed(Extension.SERVED_TAKEN)) throw this.client.notAgreedToServedTaken();
  }

  /** Start env's episode at obs with the policy run here (a recurrent one from its initial state). */
  _startLocal(env, obs) {
    this._builders[env].reset(obs);
    this._states[env] = this.policy.stateful ? this.policy.initialState() : undefined;
  }

  _checkContinues(env, obs) {
    if (this._lastObs[env] !== null && !sameObservation(obs, this._lastObs[env])) {
      throw new UsageError(`act(obs) for env ${env}: obs is not the observation its last report() gave; call startEpisode(obs) to start a new episode there`);
    }
  }

  _checkEnv(env) {
    if (!(Number.isInteger(env) && env >= 0 && env < this.options.numEnvs)) {
      throw new UsageError(`env ${env} is not one of 0..${this.options.numEnvs - 1} (numEnvs)`);
    }
  }

  _episodeEnded(env) {
    this._episodeSteps[env] = 0;
    this._counters.episodes++;
    this._recentReturns.push(this._returns[env]);
    this._returns[env] = 0;
    if (this._recentReturns.length > RETURNS_KEPT) this._recentReturns.shift();
  }

  _pendingSteps() {
    return this._builders.reduce((sum, builder) => sum + builder.pendingSteps, 0);
  }

  _takeChunks() {
    return this._builders.flatMap((builder) => builder.takeChunks());
  }

  async _pace() {
    const started = Date.now();
    if (this.onPolicy) {
      if (this._pendingSteps() < this._wantSteps) return;
      const update = await this.client.sendEpisodesAndGetState(this._takeChunks());
      this.policy.setWeights(update.weights);
      this._wantSteps = update.wantSteps ?? this._fragment;
    } else {
      if (this._pendingSteps() >= this._fragment) await this.client.sendEpisodes(this._takeChunks());
      if (Date.now() - this._lastWeightsAt >= this.options.weightsEveryMs) await this._fetchWeights();
    }
    this._counters.waitMs += Date.now() - started;
  }

  async _fetchWeights() {
    const update = await this.client.getState();
    this.policy.setWeights(update.weights);
    this._lastWeightsAt = Date.now();
  }
}
