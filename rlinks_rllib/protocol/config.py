"""The msgpack description of a runner's setup that ``SET_CONFIG`` carries.

RLlib's server answers ``GET_CONFIG`` with its whole ``AlgorithmConfig``
pickled, which only a Python peer with the same Ray can read and which runs
code when unpickled. Ours sends a plain map instead::

    {
      "version": 1,
      "algorithm": "PPO",
      "observation_space": <space>,   # see spaces.py
      "action_space": <space>,
      "rollout_fragment_length": 500, # env steps per batch the runner expects
      "on_policy": true,              # send EPISODES_AND_GET_STATE and wait for SET_STATE
      "model_config": {"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh",
                       "vf_share_layers": false, ...},
      "weights_layout": {"pi.net.mlp.0.weight": [2, 256], ...},  # optional
      "policy_graph": <bin>,          # optional: ONNX bytes, to a client that asked (policy_graph)
      "paced_in_flight": 1            # optional: an off-policy client keeps at most this many batches
                                      # sent and not yet confirmed (a runner that paces its clients)
    }

When the runner is told ``unsafe_pickle_config`` the ``config`` field holds
RLlib's pickle (for RLlib's own client) and this map moves to
``rlinks_config``.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import InvalidMessage
from .spaces import check_space

__all__ = ["CONFIG_VERSION", "PACED_IN_FLIGHT_KEY", "POLICY_GRAPH_KEY", "build_config", "read_config"]

CONFIG_VERSION = 1
#: The description's key for the exported policy graph (``policy_graph`` extension).
POLICY_GRAPH_KEY = "policy_graph"
#: The description's key for how many batches an off-policy client may have sent and not yet had confirmed
#: (a runner that paces its clients, ``off_policy_backlog: pace``); absent: as many as the client likes.
PACED_IN_FLIGHT_KEY = "paced_in_flight"


def build_config(
    *,
    algorithm: str,
    observation_space: dict,
    action_space: dict,
    rollout_fragment_length: int,
    on_policy: bool,
    model_config: Mapping[str, Any],
    weights_layout: Mapping[str, list[int]] | None = None,
    **extra: Any,
) -> dict:
    """The ``SET_CONFIG`` description; space arguments come from ``describe_space``."""
    config = {
        "version": CONFIG_VERSION,
        "algorithm": algorithm,
        "observation_space": observation_space,
        "action_space": action_space,
        "rollout_fragment_length": int(rollout_fragment_length),
        "on_policy": bool(on_policy),
        "model_config": dict(model_config),
    }
    if weights_layout is not None:
        config["weights_layout"] = {k: [int(d) for d in v] for k, v in weights_layout.items()}
    config.update(extra)
    return config


def read_config(message: Mapping[str, Any]) -> dict | None:
    """The description in a ``SET_CONFIG`` message, or ``None`` if it only holds RLlib's pickle.

    Never unpickles anything.

    Raises:
        InvalidMessage: the description is present but malformed.
    """
    config = message.get("config")
    if not isinstance(config, dict):
        config = message.get("rlinks_config")
    if config is None:
        return None
    if not isinstance(config, dict):
        raise InvalidMessage("SET_CONFIG description must be a map")
    for key, kind in (("algorithm", str), ("rollout_fragment_length", int), ("on_policy", bool), ("model_config", dict)):
        if not isinstance(config.get(key), kind):
            raise InvalidMessage(f"SET_CONFIG description needs {key!r} of type {kind.__name__}")
    check_space(config.get("observation_space"))
    check_space(config.get("action_space"))
    if not isinstance(config.get(POLICY_GRAPH_KEY, b""), bytes):
        raise InvalidMessage(f"SET_CONFIG description's {POLICY_GRAPH_KEY!r} must be bin (ONNX bytes)")
    return config
