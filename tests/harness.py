"""Helpers for tests that train a real RLlib algorithm against real clients."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import gymnasium as gym

ROOT = Path(__file__).resolve().parents[1]
DUMMY_CLIENT = ROOT / "examples" / "dummy_cartpole_client.py"
CARTPOLE = gym.make("CartPole-v1")
RLLIB_CLIENT_CODE = (
    "import sys; from ray.rllib.examples.envs.classes.utils.dummy_external_client "
    "import _dummy_external_client as c; c(int(sys.argv[1]))"
)


def ppo_config(*, num_env_runners: int, train_batch: int = 2000, env_config: dict | None = None, **training):
    """PPO on CartPole's spaces with RLinkEnvRunner, sized for a 2-core machine."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib import RLinkEnvRunner

    training = {"train_batch_size_per_learner": train_batch, "minibatch_size": 250, "num_epochs": 6, "lr": 5e-4,
                **training}
    return (
        PPOConfig()
        .environment(observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
                     env_config={"port": 0, **(env_config or {})})
        .env_runners(env_runner_cls=RLinkEnvRunner, num_env_runners=num_env_runners, sample_timeout_s=30.0)
        .training(**training)
        .debugging(seed=0)
    )


@contextlib.contextmanager
def running(algo) -> Iterator:
    """Stop the algorithm however the test ends."""
    try:
        yield algo
    finally:
        algo.stop()


@contextlib.contextmanager
def processes(commands: list[list[str]]) -> Iterator[list[subprocess.Popen]]:
    """Start client processes; kill whatever is left when the test ends."""
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        for cmd in commands
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()


def dummy_client_cmd(host: str, port: int, *extra: str) -> list[str]:
    return [sys.executable, str(DUMMY_CLIENT), "--address", f"{host}:{port}", "--max-steps", "10000000", *extra]


def rllib_client_cmd(port: int) -> list[str]:
    return [sys.executable, "-c", RLLIB_CLIENT_CODE, str(port)]


def wait_for_clients(algo, per_runner: int, timeout: float = 60.0) -> None:
    """Block until every remote runner has ``per_runner`` clients past their handshake.

    Simulators that start at different times are normal, but a test that
    checks the policy lag must not count start-up: a runner whose clients are
    still starting makes the other runner collect extra steps (see
    ``extend_after_s``), which then reach the next update with lag 1.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        counts = algo.env_runner_group.foreach_env_runner(
            lambda r: r.get_transport_stats()["clients_connected"], local_env_runner=False)
        if all(c >= per_runner for c in counts):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"clients connected per runner: {counts}, wanted {per_runner}")
        time.sleep(0.2)


def train(algo, iterations: int, stop_return: float | None = None) -> list[dict]:
    """Train up to ``iterations`` times (or until ``stop_return``); return the results."""
    results = []
    for _ in range(iterations):
        results.append(algo.train())
        if stop_return is not None and episode_return(results[-1]) >= stop_return:
            break
    return results


def episode_return(result: dict) -> float:
    return float(result["env_runners"].get("episode_return_mean", float("nan")))


def rlinks_metrics(result: dict) -> dict:
    return result["env_runners"].get("rlinks", {})
