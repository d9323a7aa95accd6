"""Our dummy client, unchanged but for its address, trains against RLlib's own server."""

from __future__ import annotations

import socket

import pytest

from harness import CARTPOLE, dummy_client_cmd, episode_return, processes, running, train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _free_port_pair() -> int:
    """A base port whose next port is free too (RLlib's runner 1 listens on base + 1)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            base = a.getsockname()[1]
            if base >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", base + 1))
                except OSError:
                    continue
                return base
    raise RuntimeError("no free port pair")


def test_dummy_client_trains_against_rllib_external_inference_server(ray_local):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.external.env_runner_server_for_external_inference import (
        EnvRunnerServerForExternalInference,
    )

    base = _free_port_pair()
    config = (
        PPOConfig()
        .environment(observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
                     env_config={"port": base})
        .env_runners(env_runner_cls=EnvRunnerServerForExternalInference, num_env_runners=1)
        .training(train_batch_size_per_learner=2000, minibatch_size=250, num_epochs=6, lr=5e-4)
    )
    with running(config.build_algo()) as algo:
        # RLlib's server can't tell the client how much to send and deadlocks if
        # one batch is less than an update, so the client sends whole updates.
        # It offers only a pickled config, which our client refuses: the model
        # defaults (tanh) apply.
        with processes([dummy_client_cmd("localhost", base + 1, "--fragment-steps", "2000")]):
            results = train(algo, 40, stop_return=150)
    assert episode_return(results[-1]) >= 150, [episode_return(r) for r in results]
