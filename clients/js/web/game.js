// The web game: N CartPoles stepped by this page, trained by an RLlib learner over WebSocket.
//
// The loop is the one every simulator has (README.md): act, step, report. The
// first cart is drawn every animation frame; `speed` env steps run per frame
// (1: watch it at 60 steps a second; more: train faster). What the page is
// doing is in `window.rlinks` (the headless test reads it there).

import { EnvClient } from "rlinks-client";
import { CartPole, X_THRESHOLD } from "../examples/cartpole_env.js";

const params = new URLSearchParams(location.search);
const address = params.get("address") ?? `ws://${location.hostname || "127.0.0.1"}:5555`;
const numEnvs = Number(params.get("envs") ?? 4);
const speed = Number(params.get("speed") ?? 1);
const maxSteps = Number(params.get("max-steps") ?? Infinity);

const status = { state: "connecting", address, steps: 0, episodes: 0, meanReturn: NaN, weightsSeqNo: 0, error: null };
window.rlinks = status;

const canvas = document.getElementById("game");
const ctx = canvas.getContext("2d");
const text = document.getElementById("status");

function draw(env, lastReturn) {
  const [x, , theta] = env.state;
  const w = canvas.width;
  const h = canvas.height;
  const scale = w / (2 * X_THRESHOLD * 1.2);
  const cartX = w / 2 + x * scale;
  const cartY = h - 60;
  ctx.clearRect(0, 0, w, h);
  ctx.strokeStyle = "#888";
  ctx.beginPath();
  ctx.moveTo(0, cartY + 15);
  ctx.lineTo(w, cartY + 15);
  ctx.stroke();
  ctx.fillStyle = "#345";
  ctx.fillRect(cartX - 30, cartY - 15, 60, 30);
  ctx.strokeStyle = "#c63";
  ctx.lineWidth = 8;
  ctx.beginPath();
  ctx.moveTo(cartX, cartY - 15);
  ctx.lineTo(cartX + Math.sin(theta) * 150, cartY - 15 - Math.cos(theta) * 150);
  ctx.stroke();
  ctx.lineWidth = 1;
  ctx.fillStyle = "#222";
  ctx.fillText(`step ${env.elapsedSteps}   last return ${lastReturn}`, 10, 20);
}

function show() {
  text.textContent =
    `${status.state} (${status.address})\n` +
    `steps ${status.steps}   episodes ${status.episodes}   mean return (last 20) ${status.meanReturn.toFixed(1)}   ` +
    `weights #${status.weightsSeqNo}` + (status.error ? `\n${status.error}` : "");
}

const nextFrame = () => new Promise((resolve) => requestAnimationFrame(resolve));

// One EnvClient per cart: the learner's directory spreads them over its runners, and each cart's
// loop runs on its own, so one waiting for the weights trained on its share never holds up another.
const carts = Array.from({ length: numEnvs }, (_, i) => ({
  env: new CartPole(1000 + i),
  client: new EnvClient(address, { seed: i, warn: (line) => console.warn(`rlinks: cart ${i}: ${line}`) }),
  episodeReturn: 0,
}));
const recent = [];
let lastReturn = 0;
let drawing = true;
document.getElementById("stop").onclick = () => carts.forEach((cart) => cart.client.stop());

async function play(cart, index) {
  const { env, client } = cart;
  let obs = env.reset();
  return client.run(async () => {
    while (status.steps < maxSteps) {
      for (let k = 0; k < speed; k++) {
        const action = await client.act(obs);
        const step = env.step(action);
        status.steps++;
        await client.report(step.reward, step.obs, step.terminated, step.truncated);
        cart.episodeReturn += step.reward;
        obs = step.obs;
        if (step.terminated || step.truncated) {
          status.episodes++;
          recent.push(cart.episodeReturn);
          if (recent.length > 20) recent.shift();
          if (index === 0) lastReturn = cart.episodeReturn;
          cart.episodeReturn = 0;
          obs = env.reset();
        }
      }
      await nextFrame(); // let the page draw and the sockets deliver
    }
  });
}

async function render() {
  while (drawing) {
    status.meanReturn = recent.length ? recent.reduce((a, b) => a + b, 0) / recent.length : NaN;
    status.weightsSeqNo = Math.max(...carts.map((cart) => cart.client.stats.weightsSeqNo));
    draw(carts[0].env, lastReturn);
    show();
    await nextFrame();
  }
}

const rendering = render();
try {
  await Promise.all(carts.map((cart) => cart.client.connect()));
  status.state = "training";
  status.address = [...new Set(carts.map((cart) => String(cart.client.address)))].join(", ");
  const endings = await Promise.all(carts.map(play));
  status.ending = endings.includes("training_ended") ? "training_ended" : endings[0];
  status.state = status.ending;
} catch (error) {
  status.state = "error";
  status.error = `${error.name}: ${error.message}`;
  console.error(status.error);
  carts.forEach((cart) => cart.client.stop());
}
drawing = false;
await rendering;
status.delivery = Object.fromEntries(
  ["stepsSent", "stepsAcked", "batchesResent", "reconnects"].map((key) => [key, carts.reduce((sum, cart) => sum + cart.client.stats.delivery[key], 0)]),
);
show();
