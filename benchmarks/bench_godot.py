"""The Godot demo's env steps per second in the real engine: served actions against RLlib's MLP in GDScript.

One ``rlinks learner`` on ``configs/godot_ball_chase.yaml`` per setting, and
against it the demo (``clients/godot``, ``godot3-server`` headless) run
once per inference mode and agent count, each for ``--steps`` env steps
(``--rlinks-max-steps``); the game prints its own count and time. Settings:

- *learning paused*: a train batch no game fills, so nothing waits for an
  update: the engine, the addon and the inference alone;
- *training*: the demo's config as it is (an update every 2,000 steps), so the
  games also wait for PPO's updates.

Prints a table and the ratio served / local per row. Usage::

    .venv/bin/python benchmarks/bench_godot.py [--steps 8000] [--agents 1 4]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "clients" / "godot"
EXTRA: list[str] = []
STEPS_LINE = re.compile(r"rlinks: (\d+) env steps in ([\d.]+) s")


def start_learner(config: dict, out: Path) -> tuple[subprocess.Popen, str]:
    """``rlinks learner`` on ``config`` at any free port; returns it and the address its runner took."""
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    log = open(out / "learner.log", "w")
    learner = subprocess.Popen([sys.executable, "-m", "rlinks_rllib", "learner", "--config", str(path),
                                "--port", "0", "--output", str(out / "run")], cwd=REPO, stdout=log,
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while not (out / "run" / "endpoints.json").exists():
        if learner.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the learner did not listen: {(out / 'learner.log').read_text()[-2000:]}")
        time.sleep(0.5)
    runner = json.loads((out / "run" / "endpoints.json").read_text())[0]
    return learner, f"{runner['host']}:{runner['port']}"


def play(godot: str, address: str, mode: str, agents: int, steps: int) -> float:
    """The game's env steps per second over ``steps`` env steps."""
    done = subprocess.run([godot, "--no-window", "--path", str(PROJECT), f"--rlinks-address={address}",
                           f"--rlinks-inference={mode}", f"--agents={agents}", f"--rlinks-max-steps={steps}", *EXTRA],
                          capture_output=True, text=True, timeout=600)
    found = STEPS_LINE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the game failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    return int(found.group(1)) / float(found.group(2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8000, help="env steps per game run")
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 4], help="agent counts to run")
    parser.add_argument("--speedup", type=float, help="the games' --rlinks-speedup (default: the Sync node's)")
    args = parser.parse_args(argv)
    if args.speedup:
        EXTRA.append(f"--rlinks-speedup={args.speedup:g}")
    godot = shutil.which("godot3-server")
    if godot is None:
        print("godot3-server is not installed (apt-get install godot3-server)")
        return 2
    base = yaml.safe_load((REPO / "configs" / "godot_ball_chase.yaml").read_text())
    base["stop"] = {"iters": 1000}
    paused = yaml.safe_load(yaml.safe_dump(base))
    paused["training"]["train_batch_size_per_learner"] = 10_000_000
    print(f"{'setting':<16} {'agents':>6} {'served/s':>9} {'local/s':>8} {'served/local':>12}")
    for setting, config in (("learning paused", paused), ("training", base)):
        with tempfile.TemporaryDirectory() as tmp:
            learner, address = start_learner(config, Path(tmp))
            try:
                for agents in args.agents:
                    served = play(godot, address, "served", agents, args.steps)
                    local = play(godot, address, "local", agents, args.steps)
                    print(f"{setting:<16} {agents:>6} {served:>9.0f} {local:>8.0f} {served / local:>12.2f}", flush=True)
            finally:
                learner.send_signal(signal.SIGINT)
                learner.wait(timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
