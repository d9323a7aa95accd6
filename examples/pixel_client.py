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
the template with every option); what differs is the observation, a dict
that the episode builder records as one stacked array per key, and the
policy, which :func:`policy_for` picks from the runner's config.
"""

from __future__ import annotations

import argparse
import collections
import logging
import signal
import sys

import numpy as np

from rlinks_rllib.client import RLinkClient, ServerError
from rlinks_rllib.client.connection import DEFAULT_EXTENSIONS
from rlinks_rllib.client.episode_builder import EpisodeBuilder
from rlinks_rllib.client.policy_choice import policy_for
from rlinks_rllib.protocol.errors import ErrorCode

log = logging.getLogger("pixel_client")


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
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    steps = episodes = 0
    policy = None
    returns: collections.deque[float] = collections.deque(maxlen=50)
    client = RLinkClient(args.address, timeout=args.timeout, retry_attempts=args.retry_attempts,
                         extensions=[*DEFAULT_EXTENSIONS, "policy_graph"])
    try:
        client.connect()
        config = client.get_config()  # with the exported graph: we asked for 'policy_graph'
        update = client.get_state()
        policy = policy_for(config, update.params, rng=np.random.default_rng(args.seed))
        want = config["rollout_fragment_length"] if update.want_steps is None else update.want_steps
        log.info("connected to %s; running %s", args.address, type(policy).__name__)

        builder = EpisodeBuilder()
        obs = sim.reset()
        builder.reset(obs)
        episode_return = 0.0
        while steps < args.max_steps and not stopping:
            if want > 0:
                out = policy.compute_action(obs)
                obs, reward, terminated, truncated = sim.step(int(out.action_for_env))
                builder.step(out.action, reward, obs, terminated, truncated,
                             extra={"action_logp": out.action_logp, "action_dist_inputs": out.action_dist_inputs})
                steps += 1
                episode_return += reward
                if terminated or truncated:
                    returns.append(episode_return)
                    episodes, episode_return = episodes + 1, 0.0
                    obs = sim.reset()
                    builder.reset(obs)
                if builder.num_steps < want:
                    continue
            update = client.send_episodes_and_get_state(builder.take_chunks())
            policy.set_params(update.params)
            want = update.want_steps if update.want_steps is not None else config["rollout_fragment_length"]
    except ServerError as exc:
        if exc.code != ErrorCode.SHUTTING_DOWN:
            raise
        log.info("the learner stopped; done")
    finally:
        client.close()
    mean = float(np.mean(returns)) if returns else float("nan")
    return {"steps": steps, "episodes": episodes, "mean_return_last_50": round(mean, 3),
            "policy": type(policy).__name__}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    summary = run(parse_args(argv))
    print("summary: " + " ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
