/**
 * The served_actions extension (PROTOCOL.md 10.5): the runner computes the actions.
 *
 * The client sends ACT, one row per env it steps now (columns of one length
 * k), and gets ACTIONS: one action for each row that wants one (neither
 * terminated nor truncated), in row order. This module has the wire form of
 * both; `Client.act` does the exchange.
 */

import { InvalidMessage, UsageError } from "./errors.js";
import { makeMessage, MessageType } from "./messages.js";
import { NdArray } from "./ndarray.js";

/** Env ids are the client's own names for its envs: 0 <= id <= MAX_ENV_ID. */
export const MAX_ENV_ID = 0x7fffffff;
/** Rows in one ACT (rlinks' runner refuses more). */
export const MAX_ACT_ROWS = 65536;

/**
 * One ACT row.
 * @typedef {{env: number, obs: ArrayLike<number>, reward: number, start: boolean, terminated: boolean, truncated: boolean}} ActRow
 */

/** Whether a row wants an action (its episode goes on). */
export function wantsAction(row) {
  return !row.terminated && !row.truncated;
}

/**
 * The ACT message for `rows`, observations of `obsShape` sent as float32.
 * @param {ActRow[]} rows
 * @throws {UsageError} no rows or too many, an env id out of range, an observation of another size,
 *   a reward that is not finite, a row that both starts and ends an episode
 */
export function makeAct(rows, obsShape) {
  const k = rows.length;
  if (k < 1 || k > MAX_ACT_ROWS) throw new UsageError(`an ACT needs 1 to ${MAX_ACT_ROWS} rows, got ${k}`);
  const size = obsShape.reduce((a, b) => a * b, 1);
  const obs = new Float32Array(k * size);
  const reward = new Float32Array(k);
  const flags = { start: new Uint8Array(k), terminated: new Uint8Array(k), truncated: new Uint8Array(k) };
  rows.forEach((row, i) => {
    if (!(Number.isInteger(row.env) && row.env >= 0 && row.env <= MAX_ENV_ID)) {
      throw new UsageError(`ACT row ${i}: env ${row.env} is not an int in 0..${MAX_ENV_ID}`);
    }
    if (row.obs?.length !== size) throw new UsageError(`ACT row ${i}: an observation needs ${size} numbers, got ${row.obs?.length}`);
    if (!Number.isFinite(Math.fround(row.reward))) throw new UsageError(`ACT row ${i}: the reward ${row.reward} is not finite`);
    if (row.start && !wantsAction(row)) throw new UsageError(`ACT row ${i}: a row can't both start and end an episode`);
    obs.set(row.obs, i * size);
    reward[i] = row.reward;
    for (const name of Object.keys(flags)) flags[name][i] = row[name] ? 1 : 0;
  });
  const bools = (values) => new NdArray("|b1", [k], values);
  return makeMessage(MessageType.ACT, {
    env: rows.map((row) => row.env),
    obs: NdArray.from(obs, [k, ...obsShape]),
    reward: NdArray.from(reward),
    start: bools(flags.start),
    terminated: bools(flags.terminated),
    truncated: bools(flags.truncated),
  });
}

/**
 * Read the ACTIONS answering an ACT whose rows wanting an action were those of `expected` (their envs, in order).
 *
 * @returns {{env: number[], actions: NdArray, weightsSeqNo: number}} `actions` of shape (m, ...)
 * @throws {InvalidMessage} envs other than `expected`, m actions for another number of envs, actions of another form
 */
export function readActions(message, expected) {
  const { env, weights_seq_no: seqNo } = message;
  let { actions } = message;
  if (!env.every((id) => Number.isInteger(id) && id >= 0 && id <= MAX_ENV_ID)) {
    throw new InvalidMessage(`ACTIONS: env ids must be ints in 0..${MAX_ENV_ID}`);
  }
  if (env.length !== expected.length || env.some((id, i) => id !== expected[i])) {
    throw new InvalidMessage(`ACTIONS: for envs [${env.join(", ")}], but actions were asked for [${expected.join(", ")}]`);
  }
  if (Array.isArray(actions)) {
    if (!actions.every((a) => typeof a === "number")) throw new InvalidMessage("ACTIONS: a list of actions must hold numbers");
    actions = actions.every(Number.isInteger)
      ? NdArray.from(BigInt64Array.from(actions, BigInt), [actions.length])
      : NdArray.from(Float64Array.from(actions), [actions.length]);
  }
  const m = actions.shape.length ? actions.shape[0] : -1;
  if (m !== env.length) throw new InvalidMessage(`ACTIONS: ${m} actions for ${env.length} envs`);
  if (!"biuf".includes(actions.dtype.kind)) throw new InvalidMessage(`ACTIONS: actions of dtype ${actions.dtype.str}`);
  return { env, actions, weightsSeqNo: seqNo };
}
