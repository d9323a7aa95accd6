"""One call that picks the client policy a runner's config needs.

RLlib's default MLP on a vector observation runs in numpy
(:class:`~.numpy_policy.NumpyPolicy` for PPO, APPO, IMPALA and SAC,
:class:`~.q_policy.QPolicy` for DQN, told apart by the weights' names;
nothing to install); anything else (a CNN, a
``Dict`` of image and vector, an LSTM, a custom module) runs as the policy
graph the runner exported (:class:`~.onnx_policy.OnnxPolicy`, with
onnxruntime), which the runner sends in ``SET_CONFIG`` to a client that asked
for it (``policy_graph``, PROTOCOL.md 10.7).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...protocol.config import POLICY_GRAPH_KEY
from .mlp import UnsupportedModelError
from .numpy_policy import NumpyPolicy, Policy
from .q_network import is_q_module
from .q_policy import QPolicy

__all__ = ["policy_for"]


def policy_for(
    config: Mapping[str, Any],
    params: Mapping[str, Any],
    *,
    rng: np.random.Generator | None = None,
    normalize_actions: bool = True,
    clip_actions: bool = False,
) -> Policy:
    """The policy for a runner's *config* (``get_config()``) and first weights.

    NumpyPolicy when the observation is a vector and the weights are RLlib's
    default MLP (QPolicy for DQN's, exploring with the config's epsilon
    schedule at timestep 0: whoever learns the runner's timestep moves it on
    with ``set_timestep``); otherwise OnnxPolicy over the config's policy graph.

    Raises:
        UnsupportedModelError: the module needs the policy graph and the
            config has none (the client did not ask for ``policy_graph``, or
            the runner is not ours), or the graph and weights don't fit.
        ImportError: the graph needs onnxruntime and it is not installed.
    """
    model = config.get("model_config") or {}
    space = config.get("observation_space") or {}
    vector = space.get("kind") == "box" and len(space.get("shape", ())) == 1
    options = dict(rng=rng, normalize_actions=normalize_actions, clip_actions=clip_actions)
    numpy_error = None
    if vector and not model.get("use_lstm"):
        activations = dict(fcnet_activation=model.get("fcnet_activation", "tanh"),
                           head_fcnet_activation=model.get("head_fcnet_activation", "relu"))
        try:
            if is_q_module(params):
                return QPolicy(params, config["action_space"], epsilon=model.get("epsilon", 0.0),
                               v_min=model.get("v_min", -10.0), v_max=model.get("v_max", 10.0),
                               **activations, **options)
            return NumpyPolicy(params, config["action_space"], **activations, **options)
        except UnsupportedModelError as exc:
            numpy_error = exc
    graph = config.get(POLICY_GRAPH_KEY)
    if graph is None:
        why = f"NumpyPolicy can't run it ({numpy_error})" if numpy_error else "it is not RLlib's default MLP on a vector"
        raise UnsupportedModelError(
            f"the runner's module needs its policy graph: {why}; connect with the 'policy_graph' extension "
            "(RLinkClient(..., extensions=[..., 'policy_graph'])) to an rlinks runner"
        )
    from .onnx_policy import OnnxPolicy

    return OnnxPolicy(graph, params, config["action_space"], **options)
