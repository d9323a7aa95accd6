"""The wire form of observation and action spaces, without gymnasium.

RLlib serialises gymnasium spaces with pickle-free but zlib/base64 helpers
that only Ray can read. A client in another language needs something plainer,
so ``SET_CONFIG`` describes spaces as msgpack maps::

    {"kind": "discrete", "n": 2, "start": 0}
    {"kind": "box", "shape": [4], "dtype": "<f4", "low": <array>, "high": <array>}
    {"kind": "multi_discrete", "nvec": <int array>}

:func:`describe_space` (server side, takes a gymnasium space duck-typed) and
:func:`check_space` (either side) live here once.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .errors import InvalidMessage

__all__ = ["describe_space", "check_space"]

DISCRETE = "discrete"
BOX = "box"
MULTI_DISCRETE = "multi_discrete"


def describe_space(space: Any) -> dict:
    """The wire description of a gymnasium ``Discrete``, ``Box`` or ``MultiDiscrete`` space.

    Raises:
        TypeError: the space is of another kind (Dict, Tuple, ...), which this
            version of the description does not cover.
    """
    name = type(space).__name__
    if name == "Discrete":
        return {"kind": DISCRETE, "n": int(space.n), "start": int(getattr(space, "start", 0))}
    if name == "Box":
        return {
            "kind": BOX,
            "shape": [int(d) for d in space.shape],
            "dtype": np.dtype(space.dtype).str,
            "low": np.asarray(space.low),
            "high": np.asarray(space.high),
        }
    if name == "MultiDiscrete":
        return {"kind": MULTI_DISCRETE, "nvec": np.asarray(space.nvec, dtype=np.int64)}
    raise TypeError(f"cannot describe a {name} space on the wire (Discrete, Box, MultiDiscrete only)")


def check_space(desc: Mapping[str, Any]) -> dict:
    """Check a space description received from a peer; return it.

    Raises:
        InvalidMessage: the description is malformed.
    """
    if not isinstance(desc, dict):
        raise InvalidMessage("a space description must be a map")
    kind = desc.get("kind")
    if kind == DISCRETE:
        if type(desc.get("n")) is not int or desc["n"] < 1:
            raise InvalidMessage("discrete space needs a positive int 'n'")
        if type(desc.get("start", 0)) is not int:
            raise InvalidMessage("discrete space 'start' must be an int")
        return desc
    if kind == BOX:
        shape = desc.get("shape")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise InvalidMessage("box space needs 'shape', a list of non-negative ints")
        try:
            np.dtype(desc.get("dtype"))
        except (TypeError, ValueError, SyntaxError, OverflowError) as exc:
            raise InvalidMessage(f"box space has a bad dtype {desc.get('dtype')!r}") from exc
        for bound in ("low", "high"):
            value = desc.get(bound)
            if not isinstance(value, np.ndarray) or value.shape not in (tuple(shape), ()):
                raise InvalidMessage(f"box space '{bound}' must be an array of shape {shape}")
        return desc
    if kind == MULTI_DISCRETE:
        if not isinstance(desc.get("nvec"), np.ndarray):
            raise InvalidMessage("multi_discrete space needs an int array 'nvec'")
        return desc
    raise InvalidMessage(f"unknown space kind {kind!r}")
