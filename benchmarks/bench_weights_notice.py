"""Policy lag of local off-policy simulators under SAC: polling for weights beside ``weights_notice``, in one run.

The learner: ``benchmarks/sac_pendulum_small.yaml`` built in this process
(``build_algorithm_config(...).build_algo()``, torch on one thread as
``rlinks learner`` runs it; one new weights version per env step). Two
simulators (this file with ``--client``, Pendulum-v1, ``EnvClient`` running
the policy in numpy, off-policy) connect to its runner, once per mode, one
mode after the other:

* ``poll``: what clients did before ``weights_notice``: not offered, a
  ``GET_STATE`` every ``weights_every_s`` = 1 s;
* ``notice``: the default now: ``GET_STATE`` once an ``ACK`` names newer weights.

Each mode trains for ``--seconds``; the lag is the runner's
``policy_lag_mean`` / ``policy_lag_max`` (its version when ``sample()``
hands a batch over, less the version its client last got before sending
it) over the iterations after the first, printed with the env steps per
second and the notice / poll ratios. See docs/PERFORMANCE.md.

    .venv/bin/python benchmarks/bench_weights_notice.py [--seconds 60] [--backlog-steps 0] [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, print_table  # noqa: E402

CONFIG = REPO / "benchmarks" / "sac_pendulum_small.yaml"
MODES = ("poll", "notice")
POLL_S = 1.0  # EnvClient's weights_every_s before weights_notice


def run_client(address: str, mode: str, seed: int) -> None:
    """One simulator: Pendulum-v1 with the policy run here, until the learner ends or SIGTERM."""
    import signal

    import gymnasium as gym

    from rlinks_rllib.client import EnvClient
    from rlinks_rllib.client.network.connection import DEFAULT_EXTENSIONS
    from rlinks_rllib.protocol.extensions import Extension

    options = {} if mode == "notice" else {
        "extensions": [e for e in DEFAULT_EXTENSIONS if e != Extension.WEIGHTS_NOTICE.value],
        "weights_every_s": POLL_S}
    env = gym.make("Pendulum-v1")
    client = EnvClient(address, on_policy=False, seed=seed, **options)
    signal.signal(signal.SIGTERM, lambda *_: client.stop())
    with client:
        obs, _ = env.reset(seed=seed)
        while not client.stopped:
            obs, reward, terminated, truncated, _ = env.step(client.act(obs))
            client.report(reward, obs, terminated, truncated)
            if terminated or truncated:
                obs, _ = env.reset()


def measure(mode: str, seconds: float, backlog_steps: int, workdir: Path) -> dict:
    """Train for ``seconds`` with two ``mode`` simulators; the lag and the steps per second."""
    from rlinks_rllib.training.config_file import build_algorithm_config, load_spec

    spec = yaml.safe_load(CONFIG.read_text())
    spec.pop("stop", None)
    spec["rlinks"] = {**spec["rlinks"], "port": 0}
    if backlog_steps:
        spec["rlinks"]["off_policy_backlog_steps"] = backlog_steps
    path = workdir / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(spec))
    algo = build_algorithm_config(load_spec(str(path))).build_algo()
    host, port = algo.env_runner.address
    clients = [subprocess.Popen([sys.executable, __file__, "--client", f"{host}:{port}", "--mode", mode,
                                 "--seed", str(i)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for i in range(2)]
    rows = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            runners = algo.train().get("env_runners", {})
            rlinks = runners.get("rlinks", {})
            rows.append((rlinks.get("policy_lag_mean"), rlinks.get("policy_lag_max"),
                         runners.get("num_env_steps_sampled_lifetime") or 0, time.monotonic() - started))
    finally:
        for client in clients:
            client.terminate()  # SIGTERM: EnvClient.stop(), the loop ends
        for client in clients:
            try:
                client.wait(30)
            except subprocess.TimeoutExpired:
                client.kill()
                client.wait(10)
        algo.stop()
    lags = [(mean, high) for mean, high, _, _ in rows[1:] if mean is not None] or [(float("nan"), float("nan"))]
    steps, elapsed = rows[-1][2], rows[-1][3]
    return {"lag_mean": sum(m for m, _ in lags) / len(lags), "lag_max": max(h for _, h in lags),
            "steps": steps, "steps_per_s": steps / elapsed, "iterations": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="training time per mode")
    parser.add_argument("--backlog-steps", type=int, default=0, help="off_policy_backlog_steps (0: the default)")
    parser.add_argument("--quick", action="store_true", help="10 s per mode: that it runs, not numbers")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, default="notice", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        run_client(args.client, args.mode, args.seed)
        return
    seconds = 10.0 if args.quick else args.seconds

    import ray
    import torch

    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, address="local", configure_logging=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results = {mode: measure(mode, seconds, args.backlog_steps, Path(tmp)) for mode in MODES}
    finally:
        ray.shutdown()
    print_table(["mode", "iterations", "env steps", "steps/s", "lag mean", "lag max"],
                [[mode, r["iterations"], r["steps"], round(r["steps_per_s"], 1), round(r["lag_mean"], 1),
                  r["lag_max"]] for mode, r in results.items()])
    poll, notice = results["poll"], results["notice"]
    print(f"notice / poll: lag mean {notice['lag_mean'] / poll['lag_mean']:.2f}x, "
          f"lag max {notice['lag_max'] / poll['lag_max']:.2f}x, steps/s {notice['steps_per_s'] / poll['steps_per_s']:.2f}x")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    main()
