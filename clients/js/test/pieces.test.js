// The client's pieces without a server: addresses, episode chunks, ACT rows and ACTIONS, offers.

import assert from "node:assert/strict";
import { test } from "node:test";

import { parseAddress } from "../src/address.js";
import { readRunnerConfig } from "../src/config.js";
import { EpisodeBuilder, episodeSteps } from "../src/episodes.js";
import { InvalidMessage, UsageError } from "../src/errors.js";
import { makeOffer, parseOffer } from "../src/extensions.js";
import { decodeMessage, encodeFrame, encodeMessageBody } from "../src/framing.js";
import { makeAct, readActions, usesServedTaken } from "../src/served.js";
import { loadVectors } from "./support/vectors.js";

test("addresses: host:port is TCP, tls:// TLS, ws:// and wss:// WebSocket, anything else refused", () => {
  assert.equal(String(parseAddress("127.0.0.1:5555")), "127.0.0.1:5555");
  assert.equal(parseAddress("tcp://h:1").scheme, "tcp");
  assert.equal(String(parseAddress("tls://h:1")), "tls://h:1");
  const ws = parseAddress("wss://game.example:443/rlink");
  assert.deepEqual([ws.scheme, ws.host, ws.port, ws.path], ["wss", "game.example", 443, "/rlink"]);
  assert.equal(parseAddress("ws://[::1]:9").host, "::1");
  for (const bad of ["", "host", "h:0", "h:70000", "udp://h:1", "http://h:1"]) assert.throws(() => parseAddress(bad), UsageError, bad);
});

test("an episode cut at a batch boundary goes on with the same id, the last observation first", () => {
  const builder = new EpisodeBuilder({ observationSize: 2, distInputsSize: 2 });
  builder.reset([0, 0]);
  const taken = (a) => ({ action: a, logp: -0.5, distInputs: Float32Array.of(0.1, 0.2) });
  builder.step(taken(1), 1, [1, 1]);
  builder.step(taken(0), 1, [2, 2]);
  const [first] = builder.takeChunks();
  builder.step(taken(1), 1, [3, 3], true);
  const [second] = builder.takeChunks();
  assert.equal(first.id_, second.id_);
  assert.deepEqual([first.t_started, first.t, second.t_started, second.t], [0, 2, 2, 3]);
  assert.deepEqual(first.observations.data.shape, [3, 2]);
  assert.deepEqual(Array.from(second.observations.data.values()), [2, 2, 3, 3]);
  assert.deepEqual(first.extra_model_outputs.action_dist_inputs.data.shape, [2, 2]);
  assert.equal(first.actions.data.dtype.str, "<i8");
  assert.ok(second.is_terminated && !first.is_terminated && !first.is_truncated);
  assert.equal(episodeSteps(first), 2);
  assert.equal(builder.pendingSteps, 0);
  // Each chunk is a valid EPISODES body.
  const message = decodeMessage(encodeMessageBody({ type: "EPISODES", episodes: [first, second] }));
  assert.equal(message.episodes[1].t, 3);
});

test("a new episode truncates the running one; Box actions are recorded by shape", () => {
  const builder = new EpisodeBuilder({ observationSize: 1, boxActionShape: [2] });
  builder.reset([0]);
  builder.step({ action: Float32Array.of(0.5, -0.5) }, 0.25, [1]);
  builder.reset([5]);
  const [chunk] = builder.takeChunks();
  assert.ok(chunk.is_truncated && !chunk.is_terminated);
  assert.deepEqual(chunk.actions.data.shape, [1, 2]);
  assert.equal(chunk.extra_model_outputs, null);
  assert.throws(() => builder.step({ action: Float32Array.of(1) }, 0, [1]), UsageError);
  assert.throws(() => builder.step({ action: Float32Array.of(1, 1) }, NaN, [1]), UsageError);
});

test("ACT rows go as section 10.5 says; ACTIONS for other envs, or too few, are refused", () => {
  const rows = [
    { env: 0, obs: [1, 2], reward: 1, start: false, terminated: true, truncated: false },
    { env: 0, obs: [3, 4], reward: 0, start: true, terminated: false, truncated: false },
  ];
  const act = decodeMessage(encodeMessageBody(makeAct(rows, [2])));
  assert.deepEqual(act.env, [0, 0]);
  assert.deepEqual(act.obs.shape, [2, 2]);
  assert.deepEqual(Array.from(act.start.values()), [0, 1]);
  assert.throws(() => makeAct([{ ...rows[1], terminated: true }], [2]), UsageError);
  assert.throws(() => makeAct([{ ...rows[1], obs: [1] }], [2]), UsageError);
  assert.throws(() => makeAct([], [2]), UsageError);
  const reply = readActions({ type: "ACTIONS", env: [0], actions: [1], weights_seq_no: 3 }, [0]);
  assert.equal(Number(reply.actions.values()[0]), 1);
  assert.throws(() => readActions({ type: "ACTIONS", env: [1], actions: [1], weights_seq_no: 3 }, [0]), InvalidMessage);
  assert.throws(() => readActions({ type: "ACTIONS", env: [0], actions: [], weights_seq_no: 3 }, [0]), InvalidMessage);
});

test("offers: ours sorted, theirs checked", () => {
  assert.deepEqual(makeOffer(["want_steps", "ack", "ack"], "me", { client_id: "x" }), {
    version: 1, extensions: ["ack", "want_steps"], agent: "me", client_id: "x",
  });
  assert.equal(parseOffer({ type: "PONG" }), null);
  assert.deepEqual([...parseOffer({ type: "PONG", rlinks: { version: 1, extensions: ["ack"], role: "directory" } }).extensions], ["ack"]);
  for (const bad of [[], { version: 0 }, { version: 1, extensions: "ack" }, { version: 1, extensions: [""] }]) {
    assert.throws(() => parseOffer({ type: "PONG", rlinks: bad }), InvalidMessage);
  }
});

test("served_taken rows (10.5.1) go as tests/vectors/valid_served_taken does, byte for byte", () => {
  const { bytes } = loadVectors().find((vector) => vector.name === "valid_served_taken");
  const obs = [[0, -0, 0.03, -0.5], [0.01, -0.02, 0.03, -0.375], [0.02, -0.04, 0.03, -0.25]];
  const rows = [
    { env: 0, obs: obs[0], reward: 1, start: false, terminated: false, truncated: false, train: true },
    { env: 1, obs: obs[1], reward: 1, start: false, terminated: false, truncated: false, taken: 1, train: true },
    { env: 2, obs: obs[2], reward: 0, start: true, terminated: false, truncated: false, train: false },
  ];
  const frame = encodeFrame(encodeMessageBody(makeAct(rows, [4])));
  assert.deepEqual(Buffer.from(frame), Buffer.from(bytes.subarray(0, frame.length)));
  assert.ok(usesServedTaken(rows) && !usesServedTaken(rows.map(({ taken, train, ...row }) => row)));
  // Box actions as float32 rows, zeros where the simulator did not act; nothing taken on a row that ends.
  const box = decodeMessage(encodeMessageBody(makeAct([rows[0], { ...rows[1], taken: [0.5, -2] }], [4])));
  assert.deepEqual([box.taken.dtype.str, box.taken.shape, Array.from(box.taken.values())], ["<f4", [2, 2], [0, 0, 0.5, -2]]);
  assert.deepEqual(Array.from(box.taken_mask.values()), [0, 1]);
  assert.throws(() => makeAct([{ ...rows[1], terminated: true }], [4]), UsageError);
  assert.throws(() => makeAct([{ ...rows[1], taken: 0.5 }], [4]), UsageError);
  assert.throws(() => makeAct([rows[1], { ...rows[0], taken: [1, 2] }], [4]), UsageError);
});

test("SET_CONFIG's paced_in_flight is read when it is an int >= 1, else none is followed", () => {
  const description = { algorithm: "DQN", rollout_fragment_length: 10, on_policy: false, model_config: {},
    observation_space: { kind: "box", shape: [4] }, action_space: { kind: "discrete", n: 2 } };
  assert.equal(readRunnerConfig({ config: description }).pacedInFlight, null);
  assert.equal(readRunnerConfig({ config: { ...description, paced_in_flight: 1 } }).pacedInFlight, 1);
  assert.equal(readRunnerConfig({ config: { ...description, paced_in_flight: 3 } }).pacedInFlight, 3);
  for (const odd of [0, -1, 1.5, true, "1", null]) {
    assert.equal(readRunnerConfig({ config: { ...description, paced_in_flight: odd } }).pacedInFlight, null, String(odd));
  }
});
