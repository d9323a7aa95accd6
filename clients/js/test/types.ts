// Compiled by `npm run typecheck` (tsc --noEmit), never run: the calls the README shows, as a TypeScript user writes them.

import {
  BoxSpace, Client, DiscreteSpace, EnvClient, ErrorCode, NdArray, OnnxPolicy, ProtocolError, ServerError, TrainingEnded,
  type Ending, type EnvClientStats, type WeightsUpdate,
} from "rlinks-client";

declare const sim: { reset(): Float32Array; step(action: number | Float32Array): { obs: Float32Array; reward: number; terminated: boolean; truncated: boolean } };

async function loop(): Promise<Ending> {
  const client = new EnvClient("ws://127.0.0.1:5555", { numEnvs: 1, seed: 3, timeoutMs: 60_000, secret: null });
  return client.run(async () => {
    let obs = sim.reset();
    for (;;) {
      const action = await client.act(obs);
      const step = sim.step(action);
      await client.report(step.reward, step.obs, step.terminated, step.truncated);
      obs = step.terminated || step.truncated ? sim.reset() : step.obs;
    }
  });
}

async function lowLevel(): Promise<number> {
  const client = new Client("127.0.0.1:5555", { reliable: true, warn: (text: string) => console.log(text) });
  const update: WeightsUpdate = await client.getState();
  const firstLayer: NdArray | undefined = update.weights.params.get("pi.net.mlp.0.weight");
  await client.sendEpisodes([]);
  await client.flush();
  client.close();
  return (firstLayer?.shape[0] ?? 0) + (update.wantSteps ?? 0);
}

function describe(error: unknown, stats: EnvClientStats, space: BoxSpace): string {
  if (error instanceof TrainingEnded) return "ended";
  if (error instanceof ServerError && error.code === ErrorCode.SHUTTING_DOWN) return error.text;
  if (error instanceof ProtocolError) return error.code;
  return `${stats.steps} ${stats.delivery.stepsAcked} ${space.low[0]}`;
}

async function served(obs: Float32Array): Promise<number | Float32Array> {
  const client = new EnvClient("ws://127.0.0.1:5555", { inference: "served", numEnvs: 2 });
  await client.startEpisode(obs, { train: false });
  await client.startEpisode(obs, 1, { train: true });
  return client.logAction(obs, 1, 1);
}

async function graph(bytes: Uint8Array, update: WeightsUpdate, image: Uint8Array): Promise<number> {
  const policy = await OnnxPolicy.create(bytes, update.weights, { space: new DiscreteSpace(3), seed: 1 });
  let state = policy.stateful ? policy.initialState() : undefined;
  const taken = await policy.act({ camera: image, state: [2, [0.5, -0.5]] }, state);
  state = taken.stateOut ?? undefined;
  const { distInputs } = await policy.forward([image, image]);
  policy.setWeights(update.weights);
  await policy.release();
  return taken.logp + distInputs[1][0];
}

async function imageLoop(sim: { reset(): Uint8Array; step(action: number | Float32Array): { obs: Uint8Array; reward: number } }) {
  const client = new EnvClient("127.0.0.1:5555", { inference: "local", onnxRuntime: await import("onnxruntime-web") });
  await client.report(1, sim.step(await client.act(sim.reset())).obs);
}

export { describe, graph, imageLoop, loop, lowLevel, served };
