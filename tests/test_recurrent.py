"""An LSTM trained end to end over RLlink: clients run the exported graph, carry its state, and remember."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from harness import ROOT, episode_return, processes, running, wait_for_clients
from rlinks_rllib.server.env_runner import runner_addresses

pytest.importorskip("onnxruntime")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_lstm_learns_to_remember_the_cue(ray_local):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from rlinks_rllib import RLinkEnvRunner

    config = (
        PPOConfig()
        .environment(observation_space=gym.spaces.Box(0.0, 1.0, (3,), np.float32), action_space=gym.spaces.Discrete(2),
                     env_config={"port": 0})
        .env_runners(env_runner_cls=RLinkEnvRunner, num_env_runners=1, sample_timeout_s=60.0)
        .training(train_batch_size_per_learner=1000, minibatch_size=200, num_epochs=6, lr=1e-3, entropy_coeff=0.01)
        .rl_module(model_config=DefaultModelConfig(use_lstm=True, lstm_cell_size=32, max_seq_len=8, fcnet_hiddens=[32]))
        .debugging(seed=0)
    )
    with running(config.build_algo()) as algo:
        [(_, host, port)] = runner_addresses(algo)
        commands = [[sys.executable, str(ROOT / "tests" / "memory_client.py"), "--address", f"{host}:{port}",
                     "--seed", str(i)] for i in range(2)]
        with processes(commands) as clients:
            wait_for_clients(algo, per_runner=2)
            returns = []
            for _ in range(40):
                returns.append(episode_return(algo.train()))
                assert all(c.poll() is None for c in clients), clients[0].stdout.read()
                if returns[-1] >= 0.9:
                    break
    # Without memory the answer is a coin flip (0.5 per episode); the LSTM must carry the cue.
    assert max(returns) >= 0.9, returns
    print(f"\nLSTM remembered the cue: mean return {returns[-1]:.2f} after {len(returns)} iterations")
