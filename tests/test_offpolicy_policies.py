"""The client's SAC and DQN policies against RLlib's own modules, built for real (no Ray cluster).

NumpyPolicy runs SAC's default module (a squashed Gaussian), QPolicy DQN's
(epsilon-greedy over Q-values, dueling or not, distributional or not). Each
case hands the module's ``get_state(inference_only=True)`` to the client
policy and compares what the distributions are made of: the module's outputs,
RLlib's log-probability of the same actions, its greedy action, its epsilon.
Two cases step RLlib's own ``SingleAgentEnvRunner`` and check that what its
episodes record is what the client records.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.algorithms.sac import SACConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical, TorchSquashedGaussian
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.utils import numpy as rllib_numpy
from ray.rllib.utils.schedules.scheduler import Scheduler
from ray.rllib.utils.spaces.space_utils import unsquash_action
from harness import ROOT
from test_policy import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    PENDULUM_ACT,
    PENDULUM_OBS,
    assert_close,
    build_module,
    random_obs,
    torch_logits,
)

from rlinks_rllib.client.policies import sampling
from rlinks_rllib.client.policies.numpy_policy import BoxSpace, NumpyPolicy, UnsupportedModelError
from rlinks_rllib.client.policies.choice import policy_for
from rlinks_rllib.client.policies.q_policy import MIN_LOGP, QPolicy, epsilon_at
from rlinks_rllib.protocol.spaces import describe_space
from rlinks_rllib.training.config_file import build_algorithm_config, load_spec

# The tuned examples' models (RLlib's pendulum_sac.py and cartpole_dqn.py), as configs/ ships them.
SAC_TUNED = {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu", "head_fcnet_hiddens": [],
             "head_fcnet_activation": None}
DQN_TUNED = {"fcnet_hiddens": [256], "fcnet_activation": "tanh", "head_fcnet_hiddens": [256]}
BOX_3 = gym.spaces.Box(np.array([-1.0, 0.0, -5.0], np.float32), np.array([1.0, 10.0, 5.0], np.float32))


def activations(model_config):
    return {"fcnet_activation": model_config.get("fcnet_activation", "tanh"),
            "head_fcnet_activation": model_config.get("head_fcnet_activation", "relu")}


def squashed_dist(logits):
    return TorchSquashedGaussian.from_logits(torch.from_numpy(logits))


# --- SAC ----------------------------------------------------------------------


SAC_CASES = {
    "default": (PENDULUM_ACT, {}),
    "tuned-pendulum": (PENDULUM_ACT, SAC_TUNED),
    "box-3-layernorm-head-hiddens": (
        BOX_3, {"fcnet_hiddens": [32, 16], "fcnet_use_layernorm": True, "head_fcnet_hiddens": [8],
                "head_fcnet_activation": "silu", "fcnet_activation": "elu"},
    ),
}


@pytest.mark.parametrize("case", sorted(SAC_CASES))
def test_sac_matches_rllib_squashed_gaussian(case):
    act_space, model_config = SAC_CASES[case]
    _, module = build_module(SACConfig, PENDULUM_OBS, act_space, **model_config)
    assert module.get_exploration_action_dist_cls() is TorchSquashedGaussian
    policy = NumpyPolicy(module.get_state(inference_only=True), act_space, **activations(model_config))
    assert policy.squashed
    obs = random_obs(256, PENDULUM_OBS)

    logits = policy.action_dist_inputs(obs)  # what RLlib records as action_dist_inputs: log-std not clamped
    assert_close(logits, torch_logits(module, obs, explore=True))
    assert_close(logits, torch_logits(module, obs))

    out = policy.compute_actions(obs, rng=np.random.default_rng(3))
    assert out.action.dtype == np.float32 and out.action.shape == (256, act_space.shape[0])
    assert np.all(np.abs(out.action) <= 1.0)
    expected = squashed_dist(logits).logp(torch.from_numpy(out.action)).numpy()
    np.testing.assert_allclose(out.action_logp, expected, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(out.action_for_env, np.stack([unsquash_action(a, act_space) for a in out.action]),
                               atol=1e-5)

    # Greedy: RLlib's deterministic SAC action is the Gaussian's mean, before tanh.
    greedy = policy.compute_actions(obs, explore=False)
    assert_close(greedy.action, squashed_dist(logits).to_deterministic().sample().numpy())
    np.testing.assert_array_equal(greedy.action_logp, np.zeros(256, np.float32))


def test_sac_log_prob_at_the_bounds_and_the_log_std_clamp_are_rllibs():
    assert sampling.SQUASHED_LOG_STD_RANGE == (rllib_numpy.MIN_LOG_NN_OUTPUT, rllib_numpy.MAX_LOG_NN_OUTPUT)
    assert sampling.SQUASH_MARGIN == rllib_numpy.SMALL_NUMBER
    rng = np.random.default_rng(0)
    logits = np.concatenate([rng.normal(size=(64, 2)), rng.uniform(-9, 6, size=(64, 2))], axis=1).astype(np.float32)
    actions = np.concatenate([np.full((16, 2), 1.0), np.full((16, 2), -1.0), rng.uniform(-1, 1, (32, 2))])
    actions = actions.astype(np.float32)
    box = BoxSpace((2,), -1.0, 1.0)
    ours = sampling.log_prob(box, logits, actions, squashed=True)
    expected = squashed_dist(logits).logp(torch.from_numpy(actions)).numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-3)


def test_sac_sampling_follows_tanh_of_the_gaussian_with_its_std_clamped():
    _, module = build_module(SACConfig, CARTPOLE_OBS, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), fcnet_hiddens=[8])
    state = module.get_state(inference_only=True)
    state["pi.net.mlp.0.weight"][:] = 0.0
    state["pi.net.mlp.0.bias"][:] = [0.5, -0.2, np.log(0.3), 5.0]  # the second std clamps to e^2
    policy = NumpyPolicy(state, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    out = policy.compute_actions(np.zeros((40_000, 4), np.float32), rng=np.random.default_rng(4))
    pre = np.arctanh(np.clip(out.action[:, 0].astype(np.float64), -1 + 1e-7, 1 - 1e-7))
    assert abs(pre.mean() - 0.5) < 0.01 and abs(pre.std() - 0.3) < 0.01
    # tanh(N(-0.2, e^2)): the share of actions below 0 is Phi(0.2 / e^2).
    assert abs((out.action[:, 1] < 0).mean() - 0.5108) < 0.01
    np.testing.assert_array_equal(out.action_dist_inputs[0], state["pi.net.mlp.0.bias"])


def test_sac_discrete_is_categorical_and_full_state_is_accepted():
    _, module = build_module(SACConfig, CARTPOLE_OBS, gym.spaces.Discrete(3), inference_only=False,
                             fcnet_hiddens=[16])
    policy = NumpyPolicy(module.get_state(), gym.spaces.Discrete(3))  # qf_*, qf_twin_* ignored
    assert not policy.squashed
    obs = random_obs(64, CARTPOLE_OBS)
    logits = policy.action_dist_inputs(obs)
    assert_close(logits, torch_logits(module, obs, explore=True))
    out = policy.compute_actions(obs, rng=np.random.default_rng(1))
    dist = module.get_exploration_action_dist_cls().from_logits(torch.from_numpy(logits))
    np.testing.assert_allclose(out.action_logp, dist.logp(torch.from_numpy(out.action)).numpy(), atol=1e-5)

    _, box_module = build_module(SACConfig, PENDULUM_OBS, PENDULUM_ACT, inference_only=False, fcnet_hiddens=[16])
    state = box_module.get_state()
    assert any(k.startswith("qf_encoder.") for k in state)
    assert_close(NumpyPolicy(state, PENDULUM_ACT).action_dist_inputs(obs[:, :3]),
                 torch_logits(box_module, obs[:, :3]))


def test_sac_take_over_is_recorded_squashed_with_rlibs_logp():
    _, module = build_module(SACConfig, PENDULUM_OBS, PENDULUM_ACT, fcnet_hiddens=[16])
    policy = NumpyPolicy(module.get_state(inference_only=True), PENDULUM_ACT)
    obs = random_obs(5, PENDULUM_OBS)
    torque = np.array([[-2.0], [-1.0], [0.0], [1.5], [2.0]], np.float32)  # as the env takes it
    out = policy.outputs_for(obs, torque)
    np.testing.assert_allclose(out.action, torque / 2.0)
    np.testing.assert_allclose(out.action_for_env, torque, atol=1e-6)
    expected = squashed_dist(out.action_dist_inputs).logp(torch.from_numpy(out.action)).numpy()
    np.testing.assert_allclose(out.action_logp, expected, rtol=1e-5, atol=1e-3)
    assert np.isfinite(out.action_logp).all()


# --- DQN ----------------------------------------------------------------------


DQN_CASES = {
    "default-dueling-double": (CARTPOLE_ACT, {}, {}),
    "tuned-cartpole": (CARTPOLE_ACT, DQN_TUNED, {}),
    "plain": (gym.spaces.Discrete(4), {"fcnet_hiddens": [32, 16]}, {"dueling": False}),
    "plain-single-q-relu-layernorm": (
        gym.spaces.Discrete(5), {"fcnet_hiddens": [16], "fcnet_activation": "relu", "fcnet_use_layernorm": True,
                                 "head_fcnet_hiddens": [8]},
        {"dueling": False, "double_q": False},
    ),
    "distributional-dueling": (gym.spaces.Discrete(3), {"fcnet_hiddens": [16]},
                               {"num_atoms": 7, "v_min": -3.0, "v_max": 12.0}),
    "distributional": (gym.spaces.Discrete(3), {"fcnet_hiddens": [16], "head_fcnet_hiddens": [8]},
                       {"num_atoms": 5, "dueling": False}),
}


def dqn_module(act_space, model_config, training, inference_only=True):
    torch.manual_seed(0)
    config = DQNConfig().environment(observation_space=CARTPOLE_OBS, action_space=act_space).training(**training)
    config.rl_module(model_config=DefaultModelConfig(**model_config))
    return config, config.get_rl_module_spec(inference_only=inference_only).build()


def q_values(module, obs):
    with torch.no_grad():
        return module.compute_q_values({Columns.OBS: torch.from_numpy(obs)})[QF_PREDS].numpy()


@pytest.mark.parametrize("case", sorted(DQN_CASES))
def test_dqn_matches_rllib_q_values_and_greedy_action(case):
    act_space, model_config, training = DQN_CASES[case]
    config, module = dqn_module(act_space, model_config, training)
    policy = QPolicy(module.get_state(inference_only=True), act_space, **activations(model_config),
                     v_min=config.v_min, v_max=config.v_max)
    obs = random_obs(128, CARTPOLE_OBS)

    q = policy.action_dist_inputs(obs)
    assert q.dtype == np.float32 and q.shape == (128, act_space.n)
    assert_close(q, q_values(module, obs))

    greedy = policy.compute_actions(obs, explore=False)
    with torch.no_grad():
        expected = module.forward_inference({Columns.OBS: torch.from_numpy(obs)})[Columns.ACTIONS].numpy()
    np.testing.assert_array_equal(greedy.action, expected)
    np.testing.assert_array_equal(greedy.action_logp, np.zeros(128, np.float32))
    np.testing.assert_array_equal(greedy.action_for_env, greedy.action)
    # Exploring with epsilon 0 (a schedule past its end, here) is greedy too.
    policy.set_epsilon([(0, 1.0), (100, 0.0)])
    policy.set_timestep(10**9)
    out = policy.compute_actions(obs, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(out.action, greedy.action)


def test_dqn_full_state_is_accepted_and_refusals():
    config, module = dqn_module(CARTPOLE_ACT, {"fcnet_hiddens": [16]}, {}, inference_only=False)
    module.make_target_networks()
    state = module.get_state()
    assert any(k.startswith("_target_af.") for k in state)
    obs = random_obs(16, CARTPOLE_OBS)
    assert_close(QPolicy(state, CARTPOLE_ACT).action_dist_inputs(obs), q_values(module, obs))

    with pytest.raises(UnsupportedModelError, match="unexpected parameters 'encoder.net.mlp"):
        NumpyPolicy(state, CARTPOLE_ACT)
    with pytest.raises(UnsupportedModelError, match="Discrete"):
        QPolicy(state, gym.spaces.Box(-1, 1, (2,), np.float32))
    with pytest.raises(UnsupportedModelError, match="Discrete"):
        QPolicy(state, gym.spaces.Discrete(3))  # 2 Q-values
    _, ppo = build_module(PPOConfig, CARTPOLE_OBS, CARTPOLE_ACT)
    with pytest.raises(UnsupportedModelError, match="unexpected parameters"):
        QPolicy(ppo.get_state(inference_only=True), CARTPOLE_ACT)


def test_dqn_explores_epsilon_greedily_with_its_logp():
    _, module = dqn_module(gym.spaces.Discrete(4), {"fcnet_hiddens": [8]}, {"dueling": False})
    state = module.get_state(inference_only=True)
    state["af.net.mlp.0.weight"][:] = 0.0
    state["af.net.mlp.0.bias"][:] = [0.0, 0.0, 1.0, 0.5]
    policy = QPolicy(state, gym.spaces.Discrete(4), epsilon=0.4)
    out = policy.compute_actions(np.zeros((40_000, 4), np.float32), rng=np.random.default_rng(2))
    freq = np.bincount(out.action, minlength=4) / len(out.action)
    np.testing.assert_allclose(freq, [0.1, 0.1, 0.7, 0.1], atol=0.01)
    np.testing.assert_allclose(out.action_logp, np.log(np.where(out.action == 2, 0.7, 0.1)), rtol=1e-6)
    np.testing.assert_array_equal(out.action_dist_inputs[0], [0.0, 0.0, 1.0, 0.5])

    # A take-over: the action the simulator chose, logp under the policy's epsilon (finite at epsilon 0).
    policy.set_epsilon(0.0)
    taken = policy.outputs_for(np.zeros((2, 4), np.float32), np.array([2, 3]))
    np.testing.assert_array_equal(taken.action, [2, 3])
    np.testing.assert_allclose(taken.action_logp, [0.0, MIN_LOGP])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        policy.set_epsilon(1.5)
    assert policy.epsilon == 0.0


@pytest.mark.parametrize("schedule", [0.05, [(0, 1.0), (10_000, 0.02)], [[0, 0.5], [10, 0.5], [30, 0.1]]])
def test_epsilon_follows_rllibs_schedule(schedule):
    rllib = Scheduler(schedule, framework="torch")
    _, module = dqn_module(CARTPOLE_ACT, {"fcnet_hiddens": [8]}, {"epsilon": schedule})
    policy = QPolicy(module.get_state(inference_only=True), CARTPOLE_ACT, epsilon=schedule)
    assert policy.epsilon == pytest.approx(float(rllib.update(0)))
    for t in (0, 1, 5, 10, 17, 29, 30, 5_000, 9_999, 10_000, 10**7):
        assert epsilon_at(schedule, t) == pytest.approx(float(rllib.update(t)), abs=1e-7)
        # What the module's forward_exploration moves its epsilon to at t.
        with torch.no_grad():
            module.forward_exploration({Columns.OBS: torch.zeros((1, 4))}, t=t)
        policy.set_timestep(t)
        assert policy.epsilon == pytest.approx(float(module.epsilon_schedule.get_current_value()), abs=1e-6)
    for bad in ([(5, 1.0), (10, 0.1)], [(0, 1.0)], [(0, 1.0), (10, 0.5), (5, 0.1)], "0.1", [(0, "x")]):
        with pytest.raises(ValueError):
            epsilon_at(bad, 0)


# --- which policy, and what RLlib's own runner records --------------------------


def runner_description(config):
    """The parts of the runner's SET_CONFIG description that policy_for reads (env_runner._config_message)."""
    model = {k: v for k, v in config.model_config.items() if isinstance(v, (int, float, str, bool, list, type(None)))}
    return {"algorithm": type(config).__name__.removesuffix("Config"), "model_config": model,
            "observation_space": describe_space(config.observation_space),
            "action_space": describe_space(config.action_space)}


def test_policy_for_picks_qpolicy_for_dqn_and_a_squashed_numpy_policy_for_sac():
    config, module = dqn_module(CARTPOLE_ACT, {"fcnet_hiddens": [8]}, {"epsilon": [(0, 0.8), (100, 0.1)]})
    policy = policy_for(runner_description(config), module.get_state(inference_only=True))
    assert isinstance(policy, QPolicy) and policy.epsilon == 0.8
    policy.set_timestep(50)
    assert policy.epsilon == pytest.approx(0.45)

    config, module = build_module(SACConfig, PENDULUM_OBS, PENDULUM_ACT, **SAC_TUNED)
    policy = policy_for(runner_description(config), module.get_state(inference_only=True))
    assert isinstance(policy, NumpyPolicy) and policy.squashed
    obs = random_obs(8, PENDULUM_OBS)
    assert_close(policy.action_dist_inputs(obs), torch_logits(module, obs))


def with_env(config, name):
    env = gym.make(name)
    env.close()
    return config.environment(name, observation_space=env.observation_space, action_space=env.action_space)


def sample_rllib_runner(config, steps):
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    runner = SingleAgentEnvRunner(config=config.env_runners(num_env_runners=0))
    try:
        episodes = runner.sample(num_timesteps=steps, random_actions=False)
        params = {k: np.asarray(v) for k, v in runner.module.get_state(inference_only=True).items()}
    finally:
        runner.stop()
    return episodes, params


def test_sac_records_what_rllibs_runner_records():
    config = with_env(SACConfig(), "Pendulum-v1").rl_module(model_config=DefaultModelConfig(**SAC_TUNED))
    episodes, params = sample_rllib_runner(config, 24)
    policy = policy_for(runner_description(config), params)
    for episode in episodes:
        obs = np.asarray(episode.get_observations())[:-1]
        actions = np.asarray(episode.get_actions())
        assert np.all(np.abs(actions) <= 1.0), "RLlib's SAC records the squashed action, not the torque"
        recorded_inputs = np.asarray(episode.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS))
        recorded_logp = np.asarray(episode.get_extra_model_outputs(Columns.ACTION_LOGP))
        assert_close(policy.action_dist_inputs(obs), recorded_inputs)
        np.testing.assert_allclose(policy._log_prob(recorded_inputs, actions), recorded_logp, rtol=1e-5, atol=1e-3)
        ours = policy.compute_actions(obs, rng=np.random.default_rng(0))
        assert ours.action.shape == actions.shape and ours.action_logp.shape == recorded_logp.shape


def test_dqn_records_what_rllibs_runner_records():
    config = (with_env(DQNConfig(), "CartPole-v1").training(epsilon=[(0, 0.0), (10, 0.0)])
              .rl_module(model_config=DefaultModelConfig(**DQN_TUNED)))
    episodes, params = sample_rllib_runner(config, 24)
    policy = policy_for(runner_description(config), params)
    assert isinstance(policy, QPolicy) and policy.epsilon == 0.0
    for episode in episodes:
        assert set(episode.extra_model_outputs) <= {"weights_seq_no"}, "RLlib's DQN records no logp or inputs"
        obs = np.asarray(episode.get_observations())[:-1]
        out = policy.compute_actions(obs, rng=np.random.default_rng(0))
        np.testing.assert_array_equal(out.action, np.asarray(episode.get_actions()))


@pytest.mark.parametrize(("name", "policy_cls"), [("sac_pendulum", NumpyPolicy), ("dqn_cartpole", QPolicy)])
def test_shipped_offpolicy_configs_build_modules_the_client_runs(name, policy_cls):
    config = build_algorithm_config(load_spec(ROOT / "configs" / f"{name}.yaml"))
    assert config.n_step == (2, 5), "YAML's list must reach RLlib as the tuple it takes for a range"
    config.validate()
    module = config.get_rl_module_spec(inference_only=True).build()
    policy = policy_for(runner_description(config), module.get_state(inference_only=True))
    assert type(policy) is policy_cls
    obs = random_obs(16, config.observation_space)
    if policy_cls is QPolicy:
        assert policy.epsilon == 1.0  # the schedule's start
        assert_close(policy.action_dist_inputs(obs), q_values(module, obs))
    else:
        assert policy.squashed
        assert_close(policy.action_dist_inputs(obs), torch_logits(module, obs, explore=True))


# --- SAC with Discrete actions (CartPole) -----------------------------------------

SAC_DISCRETE_CASES = {
    "default": (CARTPOLE_ACT, {}),
    "shipped-cartpole": (CARTPOLE_ACT, {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu",
                                        "head_fcnet_hiddens": []}),
    "discrete-5-layernorm-head-hiddens": (
        gym.spaces.Discrete(5), {"fcnet_hiddens": [32, 16], "fcnet_use_layernorm": True, "head_fcnet_hiddens": [8],
                                 "head_fcnet_activation": "silu", "fcnet_activation": "elu"},
    ),
}


@pytest.mark.parametrize("case", sorted(SAC_DISCRETE_CASES))
def test_sac_discrete_action_distribution_is_rllibs(case):
    """The same weights and observations give RLlib's categorical: its logits, the probability and logp of
    every action, draws at those probabilities, its greedy action, and its logp for a taken-over action."""
    act_space, model_config = SAC_DISCRETE_CASES[case]
    _, module = build_module(SACConfig, CARTPOLE_OBS, act_space, **model_config)
    dist_cls = module.get_exploration_action_dist_cls()
    assert dist_cls is TorchCategorical
    policy = NumpyPolicy(module.get_state(inference_only=True), act_space, **activations(model_config))
    assert not policy.squashed
    obs = random_obs(256, CARTPOLE_OBS)

    logits = policy.action_dist_inputs(obs)
    assert_close(logits, torch_logits(module, obs, explore=True))
    assert_close(logits, torch_logits(module, obs))
    dist = dist_cls.from_logits(torch.from_numpy(logits))
    every = np.arange(act_space.n)
    for action in every:  # the whole distribution, action by action
        column = np.full(256, action, np.int64)
        np.testing.assert_allclose(policy.log_prob_of(logits, column), dist.logp(torch.from_numpy(column)).numpy(),
                                   atol=1e-5)

    out = policy.compute_actions(obs, rng=np.random.default_rng(5))
    assert out.action.dtype == np.int64 and out.action.shape == (256,)
    np.testing.assert_array_equal(out.action_for_env, out.action)
    np.testing.assert_allclose(out.action_logp, dist.logp(torch.from_numpy(out.action)).numpy(), atol=1e-5)

    # Draws follow the probabilities: one observation, many times.
    one = np.repeat(obs[:1], 40_000, axis=0)
    drawn = policy.compute_actions(one, rng=np.random.default_rng(6)).action
    probs = torch.softmax(torch.from_numpy(logits[0]), dim=-1).numpy()
    np.testing.assert_allclose(np.bincount(drawn, minlength=act_space.n) / len(drawn), probs, atol=0.01)

    # Greedy: RLlib's deterministic categorical, the argmax.
    greedy = policy.compute_actions(obs, explore=False)
    expected = module.get_inference_action_dist_cls().from_logits(torch.from_numpy(logits)).to_deterministic()
    np.testing.assert_array_equal(greedy.action, expected.sample().numpy())
    np.testing.assert_array_equal(greedy.action_logp, np.zeros(256, np.float32))

    # A take-over: the taken action as RLlib trains on it (its index), with RLlib's logp of it.
    taken = np.arange(8) % act_space.n
    took = policy.outputs_for(obs[:8], taken)
    np.testing.assert_array_equal(took.action, taken)
    np.testing.assert_allclose(took.action_logp, dist_cls.from_logits(torch.from_numpy(logits[:8]))
                               .logp(torch.from_numpy(taken)).numpy(), atol=1e-5)


def test_sac_discrete_records_what_rllibs_runner_records():
    model = SAC_DISCRETE_CASES["shipped-cartpole"][1]
    config = with_env(SACConfig(), "CartPole-v1").rl_module(model_config=DefaultModelConfig(**model))
    episodes, params = sample_rllib_runner(config, 24)
    policy = policy_for(runner_description(config), params)
    assert type(policy) is NumpyPolicy and not policy.squashed
    for episode in episodes:
        obs = np.asarray(episode.get_observations())[:-1]
        actions = np.asarray(episode.get_actions())
        recorded_inputs = np.asarray(episode.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS))
        recorded_logp = np.asarray(episode.get_extra_model_outputs(Columns.ACTION_LOGP))
        assert_close(policy.action_dist_inputs(obs), recorded_inputs)
        np.testing.assert_allclose(policy.log_prob_of(recorded_inputs, actions), recorded_logp, atol=1e-5)
        ours = policy.compute_actions(obs, rng=np.random.default_rng(0))
        # RLlib's episode holds int32 indices here, the client's int64: the loss casts both to int64.
        assert ours.action.dtype.kind == actions.dtype.kind == "i" and ours.action.shape == actions.shape


def test_shipped_sac_cartpole_config_builds_a_discrete_module_the_client_runs():
    config = build_algorithm_config(load_spec(ROOT / "configs" / "sac_cartpole.yaml"))
    config.validate()
    assert isinstance(config.action_space, gym.spaces.Discrete)
    module = config.get_rl_module_spec(inference_only=True).build()
    policy = policy_for(runner_description(config), module.get_state(inference_only=True))
    assert type(policy) is NumpyPolicy and not policy.squashed
    obs = random_obs(16, config.observation_space)
    assert_close(policy.action_dist_inputs(obs), torch_logits(module, obs, explore=True))
