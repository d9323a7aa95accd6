"""A client whose task needs memory: the cue shows at the first step only, the answer is asked at the last.

Run by tests/test_recurrent.py. It asks the runner for its policy graph (an
LSTM), carries the state from step to step, and records ``state_out`` so the
learner can resume every sequence where the client was.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from rlinks_rllib.client import RLinkClient, ServerError
from rlinks_rllib.client.connection import DEFAULT_EXTENSIONS
from rlinks_rllib.client.episode_builder import EpisodeBuilder
from rlinks_rllib.client.policy_choice import policy_for
from rlinks_rllib.protocol.errors import ErrorCode

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
    rng = np.random.default_rng(args.seed)
    sim = RememberTheCue(rng)
    client = RLinkClient(args.address, timeout=120, extensions=[*DEFAULT_EXTENSIONS, "policy_graph"])
    steps = 0
    try:
        client.connect()
        config = client.get_config()
        update = client.get_state()
        policy = policy_for(config, update.params, rng=rng)
        assert policy.stateful, "the runner's module should be an LSTM"
        want = config["rollout_fragment_length"] if update.want_steps is None else update.want_steps
        builder = EpisodeBuilder()
        obs = sim.reset()
        builder.reset(obs)
        state = {key: value[0] for key, value in policy.initial_state().items()}
        while True:
            if want > 0:
                out = policy.compute_action(obs, state=state)
                obs, reward, done = sim.step(int(out.action_for_env))
                builder.step(out.action, reward, obs, done, False,
                             extra={"action_logp": out.action_logp, "action_dist_inputs": out.action_dist_inputs,
                                    "state_out": out.state_out})
                state = out.state_out
                steps += 1
                if done:
                    obs = sim.reset()
                    builder.reset(obs)
                    state = {key: value[0] for key, value in policy.initial_state().items()}
                if builder.num_steps < want:
                    continue
            update = client.send_episodes_and_get_state(builder.take_chunks())
            policy.set_params(update.params)
            want = config["rollout_fragment_length"] if update.want_steps is None else update.want_steps
    except ServerError as exc:
        if exc.code != ErrorCode.SHUTTING_DOWN:
            raise
    finally:
        client.close()
    print(f"summary: steps={steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
