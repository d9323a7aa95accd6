"""A simulator script in the style of RLlib's old ``PolicyClient`` examples, with its import line changed.

It is written the way ``rllib/examples/envs/external_envs/cartpole_client.py``
was on the old API stack: gymnasium's CartPole stepped by hand, one episode at
a time, ``get_action`` (or ``log_action`` for an action chosen by the script),
``log_returns``, ``end_episode``. Every ``--eval-every``-th episode is played
with ``training_enabled=False``. It runs until the learner ends the run.
"""

from __future__ import annotations

import argparse
import random

import gymnasium as gym

from rlinks_rllib.client import PolicyClient, TrainingEnded  # was: from ray.rllib.env.policy_client import PolicyClient

parser = argparse.ArgumentParser()
parser.add_argument("--address", required=True)
parser.add_argument("--inference-mode", default="local", choices=["local", "remote"])
parser.add_argument("--off-policy-fraction", type=float, default=0.0, help="share of steps whose action is random")
parser.add_argument("--eval-every", type=int, default=0, help="every N-th episode is not trained on")
args = parser.parse_args()

client = PolicyClient(f"http://{args.address}", inference_mode=args.inference_mode, update_interval=10.0)
env = gym.make("CartPole-v1")
episodes, untrained, logged, rewards = 0, 0, 0, 0.0

try:
    obs, info = env.reset()
    training = not (args.eval_every and episodes % args.eval_every == args.eval_every - 1)
    eid = client.start_episode(training_enabled=training)
    while True:
        if random.random() < args.off_policy_fraction:
            action = env.action_space.sample()
            client.log_action(eid, obs, action)
            logged += 1
        else:
            action = client.get_action(eid, obs)
        obs, reward, terminated, truncated, info = env.step(action)
        rewards += reward
        client.log_returns(eid, reward, info=info)
        if terminated or truncated:
            client.end_episode(eid, obs)
            episodes, untrained = episodes + 1, untrained + (not training)
            obs, info = env.reset()
            training = not (args.eval_every and episodes % args.eval_every == args.eval_every - 1)
            eid = client.start_episode(training_enabled=training)
except TrainingEnded:
    pass
print(f"summary: mode={args.inference_mode} episodes={episodes} untrained={untrained} logged_actions={logged} "
      f"mean_return={rewards / max(episodes, 1):.1f}", flush=True)
