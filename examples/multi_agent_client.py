"""A multi-agent simulator that trains two policies with RLlib over RLlink.

The simulator below ("beacons") stands in for a game with two kinds of
agent whose numbers change while an episode runs:

* **seekers** (``seeker_0``, ``seeker_1``, ...) appear at random spots on a
  line during the episode and walk (left, stay, right) towards the beacon at
  0; a seeker is rewarded for each step closer (and penalised for each step
  away) and leaves the episode when it arrives (terminated) or after 12 ticks
  (truncated). At most three are on the line at once.
* **signallers** (``signal_0``, ``signal_1``, ``signal_2``) act in turns,
  every other tick, ``signal_0`` and ``signal_2`` on even ticks and
  ``signal_1`` on odd ones: each sees a lamp's colour and is rewarded 1 for
  naming it. ``signal_2`` joins at tick 10 and ``signal_0`` leaves at tick 30.

An episode ends after 40 ticks (``__all__`` truncated). The learner's config
(``configs/ppo_multi_agent.yaml``) maps ``seeker_*`` to the module ``seeker``
and ``signal_*`` to ``signal``; the mapping comes from the runner, so this
script names no module itself.

The loop is the single-agent one with dicts by agent id, as RLlib's
``MultiAgentEnv`` gives them: ``client.act(obs)`` computes the actions of all
agents of a module in one batched call (agents that just left, with their
final observation, get none), ``client.report(...)`` records the tick, and
EnvClient sends the runner's share and takes the new weights. Numpy and
msgpack only, no Ray.

Run a learner first (``rlinks learner --config configs/ppo_multi_agent.yaml``),
then ``rlinks client --script examples/multi_agent_client.py -n 2``.
"""

from __future__ import annotations

import argparse
import collections
import logging
import signal
import sys

import numpy as np

from rlinks_rllib.client import EnvClient
from rlinks_rllib.protocol.multi_agent_builder import ALL

EPISODE_TICKS = 40
SEEKER_TICKS = 12
MAX_SEEKERS = 3
COLOURS = 3


class Beacons:
    """The simulator: RLlib's MultiAgentEnv conventions (dicts by agent id, ``"__all__"``), no gymnasium."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self) -> tuple[dict, dict]:
        self.t = 0
        self.seekers: dict[str, list[int]] = {}  # id -> [position, ticks on the line]
        self.next_seeker = 0
        self.signals = {"signal_0": 0, "signal_1": 0}  # id -> lamp colour it sees
        self._spawn()
        obs = self._seeker_obs(self.seekers)
        obs.update(self._signal_obs(["signal_0"]))
        return obs, {}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        rewards: dict[str, float] = {}
        terminateds: dict[str, bool] = {}
        truncateds: dict[str, bool] = {}
        self.t += 1
        for agent_id, action in actions.items():
            if agent_id.startswith("seeker"):
                pos, age = self.seekers[agent_id]
                new = int(np.clip(pos + int(action) - 1, -6, 6))
                rewards[agent_id] = float(abs(pos) - abs(new))
                self.seekers[agent_id] = [new, age + 1]
                if new == 0:
                    terminateds[agent_id] = True
                elif age + 1 >= SEEKER_TICKS:
                    truncateds[agent_id] = True
            else:
                rewards[agent_id] = 1.0 if int(action) == self.signals[agent_id] else 0.0
        obs = self._seeker_obs(self.seekers)
        for agent_id in [a for a in self.seekers if a in terminateds or a in truncateds]:
            del self.seekers[agent_id]  # arrived or gave up: it leaves (with its final observation in obs)
        if self.t == 10:
            self.signals["signal_2"] = 0  # joins
        acting = [a for a in self.signals if (int(a[-1]) % 2) == (self.t % 2)]
        if self.t == 30 and "signal_0" in self.signals:
            del self.signals["signal_0"]  # leaves, right after its last turn's reward
            terminateds["signal_0"] = True
            acting = [a for a in acting if a != "signal_0"]
        obs.update(self._signal_obs(acting))
        self._spawn()
        obs.update(self._seeker_obs({a: v for a, v in self.seekers.items() if a not in obs}))
        done = self.t >= EPISODE_TICKS
        terminateds[ALL], truncateds[ALL] = False, done
        return obs, rewards, terminateds, truncateds, {}

    def _spawn(self) -> None:
        if len(self.seekers) < MAX_SEEKERS and self.rng.random() < 0.5:
            pos = int(self.rng.choice([-4, -3, -2, 2, 3, 4]))
            self.seekers[f"seeker_{self.next_seeker}"] = [pos, 0]
            self.next_seeker += 1

    @staticmethod
    def _seeker_obs(seekers: dict) -> dict:
        return {a: np.array([pos / 4.0, np.sign(pos)], np.float32) for a, (pos, _) in seekers.items()}

    def _signal_obs(self, agent_ids: list[str]) -> dict:
        obs = {}
        for agent_id in agent_ids:
            colour = int(self.rng.integers(COLOURS))
            self.signals[agent_id] = colour
            obs[agent_id] = np.eye(COLOURS, dtype=np.float32)[colour]
        return obs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="127.0.0.1:5555", help="learner runner or directory, HOST:PORT")
    parser.add_argument("--max-steps", type=int, default=1_000_000, help="stop after this many env steps")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for any one reply")
    parser.add_argument("--retry-attempts", type=int, default=20, help="connection attempts before giving up")
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    """The simulator loop until ``--max-steps``, SIGTERM or the learner's end; return a summary."""
    env = Beacons(args.seed)
    # Not reliable: the learner's end ends the run (a reliable client would wait for it to come back).
    client = EnvClient(args.address, inference="local", seed=args.seed, reliable=False, timeout=args.timeout,
                       retry_attempts=args.retry_attempts)
    signal.signal(signal.SIGTERM, lambda *_: client.stop())
    returns: dict[str, collections.deque] = collections.defaultdict(lambda: collections.deque(maxlen=20))
    episode_return: collections.Counter = collections.Counter()
    agent_steps = 0

    with client:
        if not client.connect().multi_agent:
            raise SystemExit(f"{args.address} serves a single-agent config; run dummy_cartpole_client.py instead")
        obs, _ = env.reset()
        for _ in range(args.max_steps):
            actions = client.act(obs)  # {agent: action}, one forward pass per module
            obs, rewards, terminateds, truncateds, _ = env.step(actions)
            client.report(rewards, obs, terminateds, truncateds)
            agent_steps += len(actions)
            for agent_id, reward in rewards.items():
                episode_return[client.policy.module_for(agent_id)] += reward
            if terminateds[ALL] or truncateds[ALL]:  # the next act starts the next episode
                for module_id, value in episode_return.items():
                    returns[module_id].append(value)
                episode_return = collections.Counter()
                obs, _ = env.reset()
    stats = client.stats
    summary = {"env_steps": stats.steps, "agent_steps": agent_steps, "episodes": stats.episodes}
    for module_id, values in sorted(returns.items()):
        summary[f"return_{module_id}"] = float(np.mean(values))
    return summary


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    summary = run(parse_args(argv))
    print("summary: " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
