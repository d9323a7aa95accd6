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
 * One ACT row. With served_taken (section 10.5.1): `taken`, the simulator's own action for a row that wants
 * one (a number for a Discrete space, numbers for a Box, as the env applies it), and `train`, false on the
 * rows of an episode that is not trained on.
 * @typedef {{env: number, obs: ArrayLike<number>, reward: number, start: boolean, terminated: boolean,
 *   truncated: boolean, taken?: number | ArrayLike<number>, train?: boolean}} ActRow
 */

/** Whether a row wants an action (its episode goes on). */
export function wantsAction(row) {
  return !row.terminated && !row.truncated;
}

/** Whether `rows` use the served_taken columns (a row's own action, or its `train` setting). */
export function usesServedTaken(rows) {
  return rows.some((row) => row.taken !== undefined || row.train !== undefined);
}

/**
 * The ACT message for `rows`, observations of `obsShape` sent as float32; `taken_mask`/`taken` when a
 * row carries `taken`, `train` (every row's, true unless false) when a row carries `train`.
 * @param {ActRow[]} rows
 * @throws {UsageError} no rows or too many, an env id out of range, an observation of another size,
 *   a reward that is not finite, a row that both starts and ends an episode; a taken action on a row
 *   that ends its episode, or taken actions that are not all whole numbers or all of one length
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
  const columns = {
    env: rows.map((row) => row.env),
    obs: NdArray.from(obs, [k, ...obsShape]),
    reward: NdArray.from(reward),
    start: bools(flags.start),
    terminated: bools(flags.terminated),
    truncated: bools(flags.truncated),
  };
  if (rows.some((row) => row.taken !== undefined)) {
    columns.taken_mask = bools(Uint8Array.from(rows, (row) => (row.taken !== undefined ? 1 : 0)));
    columns.taken = takenColumn(rows);
  }
  if (rows.some((row) => row.train !== undefined)) columns.train = bools(Uint8Array.from(rows, (row) => (row.train === false ? 0 : 1)));
  return makeMessage(MessageType.ACT, columns);
}

/** The `taken` column: int64 (k,) for Discrete actions, float32 (k, n) for Box ones; zeros on rows without one. */
function takenColumn(rows) {
  const given = rows.filter((row) => row.taken !== undefined);
  rows.forEach((row, i) => {
    if (row.taken !== undefined && !wantsAction(row)) throw new UsageError(`ACT row ${i}: a taken action on a row that ends its episode`);
  });
  if (given.every((row) => typeof row.taken === "number")) {
    for (const row of given) {
      if (!Number.isSafeInteger(row.taken)) throw new UsageError(`env ${row.env}: the taken action ${row.taken} is not a whole number (a Discrete action)`);
    }
    return NdArray.from(BigInt64Array.from(rows, (row) => BigInt(row.taken ?? 0)), [rows.length]);
  }
  const width = given[0].taken?.length;
  if (given.some((row) => typeof row.taken === "number" || row.taken?.length !== width) || !(width >= 1)) {
    throw new UsageError("taken actions in one ACT must all be numbers (Discrete) or all arrays of one length (Box)");
  }
  const taken = new Float32Array(rows.length * width);
  rows.forEach((row, i) => {
    if (row.taken !== undefined) taken.set(Float32Array.from(row.taken), i * width);
  });
  return NdArray.from(taken, [rows.length, width]);
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
