// The policy graph's pieces without a runtime: the ONNX metadata, the interface's checks, images recorded in their dtype.
// (The graph run by onnxruntime-web against Python's OnnxPolicy and a real runner: tests/test_js_client.py.)

import assert from "node:assert/strict";
import { test } from "node:test";

import { readRunnerConfig } from "../src/config.js";
import { EpisodeBuilder } from "../src/episodes.js";
import { InvalidMessage, UnsupportedModel, UsageError } from "../src/errors.js";
import { NdArray } from "../src/ndarray.js";
import { GRAPH_METADATA_KEY, readGraphInterface, readGraphMetadata } from "../src/onnx_policy.js";

/** Protobuf bytes: a length-delimited field. */
function field(number, bytes) {
  const out = [number * 8 + 2];
  for (let n = bytes.length; ; n >>>= 7) {
    if (n < 0x80) { out.push(n); break; }
    out.push((n & 0x7f) | 0x80);
  }
  return Uint8Array.from([...out, ...bytes]);
}
const text = (s) => new TextEncoder().encode(s);

const SPACE = { kind: "dict", spaces: {
  camera: { kind: "box", shape: [2, 2, 3], dtype: "|u1", low: 0, high: 255 },
  "it's": { kind: "tuple", spaces: [{ kind: "discrete", n: 3 }, { kind: "box", shape: [4], dtype: "<f4", low: -1, high: 1 }] },
} };
const INTERFACE = {
  version: 1, observation_space: SPACE,
  observation_inputs: ["obs['camera']", `obs["it's"][0]`, `obs["it's"][1]`],
  state_keys: ["h"], state_inputs: ["state_in['h']"], state_outputs: ["state_out['h']"], initial_state: { h: [0, 0] },
  parameters: ["pi.net.mlp.0.weight"], output: "action_dist_inputs",
};
const INPUTS = [...INTERFACE.observation_inputs, ...INTERFACE.state_inputs, ...INTERFACE.parameters];

test("the interface is read from the ONNX model's metadata_props, the graph skipped over", () => {
  const entry = (k, v) => field(14, [...field(1, text(k)), ...field(2, text(v))]);
  const model = Uint8Array.from([0x08, 0x09, ...field(7, new Uint8Array(300)), ...entry("other", "x"), ...entry(GRAPH_METADATA_KEY, "{}")]);
  assert.deepEqual([...readGraphMetadata(model)], [["other", "x"], [GRAPH_METADATA_KEY, "{}"]]);
  assert.throws(() => readGraphMetadata(Uint8Array.from([0x3a, 0x10, 0x01])), UnsupportedModel); // a field past the end
});

test("an interface is held to its graph as Python's read_interface holds it (input names in Python's repr)", () => {
  const face = readGraphInterface(JSON.stringify(INTERFACE), INPUTS);
  assert.deepEqual(face.leaves.map(({ path }) => path), [["camera"], ["it's", 0], ["it's", 1]]);
  const refused = (change, inputs = INPUTS) => assert.throws(() => readGraphInterface(JSON.stringify({ ...INTERFACE, ...change }), inputs), UnsupportedModel);
  assert.throws(() => readGraphInterface(undefined, INPUTS), /no 'rlinks.policy' metadata/);
  assert.throws(() => readGraphInterface("{", INPUTS), /not JSON/);
  refused({ version: 2 });
  refused({ observation_inputs: ["obs"] });
  refused({ state_inputs: ["state_in['c']"] });
  refused({ initial_state: {} });
  refused({ parameters: ["pi.net.mlp.0.bias"] });
  refused({ observation_space: { kind: "box", shape: [2], dtype: ">f8" }, observation_inputs: ["obs"] });
  refused({ observation_space: { kind: "text" }, observation_inputs: ["obs"] });
  refused({}, INPUTS.slice(1));
});

test("SET_CONFIG's policy_graph is bin, or the message is refused", () => {
  const description = { algorithm: "PPO", rollout_fragment_length: 10, on_policy: true, model_config: {},
    observation_space: { kind: "box", shape: [2, 2, 3] }, action_space: { kind: "discrete", n: 3 } };
  assert.equal(readRunnerConfig({ config: description }).policyGraph, null);
  assert.deepEqual(readRunnerConfig({ config: { ...description, policy_graph: Uint8Array.of(1, 2) } }).policyGraph, Uint8Array.of(1, 2));
  assert.throws(() => readRunnerConfig({ config: { ...description, policy_graph: "graph" } }), InvalidMessage);
});

test("images are recorded in their dtype and shape, integers in its range only", () => {
  const builder = new EpisodeBuilder({ observationSize: 4, observationShape: [2, 2, 1], observationType: Uint8Array, distInputsSize: 3 });
  builder.reset(Uint8Array.of(0, 1, 2, 255));
  builder.step({ action: 2, logp: -1, distInputs: Float32Array.of(0, 0, 0) }, 1, [3, 4, 5, 6], true);
  const [chunk] = builder.takeChunks();
  const observations = chunk.observations.data;
  assert.ok(observations instanceof NdArray);
  assert.deepEqual([observations.dtype.str, observations.shape], ["|u1", [2, 2, 2, 1]]);
  assert.deepEqual([...observations.values()], [0, 1, 2, 255, 3, 4, 5, 6]);
  assert.throws(() => builder.reset([0, 1, 2, 256]), UsageError);
  assert.throws(() => builder.reset([0, 1, 2, 0.5]), UsageError);
  assert.throws(() => new EpisodeBuilder({ observationSize: 4, observationShape: [3] }), UsageError);
});

test("without onnxruntime-web, loading a graph is an UnsupportedModel that names the package", async () => {
  const { cpSync, mkdtempSync, mkdirSync, rmSync, symlinkSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const root = mkdtempSync(join(tmpdir(), "rlinks-js-"));
  try {
    // A copy of the package whose node_modules holds only its one dependency, as `npm install rlinks-client` leaves it.
    cpSync(new URL("../src", import.meta.url), join(root, "src"), { recursive: true });
    mkdirSync(join(root, "node_modules"));
    symlinkSync(new URL("../node_modules/@msgpack", import.meta.url).pathname, join(root, "node_modules", "@msgpack"));
    const bare = await import(join(root, "src", "onnx_policy.js"));
    await assert.rejects(bare.loadOnnxRuntime(), (error) => error.name === "UnsupportedModel" && /npm install onnxruntime-web/.test(error.message));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
