"""A reliable simulator stops on its own when its learner ends, within ``shutdown_grace``.

The learner says ``ERROR shutting_down`` as it stops; a reliable client tries
to reach it again (the learner may be restarting: ``test_faults`` restores
one from a checkpoint on the same ports) for ``shutdown_grace`` seconds at
most, however many ``retry_attempts`` it was given. Here the learner is a
real PPO ``Algorithm`` with one ``RLinkEnvRunner`` that is stopped for good;
its clients are the dummy client as a person runs it (reliable, thousands of
attempts allowed, the grace from ``$RLINKS_SHUTDOWN_GRACE_S``) and a raw
``RLinkClient`` in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from harness import CARTPOLE, DUMMY_CLIENT, ROOT, ppo_config
from rlinks_rllib.client import ClientError, ConnectFailed, RLinkClient, ServerError
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.client.network.retry import SHUTDOWN_GRACE_ENV
from rlinks_rllib.protocol.errors import ErrorCode
from rlinks_rllib.server.env_runner import runner_addresses
from test_hostile_runner import cartpole_chunks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GRACE_S = 3.0
#: By count alone these would keep a client trying for hours (backoff up to 10 s each).
ATTEMPTS = 2000
#: The bound on the test's waits: the grace, one connection attempt and a loaded machine's slack.
STOP_WITHIN_S = GRACE_S + 60


class OnPolicyLoop(threading.Thread):
    """A reliable RLinkClient sending on-policy batches until its call raises; keeps the error."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True, name="reliable-loop")
        self.client = RLinkClient(address, reliable=True, retry_attempts=ATTEMPTS, shutdown_grace=GRACE_S,
                                  timeout=60.0, connect_timeout=2.0)
        self.error: BaseException | None = None
        self.ended_at = 0.0

    def run(self) -> None:
        builder, rng = EpisodeBuilder(), np.random.default_rng(0)
        try:
            update = self.client.get_state()
            while True:
                update = self.client.send_episodes_and_get_state(
                    cartpole_chunks(builder, rng, update.want_steps or 100))
        except ClientError as exc:
            self.error = exc
        finally:
            self.ended_at = time.monotonic()


def test_reliable_clients_stop_within_the_grace_when_the_learner_ends(ray_local):
    algo = ppo_config(num_env_runners=1, train_batch=500, num_epochs=1).build_algo()
    stopped = False
    dummy = loop = None
    try:
        (_, host, port), = runner_addresses(algo)
        address = f"{host}:{port}"
        loop = OnPolicyLoop(address)
        dummy = subprocess.Popen(
            [sys.executable, str(DUMMY_CLIENT), "--address", address, "--reliable",
             "--retry-attempts", str(ATTEMPTS), "--max-steps", "100000000"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), SHUTDOWN_GRACE_ENV: str(GRACE_S)},
        )
        loop.start()
        assert algo.train()["env_runners"]["num_env_steps_sampled"] >= 500
        stopped_at = time.monotonic()
        algo.stop()  # the runner says shutting_down to both; nothing will listen there again
        stopped = True
        out, _ = dummy.communicate(timeout=STOP_WITHIN_S)
        dummy_took = time.monotonic() - stopped_at
        loop.join(STOP_WITHIN_S)
        assert not loop.is_alive(), "the reliable RLinkClient kept trying"
    finally:
        if not stopped:
            algo.stop()
        if dummy is not None and dummy.poll() is None:
            dummy.kill()
            dummy.communicate()
        if loop is not None:
            loop.client.close()
    # The dummy client (EnvClient) ended quietly, as at any learner's end, and said why it waited.
    assert dummy.returncode == 0, out
    assert "summary: steps=" in out and "is shutting down" in out and "shutdown_grace" in out, out
    # The raw client's call raised ConnectFailed naming the grace, caused by the learner's shutting_down.
    error = loop.error
    assert isinstance(error, ConnectFailed), repr(error)
    assert "did not come back" in str(error) and f"shutdown_grace={GRACE_S:g} s" in str(error)
    assert isinstance(error.__cause__, ServerError) and error.__cause__.code == ErrorCode.SHUTTING_DOWN.value
    print(f"\nlearner stopped: the dummy client exited {dummy_took:.1f} s later, the RLinkClient's call raised "
          f"{loop.ended_at - stopped_at:.1f} s later (shutdown_grace {GRACE_S:g} s, {ATTEMPTS} attempts allowed)")


def test_a_runner_waiting_in_sample_hands_over_what_it_holds_once_the_stop_signal_is_set(ray_local):
    """The learner's SIGTERM reaches a runner in the middle of ``sample()`` (server/stop_signal.py).

    The runner waits there for the rest of its share from a client that sent
    100 steps and waits for new weights (sample_timeout_s 3,600 s: a wait of
    45 minutes). Once the signal is set, that ``sample()`` returns the 100
    steps (they were confirmed as it handed them over) and every later one
    returns nothing at once.
    """
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib import RLinkEnvRunner
    from rlinks_rllib.server.stop_signal import make_stop_signal, set_signal

    config = PPOConfig().environment(observation_space=CARTPOLE.observation_space,
                                     action_space=CARTPOLE.action_space, env_config={"port": 0}).env_runners(
        num_env_runners=0, sample_timeout_s=3600.0)
    runner = RLinkEnvRunner(config=config, worker_index=0)
    signal = make_stop_signal()
    client = RLinkClient("%s:%d" % runner.address, timeout=60.0)
    errors: list = []

    def send() -> None:
        try:
            client.get_state()
            client.send_episodes_and_get_state(cartpole_chunks(EpisodeBuilder(), np.random.default_rng(0), 100))
        except ClientError as exc:
            errors.append(exc)  # the runner stops under it: expected

    sender = threading.Thread(target=send, daemon=True)
    try:
        runner.watch_stop_signal(signal)
        sender.start()
        deadline = time.monotonic() + 60
        while runner.server.inbox.steps < 100:
            assert time.monotonic() < deadline, "the client's steps never came"
            time.sleep(0.05)
        sampled: list = []
        sampling = threading.Thread(target=lambda: sampled.append(runner.sample()), daemon=True)
        sampling.start()
        time.sleep(2.0)
        assert sampling.is_alive(), "sample() returned before the signal"
        set_at = time.monotonic()
        assert set_signal(signal)
        sampling.join(10.0)
        assert not sampling.is_alive(), "sample() still waits 10 s after the stop signal"
        print(f"\nsample() returned {time.monotonic() - set_at:.2f} s after the stop signal")
        assert sum(episode.env_steps() for episode in sampled[0]) == 100
        assert runner.sample() == []
    finally:
        runner.stop()
        client.close()
        sender.join(30.0)
