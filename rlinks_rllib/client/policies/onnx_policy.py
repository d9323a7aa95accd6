"""Any exported RLlib module on the simulator, run with onnxruntime: no torch, no Ray.

The runner exports its module's inference pass once per architecture
(:func:`rlinks_rllib.server.graph_export.export_policy_graph`) with the
weights as graph inputs, so :class:`OnnxPolicy` takes the graph once and then
the same state dicts from ``SET_STATE`` that :class:`~.numpy_policy.NumpyPolicy`
takes. It runs CNNs, Dict observations of images and vectors, and recurrent
(LSTM) modules, whose state the caller carries from step to step
(:meth:`OnnxPolicy.initial_state`, :attr:`PolicyOutput.state_out`).

onnxruntime is imported when a policy is made, so the rest of the client
installs without it (``pip install 'rlinks-rllib[onnx]'`` brings it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...protocol.policy_graph import METADATA_KEY, GraphInterfaceError, read_interface
from ...protocol.spaces import SpaceMismatch, check_column, leaves
from .action_spaces import as_action_space
from .mlp import UnsupportedModelError
from .numpy_policy import Policy
from .sampling import PolicyOutput

__all__ = ["OnnxPolicy"]


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise ImportError(
            "OnnxPolicy needs onnxruntime (pip install 'rlinks-rllib[onnx]' or onnxruntime); "
            "NumpyPolicy runs RLlib's default MLP modules without it"
        ) from exc
    return onnxruntime


class OnnxPolicy(Policy):
    """An exported RLModule behind the client policy interface.

    Args:
        graph: the ONNX bytes the runner exported.
        params: the module's state as RLlib sends it in ``SET_STATE``; only
            the parameters the graph reads are kept.
        action_space: ``Discrete``/``Box``, in any form
            :func:`~.action_spaces.as_action_space` takes.
        normalize_actions, clip_actions, rng: as for :class:`~.numpy_policy.NumpyPolicy`.
        threads: onnxruntime's intra-op threads (1 keeps a simulator's other
            cores free).

    Raises:
        UnsupportedModelError: *graph* is not an exported policy (no
            interface in its metadata, or one of another version), or
            *params* lack a parameter it reads or have one of another shape.
        ImportError: onnxruntime is not installed.
    """

    def __init__(
        self,
        graph: bytes,
        params: Mapping[str, Any],
        action_space: Any,
        *,
        normalize_actions: bool = True,
        clip_actions: bool = False,
        rng: np.random.Generator | None = None,
        threads: int = 1,
    ) -> None:
        ort = _onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(bytes(graph), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own unexported classes
            raise UnsupportedModelError(f"onnxruntime cannot load the graph: {exc}") from exc
        self._interface = _read_interface(self._session)
        self._space = self._interface["observation_space"]
        self._shapes = {i.name: i.shape for i in self._session.get_inputs()}
        self.action_space = as_action_space(action_space)
        self._normalize = normalize_actions
        self._clip = clip_actions
        self._rng = rng if rng is not None else np.random.default_rng()
        self._params: dict[str, np.ndarray] = {}
        self.set_params(params)

    @property
    def stateful(self) -> bool:
        """Whether the module is recurrent: each step takes the state the last one gave."""
        return bool(self._interface["state_inputs"])

    def initial_state(self, batch: int = 1) -> dict[str, np.ndarray]:
        """The state a recurrent module starts an episode with, for *batch* agents, by state key."""
        return {
            key: np.repeat(np.asarray(value, np.float32)[None], batch, axis=0)
            for key, value in self._interface["initial_state"].items()
        }

    def _observation_shape(self) -> tuple[int, ...] | None:
        return tuple(self._space["shape"]) if self._space["kind"] == "box" else None

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Feed the graph a newer weight set; the old one stays if this one doesn't fit.

        Raises:
            UnsupportedModelError: a parameter the graph reads is missing or
                has another shape.
            TypeError: *params* is not a mapping.
        """
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a mapping of name to array, got {type(params).__name__}")
        fresh = {}
        for name in self._interface["parameters"]:
            if name not in params:
                raise UnsupportedModelError(f"the weights lack {name!r}, which the graph reads")
            value = np.ascontiguousarray(params[name], dtype=np.float32)
            want = self._shapes[name]
            if list(value.shape) != list(want):
                raise UnsupportedModelError(f"weight {name!r} has shape {list(value.shape)}, the graph takes {want}")
            fresh[name] = value
        self._params = fresh

    def _observation_feeds(self, obs: Any) -> tuple[dict[str, np.ndarray], int]:
        first = obs
        while isinstance(first, (dict, list, tuple)) and not isinstance(first, np.ndarray) and len(first):
            first = next(iter(first.values())) if isinstance(first, dict) else first[0]
        batch = len(np.asarray(first)) if np.ndim(first) else 0
        if batch == 0:
            raise ValueError("observations need a batch dimension")
        try:
            checked = check_column(self._space, obs, batch, what="observations")
        except SpaceMismatch as exc:
            raise ValueError(str(exc)) from exc
        feeds = {}
        for name, (path, _) in zip(self._interface["observation_inputs"], leaves(self._space)):
            node = checked
            for part in path:
                node = node[part]
            feeds[name] = np.ascontiguousarray(node)
        return feeds, batch

    def _run(self, obs: Any, state: Mapping[str, np.ndarray] | None) -> tuple[np.ndarray, dict | None]:
        feeds, batch = self._observation_feeds(obs)
        if self.stateful:
            state = state if state is not None else self.initial_state(batch)
            for key, name in zip(self._interface["state_keys"], self._interface["state_inputs"]):
                if key not in state:
                    raise ValueError(f"the state lacks {key!r}")
                feeds[name] = np.ascontiguousarray(state[key], dtype=np.float32)
        feeds.update(self._params)
        outputs = self._session.run(None, feeds)
        logits = outputs[0]
        if not self.stateful:
            return logits, None
        return logits, dict(zip(self._interface["state_keys"], outputs[1:]))

    def action_dist_inputs(self, obs: Any, state: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """The module's ``action_dist_inputs`` for a batch (a recurrent one from *state*).

        Raises:
            ValueError: as :meth:`compute_actions`.
        """
        return self._run(obs, state)[0]

    def compute_actions(
        self,
        obs: Any,
        *,
        state: Mapping[str, np.ndarray] | None = None,
        explore: bool = True,
        rng: np.random.Generator | None = None,
    ) -> PolicyOutput:
        """Sample (``explore``) or pick greedily an action for each observation.

        *obs* is a batch in the observation space's stacked form: an array
        for a ``Box``, a dict (or list) of arrays with a leading batch axis
        for a ``Dict`` (or ``Tuple``). A recurrent policy takes *state* (by
        default :meth:`initial_state`) and returns the next one in
        ``state_out``, keyed by the module's state keys: what the next step
        takes, and what the episode records per step as ``state_out`` for
        RLlib's learner.

        Raises:
            ValueError: the observations don't fit the space (the message
                names the key path), the state lacks an entry, or the
                logits are not finite.
        """
        logits, state_out = self._run(obs, state)
        return self._act_on(logits, explore, rng, state_out)

    def compute_action(
        self,
        obs: Any,
        *,
        state: Mapping[str, np.ndarray] | None = None,
        explore: bool = True,
        rng: np.random.Generator | None = None,
    ) -> PolicyOutput:
        """:meth:`compute_actions` for one observation (and one agent's state), no batch axis.

        Raises:
            ValueError: as :meth:`compute_actions`.
        """
        batched_state = None if state is None else {k: np.asarray(v)[None] for k, v in state.items()}
        batched = _add_batch_axis(self._space, obs)
        return self.compute_actions(batched, state=batched_state, explore=explore, rng=rng).row(0)


def _add_batch_axis(desc: dict, obs: Any) -> Any:
    """One observation as a batch of one, following the space (what doesn't fit is left for the check)."""
    if desc["kind"] == "dict" and isinstance(obs, dict):
        return {k: _add_batch_axis(desc["spaces"][k], v) if k in desc["spaces"] else v for k, v in obs.items()}
    if desc["kind"] == "tuple" and isinstance(obs, (list, tuple)) and len(obs) == len(desc["spaces"]):
        return [_add_batch_axis(sub, v) for sub, v in zip(desc["spaces"], obs)]
    if desc["kind"] in ("dict", "tuple"):
        return obs
    return np.asarray(obs)[None]


def _read_interface(session: Any) -> dict:
    """The interface the exporter wrote into the graph's metadata, checked against its inputs.

    Raises:
        UnsupportedModelError: it is missing or doesn't fit the graph.
    """
    props = session.get_modelmeta().custom_metadata_map
    if METADATA_KEY not in props:
        raise UnsupportedModelError(f"the graph has no {METADATA_KEY!r} metadata: it was not exported for rlinks")
    try:
        return read_interface(props[METADATA_KEY], (i.name for i in session.get_inputs()))
    except GraphInterfaceError as exc:
        raise UnsupportedModelError(str(exc)) from exc
