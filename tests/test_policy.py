"""NumpyPolicy against RLlib's own default RLModules, built for real (no Ray cluster).

Each case builds the module from an algorithm config, hands its
``get_state(inference_only=True)`` to NumpyPolicy and checks that logits,
log-probabilities and greedy actions agree with the module and RLlib's
distribution classes.
"""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.appo import APPOConfig
from ray.rllib.algorithms.impala import IMPALAConfig
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.utils.spaces.space_utils import clip_action, unsquash_action

from rlinks_rllib.client.policies.numpy_policy import (
    BoxSpace,
    DiscreteSpace,
    NumpyPolicy,
    PolicyOutput,
    UnsupportedModelError,
    as_action_space,
)
from rlinks_rllib.protocol import weights
from rlinks_rllib.protocol.spaces import describe_space
from rlinks_rllib.training.torch_policy import TorchModulePolicy

ATOL = 1e-5
CARTPOLE_OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
CARTPOLE_ACT = gym.spaces.Discrete(2)
PENDULUM_OBS = gym.spaces.Box(np.array([-1, -1, -8], np.float32), np.array([1, 1, 8], np.float32))
PENDULUM_ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def build_module(config_cls, obs_space, act_space, inference_only=True, seed=0, **model_config):
    torch.manual_seed(seed)
    config = (
        config_cls()
        .environment(observation_space=obs_space, action_space=act_space)
        .rl_module(model_config=DefaultModelConfig(**model_config))
    )
    module = config.get_rl_module_spec(inference_only=inference_only).build()
    return config, module


def assert_close(actual, expected):
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0)


def random_obs(n, space, seed=1):
    size = space.shape[0]
    return (np.random.default_rng(seed).normal(size=(n, size)) * 2).astype(np.float32)


def torch_logits(module, obs, explore=False):
    forward = module.forward_exploration if explore else module.forward_inference
    with torch.no_grad():
        return forward({Columns.OBS: torch.from_numpy(obs)})[Columns.ACTION_DIST_INPUTS].numpy()


CASES = {
    "ppo-cartpole-shared": (PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, {}),
    "ppo-cartpole-separate": (PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, {"vf_share_layers": False}),
    "ppo-pendulum-shared": (PPOConfig, PENDULUM_OBS, PENDULUM_ACT, {}),
    "ppo-pendulum-separate": (PPOConfig, PENDULUM_OBS, PENDULUM_ACT, {"vf_share_layers": False}),
    "ppo-cartpole-relu-64-32": (
        PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT,
        {"fcnet_hiddens": [64, 32], "fcnet_activation": "relu", "vf_share_layers": False},
    ),
    "ppo-pendulum-relu-64-32": (
        PPOConfig, PENDULUM_OBS, PENDULUM_ACT,
        {"fcnet_hiddens": [64, 32], "fcnet_activation": "relu"},
    ),
    "ppo-linear-one-layer": (
        PPOConfig, CARTPOLE_OBS, gym.spaces.Discrete(5),
        {"fcnet_hiddens": [16], "fcnet_activation": "linear"},
    ),
    "ppo-layernorm-head-hiddens": (
        PPOConfig, PENDULUM_OBS, PENDULUM_ACT,
        {"fcnet_hiddens": [32, 16], "fcnet_use_layernorm": True, "head_fcnet_hiddens": [8, 8],
         "head_fcnet_activation": "silu", "vf_share_layers": False},
    ),
    "ppo-free-log-std": (
        PPOConfig, PENDULUM_OBS, gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        {"fcnet_hiddens": [32, 32], "free_log_std": True},
    ),
    "ppo-box-3": (
        PPOConfig, CARTPOLE_OBS, gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        {"fcnet_activation": "elu"},
    ),
    "appo-cartpole": (APPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, {}),
    "appo-pendulum-separate": (APPOConfig, PENDULUM_OBS, PENDULUM_ACT, {"vf_share_layers": False}),
    "impala-cartpole": (IMPALAConfig, CARTPOLE_OBS, CARTPOLE_ACT, {"fcnet_hiddens": [64, 32]}),
    "impala-pendulum": (IMPALAConfig, PENDULUM_OBS, PENDULUM_ACT, {}),
}


def policy_for(module, state, act_space, model_config, **kwargs):
    return NumpyPolicy(
        state,
        act_space,
        fcnet_activation=model_config.get("fcnet_activation", "tanh"),
        head_fcnet_activation=model_config.get("head_fcnet_activation", "relu"),
        **kwargs,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_rllib_module(case):
    config_cls, obs_space, act_space, model_config = CASES[case]
    _, module = build_module(config_cls, obs_space, act_space, **model_config)
    policy = policy_for(module, module.get_state(inference_only=True), act_space, model_config)
    obs = random_obs(64, obs_space)

    logits = policy.action_dist_inputs(obs)
    assert logits.dtype == np.float32
    assert_close(logits, torch_logits(module, obs))
    assert_close(logits, torch_logits(module, obs, explore=True))

    # Sampled actions: our log-probabilities are RLlib's for the same actions.
    out = policy.compute_actions(obs, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(out.action_dist_inputs, logits)
    dist = module.get_exploration_action_dist_cls().from_logits(torch.from_numpy(logits))
    expected_logp = dist.logp(torch.from_numpy(out.action)).numpy()
    np.testing.assert_allclose(out.action_logp, expected_logp, atol=ATOL, rtol=1e-6)
    assert out.action_logp.shape == (64,)

    # Greedy: RLlib's deterministic distribution picks the same action.
    greedy = policy.compute_actions(obs, explore=False)
    inference_dist = module.get_inference_action_dist_cls().from_logits(torch.from_numpy(logits))
    det = inference_dist.to_deterministic()
    assert_close(greedy.action, det.sample().numpy())
    np.testing.assert_array_equal(greedy.action_logp, np.zeros(64, np.float32))


def test_full_state_with_critic_is_accepted():
    """A learner-side state (critic encoder, value head) runs the same actor."""
    obs_space, act_space = PENDULUM_OBS, PENDULUM_ACT
    for config_cls in (PPOConfig, APPOConfig):
        _, module = build_module(
            config_cls, obs_space, act_space, inference_only=False, vf_share_layers=False
        )
        state = module.get_state()
        assert any(name.startswith("vf.") for name in state)
        assert any(name.startswith("encoder.critic_encoder.") for name in state)
        obs = random_obs(8, obs_space)
        logits = NumpyPolicy(state, act_space).action_dist_inputs(obs)
        assert_close(logits, torch_logits(module, obs))


@pytest.mark.parametrize("free_log_std", [False, True])
def test_log_std_is_clipped_as_rllib_clips_it(free_log_std):
    _, module = build_module(
        PPOConfig, PENDULUM_OBS, PENDULUM_ACT,
        fcnet_hiddens=[8], log_std_clip_param=3.0, free_log_std=free_log_std,
    )
    state = module.get_state(inference_only=True)
    if free_log_std:
        state["pi.log_std"] = np.array([-50.0], np.float32)
    else:
        state["pi.net.mlp.0.weight"][1] = 0.0
        state["pi.net.mlp.0.bias"][1] = 50.0
    module.set_state(state)
    obs = random_obs(16, PENDULUM_OBS)
    logits = NumpyPolicy(state, PENDULUM_ACT).action_dist_inputs(obs)
    np.testing.assert_allclose(logits[:, 1], -3.0 if free_log_std else 3.0)
    assert_close(logits, torch_logits(module, obs))


def test_discrete_sampling_follows_softmax():
    _, module = build_module(PPOConfig, CARTPOLE_OBS, gym.spaces.Discrete(4), fcnet_hiddens=[8])
    state = module.get_state(inference_only=True)
    state["pi.net.mlp.0.weight"][:] = 0.0
    state["pi.net.mlp.0.bias"][:] = np.log([0.1, 0.2, 0.3, 0.4])
    policy = NumpyPolicy(state, gym.spaces.Discrete(4))
    out = policy.compute_actions(np.zeros((40_000, 4), np.float32), rng=np.random.default_rng(3))
    assert out.action.dtype == np.int64
    freq = np.bincount(out.action, minlength=4) / len(out.action)
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.01)
    np.testing.assert_allclose(out.action_logp, np.log([0.1, 0.2, 0.3, 0.4])[out.action], atol=1e-6)


def test_gaussian_sampling_follows_mean_and_std():
    _, module = build_module(PPOConfig, CARTPOLE_OBS, PENDULUM_ACT, fcnet_hiddens=[8])
    state = module.get_state(inference_only=True)
    state["pi.net.mlp.0.weight"][:] = 0.0
    state["pi.net.mlp.0.bias"][:] = [0.5, np.log(0.2)]
    out = NumpyPolicy(state, PENDULUM_ACT).compute_actions(
        np.zeros((40_000, 4), np.float32), rng=np.random.default_rng(4)
    )
    assert out.action.dtype == np.float32 and out.action.shape == (40_000, 1)
    assert abs(out.action.mean() - 0.5) < 0.005
    assert abs(out.action.std() - 0.2) < 0.005


def test_same_generator_seed_same_actions():
    _, module = build_module(PPOConfig, PENDULUM_OBS, PENDULUM_ACT)
    state = module.get_state(inference_only=True)
    obs = random_obs(32, PENDULUM_OBS)
    a = NumpyPolicy(state, PENDULUM_ACT, rng=np.random.default_rng(11)).compute_actions(obs)
    b = NumpyPolicy(state, PENDULUM_ACT).compute_actions(obs, rng=np.random.default_rng(11))
    np.testing.assert_array_equal(a.action, b.action)
    np.testing.assert_array_equal(a.action_logp, b.action_logp)


def test_actions_for_env_unsquash_and_clip_like_rllib():
    act_space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))
    _, module = build_module(PPOConfig, CARTPOLE_OBS, act_space)
    state = module.get_state(inference_only=True)
    state["pi.net.mlp.0.bias"][2:] = 1.0  # std e: actions well outside [-1, 1]
    obs = random_obs(64, CARTPOLE_OBS)

    out = NumpyPolicy(state, act_space).compute_actions(obs, rng=np.random.default_rng(5))
    expected = np.stack([unsquash_action(a, act_space) for a in out.action])
    np.testing.assert_allclose(out.action_for_env, expected, atol=1e-6)
    assert out.action_for_env.dtype == np.float32

    clipping = NumpyPolicy(state, act_space, normalize_actions=False, clip_actions=True)
    out = clipping.compute_actions(obs)
    expected = np.stack([clip_action(a, act_space) for a in out.action])
    np.testing.assert_array_equal(out.action_for_env, expected)

    out = NumpyPolicy(state, act_space, normalize_actions=False).compute_actions(obs)
    np.testing.assert_array_equal(out.action_for_env, out.action)


def test_compute_action_single_observation():
    _, module = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT)
    policy = NumpyPolicy(module.get_state(inference_only=True), CARTPOLE_ACT)
    obs = random_obs(1, CARTPOLE_OBS)
    one = policy.compute_action(obs[0], rng=np.random.default_rng(0))
    batch = policy.compute_actions(obs, rng=np.random.default_rng(0))
    assert isinstance(one, PolicyOutput)
    assert one.action == batch.action[0] and one.action_logp == batch.action_logp[0]
    assert one.action_dist_inputs.shape == (2,)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        policy.compute_action(obs)
    with pytest.raises(ValueError, match=r"\(batch, 4\)"):
        policy.compute_actions(np.zeros((3, 5), np.float32))


def test_non_finite_logits_raise():
    _, module = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, fcnet_hiddens=[8])
    policy = NumpyPolicy(module.get_state(inference_only=True), CARTPOLE_ACT)
    obs = random_obs(3, CARTPOLE_OBS)
    obs[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        policy.compute_actions(obs)


def test_set_params_takes_new_weights():
    _, first = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, seed=0)
    _, second = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, seed=1)
    policy = NumpyPolicy(first.get_state(inference_only=True), CARTPOLE_ACT)
    obs = random_obs(8, CARTPOLE_OBS)
    policy.set_params(second.get_state(inference_only=True))
    assert_close(policy.action_dist_inputs(obs), torch_logits(second, obs))
    with pytest.raises(UnsupportedModelError):
        policy.set_params({"nope": np.zeros(1, np.float32)})
    assert_close(policy.action_dist_inputs(obs), torch_logits(second, obs))


# --- what NumpyPolicy refuses -------------------------------------------------


def test_lstm_and_cnn_modules_are_unsupported():
    _, lstm = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, use_lstm=True, lstm_cell_size=8)
    with pytest.raises(UnsupportedModelError, match="TorchModulePolicy") as info:
        NumpyPolicy(lstm.get_state(inference_only=True), CARTPOLE_ACT)
    assert "lstm" in str(info.value)

    image = gym.spaces.Box(0.0, 1.0, (42, 42, 3), np.float32)
    _, cnn = build_module(PPOConfig, image, CARTPOLE_ACT)
    with pytest.raises(UnsupportedModelError, match="cnn"):
        NumpyPolicy(cnn.get_state(inference_only=True), CARTPOLE_ACT)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda s: s.update({"my_head.weight": np.zeros((2, 2), np.float32)}), "my_head"),
        (lambda s: s.pop("encoder.encoder.net.mlp.2.weight"), "Linear"),
        (lambda s: s.update({"encoder.encoder.net.mlp.2.weight": np.zeros((4, 7))}), "shape"),
        (lambda s: [s.pop(k) for k in list(s) if k.startswith("encoder.")], "encoder"),
        (lambda s: s.update({"encoder.actor_encoder.net.mlp.0.weight": np.ones((8, 4))}), "one of"),
        (lambda s: s.pop("pi.log_std_clip_param_const"), "log_std_clip"),
        (
            lambda s: s.update(
                {"pi.net.mlp.0.weight": np.ones((3, 8)), "pi.net.mlp.0.bias": np.ones(3)}
            ),
            "Box of size 1",
        ),
        (lambda s: s.update({"pi.net.mlp.0.bias": np.zeros(7, np.float32)}), "bias"),
    ],
)
def test_layouts_that_are_not_default_modules_raise(edit, match):
    _, module = build_module(PPOConfig, CARTPOLE_OBS, PENDULUM_ACT, fcnet_hiddens=[16, 8])
    state = module.get_state(inference_only=True)
    NumpyPolicy(state, PENDULUM_ACT)  # the unedited state is fine
    edit(state)
    with pytest.raises(UnsupportedModelError, match=match):
        NumpyPolicy(state, PENDULUM_ACT)


def test_activation_hints_must_fit_the_layout():
    _, module = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, fcnet_hiddens=[16, 8])
    state = module.get_state(inference_only=True)
    # A linear encoder has no activation slots between its Linear layers.
    with pytest.raises(UnsupportedModelError, match="'linear' activations"):
        NumpyPolicy(state, CARTPOLE_ACT, fcnet_activation="linear")
    with pytest.raises(UnsupportedModelError, match="gelu"):
        NumpyPolicy(state, CARTPOLE_ACT, fcnet_activation="gelu")


def test_action_space_must_fit_the_pi_head():
    _, module = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, fcnet_hiddens=[8])
    state = module.get_state(inference_only=True)
    with pytest.raises(UnsupportedModelError, match="Discrete"):
        NumpyPolicy(state, gym.spaces.Discrete(3))
    # Two logits also fit a 1-D Box's mean and log-std; with different numbers.
    NumpyPolicy(state, PENDULUM_ACT)
    with pytest.raises(UnsupportedModelError, match="Box"):
        NumpyPolicy(state, gym.spaces.Box(-1, 1, (2,), np.float32))


# --- action spaces ------------------------------------------------------------


def test_action_space_forms():
    assert as_action_space(gym.spaces.Discrete(3)) == DiscreteSpace(3)
    assert as_action_space(describe_space(gym.spaces.Discrete(3))) == DiscreteSpace(3)
    for form in (PENDULUM_ACT, describe_space(PENDULUM_ACT)):
        box = as_action_space(form)
        assert isinstance(box, BoxSpace) and box.shape == (1,)
        assert box.low.tolist() == [-2.0] and box.high.tolist() == [2.0]
    box = as_action_space({"kind": "box", "shape": [2], "low": -1, "high": [1, 3]})
    np.testing.assert_array_equal(box.high, [1, 3])
    assert BoxSpace((2,)).low.tolist() == [-np.inf, -np.inf]
    bad_spaces = (
        gym.spaces.MultiDiscrete([2, 3]),
        describe_space(gym.spaces.MultiDiscrete([2, 3])),
        gym.spaces.MultiBinary(3),
        gym.spaces.Discrete(3, start=1),
        describe_space(gym.spaces.Discrete(3, start=1)),
        {"kind": "box"},
        "discrete",
    )
    for bad in bad_spaces:
        with pytest.raises(ValueError):
            as_action_space(bad)
    with pytest.raises(ValueError):
        DiscreteSpace(0)
    with pytest.raises(ValueError):
        BoxSpace((1,), low=1.0, high=0.0)


# --- the wire form of weights -------------------------------------------------


def test_weights_round_trip_into_policy():
    _, module = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT)
    state = weights.build_state(module.get_state(inference_only=True), 3)
    assert set(state) == {weights.COMPONENT_RL_MODULE, weights.WEIGHTS_SEQ_NO}
    params, seq_no = weights.read_state(state)
    assert seq_no == 3
    obs = random_obs(4, CARTPOLE_OBS)
    logits = NumpyPolicy(params, CARTPOLE_ACT).action_dist_inputs(obs)
    assert_close(logits, torch_logits(module, obs))
    nested = {
        "rl_module": {"default_policy": dict(params)},
        "weights_seq_no": np.int64(0),
        "other": 1,
    }
    unwrapped, seq_no = weights.read_state(nested)
    assert seq_no == 0 and type(seq_no) is int and unwrapped.keys() == params.keys()


W = np.zeros((2, 2), np.float32)


@pytest.mark.parametrize(
    "state, match",
    [
        ([1, 2], "map"),
        ({"weights_seq_no": 1}, "rl_module"),
        ({"rl_module": {"a": W}}, "weights_seq_no"),
        ({"rl_module": [W], "weights_seq_no": 1}, "parameter names"),
        ({"rl_module": {1: W}, "weights_seq_no": 1}, "name"),
        ({"rl_module": {"": W}, "weights_seq_no": 1}, "name"),
        ({"rl_module": {"a": [1.0, 2.0]}, "weights_seq_no": 1}, "numpy array"),
        ({"rl_module": {"a": np.array(["x"])}, "weights_seq_no": 1}, "dtype"),
        ({"rl_module": {"a": np.array([None], dtype=object)}, "weights_seq_no": 1}, "dtype"),
        ({"rl_module": {"a": W}, "weights_seq_no": -1}, ">= 0"),
        ({"rl_module": {"a": W}, "weights_seq_no": True}, "integer"),
        ({"rl_module": {"a": W}, "weights_seq_no": 1.0}, "integer"),
        ({"rl_module": {"default_policy": {"a": W}, "p2": {"a": W}}, "weights_seq_no": 1}, "p2"),
        ({"rl_module": {"default_policy": [W]}, "weights_seq_no": 1}, "parameter names"),
    ],
)
def test_read_state_rejects(state, match):
    with pytest.raises(ValueError, match=match):
        weights.read_state(state)


def test_build_state_rejects():
    with pytest.raises(ValueError, match="numpy array"):
        weights.build_state({"a": torch.zeros(2)}, 1)
    with pytest.raises(ValueError, match=">= 0"):
        weights.build_state({"a": W}, -3)


# --- TorchModulePolicy --------------------------------------------------------


def test_torch_module_policy_matches_numpy_policy():
    act_space = PENDULUM_ACT
    config, trained = build_module(
        PPOConfig, PENDULUM_OBS, act_space, vf_share_layers=False, seed=5
    )
    state = trained.get_state(inference_only=True)
    policy = TorchModulePolicy(config, rng=np.random.default_rng(0))
    policy.set_params(state)
    reference = NumpyPolicy(state, act_space)
    obs = random_obs(32, PENDULUM_OBS)
    assert_close(policy.action_dist_inputs(obs), reference.action_dist_inputs(obs))

    torch_state = torch.random.get_rng_state()
    out = policy.compute_actions(obs, rng=np.random.default_rng(9))
    again = policy.compute_actions(obs, rng=np.random.default_rng(9))
    assert torch.equal(torch_state, torch.random.get_rng_state())
    np.testing.assert_array_equal(out.action, again.action)
    logits = torch.from_numpy(out.action_dist_inputs)
    dist = trained.get_exploration_action_dist_cls().from_logits(logits)
    np.testing.assert_allclose(
        out.action_logp, dist.logp(torch.from_numpy(out.action)).numpy(), atol=ATOL, rtol=1e-6
    )
    np.testing.assert_allclose(
        out.action_for_env, np.stack([unsquash_action(a, act_space) for a in out.action]), atol=1e-6
    )

    greedy = policy.compute_actions(obs, explore=False)
    assert_close(greedy.action, reference.compute_actions(obs, explore=False).action)
    one = policy.compute_action(obs[0], explore=False)
    assert one.action.shape == (1,) and one.action_logp == 0


def test_torch_module_policy_from_spec_and_module():
    config, module = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT, fcnet_hiddens=[8])
    assert TorchModulePolicy(module).module is module
    spec = config.get_rl_module_spec(inference_only=True)
    assert TorchModulePolicy(spec).action_space == DiscreteSpace(2)
    bare = PPOConfig().rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[8]))
    policy = TorchModulePolicy(bare, observation_space=CARTPOLE_OBS, action_space=CARTPOLE_ACT)
    assert policy.compute_actions(random_obs(3, CARTPOLE_OBS)).action.shape == (3,)
    with pytest.raises(TypeError):
        TorchModulePolicy(object())


def test_torch_module_policy_runs_what_numpy_policy_refuses():
    image = gym.spaces.Box(0.0, 1.0, (42, 42, 3), np.float32)
    config, _ = build_module(PPOConfig, image, CARTPOLE_ACT)
    policy = TorchModulePolicy(config)
    obs = np.random.default_rng(0).random((2, 42, 42, 3), dtype=np.float32)
    out = policy.compute_actions(obs)
    assert out.action.shape == (2,) and out.action_dist_inputs.shape == (2, 2)
    assert policy.compute_action(obs[0]).action_logp < 0
    with pytest.raises(ValueError, match=r"\(batch, 42, 42, 3\)"):
        policy.compute_actions(obs[:, :10])


def test_policy_module_imports_without_ray_or_torch():
    code = (
        "import sys; import rlinks_rllib.client.policies.numpy_policy; "
        "bad = sorted({'ray', 'torch', 'gymnasium'} & set(sys.modules)); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
