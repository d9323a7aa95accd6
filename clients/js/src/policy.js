/** The policy run here: RLlib's default MLP ({@link Network}) and its action distribution, over one weight set at a time. */

import { Network } from "./mlp.js";
import { drawAction, Random } from "./sampling.js";

export class LocalPolicy {
  /**
   * @param {{params: Map}} weights a weight set ({@link readWeightSet})
   * @param {{space, fcnetActivation?: string, headFcnetActivation?: string,
   *   explore?: boolean, seed?: number, normalizeActions?: boolean, clipActions?: boolean}} options
   * @throws {UnsupportedModel} not RLlib's default MLP for that space
   */
  constructor(weights, { space, fcnetActivation = "tanh", headFcnetActivation = "relu", explore = true, seed, normalizeActions = true, clipActions = false }) {
    this.space = space;
    this.fcnetActivation = fcnetActivation;
    this.headFcnetActivation = headFcnetActivation;
    this.explore = explore;
    this.normalizeActions = normalizeActions;
    this.clipActions = clipActions;
    this.random = new Random(seed);
    this.network = null;
    this.seqNo = 0;
    this.setWeights(weights);
  }

  /** Load a new weight set (a set older than the one loaded, but for 0, is ignored). */
  setWeights(weights) {
    if (this.network !== null && weights.seqNo !== 0 && weights.seqNo < this.seqNo) return;
    this.network = new Network(weights.params, this.fcnetActivation, this.headFcnetActivation, this.space);
    this.seqNo = weights.seqNo;
  }

  get observationSize() {
    return this.network.observationSize;
  }

  /** Values of the action distribution's inputs per step. */
  get outputSize() {
    return this.network.outputSize;
  }

  /**
   * One step of the policy.
   * @returns {{action: number | Float32Array, forEnv: number | Float32Array, logp: number, distInputs: Float32Array}}
   *   `action` as recorded for the learner, `forEnv` as the env applies it
   */
  act(observation) {
    return drawAction(this.space, this.network.forward(observation), {
      explore: this.explore, random: this.random, normalize: this.normalizeActions, clip: this.clipActions,
    });
  }
}
