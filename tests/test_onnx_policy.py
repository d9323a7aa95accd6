"""The ONNX policy on the simulator side matches RLlib's module, in a process without torch or Ray."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from harness import ROOT
from rlinks_rllib.protocol.spaces import describe_space, leaves
from rlinks_rllib.training.multi_input import MultiInputPPOCatalog
from rlinks_rllib.server.graph_export import export_policy_graph

pytest.importorskip("onnxruntime")

CASES = {
    "cnn": (
        gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
        gym.spaces.Discrete(3),
        dict(conv_filters=[[8, [4, 4], 4], [16, [4, 4], 4]], fcnet_hiddens=[32], fusionnet_hiddens=[32]),
    ),
    "dict": (
        gym.spaces.Dict(
            {
                "camera": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
                "state": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (4,), np.float32))),
            }
        ),
        gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
        dict(conv_filters=[[8, [4, 4], 4], [16, [4, 4], 4]], fcnet_hiddens=[32], fusionnet_hiddens=[32]),
    ),
    "lstm": (
        gym.spaces.Box(-1, 1, (5,), np.float32),
        gym.spaces.Discrete(4),
        dict(use_lstm=True, lstm_cell_size=16, fcnet_hiddens=[16], max_seq_len=8),
    ),
}
STEPS = 4
BATCH = 3

CHILD = textwrap.dedent(
    """
    import importlib.abc, json, sys
    import numpy as np

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ("torch", "ray"):
                raise ImportError(f"{name} is not installed on this simulator")

    sys.meta_path.insert(0, Refuse())
    for name in ("torch", "ray"):
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"{name} imported")

    from rlinks_rllib.client.policies.onnx_policy import OnnxPolicy

    work = sys.argv[1]
    data = np.load(f"{work}/data.npz")
    meta = json.load(open(f"{work}/meta.json"))
    params = {k[2:]: data[k] for k in data.files if k.startswith("p:")}
    policy = OnnxPolicy(open(f"{work}/graph.onnx", "rb").read(), params, meta["action_space"],
                        rng=np.random.default_rng(0))
    def obs_at(t):
        leaves = [data[f"o:{t}:{i}"] for i in range(meta["leaves"])]
        return eval(meta["nest"], {"L": leaves})
    state = policy.initial_state(meta["batch"]) if policy.stateful else None
    out = {}
    for t in range(meta["steps"]):
        result = policy.compute_actions(obs_at(t), state=state)
        out[f"logits:{t}"] = result.action_dist_inputs
        out[f"action:{t}"] = result.action
        out[f"logp:{t}"] = result.action_logp
        state = result.state_out
    policy.set_params({k: v * 1.5 for k, v in params.items()})
    out["logits:updated"] = policy.action_dist_inputs(obs_at(0), policy.initial_state(meta["batch"]) if policy.stateful else None)
    np.savez(f"{work}/out.npz", **out)
    """
)


def nest_expression(desc, counter=None):
    """Python source that rebuilds the nested observation from a list ``L`` of leaf batches."""
    counter = counter if counter is not None else [0]
    if desc["kind"] == "dict":
        return "{" + ", ".join(f"{k!r}: {nest_expression(s, counter)}" for k, s in desc["spaces"].items()) + "}"
    if desc["kind"] == "tuple":
        return "[" + ", ".join(nest_expression(s, counter) for s in desc["spaces"]) + "]"
    counter[0] += 1
    return f"L[{counter[0] - 1}]"


def torch_nest(desc, leaf_batches):
    it = iter(leaf_batches)

    def build(d):
        if d["kind"] == "dict":
            return {k: build(s) for k, s in d["spaces"].items()}
        if d["kind"] == "tuple":
            return [build(s) for s in d["spaces"]]
        return torch.as_tensor(next(it))

    return build(desc)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.timeout(600)
def test_onnx_policy_matches_rllib_without_torch_or_ray(case, tmp_path):
    observation_space, action_space, model = CASES[case]
    config = (
        PPOConfig()
        .environment(observation_space=observation_space, action_space=action_space)
        .rl_module(rl_module_spec=RLModuleSpec(catalog_class=MultiInputPPOCatalog), model_config=DefaultModelConfig(**model))
    )
    module = config.get_rl_module_spec(inference_only=True).build()
    (tmp_path / "graph.onnx").write_bytes(export_policy_graph(module))
    desc = describe_space(observation_space)
    paths = [path for path, _ in leaves(desc)]
    observation_space.seed(3)
    data = {f"p:{k}": v.detach().numpy() for k, v in module.state_dict().items()}
    steps = []
    for t in range(STEPS):
        samples = [observation_space.sample() for _ in range(BATCH)]
        batch = []
        for i, path in enumerate(paths):
            values = []
            for sample in samples:
                for part in path:
                    sample = sample[part]
                values.append(np.asarray(sample))
            data[f"o:{t}:{i}"] = np.stack(values)
            batch.append(data[f"o:{t}:{i}"])
        steps.append(batch)
    (tmp_path / "data.npz").write_bytes(b"")
    np.savez(tmp_path / "data.npz", **data)
    (tmp_path / "meta.json").write_text(json.dumps({
        "action_space": {"kind": "discrete", "n": int(action_space.n)} if hasattr(action_space, "n")
        else {"kind": "box", "shape": list(action_space.shape), "low": -2.0, "high": 2.0},
        "leaves": len(paths), "nest": nest_expression(desc), "batch": BATCH, "steps": STEPS,
    }))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert child.returncode == 0, child.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")

    state = {k: v.unsqueeze(0).expand(BATCH, *v.shape) for k, v in module.get_initial_state().items()} if module.is_stateful() else None
    dist_cls = module.get_exploration_action_dist_cls()
    for t, leaf_batches in enumerate(steps):
        batch = {Columns.OBS: torch_nest(desc, leaf_batches)}
        if state is not None:
            batch[Columns.OBS] = torch.as_tensor(leaf_batches[0]).unsqueeze(1)
            batch[Columns.STATE_IN] = state
        with torch.no_grad():
            ref = module.forward_inference(batch)
        logits = ref[Columns.ACTION_DIST_INPUTS]
        if state is not None:
            logits, state = logits.squeeze(1), ref[Columns.STATE_OUT]
        np.testing.assert_allclose(out[f"logits:{t}"], logits.numpy(), atol=1e-4, rtol=1e-4)
        rllib_logp = dist_cls.from_logits(logits).logp(torch.as_tensor(out[f"action:{t}"])).numpy()
        np.testing.assert_allclose(out[f"logp:{t}"], rllib_logp, atol=1e-4, rtol=1e-4)

    # A new weight set reaches every parameter the graph reads: it was not baked in.
    with torch.no_grad():
        for param in module.parameters():
            param.mul_(1.5)
        batch = {Columns.OBS: torch_nest(desc, steps[0])}
        if module.is_stateful():
            batch[Columns.OBS] = torch.as_tensor(steps[0][0]).unsqueeze(1)
            batch[Columns.STATE_IN] = {k: v.unsqueeze(0).expand(BATCH, *v.shape) for k, v in module.get_initial_state().items()}
        updated = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS].reshape(BATCH, -1)
    np.testing.assert_allclose(out["logits:updated"], updated.numpy(), atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def dict_graph():
    observation_space, action_space, model = CASES["dict"]
    config = (
        PPOConfig()
        .environment(observation_space=observation_space, action_space=action_space)
        .rl_module(rl_module_spec=RLModuleSpec(catalog_class=MultiInputPPOCatalog), model_config=DefaultModelConfig(**model))
    )
    module = config.get_rl_module_spec(inference_only=True).build()
    params = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    return export_policy_graph(module), params, describe_space(action_space)


def dict_obs(batch=2, **change):
    obs = {"camera": np.zeros((batch, 16, 16, 3), np.uint8),
           "state": [np.zeros(batch, np.int64), np.zeros((batch, 4), np.float32)]}
    obs.update(change)
    return obs


def test_bad_observations_name_the_key_path(dict_graph):
    from rlinks_rllib.client.policies.onnx_policy import OnnxPolicy

    graph, params, action_space = dict_graph
    policy = OnnxPolicy(graph, params, action_space)
    assert policy.compute_actions(dict_obs()).action.shape == (2, 2)
    assert policy.compute_action({"camera": np.zeros((16, 16, 3), np.uint8), "state": [1, np.zeros(4)]}).action.shape == (2,)
    with pytest.raises(ValueError, match=r"observations\['camera'\]: dtype <f4 does not cast"):
        policy.compute_actions(dict_obs(camera=np.zeros((2, 16, 16, 3), np.float32)))
    with pytest.raises(ValueError, match=r"observations\['state'\]\[1\]: NaN"):
        policy.compute_actions(dict_obs(state=[np.zeros(2, np.int64), np.full((2, 4), np.nan, np.float32)]))
    with pytest.raises(ValueError, match=r"observations\['lidar'\]: unexpected key"):
        policy.compute_actions(dict_obs(lidar=np.zeros((2, 3))))


def test_weights_that_dont_fit_the_graph_are_refused_and_the_old_ones_stay(dict_graph):
    from rlinks_rllib.client.policies.onnx_policy import OnnxPolicy
    from rlinks_rllib.client.policies.numpy_policy import UnsupportedModelError

    graph, params, action_space = dict_graph
    policy = OnnxPolicy(graph, params, action_space)
    before = policy.action_dist_inputs(dict_obs())
    name = next(iter(k for k in params if k.startswith("encoder")))
    with pytest.raises(UnsupportedModelError, match="lack"):
        policy.set_params({k: v for k, v in params.items() if k != name})
    with pytest.raises(UnsupportedModelError, match="has shape"):
        policy.set_params({**params, name: np.zeros((1, 1), np.float32)})
    np.testing.assert_array_equal(policy.action_dist_inputs(dict_obs()), before)


def test_a_graph_not_exported_for_rlinks_is_refused(dict_graph):
    import onnx
    from onnx import helper

    from rlinks_rllib.client.policies.onnx_policy import OnnxPolicy
    from rlinks_rllib.client.policies.numpy_policy import UnsupportedModelError
    from rlinks_rllib.protocol.policy_graph import METADATA_KEY

    graph, params, action_space = dict_graph
    model = onnx.load_from_string(graph)
    del model.metadata_props[:]
    with pytest.raises(UnsupportedModelError, match="not exported for rlinks"):
        OnnxPolicy(model.SerializeToString(), params, action_space)
    meta = json.loads(onnx.load_from_string(graph).metadata_props[0].value)
    meta["parameters"].append("not.an.input")
    helper.set_model_props(model, {METADATA_KEY: json.dumps(meta)})
    with pytest.raises(UnsupportedModelError, match="no input 'not.an.input'"):
        OnnxPolicy(model.SerializeToString(), params, action_space)
    with pytest.raises(UnsupportedModelError, match="cannot load"):
        OnnxPolicy(b"not onnx", params, action_space)


def test_the_runner_hands_its_graph_only_to_clients_that_ask():
    from rlinks_rllib.client import RLinkClient
    from rlinks_rllib.client.network.connection import DEFAULT_EXTENSIONS
    from rlinks_rllib.protocol.config import build_config
    from rlinks_rllib.protocol.episodes import check_episode_state
    from rlinks_rllib.server.network.listener import RLinkServer
    from rlinks_rllib.server.settings import RLinkSettings

    graph = b"\x08\x09 an ONNX model, opaque to the transport"

    def config_message(with_graph):
        extra = {"policy_graph": graph} if with_graph else {}
        description = build_config(algorithm="PPO", observation_space=describe_space(gym.spaces.Box(-1, 1, (4,))),
                                   action_space=describe_space(gym.spaces.Discrete(2)), rollout_fragment_length=64,
                                   on_policy=False, model_config={}, **extra)
        return {"type": "SET_CONFIG", "config": description}

    def ingest(wire):
        episodes = [check_episode_state(w, allow_empty=True) for w in wire]
        return episodes, sum(e["t"] - e["t_started"] for e in episodes)

    def config_of(server, *extra):
        client = RLinkClient(f"127.0.0.1:{server.address[1]}", extensions=[*DEFAULT_EXTENSIONS, *extra], timeout=10)
        try:
            client.connect()
            return client.get_config()
        finally:
            client.close()

    for exported in (True, False):
        server = RLinkServer(RLinkSettings(port=0), port=0, ingest=ingest, config_message=config_message,
                             update_steps=64, on_policy=False, policy_graph=exported)
        server.replace_weights({"w": np.zeros(2, np.float32)}, 1)
        server.start()
        try:
            assert "policy_graph" not in config_of(server)
            asked = config_of(server, "policy_graph")
            if exported:
                assert asked["policy_graph"] == graph
            else:
                assert "policy_graph" not in asked  # not agreed: a runner without a graph says nothing
        finally:
            server.stop()


def test_policy_for_picks_numpy_for_the_default_mlp_and_the_graph_otherwise(dict_graph):
    from rlinks_rllib.client.policies.onnx_policy import OnnxPolicy
    from rlinks_rllib.client.policies.numpy_policy import NumpyPolicy, UnsupportedModelError
    from rlinks_rllib.client.policies.choice import policy_for

    mlp = PPOConfig().environment(observation_space=gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2))
    module = mlp.rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[8])).get_rl_module_spec(inference_only=True).build()
    vector_config = {"observation_space": describe_space(module.observation_space),
                     "action_space": describe_space(module.action_space), "model_config": {"fcnet_hiddens": [8]}}
    params = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    assert isinstance(policy_for(vector_config, params), NumpyPolicy)

    graph, dict_params, action_space = dict_graph
    dict_config = {"observation_space": describe_space(CASES["dict"][0]), "action_space": action_space,
                   "model_config": {}}
    with pytest.raises(UnsupportedModelError, match="'policy_graph' extension"):
        policy_for(dict_config, dict_params)
    assert isinstance(policy_for({**dict_config, "policy_graph": graph}, dict_params), OnnxPolicy)


def test_recurrent_chunks_give_rllibs_learner_the_state_to_start_from():
    """A client carries the LSTM state and records it; a cut chunk's lookback holds the state RLlib resumes from."""
    from ray.rllib.connectors.common.add_states_from_episodes_to_batch import AddStatesFromEpisodesToBatch
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
    from rlinks_rllib.client.policies.onnx_policy import OnnxPolicy
    from rlinks_rllib.protocol.episodes import check_episode_state

    observation_space, action_space, model = CASES["lstm"]
    config = PPOConfig().environment(observation_space=observation_space, action_space=action_space).rl_module(
        model_config=DefaultModelConfig(**{**model, "max_seq_len": 2}))
    module = config.get_rl_module_spec().build()
    params = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    policy = OnnxPolicy(export_policy_graph(config.get_rl_module_spec(inference_only=True).build()),
                        params, describe_space(action_space), rng=np.random.default_rng(0))
    builder = EpisodeBuilder()
    observation_space.seed(0)
    obs = observation_space.sample()
    builder.reset(obs)
    state = {k: v[0] for k, v in policy.initial_state().items()}
    outs = []
    for t in range(7):
        out = policy.compute_action(obs, state=state)
        obs = observation_space.sample()
        builder.step(out.action, 0.0, obs, extra={"action_logp": out.action_logp,
                                                  "action_dist_inputs": out.action_dist_inputs,
                                                  "state_out": out.state_out})
        outs.append(out.state_out)
        state = out.state_out
        if t == 2:
            first = builder.take_chunks()  # cut after 3 steps
    second = builder.take_chunks()
    episodes = [SingleAgentEpisode.from_state(check_episode_state(chunk)) for chunk in first + second]
    assert episodes[1].t_started == 3
    batch = AddStatesFromEpisodesToBatch(as_learner_connector=True)(rl_module=module, batch={}, episodes=episodes)
    state_in = batch[Columns.STATE_IN]
    # One state per max_seq_len=2 steps, per chunk: chunk 1 starts from the initial state and resumes at
    # step 2; chunk 2 (steps 3..6) starts from step 2's state_out (its lookback) and resumes at step 4.
    [per_chunk] = state_in.values()  # one episode id: its chunks' rows in order
    h = np.concatenate([np.asarray(rows["h"]) for rows in per_chunk])
    assert h.shape == (4, *module.get_initial_state()["h"].shape)
    np.testing.assert_allclose(h[0], module.get_initial_state()["h"].numpy(), atol=1e-6)
    np.testing.assert_allclose(h[1], outs[1]["h"], atol=1e-6)
    np.testing.assert_allclose(h[2], outs[2]["h"], atol=1e-6)
    np.testing.assert_allclose(h[3], outs[4]["h"], atol=1e-6)
