// The local policy against tests/vectors/policy/: what the Python client computes for RLlib's default MLP.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { BoxSpace, DiscreteSpace } from "../src/config.js";
import { UnsupportedModel } from "../src/errors.js";
import { Network } from "../src/mlp.js";
import { NdArray } from "../src/ndarray.js";
import { actionForEnv, categoricalLogp, gaussianLogp, Random, sampleCategorical, sampleGaussian } from "../src/sampling.js";
import { VECTORS } from "./support/vectors.js";

const load = (name) => JSON.parse(readFileSync(join(VECTORS, "policy", name), "utf8"));

function space(spec) {
  if (spec.kind === "discrete") return new DiscreteSpace(spec.n);
  return new BoxSpace(spec.shape, spec.low, spec.high);
}

function params(spec) {
  return new Map(Object.entries(spec).map(([name, { shape, data }]) => [name, NdArray.from(Float32Array.from(data, (x) => x ?? Infinity), shape)]));
}

function close(got, want, what) {
  assert.equal(got.length, want.length, what);
  for (let i = 0; i < want.length; i++) {
    const tolerance = 1e-5 + 1e-5 * Math.abs(want[i]);
    assert.ok(Math.abs(got[i] - want[i]) <= tolerance, `${what}[${i}]: ${got[i]}, expected ${want[i]}`);
  }
}

const mlp = load("mlp.json");

for (const c of mlp.cases) {
  test(`mlp ${c.name}`, () => {
    const network = new Network(params(c.params), c.fcnet_activation, c.head_fcnet_activation, space(c.action_space));
    c.observations.forEach((obs, i) => close(network.forward(obs), c.dist_inputs[i], `row ${i}`));
  });
}

for (const r of mlp.refused) {
  test(`mlp refuses ${r.name}`, () => {
    const base = mlp.cases.find((c) => c.name === r.params_of);
    const kept = Object.fromEntries(Object.entries(base.params).filter(([name]) => !r.drop.includes(name)));
    assert.throws(() => new Network(params(kept), base.fcnet_activation, base.head_fcnet_activation, space(r.action_space)), UnsupportedModel);
  });
}

test("logp of given actions", () => {
  for (const c of load("logp.json").cases) {
    const got = c.action_space.kind === "discrete" ? categoricalLogp(c.dist_inputs, c.action) : gaussianLogp(c.dist_inputs, c.action);
    close([got], [c.logp], `${JSON.stringify(c.action_space)} ${JSON.stringify(c.action)}`);
  }
});

test("the action an env applies", () => {
  for (const c of load("action_for_env.json").cases) {
    const got = actionForEnv(space(c.action_space), Float32Array.from(c.sampled), { normalize: c.normalize, clip: c.clip });
    close(got, c.for_env, JSON.stringify(c));
  }
});

test("sampling follows the distribution and records its logp", () => {
  const random = new Random(7);
  const logits = Float32Array.of(0, Math.log(3));
  let ones = 0;
  for (let i = 0; i < 20000; i++) {
    const { action, logp } = sampleCategorical(logits, random);
    ones += action;
    assert.equal(logp, categoricalLogp(logits, action));
  }
  assert.ok(Math.abs(ones / 20000 - 0.75) < 0.02, `P(1) = ${ones / 20000}`);
  const inputs = Float32Array.of(1.5, Math.log(0.5));
  let sum = 0;
  let squares = 0;
  for (let i = 0; i < 20000; i++) {
    const { action, logp } = sampleGaussian(inputs, random);
    assert.equal(logp, gaussianLogp(inputs, action));
    sum += action[0];
    squares += action[0] ** 2;
  }
  const mean = sum / 20000;
  assert.ok(Math.abs(mean - 1.5) < 0.02 && Math.abs(Math.sqrt(squares / 20000 - mean ** 2) - 0.5) < 0.02);
});
