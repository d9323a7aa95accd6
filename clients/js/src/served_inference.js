/**
 * EnvClient's served mode: the runner computes the actions (PROTOCOL.md 10.5) and records the episodes.
 *
 * Each act() is one ACT: the env's row (a start row for a new episode, else
 * the reward its last action got and the observation now), after the rows
 * that ended episodes since (so the runner closes those first). A report
 * that ends an episode is held until the next ACT; close() sends the last
 * ones. The runner parks an on-policy ACT until new weights come, so pacing
 * is its business. An action the simulator took itself (logAction) goes as
 * its row's `taken`, and every row says whether its env's episode is trained
 * on (`train`) once an env plays one that is not (served_taken, 10.5.1). A
 * refused ACT leaves the rows for the next one.
 */

import { InvalidMessage } from "./errors.js";

export class ServedInference {
  /**
   * @param {import("./client.js").Client} client
   * @param {number[]} obsShape the shape of one observation
   * @param {import("./config.js").DiscreteSpace | import("./config.js").BoxSpace | null} space the action space, if known
   */
  constructor(client, obsShape, space, numEnvs, warn) {
    this.client = client;
    this.obsShape = obsShape;
    this.space = space;
    this.warn = warn;
    this.outcome = new Array(numEnvs).fill(null); // the row an env's next act() reports
    this.endings = []; // rows that ended episodes, for the next ACT
    this.untrained = new Set(); // envs whose episodes are not trained on
    this.seqNo = 0;
  }

  /**
   * The action for `env`'s observation now; with `taken`, the simulator's own (the runner records it and
   * answers with it, a Box one clipped to the bounds).
   */
  async act(env, obs, taken = undefined) {
    const pending = this.outcome[env];
    const row = { ...(pending ?? { env, reward: 0, start: true, terminated: false, truncated: false }), obs };
    if (taken !== undefined) row.taken = taken;
    const endings = this.endings;
    const rows = [...endings.filter((r) => r.env !== env), ...endings.filter((r) => r.env === env), row];
    const reply = await this._send(rows);
    this.outcome[env] = null;
    this.endings = this.endings.filter((r) => !endings.includes(r));
    return this._actionOf(reply, reply.env.length - 1);
  }

  /** `env`'s next episode (started by its next act) is trained on, or not. */
  setTrain(env, train) {
    if (train) this.untrained.delete(env);
    else this.untrained.add(env);
  }

  /** What `env`'s last action led to. */
  report(env, reward, obs, terminated, truncated) {
    const row = { env, obs: Float32Array.from(obs), reward, start: false, terminated, truncated };
    if (terminated || truncated) this.endings.push(row);
    else this.outcome[env] = row;
  }

  /** End `env`'s episode where it stands (truncated, told with the next ACT). */
  end(env) {
    const pending = this.outcome[env];
    this.outcome[env] = null;
    if (pending !== null) this.endings.push({ ...pending, truncated: true });
  }

  /** Send the rows that end episodes (every open one too, with `flush`). */
  async close(flush) {
    if (!flush) return;
    this.outcome.forEach((_, env) => this.end(env));
    if (this.endings.length === 0) return;
    await this._send(this.endings);
    this.endings = [];
  }

  async _send(rows) {
    const { untrained } = this;
    const sent = untrained.size ? rows.map((row) => ({ ...row, train: !untrained.has(row.env) })) : rows;
    const reply = await this.client.act(sent, this.obsShape);
    this.seqNo = reply.weightsSeqNo;
    if (reply.interrupted.length) {
      this.warn(`${reply.interrupted.length} episode(s) interrupted by the lost connection; the runner records them from here on, as new episodes`);
    }
    return reply;
  }

  _actionOf(reply, i) {
    const { actions } = reply;
    const values = actions.values();
    const box = this.space ? this.space.kind === "box" : actions.dtype.kind === "f";
    if (!box) {
      const action = Number(values[i]);
      if (!Number.isInteger(action) || (this.space && (action < 0 || action >= this.space.n))) {
        throw new InvalidMessage(`ACTIONS: action ${action} for env ${reply.env[i]} is not in ${this.space ?? "a Discrete space"}`);
      }
      return action;
    }
    const width = actions.size / reply.env.length;
    if (!(width >= 1) || (this.space && width !== this.space.size)) {
      throw new InvalidMessage(`ACTIONS: ${width} number(s) per env, which is not an action of ${this.space ?? "a Box"}`);
    }
    return Float32Array.from(values.subarray(i * width, (i + 1) * width), Number);
  }
}
