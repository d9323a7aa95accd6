"""The runner's forward pass for served actions: RLlib's default MLP in numpy, the same as the module's.

``NumpyForward`` stands in for the module only where it computes what the
module computes; these tests hold it to real RLlib modules (PPO on
CartPole's and Pendulum's spaces) and check that any other module keeps the
torch path.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns

from rlinks_rllib.protocol.config import build_config
from rlinks_rllib.protocol.spaces import describe_space
from rlinks_rllib.server.served.forward import ModuleForward, NumpyForward

CARTPOLE = gym.make("CartPole-v1")
PENDULUM = gym.make("Pendulum-v1")


def ppo_module(observation_space, action_space, config=None, **model):
    config = (config or PPOConfig()).environment(observation_space=observation_space, action_space=action_space)
    if model:
        config = config.rl_module(model_config=model)
    spec = config.get_rl_module_spec(spaces={"default_policy": (observation_space, action_space)},
                                     inference_only=True)
    return config, spec.build()


def description(config, observation_space, action_space):
    """What the runner's SET_CONFIG says of its model (the part a client policy is picked by)."""
    model = config.model_config if isinstance(config.model_config, dict) else dict(config.model_config)
    return build_config(algorithm="X", observation_space=describe_space(observation_space),
                        action_space=describe_space(action_space), rollout_fragment_length=1, on_policy=False,
                        model_config={k: v for k, v in model.items()
                                      if isinstance(v, (int, float, str, bool, list, type(None)))},
                        weights_layout={}, server="test")


def numpy_forward(config, module, observation_space, action_space, **kwargs):
    return NumpyForward.for_module(module, description(config, observation_space, action_space),
                                   normalize_actions=bool(config.normalize_actions),
                                   clip_actions=bool(config.clip_actions), **kwargs)


@pytest.mark.parametrize("env", [CARTPOLE, PENDULUM], ids=["discrete", "box"])
def test_numpy_forward_computes_what_the_module_computes(env):
    torch.manual_seed(0)
    config, module = ppo_module(env.observation_space, env.action_space, fcnet_hiddens=[64, 64])
    forward = numpy_forward(config, module, env.observation_space, env.action_space)
    assert isinstance(forward, NumpyForward) and forward.inline
    obs = np.stack([env.observation_space.sample() for _ in range(32)]).astype(np.float32)
    result = forward(obs)
    with torch.no_grad():
        dist_inputs = module.forward_exploration({Columns.OBS: torch.from_numpy(obs)}, t=0)[Columns.ACTION_DIST_INPUTS]
        dist = module.get_exploration_action_dist_cls().from_logits(dist_inputs)
        logp = dist.logp(torch.as_tensor(result.actions)).numpy()
    np.testing.assert_allclose(result.action_dist_inputs, dist_inputs.numpy(), atol=1e-5)
    # The recorded log-probability is the module's own of the action sampled.
    np.testing.assert_allclose(result.action_logp, logp, atol=1e-4)
    # The action for the env is what the torch path gives the env for the same sample.
    torch_path = ModuleForward(module, env.action_space, normalize_actions=bool(config.normalize_actions),
                               clip_actions=bool(config.clip_actions))
    np.testing.assert_allclose(result.actions_for_env, torch_path._for_env(result.actions), atol=1e-6)
    assert result.actions_for_env.dtype == (np.int64 if isinstance(env.action_space, gym.spaces.Discrete)
                                            else env.action_space.dtype)


def test_new_weights_and_their_version_are_taken_together():
    torch.manual_seed(0)
    config, module = ppo_module(CARTPOLE.observation_space, CARTPOLE.action_space)
    forward = numpy_forward(config, module, CARTPOLE.observation_space, CARTPOLE.action_space)
    _, other = ppo_module(CARTPOLE.observation_space, CARTPOLE.action_space)
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    before = forward(obs)
    forward.load(other.get_state(inference_only=True), 5)
    after = forward(obs)
    assert before.weights_seq_no == 0 and after.weights_seq_no == 5
    with torch.no_grad():
        expected = other.forward_exploration({Columns.OBS: torch.from_numpy(obs)})[Columns.ACTION_DIST_INPUTS]
    np.testing.assert_allclose(after.action_dist_inputs, expected.numpy(), atol=1e-5)
    # The module itself holds them too (checkpoints and get_state read it).
    np.testing.assert_allclose(module.get_state()["encoder.actor_encoder.net.mlp.0.weight"],
                               other.get_state()["encoder.actor_encoder.net.mlp.0.weight"])
    forward.load(other.get_state(inference_only=True))  # RLlib's "force" set: the same version
    assert forward(obs).weights_seq_no == 5


def test_a_module_numpy_cannot_run_keeps_the_torch_path():
    image = gym.spaces.Box(0, 255, (42, 42, 3), np.uint8)
    config, module = ppo_module(image, CARTPOLE.action_space)
    assert numpy_forward(config, module, image, CARTPOLE.action_space) is None


def test_a_module_whose_outputs_differ_from_numpys_keeps_the_torch_path():
    """The same weights' names but another activation than the config says: the check catches it."""
    config, module = ppo_module(CARTPOLE.observation_space, CARTPOLE.action_space, fcnet_activation="relu")
    lying = PPOConfig().rl_module(model_config={"fcnet_activation": "tanh"})
    assert numpy_forward(lying, module, CARTPOLE.observation_space, CARTPOLE.action_space) is None


def test_dqn_is_served_greedy_as_the_module_and_explores_along_the_schedule_at_the_runners_timestep():
    from ray.rllib.algorithms.dqn import DQNConfig

    torch.manual_seed(0)
    config, module = ppo_module(CARTPOLE.observation_space, CARTPOLE.action_space,
                                DQNConfig().training(epsilon=[(0, 1.0), (1000, 0.0)]))
    steps = [0]
    forward = numpy_forward(config, module, CARTPOLE.observation_space, CARTPOLE.action_space,
                            timestep=lambda: steps[0])
    assert isinstance(forward, NumpyForward)
    obs = np.random.default_rng(1).uniform(-2, 2, (400, 4)).astype(np.float32)
    with torch.no_grad():
        greedy = module.forward_inference({Columns.OBS: torch.from_numpy(obs)})[Columns.ACTIONS].numpy()
    at_start = forward(obs).actions
    steps[0] = 1000  # epsilon 0 from here: every action the greedy one
    np.testing.assert_array_equal(forward(obs).actions, greedy)
    assert (at_start != greedy).sum() > 100  # epsilon 1: about half of them differ
