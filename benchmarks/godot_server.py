"""Godot RL Agents' Python side, as its users run it: the competitor of ``bench_served.py``.

Run by ``bench_served.py`` with the Python of the venv that holds the
``godot-rl`` package (its pins clash with ours, so it has a venv of its own).
It listens with Godot RL's own ``StableBaselinesGodotEnv`` (its ``GodotEnv``
underneath), waits for the game process (``served_game.py --godot PORT``),
and drives it for ``--seconds`` the way Godot RL's Stable Baselines 3
example does:

- ``--mode paused``: its inference loop, ``model.predict(obs)`` then
  ``env.step(action)``, with an SB3 PPO ``MultiInputPolicy`` (a 64x64 tanh
  MLP, as ours);
- ``--mode numpy``: the same loop on Godot RL's ``GodotEnv`` itself, the
  actions from a numpy MLP with the weights in ``--weights`` (an ``.npz`` of
  ``w0, b0, w1, b1, ...``: the very layers our runner computes, tanh between
  them, the last one's logits sampled as a categorical): what a game
  developer who runs a small policy of their own on Godot RL's Python side
  pays for the transport, without torch or SB3 in the way;
- ``--mode learning``: ``model.learn(...)`` with PPO collecting
  ``--batch`` steps per update (``n_steps`` per agent), minibatches of 64,
  10 epochs, stopped by a callback when the time is up.

Then it sends ``close``, which ends the game process. In the two inference
loops it prints, last, one JSON line: ``{"cpu_us_per_tick"}``, its CPU time
per ``step`` from the first to the last (its Python, torch or numpy, and its
system calls).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("paused", "numpy", "learning"), required=True)
    parser.add_argument("--seconds", type=float, required=True, help="how long to drive the game")
    parser.add_argument("--batch", type=int, default=1024, help="env steps per PPO update (learning)")
    parser.add_argument("--weights", help="the numpy policy's layers (.npz; --mode numpy)")
    args = parser.parse_args(argv)
    if args.mode == "numpy":
        if not args.weights:
            parser.error("--mode numpy needs --weights")
        return numpy_loop(args.port, args.weights, args.seconds)

    import torch
    from godot_rl.wrappers.stable_baselines_wrapper import StableBaselinesGodotEnv
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    env = StableBaselinesGodotEnv(port=args.port)
    n_steps = max(args.batch // env.num_envs, 2)
    model = PPO("MultiInputPolicy", env, n_steps=n_steps, batch_size=64, n_epochs=10, device="cpu",
                policy_kwargs={"net_arch": [64, 64], "activation_fn": torch.nn.Tanh}, verbose=0)
    if args.mode == "paused":
        obs = env.reset()
        deadline = time.monotonic() + args.seconds
        cpu, steps = time.process_time(), 0
        while time.monotonic() < deadline:
            action, _ = model.predict(obs)
            obs, _, _, _ = env.step(action)
            steps += 1
        report_cpu(cpu, steps)
    else:
        class StopAtDeadline(BaseCallback):
            """Ends ``learn`` ``--seconds`` after it started collecting (its set-up takes seconds of its own)."""

            def _on_training_start(self) -> None:
                self.deadline = time.monotonic() + args.seconds

            def _on_step(self) -> bool:
                return time.monotonic() < self.deadline

        model.learn(total_timesteps=10**9, callback=StopAtDeadline())
    env.close()
    return 0


def numpy_loop(port: int, weights: str, seconds: float) -> int:
    """Drive the game with Godot RL's ``GodotEnv`` and a numpy MLP for ``seconds``, then close it."""
    import numpy as np
    from godot_rl.core.godot_env import GodotEnv

    with np.load(weights) as saved:
        layers = [(saved[f"w{i}"], saved[f"b{i}"]) for i in range(len(saved.files) // 2)]
    rng = np.random.default_rng(0)
    env = GodotEnv(port=port)
    obs, _ = env.reset()
    deadline = time.monotonic() + seconds
    cpu, steps = time.process_time(), 0
    while time.monotonic() < deadline:
        steps += 1
        x = np.array([o["obs"] for o in obs], dtype=np.float32)
        for weight, bias in layers[:-1]:
            x = np.tanh(x @ weight + bias)
        logits = x @ layers[-1][0] + layers[-1][1]
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        action = np.minimum((probs.cumsum(axis=1) < rng.random((len(probs), 1))).sum(axis=1), len(layers[-1][1]) - 1)
        obs, _, _, _, _ = env.step([action])
    report_cpu(cpu, steps)
    env.close()
    return 0


def report_cpu(since: float, steps: int) -> None:
    """Print this process's CPU time per step since ``since`` (read by ``bench_served.py`` from the log)."""
    print(json.dumps({"cpu_us_per_tick": (time.process_time() - since) * 1e6 / max(steps, 1)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
