"""What EnvClient simulators of a sample server act with: the ``SET_CONFIG`` they read and the model's form.

A runner describes its RLlib algorithm; a dataset (:class:`~.server.SampleServer`
with simulators) has no algorithm, only the spaces it was told and the model
the user's loop syncs. :class:`SimulatorModel` builds the same description
(:func:`~rlinks_rllib.protocol.config.build_config`, PROTOCOL.md 10.10) saying:
off-policy (the simulators never wait for an update), and either RLlib's
default MLP (weights only: the client runs it in numpy, ``client/policies/mlp.py``) or
the policy graph of any other module (``policy_graph``, PROTOCOL.md 10.7).

The model's form is fixed by the first one synced, as a runner's is by its
RLModule: a client builds its policy once, from the config and first weights,
and takes later weights into it. A later sync must have the same parameter
names and shapes (:meth:`SimulatorModel.accept` says so); each new weight set
is a new version, packed once for every client by the sample server.

No threads here: the server waits for the first model under its own lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from .._version import SERVER_AGENT
from ..client.policies.choice import policy_for
from ..client.policies.mlp import UnsupportedModelError
from ..protocol.config import POLICY_GRAPH_KEY, build_config
from ..protocol.framing import encode_message
from ..protocol.messages import MessageType
from ..protocol.spaces import describe_space

__all__ = ["SimulatorModel", "DATASET_ALGORITHM", "DEFAULT_FRAGMENT_STEPS"]

#: The ``algorithm`` a dataset's description names: the user's own loop, not one of RLlib's.
DATASET_ALGORITHM = "RLinkDataset"
#: Env steps a simulator records before it sends them (the description's ``rollout_fragment_length``).
DEFAULT_FRAGMENT_STEPS = 200
#: Model config keys the description carries (what the client's policies read; JSON-able values only).
_DESCRIBED = (int, float, str, bool, list, type(None))


class SimulatorModel:
    """The spaces, the model config and the form of the model a dataset's simulators run.

    Args:
        observation_space, action_space: the simulators' gymnasium spaces.
        model_config: RLlib's ``model_config`` of the module the user's loop trains (its
            ``fcnet_activation`` and ``head_fcnet_activation`` tell the client how to run RLlib's
            default MLP; RLlib's defaults when absent).
        fragment_steps: env steps a simulator records before it sends them.

    Raises:
        ValueError: ``fragment_steps`` is not a positive int.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 model_config: Optional[Mapping[str, Any]] = None,
                 fragment_steps: int = DEFAULT_FRAGMENT_STEPS) -> None:
        if type(fragment_steps) is not int or fragment_steps < 1:
            raise ValueError(f"fragment_steps must be an int >= 1, got {fragment_steps!r}")
        self.observation_space = observation_space
        self.action_space = action_space
        self.model_config = dict(model_config or {})
        self.fragment_steps = fragment_steps
        self._spaces = (describe_space(observation_space), describe_space(action_space))
        #: name -> shape of the first model synced; None until then.
        self._layout: Optional[dict[str, tuple[int, ...]]] = None
        self._graph: Optional[bytes] = None
        self._frames: dict[bool, bytes] = {}

    @property
    def ready(self) -> bool:
        """Whether a model was synced (simulators asking for the config wait until then)."""
        return self._layout is not None

    @property
    def uses_graph(self) -> bool:
        """Whether the simulators run the model as a policy graph (``False``: RLlib's default MLP in numpy)."""
        return self._graph is not None

    def runs_in_numpy(self, params: Mapping[str, Any]) -> bool:
        """Whether a client runs ``params`` as RLlib's default MLP (no graph needed): the client's own test."""
        try:
            policy_for(self.description(with_graph=False), params)
        except (UnsupportedModelError, TypeError, KeyError):
            return False
        return True

    def accept(self, params: Mapping[str, np.ndarray], graph: Optional[bytes] = None) -> None:
        """Take ``params`` as the next weights; the first call fixes the model's form.

        Args:
            params: parameter name -> numpy array.
            graph: the module as an ONNX policy graph (``server/graph_export.py``), needed the
                first time when ``params`` are not RLlib's default MLP; ignored later.

        Raises:
            ValueError: the first model is neither RLlib's default MLP nor comes with a graph, or a
                later one has other parameter names or shapes than the first.
        """
        layout = {name: tuple(np.shape(value)) for name, value in params.items()}
        if self._layout is None:
            if graph is None and not self.runs_in_numpy(params):
                raise ValueError("these weights are not RLlib's default MLP for the dataset's spaces and "
                                 "model_config: sync the torch module itself, so that its policy graph goes "
                                 "to the simulators")
            self._layout, self._graph = layout, graph
            return
        if layout != self._layout:
            missing = sorted(set(self._layout) - set(layout))[:3]
            extra = sorted(set(layout) - set(self._layout))[:3]
            other = sorted(n for n in set(layout) & set(self._layout) if layout[n] != self._layout[n])[:3]
            raise ValueError("the simulators run the model first synced, and these weights have another form "
                             f"(missing {missing}, new {extra}, other shapes {other}): a dataset keeps one "
                             "architecture")

    def description(self, *, with_graph: bool) -> dict:
        """The ``SET_CONFIG`` description (with the policy graph when ``with_graph`` and there is one)."""
        extra = {POLICY_GRAPH_KEY: self._graph} if with_graph and self._graph is not None else {}
        return build_config(
            algorithm=DATASET_ALGORITHM,
            observation_space=self._spaces[0],
            action_space=self._spaces[1],
            rollout_fragment_length=self.fragment_steps,
            on_policy=False,
            model_config={k: v for k, v in self.model_config.items() if isinstance(v, _DESCRIBED)},
            weights_layout=self._layout,
            server=SERVER_AGENT,
            **extra,
        )

    def config_frame(self, *, with_graph: bool) -> bytes:
        """The ``SET_CONFIG`` frame, encoded once per form (call once :attr:`ready`)."""
        with_graph = with_graph and self._graph is not None
        if with_graph not in self._frames:
            message = {"type": MessageType.SET_CONFIG.value, "config": self.description(with_graph=with_graph)}
            self._frames[with_graph] = encode_message(message)
        return self._frames[with_graph]
