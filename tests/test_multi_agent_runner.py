"""A real PPO multi-agent config served by RLinkEnvRunner to a real client over loopback.

Agents join and leave mid-episode, two act in turns, one policy is frozen:
every MultiAgentEpisode RLlib receives validates, and the env and agent
steps RLlib counts are exactly those the client sent. Hostile chunks get an
ERROR naming agent and field, and lose nothing of the good client's.
"""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest

from harness import running
from rlinks_rllib import RLinkEnvRunner
from rlinks_rllib.client import RLinkClient, ServerError
from rlinks_rllib.client.inference.policy_set import MULTI_AGENT_EXTENSIONS, PolicySet, read_multi_agent_config
from rlinks_rllib.protocol.agent_mapping import AgentMapping
from rlinks_rllib.protocol.multi_agent_builder import ALL, MultiAgentEpisodeBuilder

MAPPING = AgentMapping([["mover_*", "mover"], ["turn_*", "turner"]])
SPACES = {"mover": (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(3)),
          "turner": (gym.spaces.Box(0.0, 1.0, (3,), np.float32), gym.spaces.Discrete(2))}
UPDATES = 3
EPISODE_TICKS = 12


def ma_config(mapping=MAPPING):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.policy.policy import PolicySpec

    return (
        PPOConfig()
        .environment(env_config={"port": 0})
        .env_runners(env_runner_cls=RLinkEnvRunner, num_env_runners=0, sample_timeout_s=30.0)
        .multi_agent(policies={m: PolicySpec(observation_space=o, action_space=a) for m, (o, a) in SPACES.items()},
                     policy_mapping_fn=mapping, policies_to_train=["mover"])
        .training(train_batch_size_per_learner=120, minibatch_size=60, num_epochs=2, lr=0.01)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[16]))
        .debugging(seed=0)
    )


class ComingAndGoing:
    """Movers join at ticks 0, 3, 6 and leave (terminated) after 4 ticks; turn_a acts on even ticks,
    turn_b (joining at tick 1) on odd ones; __all__ truncates at tick 12."""

    def reset(self):
        self.t, self.movers = 0, {"mover_0": 0}
        return {"mover_0": self._obs("mover_0"), "turn_a": self._obs("turn_a")}

    def _obs(self, agent_id):
        size = SPACES[MAPPING.module_for(agent_id)][0].shape[0]
        return np.full(size, (self.t % 5) / 5.0, np.float32)

    def step(self, actions):
        self.t += 1
        rewards = {a: float(action == 1) for a, action in actions.items()}
        obs, terminateds = {}, {}
        for agent_id in list(self.movers):
            self.movers[agent_id] += 1
            obs[agent_id] = self._obs(agent_id)
            if self.movers[agent_id] == 4:
                terminateds[agent_id] = True
                del self.movers[agent_id]
        if self.t in (3, 6):
            new = f"mover_{self.t // 3}"
            self.movers[new] = 0
            obs[new] = self._obs(new)
        obs["turn_a" if self.t % 2 == 0 else "turn_b"] = self._obs("turn_a")
        terminateds[ALL] = False
        return obs, rewards, terminateds, {ALL: self.t >= EPISODE_TICKS}


def run_client(address, out, updates=UPDATES):
    with RLinkClient(address, extensions=MULTI_AGENT_EXTENSIONS, timeout=120) as client:
        multi_agent = read_multi_agent_config(client.get_config())
        update = client.get_state()
        out["weights"] = [update.params]
        out["mapping"] = multi_agent.mapping
        policies = PolicySet(multi_agent, update.params, ask=client.get_modules, rng=np.random.default_rng(0))
        builder = out["builder"] = MultiAgentEpisodeBuilder(module_for=policies.module_for)
        env = ComingAndGoing()
        builder.reset(env.reset())
        for _ in range(updates):
            while builder.num_steps < update.want_steps:
                outputs = policies.compute_actions(builder.observations_to_act())
                obs, rewards, terminateds, truncateds = env.step({a: int(o.action) for a, o in outputs.items()})
                builder.step({a: o.action for a, o in outputs.items()}, rewards, obs, terminateds, truncateds,
                             {a: {"action_logp": o.action_logp, "action_dist_inputs": o.action_dist_inputs}
                              for a, o in outputs.items()})
                if truncateds[ALL]:
                    builder.reset(env.reset())
            update = client.send_episodes_and_get_state(builder.take_chunks())
            policies.set_params(update.params)
            out["weights"].append(update.params)


def hostile_chunk(spoil):
    builder = MultiAgentEpisodeBuilder(module_for=MAPPING.module_for)
    env = ComingAndGoing()
    builder.reset(env.reset())
    for _ in range(4):
        acting = builder.acting_agents
        obs, rewards, terminateds, truncateds = env.step({a: 1 for a in acting})
        builder.step({a: 1 for a in acting}, rewards, obs, terminateds, truncateds,
                     {a: {"action_logp": np.float32(-0.7), "action_dist_inputs": np.zeros(3 if a.startswith("m") else 2,
                                                                                            np.float32)}
                      for a in acting})
    (chunk,) = builder.take_chunks()
    spoil(chunk)
    return chunk


def _agent(chunk, agent_id):
    return next(state for a, state in chunk["agent_episodes"] if a == agent_id)


HOSTILE = [
    ("unknown agent", lambda c: c["agent_episodes"].append(["robot_1", dict(_agent(c, "mover_0"), agent_id=None,
                                                                            module_id=None)]), "'robot_1'"),
    ("obs and actions don't line up", lambda c: _agent(c, "turn_a")["actions"].update(data=np.ones(7, np.int64)),
     "agent 'turn_a'.*actions"),
    ("module not served", lambda c: _agent(c, "mover_0").update(module_id="sniper"), "'mover_0'.*'sniper'"),
    ("space mismatch", lambda c: _agent(c, "mover_1")["observations"].update(
        data=np.zeros((len(_agent(c, "mover_1")["rewards"]["data"]) + 1, 5), np.float32)),
     "agent 'mover_1'.*observations.*shape"),
]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_joining_leaving_turn_based_agents_and_a_frozen_policy(ray_local):
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    with running(ma_config().build_algo()) as algo:
        runner = algo.env_runner_group.local_env_runner
        received: list = []
        sample = runner.sample

        def recording_sample(**kwargs):
            # Checked and counted as RLlib receives them: its learner connectors change them in place later.
            episodes = sample(**kwargs)
            for episode in episodes:
                assert isinstance(episode, MultiAgentEpisode)
                episode.validate()
                assert all(sa.module_id == MAPPING.module_for(aid) for aid, sa in episode.agent_episodes.items())
                received.append((len(episode), episode.agent_steps(), set(episode.agent_episodes)))
            return episodes

        runner.sample = recording_sample
        address = "%s:%d" % runner.address
        out: dict = {}
        errors: list = []

        def client_thread():
            try:
                run_client(address, out)
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)

        thread = threading.Thread(target=client_thread, daemon=True)
        thread.start()
        results = []
        for i in range(UPDATES):
            results.append(algo.train())
            if i == 0:
                for name, spoil, message in HOSTILE:
                    with RLinkClient(address, extensions=MULTI_AGENT_EXTENSIONS, timeout=30) as bad:
                        bad.get_state()
                        bad.send_episodes([hostile_chunk(spoil)])
                        with pytest.raises(ServerError, match=message) as refused:
                            bad.get_state()
                        assert refused.value.code == "bad_episode", name
        thread.join(timeout=120)
        assert not thread.is_alive() and not errors, errors

    builder = out["builder"]
    assert received
    assert sum(env for env, _, _ in received) == builder.env_steps_total
    assert sum(agent for _, agent, _ in received) == builder.agent_steps_total
    agents = set().union(*(ids for _, _, ids in received))
    assert {"mover_0", "mover_1", "mover_2", "turn_a", "turn_b"} <= agents
    # The frozen policy is served every update, unchanged; the trained one changes.
    first, last = out["weights"][0], out["weights"][-1]
    assert set(last) == {"mover", "turner"}
    assert all(np.array_equal(first["turner"][k], last["turner"][k]) for k in first["turner"])
    assert any(not np.array_equal(first["mover"][k], last["mover"][k]) for k in first["mover"])
    runners = results[-1]["env_runners"]
    assert set(runners["module_episode_returns_mean"]) == {"mover", "turner"}
    assert runners["rlinks"]["module_policy_lag_max"] == {"mover": 0, "turner": 0}
    assert runners["rlinks"]["errors"]["bad_episode"] >= len(HOSTILE)


def python_mapping(agent_id, episode, **kwargs):
    """A mapping only Python can say: no table goes to the client, which asks per new agent."""
    if agent_id.startswith("turn_"):
        return "turner"
    if agent_id.startswith("mover_") and agent_id[-1].isdigit():
        return "mover"
    raise KeyError(agent_id)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_python_mapping_function_is_told_to_the_client_per_agent(ray_local):
    with running(ma_config(python_mapping).build_algo()) as algo:
        runner = algo.env_runner_group.local_env_runner
        address = "%s:%d" % runner.address
        out: dict = {}
        thread = threading.Thread(target=run_client, args=(address, out, 1), daemon=True)
        thread.start()
        result = algo.train()
        thread.join(timeout=60)
        assert not thread.is_alive()
        with RLinkClient(address, extensions=MULTI_AGENT_EXTENSIONS, timeout=30) as client:
            assert client.get_modules(["turn_x", "mover_9"]) == {"turn_x": "turner", "mover_9": "mover"}
            with pytest.raises(ServerError, match="'robot_1'.*policy_mapping_fn") as refused:
                client.get_modules(["robot_1"])
            assert refused.value.code == "bad_episode"
    assert out["mapping"] is None and len(out["weights"]) == 2
    assert set(result["env_runners"]["module_episode_returns_mean"]) <= {"mover", "turner"}
    assert result["env_runners"]["num_env_steps_sampled"] > 0
