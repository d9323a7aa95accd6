"""A torch model from the user's own loop, in the forms a dataset's simulators take it.

:class:`~.torch_dataset.RLinkSyncModel` sends what :func:`weights_of` reads from a
module or state dict. EnvClient simulators run RLlib's default MLP from those
weights in numpy; any other module also needs its architecture, which
:func:`policy_graph_of` exports once (ONNX, weights as graph inputs, with
``server/graph_export.py``: the runner's own exporter). :func:`default_module`
builds the module a simulator runs in numpy: RLlib's default torch RLModule
of an algorithm (PPO, APPO, IMPALA, SAC, DQN) for the dataset's spaces.

A plain ``torch.nn.Module`` (not an RLModule) is exported as a policy: it
takes a batch of observations and returns RLlib's ``action_dist_inputs``
(logits for a ``Discrete`` action space; means and log-stds for a ``Box``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any, Optional, Union

import numpy as np
import torch

__all__ = ["weights_of", "policy_graph_of", "default_module", "ModelLike"]

#: What ``RLinkSyncModel.sync`` takes: a module, a state dict, or a ``torch.save`` file of one.
ModelLike = Union[torch.nn.Module, Mapping[str, Any], str, os.PathLike]


def _is_rl_module(model: Any) -> bool:
    return hasattr(model, "forward_inference") and hasattr(model, "get_state")


def weights_of(model: ModelLike) -> dict[str, np.ndarray]:
    """``model``'s parameters as name -> numpy array, named as simulators read them.

    An RLModule gives ``get_state(inference_only=True)`` (what a runner
    sends); another module its ``state_dict()``; a path is read with
    ``torch.load(weights_only=True)``.

    Raises:
        OSError: a path that can't be read.
        TypeError: a value that is not a tensor or array.
    """
    if isinstance(model, (str, os.PathLike)):
        model = torch.load(model, map_location="cpu", weights_only=True)
    if isinstance(model, torch.nn.Module):
        state = model.get_state(inference_only=True) if _is_rl_module(model) else model.state_dict()
    else:
        state = model
    params = {}
    for name, value in state.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        elif not isinstance(value, (np.ndarray, np.generic, int, float)):
            raise TypeError(f"weight {name!r} is a {type(value).__name__}, not a tensor or array")
        params[name] = np.asarray(value)
    return params


class _AsRLModule(torch.nn.Module):
    """A plain policy module (observations -> ``action_dist_inputs``) as the exporter reads an RLModule.

    Its parameters are the wrapped module's under the same names (not
    ``net.``-prefixed), so the graph's weight inputs are named as the
    module's own ``state_dict()``.
    """

    def __init__(self, net: torch.nn.Module, observation_space: Any) -> None:
        super().__init__()
        for name, child in net.named_children():
            self.add_module(name, child)
        for name, param in net.named_parameters(recurse=False):
            self.register_parameter(name, param)
        object.__setattr__(self, "_net", net)  # called, not registered a second time
        self.observation_space = observation_space

    def is_stateful(self) -> bool:
        return False

    def get_initial_state(self) -> dict:
        return {}

    def forward_inference(self, batch: dict) -> dict:
        from ray.rllib.core.columns import Columns

        return {Columns.ACTION_DIST_INPUTS: self._net(batch[Columns.OBS])}


def policy_graph_of(module: torch.nn.Module, observation_space: Any) -> bytes:
    """``module``'s inference pass as ONNX bytes with its weights as inputs (PROTOCOL.md 10.7).

    An RLModule is exported as a runner exports its own; any other module as
    a policy from observations to ``action_dist_inputs``. A module on a GPU
    is exported from a CPU copy (the exporter's example observations are on
    the CPU); the module itself is left as it was.

    Raises:
        ExportError: torch can't export it (or onnx is not installed).
    """
    from ..server.graph_export import export_policy_graph

    on_cpu = all(p.device.type == "cpu" for p in module.parameters())
    source = module if on_cpu else copy.deepcopy(module).cpu()
    was_training = source.training
    try:
        return export_policy_graph(source if _is_rl_module(source) else _AsRLModule(source, observation_space))
    finally:
        source.train(was_training)


def default_module(algorithm: str, observation_space: Any, action_space: Any,
                   model_config: Optional[Mapping[str, Any]] = None) -> torch.nn.Module:
    """RLlib's default torch RLModule of ``algorithm`` for these spaces (what a simulator runs in numpy).

    Args:
        algorithm: an RLlib algorithm's name: ``"PPO"``, ``"APPO"``, ``"IMPALA"``, ``"SAC"``, ``"DQN"``.
        observation_space, action_space: gymnasium spaces (a 1-D ``Box`` observation runs in numpy).
        model_config: RLlib's ``model_config`` (``fcnet_hiddens``, ``fcnet_activation``, ...).

    Raises:
        ValueError: an algorithm RLlib does not know.
    """
    from ray.tune.registry import get_trainable_cls

    try:
        config = get_trainable_cls(algorithm).get_default_config()
    except Exception as exc:  # noqa: BLE001 - Tune raises a TuneError of its own for an unknown name
        raise ValueError(f"RLlib has no algorithm {algorithm!r}: {exc}") from exc
    config = config.rl_module(model_config=dict(model_config or {}))
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = observation_space, action_space
    spec.model_config = config.model_config  # the algorithm's own defaults beside the user's (DQN's num_atoms)
    return spec.build()
