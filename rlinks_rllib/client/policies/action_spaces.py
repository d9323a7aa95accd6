"""The action spaces a client-side policy can act in: ``Discrete`` and ``Box``.

Gymnasium is not needed: :func:`as_action_space` reads a gymnasium space by
its attributes, or the space's wire description from ``SET_CONFIG``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ...protocol import spaces

__all__ = ["DiscreteSpace", "BoxSpace", "ActionSpace", "as_action_space"]


@dataclass(frozen=True)
class DiscreteSpace:
    """Actions ``0 .. n-1`` (gymnasium's ``Discrete(n)``).

    Raises:
        ValueError: *n* is not an integer >= 1.
    """

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise ValueError(f"Discrete action space needs an integer n >= 1, got {self.n!r}")
        object.__setattr__(self, "n", int(self.n))


@dataclass(frozen=True, eq=False)
class BoxSpace:
    """Float actions of ``shape`` between ``low`` and ``high`` (gymnasium's ``Box``).

    ``low`` and ``high`` broadcast to ``shape`` and default to unbounded; they
    are stored as float32 copies of that shape.

    Raises:
        ValueError: *shape* is empty or has a size < 1, *low*/*high* don't
            broadcast to it, or ``low > high`` somewhere.
    """

    shape: tuple[int, ...]
    low: Any = -np.inf
    high: Any = np.inf

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in np.atleast_1d(self.shape))
        if not shape or any(d < 1 for d in shape):
            raise ValueError(
                f"Box action space needs a shape of positive sizes, got {self.shape!r}"
            )
        low = np.broadcast_to(np.asarray(self.low, dtype=np.float32), shape).copy()
        high = np.broadcast_to(np.asarray(self.high, dtype=np.float32), shape).copy()
        if np.any(low > high):
            raise ValueError("Box action space has low > high")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @property
    def size(self) -> int:
        """Number of action dimensions the Gaussian is over (``prod(shape)``)."""
        return math.prod(self.shape)


ActionSpace = Union[DiscreteSpace, BoxSpace]


def as_action_space(space: Any) -> ActionSpace:
    """Return *space* as a :class:`DiscreteSpace` or :class:`BoxSpace`.

    Accepts either of those, the wire description of a space that
    ``SET_CONFIG`` carries (:mod:`rlinks_rllib.protocol.spaces`, e.g.
    ``{"kind": "discrete", "n": 2, "start": 0}``), or a gymnasium
    ``Discrete``/``Box`` (read by its attributes, so gymnasium need not be
    importable here).

    Raises:
        ValueError: *space* is none of these, its values are out of range, or
            a ``Discrete`` starts elsewhere than 0.
    """
    if isinstance(space, (DiscreteSpace, BoxSpace)):
        return space
    if isinstance(space, Mapping):
        kind = space.get("kind")
        if kind == spaces.DISCRETE and "n" in space:
            return _discrete(space["n"], space.get("start", 0))
        if kind == spaces.BOX and "shape" in space:
            return BoxSpace(space["shape"], space.get("low", -np.inf), space.get("high", np.inf))
        raise ValueError(
            f"only {spaces.DISCRETE!r} and {spaces.BOX!r} action spaces are supported, "
            f"got a description of kind {kind!r}; TorchModulePolicy runs RLlib's module for others"
        )
    if all(hasattr(space, name) for name in ("shape", "low", "high")):
        return BoxSpace(space.shape, space.low, space.high)
    if hasattr(space, "n") and hasattr(space, "start"):
        return _discrete(space.n, space.start)
    raise ValueError(
        f"only Discrete and Box action spaces are supported, got {type(space).__name__}; "
        "TorchModulePolicy runs RLlib's module for other spaces"
    )


def _discrete(n: Any, start: Any) -> DiscreteSpace:
    """A :class:`DiscreteSpace` of *n*, refusing a *start* other than 0.

    Raises:
        ValueError: *start* is not 0 (RLlib's categorical only draws
            ``0 .. n-1``), or *n* is not an integer >= 1.
    """
    if start != 0:
        raise ValueError(
            f"Discrete action space starts at {start}; RLlib's categorical draws "
            "0 .. n-1, so the simulator must shift the action itself"
        )
    return DiscreteSpace(n)
