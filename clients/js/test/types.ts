// Compiled by `npm run typecheck` (tsc --noEmit), never run: the calls the README shows, as a TypeScript user writes them.

import {
  BoxSpace, Client, EnvClient, ErrorCode, NdArray, ProtocolError, ServerError, TrainingEnded, type Ending,
  type EnvClientStats, type WeightsUpdate,
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

export { describe, loop, lowLevel, served };
