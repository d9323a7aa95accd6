"""A client whose task needs memory: the cue shows at the first step only, the answer is asked at the last.

Run by tests/test_recurrent.py. The runner's module is an LSTM: EnvClient runs
its exported graph, carries the state from step to step (a fresh one each
episode) and records ``state_out`` so the learner can resume every sequence
where the client was.
"""

from __future__ import annotations

import argparse
import signal
import sys

import numpy as np

from rlinks_rllib.client import EnvClient

DELAY = 3  # blank steps between the cue and the question


class RememberTheCue:
    """Step 0 shows cue 0 or 1; then DELAY blank steps; then the question: answer the cue for reward 1."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.cue = self.t = 0

    def reset(self) -> np.ndarray:
        self.cue, self.t = int(self.rng.integers(2)), 0
        return self._observe()

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        asked = self.t == DELAY + 1
        self.t += 1
        if asked:
            return self._observe(), float(action == self.cue), True
        return self._observe(), 0.0, False

    def _observe(self) -> np.ndarray:
        obs = np.zeros(3, np.float32)
        if self.t == 0:
            obs[self.cue] = 1.0
        if self.t == DELAY + 1:
            obs[2] = 1.0
        return obs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sim = RememberTheCue(np.random.default_rng(args.seed))
    client = EnvClient(args.address, inference="local", seed=args.seed, reliable=False, timeout=120)
    signal.signal(signal.SIGTERM, lambda *_: client.stop())

    with client:
        if not client.connect().policy.stateful:
            raise SystemExit("the runner's module should be an LSTM")
        obs = sim.reset()
        while True:
            action = client.act(obs)
            obs, reward, done = sim.step(int(action))
            client.report(reward, obs, terminated=done)
            if done:
                obs = sim.reset()
    print(f"summary: steps={client.stats.steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
