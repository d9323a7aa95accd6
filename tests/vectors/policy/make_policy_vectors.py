"""Write the local-policy test vectors: what a client that runs RLlib's default MLP must compute.

Usage::

    python tests/vectors/policy/make_policy_vectors.py [OUT_DIR]     # default: this directory

Every number comes from rlinks' Python client (``rlinks_rllib.client``:
``mlp.read_network``, ``sampling.log_prob``, ``sampling.action_for_env``),
which ``tests/test_policy.py`` holds to RLlib's own modules and
distributions. Random draws can't be pinned across languages, so the vectors
pin what sampling is built on: the forward pass, the log-probability of given
actions, and the action a simulator applies. Deterministic (seeded numpy, no
clocks); ``tests/test_cpp_client.py`` fails when the files are stale.

Files (JSON; floats are float32 values written exactly):

- ``mlp.json``: ``cases`` of ``{name, params: {torch name: {shape, data}},
  fcnet_activation, head_fcnet_activation, action_space, observations,
  dist_inputs}`` (``dist_inputs`` one row per observation), and ``refused``:
  ``{name, params_of, drop, action_space}``, the params of case ``params_of``
  less the names in ``drop``, which are not such a module for that space.
- ``logp.json``: ``cases`` of ``{action_space, dist_inputs, action, logp}``.
- ``action_for_env.json``: ``cases`` of ``{action_space, normalize, clip,
  sampled, for_env}``.

``action_space`` is ``{"kind": "discrete", "n"}`` or ``{"kind": "box",
"shape", "low", "high"}`` (bounds flat, ``null`` for an infinite one).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rlinks_rllib.client.policies.action_spaces import BoxSpace, DiscreteSpace
from rlinks_rllib.client.policies.mlp import UnsupportedModelError, read_network
from rlinks_rllib.client.policies.sampling import action_for_env, log_prob

HERE = Path(__file__).resolve().parent
CLIP = "pi.log_std_clip_param_const"


def floats(array: Any) -> list:
    """float32 values as JSON numbers (Python's shortest repr of the exact value); inf as null."""
    return [None if not np.isfinite(x) else float(x) for x in np.asarray(array, np.float32).reshape(-1)]


def space_json(space: DiscreteSpace | BoxSpace) -> dict:
    if isinstance(space, DiscreteSpace):
        return {"kind": "discrete", "n": space.n}
    return {"kind": "box", "shape": list(space.shape), "low": floats(space.low), "high": floats(space.high)}


def params_json(params: dict) -> dict:
    return {name: {"shape": list(value.shape), "data": floats(value)} for name, value in params.items()}


def mlp(rng: np.random.Generator, sizes: list[int], *, prefix: str = "encoder.actor_encoder.net.mlp.",
        layer_norm: bool = False, linear_between: bool = False) -> dict:
    """An RLlib TorchMLP's parameters: Linear [LayerNorm] [activation slot] per layer."""
    params, index = {}, 0
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        params[f"{prefix}{index}.weight"] = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)
        params[f"{prefix}{index}.bias"] = (0.1 * rng.standard_normal(n_out)).astype(np.float32)
        index += 1
        if layer_norm:
            params[f"{prefix}{index}.weight"] = (1 + 0.1 * rng.standard_normal(n_out)).astype(np.float32)
            params[f"{prefix}{index}.bias"] = (0.1 * rng.standard_normal(n_out)).astype(np.float32)
            index += 1
        if not linear_between:
            index += 1
    return params


def network_case(rng, name, obs_size, hidden, head_hidden, space, *, activation="tanh", head_activation="relu",
                 layer_norm=False, free_log_std=False, clip=20.0, log_std_bias=0.0, extra=None) -> dict:
    out = space.n if isinstance(space, DiscreteSpace) else space.size * (1 if free_log_std else 2)
    params = mlp(rng, [obs_size, *hidden], layer_norm=layer_norm, linear_between=activation == "linear")
    params.update(mlp(rng, [hidden[-1], *head_hidden, out], prefix="pi.net.mlp.", layer_norm=layer_norm,
                      linear_between=head_activation == "linear"))
    if isinstance(space, BoxSpace):
        last_bias = max(k for k in params if k.startswith("pi.net.mlp.") and k.endswith(".bias"))
        if not free_log_std:
            params[last_bias][space.size:] += np.float32(log_std_bias)
        else:
            params["pi.log_std"] = (log_std_bias + rng.standard_normal(space.size)).astype(np.float32)
        params[CLIP] = np.array([clip], np.float32)
    params.update(extra or {})
    observations = (2 * rng.standard_normal((5, obs_size))).astype(np.float32)
    net = read_network(params, space, activation, head_activation)
    return {"name": name, "params": params_json(params), "fcnet_activation": activation,
            "head_fcnet_activation": head_activation, "action_space": space_json(space),
            "observations": [floats(o) for o in observations],
            "dist_inputs": [floats(row) for row in net(observations)]}


def mlp_vectors() -> dict:
    rng = np.random.default_rng(20)
    pendulum = BoxSpace((1,), -2.0, 2.0)
    box3 = BoxSpace((3,), -1.0, 1.0)
    cases = [
        network_case(rng, "discrete_tanh_32_32", 4, [32, 32], [], DiscreteSpace(2)),
        network_case(rng, "discrete_relu_separate_vf", 6, [16, 8], [], DiscreteSpace(5), activation="relu",
                     extra={"vf.net.mlp.0.weight": np.ones((1, 8), np.float32)}),
        network_case(rng, "box_pendulum_tanh", 3, [24, 24], [], pendulum),
        network_case(rng, "box_log_std_clipped", 3, [8], [], box3, clip=0.5, log_std_bias=3.0),
        network_case(rng, "box_free_log_std", 5, [16, 16], [], box3, free_log_std=True, clip=1.0, log_std_bias=0.5),
        network_case(rng, "box_layer_norm_head_hiddens_silu", 4, [16, 8], [8, 8], pendulum, activation="elu",
                     head_activation="silu", layer_norm=True),
        network_case(rng, "box_sigmoid_linear_head", 2, [8, 8], [4], BoxSpace((2,), -np.inf, np.inf),
                     activation="sigmoid", head_activation="linear"),
    ]
    by_name = {case["name"]: case for case in cases}
    refused = [
        {"name": "discrete_with_free_log_std", "params_of": "box_free_log_std", "drop": [],
         "action_space": space_json(DiscreteSpace(3))},
        {"name": "box_of_another_size", "params_of": "box_pendulum_tanh", "drop": [], "action_space": space_json(box3)},
        {"name": "discrete_of_another_size", "params_of": "discrete_tanh_32_32", "drop": [],
         "action_space": space_json(DiscreteSpace(3))},
        {"name": "box_without_log_std_clip", "params_of": "box_pendulum_tanh", "drop": [CLIP],
         "action_space": space_json(pendulum)},
    ]
    for case in refused:
        source = by_name[case["params_of"]]
        params = {k: np.array(v["data"], np.float32).reshape(v["shape"])
                  for k, v in source["params"].items() if k not in case["drop"]}
        spec = case["action_space"]
        space = DiscreteSpace(spec["n"]) if spec["kind"] == "discrete" else BoxSpace(tuple(spec["shape"]), -1.0, 1.0)
        try:
            read_network(params, space, source["fcnet_activation"], source["head_fcnet_activation"])
        except UnsupportedModelError:
            continue
        raise AssertionError(f"{case['name']}: the Python client takes it")
    return {"cases": cases, "refused": refused}


def logp_vectors() -> dict:
    rng = np.random.default_rng(21)
    cases = []
    for n, scale in [(2, 1.0), (5, 3.0), (7, 40.0)]:
        logits = (scale * rng.standard_normal((3, n))).astype(np.float32)
        actions = rng.integers(n, size=3)
        for row, action in zip(logits, actions):
            logp = log_prob(DiscreteSpace(n), row[None], np.array([action]))[0]
            cases.append({"action_space": space_json(DiscreteSpace(n)), "dist_inputs": floats(row),
                          "action": int(action), "logp": float(logp)})
    for size, spread in [(1, 1.0), (3, 0.5), (6, 4.0)]:
        space = BoxSpace((size,), -1.0, 1.0)
        for _ in range(3):
            mean = rng.standard_normal(size).astype(np.float32)
            log_std = (spread * rng.standard_normal(size)).astype(np.float32)
            inputs = np.concatenate([mean, log_std])
            action = (mean + np.exp(log_std) * rng.standard_normal(size)).astype(np.float32)
            logp = log_prob(space, inputs[None], action[None])[0]
            cases.append({"action_space": space_json(space), "dist_inputs": floats(inputs), "action": floats(action),
                          "logp": float(logp)})
    return {"cases": cases}


def action_for_env_vectors() -> dict:
    rng = np.random.default_rng(22)
    spaces = [BoxSpace((1,), -2.0, 2.0), BoxSpace((3,), [-1.0, 0.0, -5.0], [1.0, 10.0, 0.5]),
              BoxSpace((2,), -np.inf, np.inf), BoxSpace((2,), [-1.0, -np.inf], [1.0, 3.0])]
    cases = []
    for space in spaces:
        for normalize, clip in [(True, False), (False, True), (False, False), (True, True)]:
            sampled = (1.5 * rng.standard_normal(space.size)).astype(np.float32)
            for_env = action_for_env(space, sampled[None], normalize=normalize, clip=clip)[0]
            cases.append({"action_space": space_json(space), "normalize": normalize, "clip": clip,
                          "sampled": floats(sampled), "for_env": floats(for_env)})
    return {"cases": cases}


FILES = {"mlp.json": mlp_vectors, "logp.json": logp_vectors, "action_for_env.json": action_for_env_vectors}


def write(out: Path) -> list[Path]:
    """Write every file into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in FILES.items():
        path = out / name
        path.write_text(json.dumps(make(), separators=(",", ":")) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(path)
