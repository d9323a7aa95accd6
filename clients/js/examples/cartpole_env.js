/**
 * gymnasium's CartPole-v1, written out: the same constants, Euler integration, reward 1 per step,
 * termination at |x| > 2.4 or |theta| > 12 degrees, truncation at 500 steps, a start uniform in
 * [-0.05, 0.05). No Node or browser APIs: the example (cartpole.mjs) and the web page both use it.
 */

const GRAVITY = 9.8;
const MASS_CART = 1.0;
const MASS_POLE = 0.1;
const TOTAL_MASS = MASS_CART + MASS_POLE;
const LENGTH = 0.5; // half the pole's length
const POLE_MASS_LENGTH = MASS_POLE * LENGTH;
const FORCE_MAG = 10.0;
const TAU = 0.02; // seconds between state updates
export const THETA_THRESHOLD = (12 * 2 * Math.PI) / 360;
export const X_THRESHOLD = 2.4;
export const MAX_EPISODE_STEPS = 500;

/** A seeded uniform generator (mulberry32), so a seed gives the same episodes. */
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class CartPole {
  constructor(seed = Math.floor(Math.random() * 2 ** 32)) {
    this.random = mulberry32(seed);
    this.state = [0, 0, 0, 0];
    this.elapsedSteps = 0;
  }

  /** The observation: x, x_dot, theta, theta_dot as float32. */
  observation() {
    return Float32Array.from(this.state);
  }

  reset() {
    this.state = this.state.map(() => -0.05 + 0.1 * this.random());
    this.elapsedSteps = 0;
    return this.observation();
  }

  /** @param {number} action 0 pushes left, 1 right */
  step(action) {
    let [x, xDot, theta, thetaDot] = this.state;
    const force = action === 1 ? FORCE_MAG : -FORCE_MAG;
    const cos = Math.cos(theta);
    const sin = Math.sin(theta);
    const temp = (force + POLE_MASS_LENGTH * thetaDot * thetaDot * sin) / TOTAL_MASS;
    const thetaAcc = (GRAVITY * sin - cos * temp) / (LENGTH * (4 / 3 - (MASS_POLE * cos * cos) / TOTAL_MASS));
    const xAcc = temp - (POLE_MASS_LENGTH * thetaAcc * cos) / TOTAL_MASS;
    x += TAU * xDot;
    xDot += TAU * xAcc;
    theta += TAU * thetaDot;
    thetaDot += TAU * thetaAcc;
    this.state = [x, xDot, theta, thetaDot];
    this.elapsedSteps++;
    const terminated = x < -X_THRESHOLD || x > X_THRESHOLD || theta < -THETA_THRESHOLD || theta > THETA_THRESHOLD;
    return { obs: this.observation(), reward: 1.0, terminated, truncated: this.elapsedSteps >= MAX_EPISODE_STEPS };
  }
}
