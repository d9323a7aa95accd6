#!/usr/bin/env node
// A simulator that trains with RLlib over RLlink, in JavaScript: the template to copy.
//
// CartPole (cartpole_env.js, gymnasium's CartPole-v1 dynamics) stands in for
// your simulator. Its loop calls two things of EnvClient:
//   act(obs)  -> the action (the policy runs here, from the learner's weights);
//   report(reward, nextObs, terminated, truncated) -> what came of it.
// EnvClient does the rest: it connects (to the learner's directory, which
// names a runner, or to a runner), records the episodes, sends them (on-policy:
// waits for the weights trained on them, when the runner's share is in),
// takes new weights, reconnects and closes.
//
// Run a learner first (rlinks learner --config configs/ppo_cartpole.yaml),
// then one or more copies of this:
//   node clients/js/examples/cartpole.mjs --address 127.0.0.1:5555

import { parseArgs } from "node:util";

import { ClientClosed, DiscreteSpace, EnvClient, NotAgreed, ProtocolError, RLinksError, ServerError } from "rlinks-client";
import { CartPole } from "./cartpole_env.js";

const USAGE = `usage: node cartpole.mjs [options]

CartPole-v1 training with an RLlib learner over RLlink.

  --address ADDRESS      the learner's directory or a runner: HOST:PORT, or
                         ws://HOST:PORT for WebSocket (default 127.0.0.1:5555)
  --max-steps N          stop after N env steps (default 100000)
  --envs N               CartPoles stepped by this client (default 1)
  --seed S               seed of the envs and the action sampling
  --timeout SECONDS      longest wait for any one reply (default 120)
  --retry-attempts N     connection attempts before giving up (default 20)
  --unreliable           don't reconnect after a dropped connection
  --shutdown-grace S     after the learner's shutting_down, how long to try to
                         reconnect before ending (default 30)
  --off-policy           send batches without waiting for new weights
  --served-actions       the learner computes the actions (served_actions): send
                         observations, get actions; no network here
  --secret-file PATH     shared secret for an authenticating learner (or set RLINKS_SECRET)
  --ca-file, --cert-file, --key-file PATH
                         TLS (tls:// and wss://): CA to check the server with;
                         client certificate and key
  --fragment-steps N     steps per batch when the server doesn't say (RLlib's own
                         server; default 500)
  --activation NAME      hidden activation when the server doesn't say (default tanh)
`;

const { values: args } = parseArgs({
  options: {
    address: { type: "string", default: "127.0.0.1:5555" },
    "max-steps": { type: "string", default: "100000" },
    envs: { type: "string", default: "1" },
    seed: { type: "string" },
    timeout: { type: "string", default: "120" },
    "retry-attempts": { type: "string", default: "20" },
    unreliable: { type: "boolean", default: false },
    "shutdown-grace": { type: "string", default: "30" },
    "off-policy": { type: "boolean", default: false },
    "served-actions": { type: "boolean", default: false },
    "secret-file": { type: "string" },
    "ca-file": { type: "string" },
    "cert-file": { type: "string" },
    "key-file": { type: "string" },
    "fragment-steps": { type: "string", default: "500" },
    activation: { type: "string", default: "tanh" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

const { readFileSync } = await import("node:fs");

function readSecret() {
  if (args["secret-file"]) return readFileSync(args["secret-file"]);
  return process.env.RLINKS_SECRET || null;
}

function readCertificates() {
  const files = { ca: args["ca-file"], cert: args["cert-file"], key: args["key-file"] };
  return Object.fromEntries(Object.entries(files).filter(([, path]) => path).map(([name, path]) => [name, readFileSync(path)]));
}

const maxSteps = Number(args["max-steps"]);
const numEnvs = Number(args.envs);
const seed = args.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(args.seed);
const summary = { steps: 0, episodes: 0, returns: [] };

function printSummary(stats) {
  const mean = summary.returns.length ? summary.returns.reduce((a, b) => a + b, 0) / summary.returns.length : NaN;
  const d = stats?.delivery ?? {};
  console.log(
    `summary: steps=${summary.steps} episodes=${summary.episodes} mean_return_last_20=${mean.toFixed(1)} ` +
      `weights_seq_no=${stats?.weightsSeqNo ?? 0} reconnects=${d.reconnects ?? 0} batches_resent=${d.batchesResent ?? 0} ` +
      `steps_sent=${d.stepsSent ?? 0} steps_acked=${d.stepsAcked ?? 0}`,
  );
}

const client = new EnvClient(args.address, {
  numEnvs,
  seed,
  timeoutMs: 1000 * Number(args.timeout),
  retryAttempts: Number(args["retry-attempts"]),
  reliable: !args.unreliable,
  shutdownGraceMs: 1000 * Number(args["shutdown-grace"]),
  onPolicy: args["off-policy"] ? false : null,
  inference: args["served-actions"] ? "served" : "auto",
  secret: readSecret(),
  tls: readCertificates(),
  // Only for RLlib's own server, which describes itself as a pickle this client never reads:
  actionSpace: new DiscreteSpace(2),
  rolloutFragmentLength: Number(args["fragment-steps"]),
  fcnetActivation: args.activation,
  warn: (text) => console.error(`cartpole: WARNING: ${text}`),
});
process.on("SIGTERM", () => client.stop());
process.on("SIGINT", () => client.stop());

try {
  await client.connect();
  console.error(`cartpole: connected to ${client.address} (${client.client.plainRllib ? "plain RLlink" : client.client.serverAgent}); ` +
    `${numEnvs} env(s), ${client.mode === "served" ? "actions served by the learner" : client.onPolicy ? "on-policy batches" : "off-policy batches"}`);
  const envs = Array.from({ length: numEnvs }, (_, i) => new CartPole(seed + i));
  const obs = envs.map((env) => env.reset());
  const returns = new Array(numEnvs).fill(0);
  const ending = await client.run(async () => {
    while (summary.steps < maxSteps) {
      for (let i = 0; i < numEnvs; i++) {
        const action = await client.act(obs[i], i);
        const step = envs[i].step(action);
        summary.steps++;
        await client.report(step.reward, step.obs, step.terminated, step.truncated, i);
        returns[i] += step.reward;
        obs[i] = step.obs;
        if (step.terminated || step.truncated) {
          // The episode ended; this env's next act() starts the next one from its reset.
          summary.episodes++;
          summary.returns.push(returns[i]);
          if (summary.returns.length > 20) summary.returns.shift();
          returns[i] = 0;
          obs[i] = envs[i].reset();
        }
      }
    }
  }); // then closes: what is due is delivered and acknowledged first
  if (ending === "training_ended") console.error("cartpole: the learner stopped; done");
  if (ending === "stopped") console.error("cartpole: stopped");
  printSummary(client.stats);
} catch (error) {
  if (error instanceof NotAgreed) {
    console.error(`cartpole: the learner does not serve actions: ${error.message}; run without --served-actions`);
    printSummary(client.stats);
    process.exit(3);
  }
  if (error instanceof ServerError) console.error(`cartpole: the learner refused us: ${error.code}: ${error.text}`);
  else if (error instanceof ProtocolError) console.error(`cartpole: protocol error (${error.code}): ${error.message}`);
  else if (error instanceof ClientClosed) console.error("cartpole: stopped");
  else if (error instanceof RLinksError) console.error(`cartpole: ${error.name}: ${error.message}`);
  else throw error;
  printSummary(client.stats);
  process.exitCode = 1;
}
