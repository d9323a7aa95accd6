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
- ``--mode learning``: ``model.learn(...)`` with PPO collecting
  ``--batch`` steps per update (``n_steps`` per agent), minibatches of 64,
  10 epochs, stopped by a callback when the time is up.

Then it sends ``close``, which ends the game process.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("paused", "learning"), required=True)
    parser.add_argument("--seconds", type=float, required=True, help="how long to drive the game")
    parser.add_argument("--batch", type=int, default=1024, help="env steps per PPO update (learning)")
    args = parser.parse_args(argv)

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
        while time.monotonic() < deadline:
            action, _ = model.predict(obs)
            obs, _, _, _ = env.step(action)
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


if __name__ == "__main__":
    sys.exit(main())
