"""The interface of an exported policy graph: what its inputs and outputs are called.

The runner exports its module's inference pass to ONNX with the weights as
graph inputs (:mod:`rlinks_rllib.server.graph_export`); a client runs it
with any ONNX runtime (:class:`rlinks_rllib.client.policies.onnx_policy.OnnxPolicy` in
Python). Both sides agree on the names through this module, and the graph
carries them in its metadata entry :data:`METADATA_KEY` as JSON::

    {"version": 1,
     "observation_space": <space, JSON>,        # spaces.py, arrays as lists
     "observation_inputs": ["obs['camera']", "obs['joints']"],
     "state_keys": ["h", "c"],                              # [] if stateless
     "state_inputs": ["state_in['h']", "state_in['c']"],
     "state_outputs": ["state_out['h']", "state_out['c']"],
     "initial_state": {"h": [0.0, ...], "c": [...]},
     "parameters": ["encoder.encoder.net.mlp.0.weight", ...],
     "output": "action_dist_inputs"}

Observation inputs follow :func:`~.spaces.leaves` (``obs`` alone for a plain
space), each with a leading batch axis in the leaf's dtype (a ``Discrete`` as
int64). Parameters are named as in RLlib's state dict, so a ``SET_STATE``
feeds them unchanged. A recurrent module's state keys are its own (``h``,
``c`` for RLlib's LSTM): the keys of the ``state_out`` a client records per
step for the learner.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import numpy as np

from .errors import RLinksError
from .spaces import check_space, format_path, leaves

__all__ = [
    "METADATA_KEY",
    "OUTPUT",
    "VERSION",
    "GraphInterfaceError",
    "observation_input_names",
    "state_names",
    "make_interface",
    "read_interface",
]

METADATA_KEY = "rlinks.policy"
OUTPUT = "action_dist_inputs"
VERSION = 1


class GraphInterfaceError(RLinksError, ValueError):
    """A graph's interface is missing, of another version, or does not match its inputs."""


def observation_input_names(space_desc: dict) -> list[str]:
    """``["obs"]`` for a plain space, else ``obs`` plus each leaf's key path."""
    return [f"obs{format_path(path)}" for path, _ in leaves(space_desc)]


def state_names(prefix: str, keys: Iterable[str]) -> list[str]:
    """``state_in['h']``...: a recurrent module's state entries as graph names."""
    return [f"{prefix}{format_path((key,))}" for key in keys]


def make_interface(space_desc: dict, initial_state: dict, parameters: list[str]) -> str:
    """The JSON of a graph's interface (*initial_state*: state key → array, no batch axis)."""
    return json.dumps(
        {
            "version": VERSION,
            "observation_space": _to_json(space_desc),
            "observation_inputs": observation_input_names(space_desc),
            "state_keys": list(initial_state),
            "state_inputs": state_names("state_in", initial_state),
            "state_outputs": state_names("state_out", initial_state),
            "initial_state": {key: np.asarray(value).tolist() for key, value in initial_state.items()},
            "parameters": list(parameters),
            "output": OUTPUT,
        }
    )


def read_interface(text: str, input_names: Iterable[str]) -> dict:
    """Parse and check a graph's interface against the graph's actual input names.

    Returns the interface with ``observation_space`` as a checked space
    description (arrays, not lists).

    Raises:
        GraphInterfaceError: not JSON, another version, a malformed space, or
            names that the graph's inputs don't have.
    """
    try:
        interface = json.loads(text)
    except ValueError as exc:
        raise GraphInterfaceError("the graph's interface is not JSON") from exc
    if not isinstance(interface, dict) or interface.get("version") != VERSION:
        raise GraphInterfaceError(f"the graph's interface is not of version {VERSION}")
    try:
        space = check_space(_from_json(interface["observation_space"]))
        names = [interface[key] for key in ("observation_inputs", "state_inputs", "state_outputs", "parameters")]
        keys = interface["state_keys"]
        initial = interface["initial_state"]
    except (KeyError, TypeError, ValueError) as exc:
        raise GraphInterfaceError(f"the graph's interface is malformed: {exc}") from exc
    if interface["observation_inputs"] != observation_input_names(space):
        raise GraphInterfaceError("the graph's observation inputs don't follow its observation space")
    if not all(isinstance(group, list) and all(isinstance(n, str) for n in group) for group in names):
        raise GraphInterfaceError("the graph's interface names must be lists of strings")
    if not isinstance(keys, list) or names[1] != state_names("state_in", keys) or names[2] != state_names("state_out", keys):
        raise GraphInterfaceError("the graph's state inputs and outputs don't follow its state keys")
    if not isinstance(initial, dict) or sorted(initial) != sorted(keys):
        raise GraphInterfaceError("the graph's initial state doesn't give every state key")
    present = set(input_names)
    missing = [n for n in names[0] + names[1] + names[3] if n not in present]
    if missing:
        raise GraphInterfaceError(f"the graph has no input {missing[0]!r} that its interface names")
    interface["observation_space"] = space
    return interface


def _to_json(desc: Any) -> Any:
    if isinstance(desc, dict):
        return {k: _to_json(v) for k, v in desc.items()}
    if isinstance(desc, list):
        return [_to_json(v) for v in desc]
    if isinstance(desc, np.ndarray):
        return desc.tolist()
    return desc


def _from_json(desc: Any) -> Any:
    if isinstance(desc, list):
        return [_from_json(v) for v in desc]
    if not isinstance(desc, dict):
        return desc
    out = {k: _from_json(v) for k, v in desc.items()}
    if out.get("kind") == "box":
        dtype = np.dtype(out["dtype"])
        out["low"], out["high"] = (np.asarray(out[b], dtype=dtype) for b in ("low", "high"))
    elif out.get("kind") == "multi_discrete":
        out["nvec"] = np.asarray(out["nvec"], dtype=np.int64)
    return out
