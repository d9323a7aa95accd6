"""Helpers for tests that train a real RLlib algorithm against real clients."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
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


RLINKS = [sys.executable, "-m", "rlinks_rllib"]


@dataclass
class CliRun:
    """What a training run through the real ``rlinks`` command left behind."""

    learner_log: str
    client_out: str
    returncode: int
    seconds: float
    output: Path

    @property
    def reached(self) -> float:
        """The mean return the learner stopped at (``done: mean return X``)."""
        found = re.search(r"done: mean return (-?[\d.]+)", self.learner_log)
        assert found, self.learner_log[-4000:]
        return float(found.group(1))


class Cancelled(Exception):
    """A training run was told to stop (its session ended) before its learner did."""


def train_through_cli(tmp_path: Path, learner_args: list[str], client_args: list[str],
                      timeout_s: float = 600, more_clients: list[list[str]] = (),
                      clients_after_s: float = 0.0, cancelled: threading.Event | None = None) -> CliRun:
    """``rlinks learner ARGS`` on free ports, then ``rlinks client --address <its directory> ARGS``.

    Each of ``more_clients`` starts one more ``rlinks client`` group with those arguments;
    :attr:`CliRun.client_out` holds what every group printed. The clients start
    ``clients_after_s`` seconds after the learner listens.

    Waits until the learner exits (its stop rule) or *timeout_s* passes
    (an assertion); clients that fail end the wait at once, and so does
    ``cancelled`` once set (:class:`Cancelled`). The learner gets Ctrl-C when
    the test ends early, so it stops RLlib and Ray itself.
    """

    def check_cancelled() -> None:
        if cancelled is not None and cancelled.is_set():
            raise Cancelled("the training run was cancelled before its learner stopped")

    output = tmp_path / "run"
    started = time.monotonic()
    log = open(tmp_path / "learner.log", "w+")  # a file, not a pipe: the learner never blocks on its output
    learner = subprocess.Popen([*RLINKS, "learner", *learner_args, "--port", "0", "--output", str(output)],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    clients = None
    try:
        deadline = time.monotonic() + 180
        while not (output / "endpoints.json").exists():  # written after directory.json
            assert learner.poll() is None, (tmp_path / "learner.log").read_text()
            assert time.monotonic() < deadline, "the learner never listened"
            check_cancelled()
            time.sleep(0.5)
        if (output / "directory.json").exists():
            address = json.loads((output / "directory.json").read_text())
        else:  # the driver's own runner serves (num_env_runners: 0): no directory
            address = json.loads((output / "endpoints.json").read_text())[0]
        if clients_after_s:
            # The learner must live through the wait (a dead one fails the test at once).
            until = time.monotonic() + clients_after_s
            while time.monotonic() < until:
                assert learner.poll() is None, (tmp_path / "learner.log").read_text()[-3000:]
                check_cancelled()
                time.sleep(0.5)
        clients = [subprocess.Popen(
            [*RLINKS, "client", "--address", f"{address['host']}:{address['port']}", *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ) for args in [client_args, *more_clients]]
        deadline = time.monotonic() + timeout_s
        while learner.poll() is None:
            # Clients that fail (a bad flag, a refusal) would leave the learner waiting for steps; once
            # the learner has stopped they exit 0 (shutting_down) before it has.
            for group in clients:
                assert group.poll() in (None, 0), group.communicate(timeout=10)[0]
            assert time.monotonic() < deadline, f"the learner did not stop within {timeout_s:.0f} s"
            check_cancelled()
            time.sleep(1)
        client_out = "".join(group.communicate(timeout=60)[0] for group in clients)
    finally:
        for group in clients or []:
            if group.poll() is None:
                group.kill()
                group.wait(timeout=10)
        if learner.poll() is None:
            learner.send_signal(signal.SIGINT)
            try:
                learner.wait(timeout=120)
            except subprocess.TimeoutExpired:
                learner.kill()
                learner.wait(timeout=10)
        log.close()
    return CliRun((tmp_path / "learner.log").read_text(), client_out, learner.returncode,
                  time.monotonic() - started, output)
