"""The wire form of a weight set, as RLlib's server puts it in ``SET_STATE``.

RLlib's ``EnvRunnerServerForExternalInference.get_state()`` sends::

    {"rl_module": {param_name: ndarray, ...}, "weights_seq_no": int}

where the parameter dict is ``module.get_state(inference_only=True)``: flat,
dotted torch names (``encoder.actor_encoder.net.mlp.0.weight``,
``pi.net.mlp.0.bias``, ``pi.log_std_clip_param_const``, ...). A state taken
from a ``MultiRLModule`` nests that dict one level down, under
``"default_policy"``; RLlib's own ``set_state`` unwraps it, and so does
:func:`read_state`.

A ``weights_seq_no`` of 0 means "no number yet, apply anyway" to RLlib, so 0 is
valid here too.

Both functions raise :class:`WeightsError` for anything else: an
:class:`~.errors.InvalidMessage` when it arrives from a peer, and a
``ValueError`` for a caller that builds a weight set from bad arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InvalidMessage

__all__ = [
    "WeightsError",
    "COMPONENT_RL_MODULE",
    "WEIGHTS_SEQ_NO",
    "DEFAULT_MODULE_ID",
    "build_state",
    "read_state",
    "check_params",
    "check_seq_no",
]

#: Key of the parameter dict in a weight set (RLlib's ``COMPONENT_RL_MODULE``).
COMPONENT_RL_MODULE = "rl_module"
#: Key of the weight set's sequence number (RLlib's ``WEIGHTS_SEQ_NO``).
WEIGHTS_SEQ_NO = "weights_seq_no"
#: Module id under which a multi-module state holds the single-agent module.
DEFAULT_MODULE_ID = "default_policy"

class WeightsError(InvalidMessage, ValueError):
    """A weight set is not a map of named numeric arrays with a ``weights_seq_no`` >= 0."""


#: numpy kinds a parameter may have: bool, signed/unsigned integer, float.
_NUMERIC_KINDS = frozenset("biuf")


def build_state(params: Mapping[str, np.ndarray], seq_no: int) -> dict[str, Any]:
    """Return the weight set that carries *params* as version *seq_no*.

    The arrays are not copied. *params* is checked as :func:`read_state` checks
    what arrives, so a sender can't put on the wire what a receiver refuses.

    Raises:
        WeightsError: a name is not a non-empty string, a value is not a numeric
            numpy array, or *seq_no* is not an integer >= 0.
    """
    return {
        COMPONENT_RL_MODULE: check_params(params),
        WEIGHTS_SEQ_NO: check_seq_no(seq_no),
    }


def read_state(state: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
    """Return ``(params, seq_no)`` from a weight set received in ``SET_STATE``.

    A parameter dict nested under ``"default_policy"`` is unwrapped. Keys of
    *state* other than the two above are other components of an RLlib state
    and are not ours to read; they are left alone.

    Raises:
        WeightsError: *state* is not a mapping, lacks ``"rl_module"`` or
            ``"weights_seq_no"``, holds more modules than ``"default_policy"``,
            or a parameter or the sequence number has the wrong type (see
            :func:`build_state`).
    """
    if not isinstance(state, Mapping):
        raise WeightsError(f"weight set must be a map, got {type(state).__name__}")
    for key in (COMPONENT_RL_MODULE, WEIGHTS_SEQ_NO):
        if key not in state:
            raise WeightsError(f"weight set lacks {key!r} (has {_some_keys(state)})")
    params = state[COMPONENT_RL_MODULE]
    if isinstance(params, Mapping) and DEFAULT_MODULE_ID in params:
        others = [key for key in params if key != DEFAULT_MODULE_ID]
        if others:
            raise WeightsError(
                f"weight set holds modules other than {DEFAULT_MODULE_ID!r} "
                f"({_some_keys(others)}); only single-agent modules are supported"
            )
        params = params[DEFAULT_MODULE_ID]
    return check_params(params), check_seq_no(state[WEIGHTS_SEQ_NO])


def check_params(params: Any) -> dict[str, np.ndarray]:
    """*params* checked as a parameter map (names to numeric arrays); raises WeightsError."""
    if not isinstance(params, Mapping):
        raise WeightsError(
            f"{COMPONENT_RL_MODULE!r} must map parameter names to arrays, "
            f"got {type(params).__name__}"
        )
    checked: dict[str, np.ndarray] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name:
            raise WeightsError(f"parameter name must be a non-empty string, got {name!r}")
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            raise WeightsError(
                f"parameter {name!r} must be a numpy array, got {type(value).__name__}"
            )
        if value.dtype.kind not in _NUMERIC_KINDS:
            raise WeightsError(
                f"parameter {name!r} has dtype {value.dtype}; "
                "only bool, integer and float arrays are weights"
            )
        checked[name] = value
    return checked


def check_seq_no(seq_no: Any) -> int:
    """*seq_no* checked as an int >= 0; raises WeightsError."""
    # bool is an int to Python, but True is no sequence number.
    if isinstance(seq_no, (bool, np.bool_)) or not isinstance(seq_no, (int, np.integer)):
        raise WeightsError(f"{WEIGHTS_SEQ_NO!r} must be an integer, got {type(seq_no).__name__}")
    if seq_no < 0:
        raise WeightsError(f"{WEIGHTS_SEQ_NO!r} must be >= 0, got {seq_no}")
    return int(seq_no)


def _some_keys(keys: Any, limit: int = 8) -> str:
    """A short, bounded listing of a peer's keys for an error message."""
    shown = [repr(key)[:64] for _, key in zip(range(limit), keys)]
    more = len(keys) - len(shown) if hasattr(keys, "__len__") else 0
    return ", ".join(shown) + (f", ... ({more} more)" if more > 0 else "") or "no keys"
