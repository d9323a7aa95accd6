/**
 * A simulator's connection to an RLlib learner over RLlink (PROTOCOL.md sections 6 and 10), one call at a time.
 *
 * Every call connects first if needed: PING with the extensions offered
 * (want_steps, ack, endpoints; auth with a secret), through the learner's
 * directory to the least-loaded runner when given the directory's address.
 * Batches are numbered (`ack`) and kept until the runner confirms them; with
 * `reliable` a dropped connection is opened again (through the directory)
 * and what was not confirmed is sent again, in order. The JavaScript side
 * of the Python `client.connection` and the C++ `rlinks::Client`.
 *
 * Errors: ConnectFailed (no attempt worked), ConnectionLost, Timeout,
 * ServerError (the server sent ERROR), ProtocolError (the server broke the
 * protocol; unexpected_message for a reply out of turn; auth_failed when it
 * can't prove it knows the secret), ClientClosed (after stop()), UsageError.
 */

import { parseAddress, makeAddress } from "./address.js";
import { normalizeSecret, NONCE_KEY, proof, randomNonce, sameProof, serverNonce } from "./auth.js";
import { episodeSteps } from "./episodes.js";
import {
  AuthFailed, ClientClosed, ConnectFailed, ConnectionLost, ErrorCode, InvalidMessage, NotAgreed, ProtocolError,
  ServerError, Timeout, UnexpectedMessage, UsageError,
} from "./errors.js";
import { Extension, makeOffer, negotiate, parseOffer } from "./extensions.js";
import { encodeMessageBody } from "./framing.js";
import { DEFAULT_MAX_FRAME_BYTES } from "./limits.js";
import { makeMessage, MessageType } from "./messages.js";
import { NdArray } from "./ndarray.js";
import { makeAct, readActions, usesServedTaken, wantsAction } from "./served.js";
import { openTransport } from "./transport.js";
import { readWeightSet } from "./weights.js";

export const VERSION = "0.1.0";
const MAX_SERVER_CODE_CHARS = 64;
const MAX_SERVER_TEXT_CHARS = 4096;
const DIRECTORY_ROLE = "directory";
/** A client that never reached its learner waits this long for one that is not up yet (Python's and C++'s default too). */
export const DEFAULT_CONNECT_WAIT_MS = 60_000;
const CONNECT_WAIT_ENV = "RLINKS_CONNECT_WAIT_S";
/** shutdownGraceMs under Node (the Python and C++ clients' default too). */
const DEFAULT_SHUTDOWN_GRACE_MS = 30_000;
/** What a client offers unless told otherwise (`auth` is added when there is a secret). */
export const DEFAULT_EXTENSIONS = Object.freeze([Extension.WANT_STEPS, Extension.ACK, Extension.ENDPOINTS]);
const KNOWN_EXTENSIONS = new Set([...DEFAULT_EXTENSIONS, Extension.SERVED_ACTIONS, Extension.SERVED_TAKEN, Extension.POLICY_GRAPH]);

const DEFAULTS = {
  timeoutMs: 30_000,
  connectTimeoutMs: 10_000,
  retryAttempts: 5,
  backoffInitialMs: 200,
  backoffCapMs: 10_000,
  reliable: false,
  maxUnacked: 16,
  /**
   * After the learner's shutting_down, how long a reliable client tries to reconnect before it ends
   * (a learner restored from a checkpoint comes back on the same ports). Undefined: 30 s under Node,
   * 0 in a browser, whose console shows every refused WebSocket (ERR_CONNECTION_REFUSED): a normal end
   * stays quiet there.
   */
  shutdownGraceMs: undefined,
  /**
   * How long a client that has never reached its learner keeps trying one that is not up yet (refused,
   * or a directory with no runner yet), past retryAttempts, saying so once through `warn`. Undefined:
   * $RLINKS_CONNECT_WAIT_S under Node if set, else 60 s (as the Python and C++ clients). 0: no wait.
   */
  connectWaitMs: undefined,
  extensions: DEFAULT_EXTENSIONS,
  maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
  secret: null,
  /** PEM for tls:// and (under Node) wss://: {ca, cert, key}; the system's CAs when not given. */
  tls: {},
  agent: `rlinks-js/${VERSION}`,
  /** Under Node, the Origin header a ws:// connection sends (a browser sends its page's own); none by default. */
  origin: undefined,
  warn: (text) => console.warn(`rlinks: ${text}`),
};

/** A page's script (not Node, not a worker without a document). */
function inBrowser() {
  return typeof globalThis.document !== "undefined" && typeof globalThis.process?.versions?.node !== "string";
}

/** The connect wait the options leave to the environment: $RLINKS_CONNECT_WAIT_S (seconds) under Node, else 60 s. */
export function defaultConnectWaitMs() {
  const text = globalThis.process?.env?.[CONNECT_WAIT_ENV]?.trim();
  if (!text) return DEFAULT_CONNECT_WAIT_MS;
  const seconds = Number(text);
  if (!(Number.isFinite(seconds) && seconds >= 0)) {
    throw new UsageError(`$${CONNECT_WAIT_ENV} must be a non-negative number of seconds, got '${text}'`);
  }
  return seconds * 1000;
}

function serverError(message) {
  return new ServerError(message.code.slice(0, MAX_SERVER_CODE_CHARS), message.message.slice(0, MAX_SERVER_TEXT_CHARS));
}

function randomHex(bytes) {
  const random = globalThis.crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(random, (b) => b.toString(16).padStart(2, "0")).join("");
}

export class Client {
  /**
   * @param {string} address `host:port`, `tls://host:port`, `ws://host:port` or `wss://host:port` (a runner, or the learner's directory)
   * @param {Partial<typeof DEFAULTS>} [options]
   * @throws {UsageError} bad options
   */
  constructor(address, options = {}) {
    this.options = { ...DEFAULTS, ...options };
    const o = this.options;
    if (!(o.timeoutMs > 0) || !(o.connectTimeoutMs > 0)) throw new UsageError("timeouts must be positive");
    if (!(Number.isInteger(o.retryAttempts) && o.retryAttempts >= 1)) throw new UsageError("retryAttempts must be an int >= 1");
    if (!(Number.isInteger(o.maxUnacked) && o.maxUnacked >= 1)) throw new UsageError("maxUnacked must be an int >= 1");
    o.connectWaitMs ??= defaultConnectWaitMs();
    o.shutdownGraceMs ??= inBrowser() ? 0 : DEFAULT_SHUTDOWN_GRACE_MS;
    if (!(o.connectWaitMs >= 0 && Number.isFinite(o.connectWaitMs))) throw new UsageError("connectWaitMs must be a number of ms >= 0");
    for (const name of o.extensions) {
      if (!KNOWN_EXTENSIONS.has(name)) {
        throw new UsageError(`unknown extension '${name}' (known: ${[...KNOWN_EXTENSIONS].join(", ")}; auth is offered when there is a secret)`);
      }
    }
    this._secret = o.secret ? normalizeSecret(o.secret) : null;
    this._given = parseAddress(address);
    /** The address connected to (a runner, once the directory named one). */
    this.address = this._given;
    /** Stable across reconnects: the runner recognises resent batches by it. */
    this.clientId = randomHex(16);
    this._usesDirectory = false;
    this._transport = null;
    this._generation = 0;
    this._handshaken = false;
    this._closed = false;
    this._stopped = false;
    this._busy = false;
    this._sleepCancel = null;
    this._warnedNoAck = false;
    /** The learner said shutting_down: what it never acknowledged will never be trained (nothing to warn about). */
    this._learnerEnded = false;
    this._agreed = new Set();
    /** Whether the server answered a bare PONG (RLlib's own server: no extension). */
    this.plainRllib = false;
    /** How the server named itself in its PONG. */
    this.serverAgent = "";
    this._isDirectory = false;
    this._nextSeq = 1;
    this._pending = [];
    this._awaitingState = null;
    this._counters = {
      batchesSent: 0, stepsSent: 0, batchesAcked: 0, stepsAcked: 0, batchesResent: 0, reconnects: 0,
      actsSent: 0, actRowsSent: 0, episodesInterrupted: 0,
    };
    // served_actions: the envs with an episode open on the runner, as of connection `_openGeneration`,
    // and those whose open episode a dropped connection closed (started again by their next row).
    this._openEnvs = new Set();
    this._lostEnvs = new Set();
    this._openGeneration = 0;
    this._actionsSeqNo = 0;
  }

  /** Whether the server agreed to `extension` on the current connection. */
  agreed(extension) {
    return this._agreed.has(extension);
  }

  get connected() {
    return this._transport !== null;
  }

  /** Batches sent and confirmed, resent, reconnects. */
  get stats() {
    return { ...this._counters, unacked: this._pending.length };
  }

  // -------------------------------------------------------------------------
  // Calls

  /** Connect (and finish the handshake) now rather than on the first call. */
  async connect() {
    await this._call("connect", async () => {});
  }

  /** The runner's SET_CONFIG message (read it with readRunnerConfig). */
  async getConfig() {
    return this._call("getConfig", async () => {
      this._drain();
      await this._sendMessage(makeMessage(MessageType.GET_CONFIG), "GET_CONFIG");
      return this._await(MessageType.SET_CONFIG, "SET_CONFIG (after GET_CONFIG)");
    });
  }

  /** The current weights: `{weights: {params, seqNo}, wantSteps}`. */
  async getState() {
    const reply = await this._call("getState", async () => {
      this._drain();
      await this._sendMessage(makeMessage(MessageType.GET_STATE), "GET_STATE");
      return this._await(MessageType.SET_STATE, "SET_STATE (after GET_STATE)");
    });
    return this._weightsUpdate(reply);
  }

  /** Off-policy: send a batch of episode states; returns its seq (null without `ack`) once written. */
  async sendEpisodes(episodes) {
    return this._exclusive("sendEpisodes", async () => {
      await this._run("sendEpisodes", async () => this._makeRoom());
      const batch = this._enqueue(MessageType.EPISODES, episodes);
      await this._run("sendEpisodes", async () => {
        this._drain();
        if (batch.sentOn !== this._generation) await this._sendBatch(batch);
      });
      return batch.seq;
    });
  }

  /** On-policy: send a batch and wait for the weights trained on it: `{weights, wantSteps}`. */
  async sendEpisodesAndGetState(episodes) {
    const what = "sendEpisodesAndGetState";
    const reply = await this._exclusive(what, async () => {
      await this._run(what, async () => this._makeRoom());
      const batch = this._enqueue(MessageType.EPISODES_AND_GET_STATE, episodes);
      this._awaitingState = batch;
      try {
        return await this._run(what, async () => {
          this._drain();
          if (batch.sentOn !== this._generation) {
            if (batch.sentOn !== 0 && batch.seq === null) {
              // Written in full on a connection that then dropped, and nothing says
              // whether it arrived: asking for the weights can't train on it twice.
              await this._sendMessage(makeMessage(MessageType.GET_STATE), "GET_STATE");
            } else if (batch.acked) {
              // Taken by RLlib before the connection dropped (PROTOCOL.md 10.2): never
              // again; an empty batch without seq gets the weights of the next update.
              await this._sendMessage(makeMessage(MessageType.EPISODES_AND_GET_STATE, { episodes: [], timesteps: 0 }), "EPISODES_AND_GET_STATE (empty)");
            } else {
              await this._sendBatch(batch);
            }
          }
          return this._await(
            MessageType.SET_STATE,
            "SET_STATE (after our on-policy batch)",
            "; on-policy, this includes the learner's training step: raise timeoutMs if it takes longer",
          );
        });
      } finally {
        this._awaitingState = null;
      }
    });
    return this._weightsUpdate(reply);
  }

  /**
   * Served actions (PROTOCOL.md 10.5; offer "served_actions" in `extensions`): one ACT with `rows`, and the
   * ACTIONS for it: `{env, actions, weightsSeqNo, interrupted}`, one action per row that wants one, in row order.
   *
   * An env's first row must be a start row, and so must its first row after an ending one. When the
   * connection drops the runner closes every open episode of this client; on the next connection each
   * such env starts again (its next row goes as a start row, an ending row for it is left out), and
   * `interrupted` names those envs.
   *
   * Rows with `taken` (the simulator's own action) or `train` need served_taken (section 10.5.1).
   *
   * @param {import("./served.js").ActRow[]} rows
   * @param {number[]} obsShape the shape of one observation
   * @throws {NotAgreed} the server does not serve actions, or rows use served_taken and it did not agree
   *   to it; the errors of the other calls
   */
  async act(rows, obsShape) {
    if (!this.options.extensions.includes(Extension.SERVED_ACTIONS)) {
      throw new UsageError('act() needs the served_actions extension: add "served_actions" to the extensions option');
    }
    const ownActions = usesServedTaken(rows);
    if (ownActions && !this.options.extensions.includes(Extension.SERVED_TAKEN)) {
      throw new UsageError('rows with taken or train need the served_taken extension: add "served_taken" to the extensions option');
    }
    makeAct(rows, obsShape);
    // The caller's mistakes are found here, before anything is sent: a reconnect only moves envs
    // from open to lost, which the plan treats alike but for the rewriting.
    this._planAct(rows, this._openEnvs, this._lostEnvs);
    return this._call("act", async () => {
      this._drain();
      if (!this._agreed.has(Extension.SERVED_ACTIONS)) {
        throw new NotAgreed(
          `${this.address} did not agree to served_actions: it does not compute actions for its clients ` +
            `(${this.plainRllib ? "plain RLlink" : `agent '${this.serverAgent}'`}); run the policy locally and send episodes instead`,
        );
      }
      if (ownActions && !this._agreed.has(Extension.SERVED_TAKEN)) throw this.notAgreedToServedTaken();
      if (this._openGeneration !== this._generation) {
        // A new connection: the runner closed every episode open on the old one.
        for (const env of this._openEnvs) this._lostEnvs.add(env);
        this._openEnvs = new Set();
        this._openGeneration = this._generation;
      }
      const plan = this._planAct(rows, this._openEnvs, this._lostEnvs);
      let reply = { env: [], actions: NdArray.from(new BigInt64Array(0)), weightsSeqNo: this._actionsSeqNo };
      if (plan.rows.length) {
        await this._sendMessage(makeAct(plan.rows, obsShape), "ACT");
        const message = await this._await(
          MessageType.ACTIONS,
          "ACTIONS (after our ACT)",
          "; on-policy, once the runner has its share of the update this includes the learner's training step: raise timeoutMs if it takes longer",
        );
        try {
          reply = readActions(message, plan.wanting);
        } catch (error) {
          if (!(error instanceof ProtocolError)) throw error;
          throw new InvalidMessage(`${this.address} answered our ACT wrongly: ${error.message}`, error.code);
        }
        this._counters.actsSent++;
        this._counters.actRowsSent += plan.rows.length;
        this._actionsSeqNo = reply.weightsSeqNo;
      }
      this._counters.episodesInterrupted += plan.interrupted.length;
      this._openEnvs = plan.openAfter;
      this._lostEnvs = plan.lostAfter;
      return { ...reply, interrupted: plan.interrupted };
    });
  }

  /** The refusal of the simulator's own actions and untrained episodes by a runner that records only its own. */
  notAgreedToServedTaken() {
    return new NotAgreed(
      `${this.address} did not agree to served_taken: it records only the actions it computes, so it can't take ` +
        `the simulator's own actions (logAction) or episodes that are not trained on (startEpisode with train: false)`,
    );
  }

  /** What to send for `rows` when the runner has episodes open for `open` and closed those of `lost` when a connection dropped. */
  _planAct(rows, open, lost) {
    const openAfter = new Set(open);
    const lostAfter = new Set(lost);
    const kept = [];
    const wanting = [];
    const interrupted = [];
    rows.forEach((row, i) => {
      let start = Boolean(row.start);
      if (lostAfter.delete(row.env)) {
        // Its episode was closed when a connection dropped: start it again here,
        // or leave out the row that would have ended it.
        interrupted.push(row.env);
        if (!start && !wantsAction(row)) return;
        start = true;
      } else if (!start && !openAfter.has(row.env)) {
        throw new UsageError(
          `ACT row ${i}: env ${row.env} has no open episode (its first row, and its first row after one that ends its episode, must be a start row)`,
        );
      }
      if (start) openAfter.add(row.env);
      if (wantsAction(row)) wanting.push(row.env);
      else openAfter.delete(row.env);
      kept.push(start === row.start ? row : { ...row, start });
    });
    return { rows: kept, wanting, interrupted, openAfter, lostAfter };
  }

  /** Wait until every batch sent is acknowledged (nothing to do without `ack`). */
  async flush() {
    if (this._closed) throw new UsageError("this client was closed");
    if (this._pending.length === 0) return;
    await this._call("flush", async () => {
      this._drain();
      while (this._pending.length > 0) await this._awaitAck(`ACK (${this._pending.length} batch(es) unacknowledged)`);
    });
  }

  /** Make every call, and every wait inside one, throw ClientClosed from now on; closes the connection. */
  stop() {
    this._stopped = true;
    this._sleepCancel?.();
    this._transport?.close();
  }

  get stopped() {
    return this._stopped;
  }

  /** Close for good; unacknowledged batches are given up, with a warning. */
  close() {
    if (this._closed) return;
    this._closed = true;
    if (this._pending.length > 0) {
      if (!this._learnerEnded) {
        this._warn(`closing the connection to ${this.address} with ${this._pending.length} batch(es) not acknowledged; call flush() first to wait for them`);
      }
      this._pending = [];
    }
    this._discardConnection();
  }

  // -------------------------------------------------------------------------
  // Retry and reconnection

  _call(what, operation) {
    return this._exclusive(what, () => this._run(what, operation));
  }

  async _exclusive(what, body) {
    if (this._busy) throw new UsageError(`${what}() while another call of this client is running: await each call before the next`);
    this._busy = true;
    try {
      return await body();
    } finally {
      this._busy = false;
    }
  }

  /**
   * Runs `operation` on a live connection; when reliable, reconnects and runs it again after a drop,
   * so `operation` must check what the reconnection resent. When the drop was the learner's
   * shutting_down and no reconnection works, that ERROR is what the call throws.
   */
  async _run(what, operation) {
    if (this._closed) throw new UsageError("this client was closed; make a new one");
    if (this._stopped) throw new ClientClosed(`${what}: stopped`);
    let recoveries = 0;
    let shutDown = null;
    let graceEnds = null; // once the learner said shutting_down: when to stop trying to reconnect
    for (;;) {
      try {
        if (this._transport === null) await this._connectWithRetries(graceEnds);
        return await operation();
      } catch (error) {
        this._discardConnection();
        if (this._stopped) throw new ClientClosed(`${what}: stopped`, { cause: error });
        if (error instanceof ConnectionLost) {
          if (!this.options.reliable) throw error;
          shutDown = null;
        } else if (error instanceof ServerError) {
          if (!this.options.reliable || error.code !== ErrorCode.SHUTTING_DOWN || recoveries >= this.options.retryAttempts) throw error;
          shutDown = error;
          this._learnerEnded = true;
          graceEnds ??= Date.now() + this.options.shutdownGraceMs;
          if (this.options.shutdownGraceMs <= 0) throw error;
        } else if (error instanceof ConnectFailed && shutDown !== null) {
          throw new ServerError(shutDown.code, `${shutDown.text} (and ${this.address} could not be reached again: ${error.message})`);
        } else {
          throw error;
        }
        await this._recover(what, error, recoveries++);
      }
    }
  }

  async _recover(what, error, recoveries) {
    if (recoveries >= this.options.retryAttempts) {
      throw new ConnectionLost(
        `${what}: the connection to ${this.address} kept dropping; gave up after ${recoveries} reconnection(s). Last error: ${error.message}`,
      );
    }
    if (!this._warnedNoAck && !this._agreed.has(Extension.ACK)) {
      this._warnedNoAck = true;
      this._warn(`${this.address} does not acknowledge batches (plain RLlink): a batch in flight when the connection dropped may be lost`);
    }
    // The learner's shutting_down is its normal end: trying it again within the grace goes unsaid.
    if (!(error instanceof ServerError)) this._warn(`connection to ${this.address} lost during ${what} (${error.message}); reconnecting`);
    await this._sleepBackoff(recoveries);
  }

  async _sleepBackoff(failures, until = null) {
    let ceiling = Math.min(this.options.backoffCapMs, this.options.backoffInitialMs * 2 ** Math.min(failures, 30));
    if (until !== null) ceiling = Math.max(0, Math.min(ceiling, until - Date.now()));
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, Math.random() * ceiling);
      this._sleepCancel = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this._sleepCancel = null;
    if (this._stopped) throw new ClientClosed("stopped");
  }

  /** `until`: give up then, however many attempts are left (the learner's shutdown grace). */
  async _connectWithRetries(until = null) {
    let lastError = "";
    const lost = this._usesDirectory && String(this.address) !== String(this._given) ? this.address : null;
    let attempt = 0;
    // A client that never reached its learner waits for one that is not up yet (connectWaitMs).
    const first = !this._handshaken;
    const waitEnds = Date.now() + this.options.connectWaitMs;
    let waiting = false;
    const keepWaiting = () => waiting && until === null && Date.now() < waitEnds;
    for (; attempt < this.options.retryAttempts || keepWaiting(); attempt++) {
      // Past retryAttempts only the wait keeps us here: one last try at its end.
      if (attempt > 0) await this._sleepBackoff(attempt - 1, until ?? (attempt >= this.options.retryAttempts ? waitEnds : null));
      if (until !== null && attempt > 0 && Date.now() >= until) {
        lastError = `the learner did not come back within ${this.options.shutdownGraceMs / 1000} s of its shutting_down (${lastError})`;
        break;
      }
      if (this._usesDirectory) this.address = this._given;
      try {
        await this._open();
        await this._handshake();
        await this._followDirectory(lost);
        if (this._handshaken) this._counters.reconnects++;
        this._handshaken = true;
        await this._resendPending();
        return;
      } catch (error) {
        if (this._stopped) throw new ClientClosed("stopped", { cause: error });
        if (error instanceof ServerError ? error.code !== ErrorCode.SHUTTING_DOWN : !(error instanceof ConnectionLost)) {
          this._discardConnection();
          throw error;
        }
        lastError = error.message;
        if (first && !waiting && until === null && this.options.connectWaitMs > 0 && error instanceof ConnectionLost) {
          waiting = true;
          this._warn(`waiting up to ${this.options.connectWaitMs / 1000} s for the learner at ${this._given} to listen ` +
            `(connectWaitMs): ${lastError}${this._originHint()}`);
        }
      }
      this._discardConnection();
    }
    throw new ConnectFailed(
      `could not connect to ${this.address} after ${attempt} attempt(s)${waiting ? " and the connect wait" : ""}: ${lastError}; ` +
        `is the learner running and is the port right?${this._originHint()}`,
    );
  }

  async _open() {
    this._transport = await openTransport(this.address, this.options);
    if (this._stopped) this._transport.close();
    this._agreed = new Set();
    this._generation++;
  }

  async _handshake() {
    const offered = [...this.options.extensions];
    const extra = { client_id: this.clientId };
    let clientNonce = null;
    if (this._secret !== null) {
      offered.push(Extension.AUTH);
      clientNonce = randomNonce();
      extra[NONCE_KEY] = clientNonce;
    }
    await this._sendMessage(makeMessage(MessageType.PING, { rlinks: makeOffer(offered, this.options.agent, extra) }), "PING");
    const reply = await this._await(
      MessageType.PONG,
      "PONG (the handshake)",
      "; the server took the connection but did not answer. RLlib's own server serves one client at a time: is another client connected to it?",
    );
    const answer = parseOffer(reply);
    this.plainRllib = answer === null;
    this.serverAgent = answer?.agent ?? "";
    this._agreed = negotiate(answer, offered);
    this._isDirectory = answer?.extra.role === DIRECTORY_ROLE;
    // A directory with the secret proves it like a runner (PROTOCOL.md 10.4).
    if (this._secret !== null) await this._authenticate(clientNonce, answer);
  }

  async _authenticate(clientNonce, answer) {
    const nonce = serverNonce(answer, this.address);
    const ours = await proof(this._secret, "client", clientNonce, nonce);
    await this._sendMessage(makeMessage(MessageType.AUTH, { proof: ours }), "AUTH");
    const reply = await this._await(MessageType.AUTH_OK, "AUTH_OK (authentication)");
    if (!sameProof(await proof(this._secret, "server", clientNonce, nonce), reply.proof)) {
      throw new AuthFailed(`${this.address} did not prove it knows the shared secret; is it the learner you meant?`);
    }
  }

  async _followDirectory(lost) {
    if (!this._isDirectory) return;
    this._usesDirectory = true;
    const directory = this.address;
    await this._sendMessage(makeMessage(MessageType.GET_ENDPOINTS), "GET_ENDPOINTS");
    const reply = await this._await(MessageType.ENDPOINTS, "ENDPOINTS (from the directory)");
    this._discardConnection();
    // Least-loaded first, as the directory sent them, but the runner just lost last: the
    // directory learns that a runner is cut off only after the learner's next iteration.
    const runners = [];
    for (const entry of reply.endpoints) {
      const { host, port } = entry ?? {};
      if (typeof host !== "string" || !Number.isInteger(port) || port < 1 || port > 65535) continue;
      runners.push(makeAddress(this._given.scheme, host, port, this._given.path));
    }
    if (lost !== null) runners.sort((a, b) => (String(a) === String(lost)) - (String(b) === String(lost)));
    const tried = [];
    for (const runner of runners) {
      this.address = runner;
      try {
        await this._open();
        await this._handshake();
        if (this._isDirectory) throw new ConnectionLost("it is a directory too");
        return;
      } catch (error) {
        if (!(error instanceof ConnectionLost || error instanceof ServerError || error instanceof Timeout || error instanceof ProtocolError)) throw error;
        tried.push(`${runner} (${error.message})`);
      }
      this._discardConnection();
    }
    this.address = directory;
    throw new ConnectionLost(`the directory at ${directory} lists no runner that answers${tried.length ? `: ${tried.join("; ")}` : " yet"}`);
  }

  async _resendPending() {
    if (this._pending.length === 0) return;
    if (!this._agreed.has(Extension.ACK)) {
      this._warn(`${this.address} no longer acknowledges batches; ${this._pending.length} unacknowledged batch(es) may be lost`);
      this._pending = [];
      return;
    }
    // A copy: an ACK read while a SET_STATE is awaited below takes its batch out of the window.
    for (const batch of [...this._pending]) {
      if (batch.acked) continue;
      await this._sendBatch(batch);
      if (batch.type === MessageType.EPISODES_AND_GET_STATE && batch !== this._awaitingState) {
        // Sent again, an on-policy batch is owed a SET_STATE before anything else;
        // its weights went to the call that sent it first: read and drop.
        await this._await(MessageType.SET_STATE, `SET_STATE (owed for on-policy batch ${batch.seq}, sent again)`);
      }
    }
  }

  _discardConnection() {
    this._transport?.close();
    this._transport = null;
    if (this._pending.length > 0 && !this.options.reliable) {
      this._warn(`connection to ${this.address} closed with ${this._pending.length} batch(es) not acknowledged; they may be lost (reliable mode resends them)`);
      this._pending = [];
    }
  }

  // -------------------------------------------------------------------------
  // Batches

  _enqueue(type, episodes) {
    if (!Array.isArray(episodes)) throw new UsageError("episodes must be a list of episode states");
    let steps = 0;
    for (const episode of episodes) steps += episodeSteps(episode);
    const fields = { episodes, timesteps: steps };
    const batch = { seq: null, type, body: null, steps, sentOn: 0, sends: 0, acked: false };
    const acknowledged = this._agreed.has(Extension.ACK);
    if (acknowledged) {
      batch.seq = this._nextSeq++;
      fields.seq = batch.seq;
    }
    batch.body = encodeMessageBody(makeMessage(type, fields));
    if (acknowledged) this._pending.push(batch);
    return batch;
  }

  async _makeRoom() {
    this._drain();
    while (this._pending.length >= this.options.maxUnacked) {
      await this._awaitAck(`ACK (${this._pending.length} batches unacknowledged, maxUnacked=${this.options.maxUnacked})`);
    }
  }

  async _sendBatch(batch) {
    await this._sendBody(batch.body, batch.type);
    batch.sentOn = this._generation;
    if (++batch.sends === 1) {
      this._counters.batchesSent++;
      this._counters.stepsSent += batch.steps;
    } else {
      this._counters.batchesResent++;
    }
    if (!this.options.reliable) batch.body = null; // never sent again
  }

  _onAck(seq) {
    const i = this._pending.findIndex((batch) => batch.seq === seq);
    if (i >= 0) {
      const [batch] = this._pending.splice(i, 1);
      batch.acked = true;
      this._counters.batchesAcked++;
      this._counters.stepsAcked += batch.steps;
      return;
    }
    if (seq > 0 && seq < this._nextSeq) return; // confirmed before; a resend gets a second ACK
    throw new UnexpectedMessage(`${this.address} acknowledged seq ${seq}, which was never sent (last sent: ${this._nextSeq - 1})`);
  }

  _weightsUpdate(setState) {
    const wantSteps = this._agreed.has(Extension.WANT_STEPS) && Number.isInteger(setState.want_steps) ? setState.want_steps : null;
    return { weights: readWeightSet(setState.state), wantSteps };
  }

  // -------------------------------------------------------------------------
  // Messages

  async _sendMessage(message, what) {
    await this._sendBody(encodeMessageBody(message), what);
  }

  async _sendBody(body, what) {
    if (this._transport === null) throw new ConnectionLost(`not connected to ${this.address}`);
    try {
      await this._transport.send(body, this.options.timeoutMs);
    } catch (error) {
      if (!(error instanceof ConnectionLost)) throw error;
      // A server that refuses a frame says why, then closes: its ERROR tells more than "connection reset".
      for (;;) {
        let message;
        try {
          message = this._transport?.poll();
        } catch {
          break;
        }
        if (message === undefined) break;
        if (message.type === MessageType.ERROR) throw serverError(message);
      }
      throw new ConnectionLost(`connection to ${this.address} lost while sending ${what}: ${error.message}`);
    }
  }

  async _await(expected, what, hint = "") {
    const deadline = Date.now() + this.options.timeoutMs;
    for (;;) {
      if (this._transport === null) throw new ConnectionLost(`not connected to ${this.address}`);
      const message = await this._transport.next(deadline);
      if (message === null) {
        throw new Timeout(`no ${what} from ${this.address} within ${this.options.timeoutMs / 1000} s${hint}`);
      }
      if (message.type === expected) return message;
      this._handleUnsolicited(message, what);
    }
  }

  async _awaitAck(what) {
    const message = await this._transport.next(Date.now() + this.options.timeoutMs);
    if (message === null) throw new Timeout(`no ${what} from ${this.address} within ${this.options.timeoutMs / 1000} s`);
    this._handleUnsolicited(message, what);
  }

  _handleUnsolicited(message, what) {
    if (message.type === MessageType.ACK && this._agreed.has(Extension.ACK)) return this._onAck(message.seq);
    if (message.type === MessageType.ERROR) throw serverError(message);
    throw new UnexpectedMessage(`${this.address} sent ${message.type} while we waited for ${what}`);
  }

  /** Take in what the server sent between calls (ACKs, an ERROR, a close) without waiting. */
  _drain() {
    if (this._transport === null) throw new ConnectionLost(`not connected to ${this.address}`);
    for (let message = this._transport.poll(); message !== undefined; message = this._transport.poll()) {
      this._handleUnsolicited(message, "the next call");
    }
  }

  _warn(text) {
    this.options.warn(text);
  }

  /**
   * In a browser, what a failed WebSocket can't say: a learner refuses a page's origin with close 1008 and
   * the reason (then the error is a ConnectFailed that says it, and this hint is not reached), but an older
   * one answered HTTP 403, of which a page's WebSocket learns nothing: the error names the page's origin and
   * the flag that lets it in.
   */
  _originHint() {
    const origin = globalThis.location?.origin;
    if (!this._given.scheme.startsWith("ws") || typeof globalThis.document === "undefined" || !origin) return "";
    return ` (a browser does not say why a WebSocket failed: if the learner's log says "origin '${origin}' is not in ` +
      `the runner's ws_allowed_origins", start it with --ws-allowed-origin ${origin})`;
  }
}
