"""A simulator that sees a camera image beside a vector, trained with RLlib over RLlink.

The simulator below (``CursorToTarget``) renders a 32x32 RGB image with numpy.
A cursor moves along a track of 8 cells and must stop on the target: the
target's cell shows only in the image (a bright red band over sensor
noise), the cursor's place only in the vector. So the policy needs both: a
CNN for the image and an MLP for the vector, which RLlib trains on the
learner (``configs/ppo_pixels.yaml``) and this client runs as the exported
ONNX graph (``OnnxPolicy``; numpy, msgpack and onnxruntime, no torch, no Ray).

Run a learner, then clients::

    rlinks learner --config configs/ppo_pixels.yaml
    rlinks client --script examples/pixel_client.py --address 127.0.0.1:5565 -n 2

The loop is the dummy CartPole client's (``examples/dummy_cartpole_client.py``,
the template with every option): only the observation differs, a dict that
EnvClient passes to the policy and records as it is.
"""

from __future__ import annotations

import argparse
import collections
import logging
import signal
import sys

import numpy as np

from rlinks_rllib.client import EnvClient


class CursorToTarget:
    """The simulator: stop the cursor on the target; only the image shows the target.

    Actions: 0 left, 1 stay, 2 right. Staying on the target ends the episode
    with reward 1 (terminated); every other step costs 0.05; an episode is
    cut after 20 steps (truncated). Random play scores about -0.3, going
    straight to the target about 0.8.
    """

    CELLS, SIZE, MAX_STEPS = 8, 32, 20

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        self._target = self._cursor = self._steps = 0

    def reset(self) -> dict:
        self._target = int(self._rng.integers(self.CELLS))
        self._cursor = int(self._rng.integers(self.CELLS))
        self._steps = 0
        return self._observe()

    def step(self, action: int) -> tuple[dict, float, bool, bool]:
        self._steps += 1
        if action == 1 and self._cursor == self._target:
            return self._observe(), 1.0, True, False
        self._cursor = int(np.clip(self._cursor + action - 1, 0, self.CELLS - 1))
        return self._observe(), -0.05, False, self._steps >= self.MAX_STEPS

    def _observe(self) -> dict:
        camera = self._rng.integers(0, 40, (self.SIZE, self.SIZE, 3), dtype=np.uint8)  # sensor noise
        width = self.SIZE // self.CELLS
        camera[:, self._target * width:(self._target + 1) * width, 0] = 255
        cursor = np.array([self._cursor / (self.CELLS - 1), 1 - self._steps / self.MAX_STEPS], np.float32)
        return {"camera": camera, "cursor": cursor}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="127.0.0.1:5565", help="the learner's directory (or one runner), HOST:PORT")
    parser.add_argument("--max-steps", type=int, default=200_000, help="stop after this many env steps")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for any one reply")
    parser.add_argument("--retry-attempts", type=int, default=30, help="connection attempts before giving up")
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    """Run the simulator until ``--max-steps``, SIGTERM or the learner's end; return a summary."""
    sim = CursorToTarget(args.seed)
    # "local": the policy runs here, as the graph the runner exports for its CNN+MLP module. Not
    # reliable: the learner's end ends the run (a reliable client would wait for it to come back).
    client = EnvClient(args.address, inference="local", seed=args.seed, reliable=False, timeout=args.timeout,
                       retry_attempts=args.retry_attempts)
    signal.signal(signal.SIGTERM, lambda *_: client.stop())
    returns, episode_return = collections.deque(maxlen=50), 0.0

    with client:
        obs = sim.reset()
        for _ in range(args.max_steps):
            action = client.act(obs)
            obs, reward, terminated, truncated = sim.step(int(action))
            client.report(reward, obs, terminated, truncated)
            episode_return += reward
            if terminated or truncated:  # the next act starts the next episode
                returns.append(episode_return)
                obs, episode_return = sim.reset(), 0.0
    stats = client.stats
    return {"steps": stats.steps, "episodes": stats.episodes,
            "mean_return_last_50": round(float(np.mean(returns)) if returns else float("nan"), 3),
            "policy": type(client.policy).__name__}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    summary = run(parse_args(argv))
    print("summary: " + " ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
