"""The learner's encoder for Dict/Tuple observations: RLlib's CNN per image, an MLP over the rest, fused."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rlinks_rllib.training.multi_input import MultiInputPPOCatalog, TorchMultiInputEncoder

SMALL = dict(conv_filters=[[8, [4, 4], 4], [16, [4, 4], 4]], fcnet_hiddens=[32], fusionnet_hiddens=[32])

ROBOT = gym.spaces.Dict(
    {
        "camera": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
        "depth": gym.spaces.Box(0.0, 1.0, (16, 16, 1), np.float32),
        "joints": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        "flags": gym.spaces.Tuple((gym.spaces.MultiBinary(2), gym.spaces.Discrete(3, start=1))),
        "gears": gym.spaces.MultiDiscrete([2, 4]),
    }
)


def build(observation_space, action_space=gym.spaces.Discrete(2), **model):
    config = PPOConfig().environment(observation_space=observation_space, action_space=action_space).rl_module(
        rl_module_spec=RLModuleSpec(catalog_class=MultiInputPPOCatalog),
        model_config=DefaultModelConfig(**{**SMALL, **model}),
    )
    return config.get_rl_module_spec().build()


def actor_encoder(module):
    """The encoder in front of the policy head, shared with the value head or not."""
    both = module.encoder
    return both.actor_encoder if hasattr(both, "actor_encoder") else both.encoder


def stack(space, values):
    """A batch of nested values as the learner's connectors hand it over: one tensor per leaf."""
    if isinstance(space, gym.spaces.Dict):
        return {key: stack(sub, [v[key] for v in values]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return [stack(sub, [v[i] for v in values]) for i, sub in enumerate(space.spaces)]
    return torch.as_tensor(np.stack([np.asarray(v) for v in values]))


def test_every_leaf_reaches_the_heads():
    module = build(ROBOT)
    encoder = actor_encoder(module)
    assert isinstance(encoder, TorchMultiInputEncoder)
    assert [leaf.path for leaf in encoder.plan] == [
        ("camera",), ("depth",), ("flags", 0), ("flags", 1), ("gears",), ("joints",)
    ]
    assert sorted(encoder.fusion.base_encoders) == ["image0", "image1", "vector"]
    ROBOT.seed(0)
    batch = stack(ROBOT, [ROBOT.sample() for _ in range(6)])
    out = module.forward_train({Columns.OBS: batch})
    assert out[Columns.ACTION_DIST_INPUTS].shape == (6, 2)
    assert module.compute_values({Columns.OBS: batch}).shape == (6,)
    out[Columns.ACTION_DIST_INPUTS].sum().backward()
    for name, param in encoder.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_one_hot_leaves_respect_their_start():
    space = gym.spaces.Dict({"mode": gym.spaces.Discrete(3, start=1)})
    encoder = actor_encoder(build(space))
    [leaf] = encoder.plan
    flat = encoder._flatten(leaf, torch.tensor([1, 2, 3]))
    assert torch.equal(flat, torch.eye(3))


def test_a_tuple_of_an_image_and_a_vector():
    space = gym.spaces.Tuple((gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), gym.spaces.Box(-1, 1, (2,))))
    module = build(space, action_space=gym.spaces.Box(-1, 1, (2,)))
    space.seed(1)
    out = module.forward_inference({Columns.OBS: stack(space, [space.sample() for _ in range(3)])})
    assert out[Columns.ACTION_DIST_INPUTS].shape == (3, 4)


def test_plain_spaces_keep_rllibs_own_encoders():
    module = build(gym.spaces.Box(-1, 1, (4,)), conv_filters=None)
    assert type(actor_encoder(module)).__name__ == "TorchMLPEncoder"


class SideOfTheScreen(gym.Env):
    """A bright half-screen, left or right, says which action pays; the vector beside it is noise."""

    def __init__(self, config=None):
        self.observation_space = gym.spaces.Dict(
            {"camera": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), "noise": gym.spaces.Box(-1, 1, (2,))}
        )
        self.action_space = gym.spaces.Discrete(2)
        self.rng = np.random.default_rng(0)

    def _observe(self):
        self.side = int(self.rng.integers(2))
        camera = np.zeros((16, 16, 3), np.uint8)
        camera[:, 8 * self.side: 8 * self.side + 8] = 255
        return {"camera": camera, "noise": self.rng.uniform(-1, 1, 2).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(action == self.side)
        self.t += 1
        return self._observe(), reward, False, self.t >= 20, {}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_learns_what_only_the_image_shows(ray_local):
    config = (
        PPOConfig()
        .environment(SideOfTheScreen)
        .env_runners(num_env_runners=0)
        .training(train_batch_size_per_learner=400, minibatch_size=100, num_epochs=4, lr=1e-3, gamma=0.0, lambda_=0.0)
        .rl_module(rl_module_spec=RLModuleSpec(catalog_class=MultiInputPPOCatalog), model_config=DefaultModelConfig(**SMALL))
    )
    algo = config.build_algo()
    try:
        returns = [algo.train()["env_runners"]["episode_return_mean"] for _ in range(10)]
    finally:
        algo.stop()
    # Chance is 10 of 20; the noise vector can't beat it, the image can.
    assert max(returns) >= 18, returns


@pytest.mark.parametrize("algorithm", ["PPO", "APPO", "DQN"])
def test_a_config_file_with_a_dict_observation_gets_the_encoder(tmp_path, algorithm):
    from rlinks_rllib.training.config_file import ConfigFileError, build_algorithm_config, load_spec

    path = tmp_path / "pixels.yaml"
    path.write_text(
        f"algorithm: {algorithm}\n"
        "spaces:\n"
        "  observation:\n"
        "    dict:\n"
        "      camera: {box: {low: 0, high: 255, shape: [16, 16, 3], dtype: uint8}}\n"
        "      speed: {box: {low: -1, high: 1, shape: [1]}}\n"
        "  action: {discrete: 3}\n"
        "model: {conv_filters: [[8, [4, 4], 4], [16, [4, 4], 4]], fcnet_hiddens: [32]}\n"
    )
    if algorithm == "DQN":
        with pytest.raises(ConfigFileError, match="needs PPO, APPO or IMPALA"):
            build_algorithm_config(load_spec(path))
        return
    module = build_algorithm_config(load_spec(path)).get_rl_module_spec().build()
    assert isinstance(actor_encoder(module), TorchMultiInputEncoder)
