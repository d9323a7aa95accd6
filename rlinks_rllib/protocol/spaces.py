"""The wire form of observation and action spaces, without gymnasium.

RLlib serialises gymnasium spaces with pickle-free but zlib/base64 helpers
that only Ray can read. A client in another language needs something plainer,
so ``SET_CONFIG`` describes spaces as msgpack maps::

    {"kind": "discrete", "n": 2, "start": 0}
    {"kind": "box", "shape": [4], "dtype": "<f4", "low": <array>, "high": <array>}
    {"kind": "multi_discrete", "nvec": <int array>}
    {"kind": "multi_binary", "shape": [3]}
    {"kind": "dict", "spaces": {"camera": <space>, "joints": <space>}}
    {"kind": "tuple", "spaces": [<space>, <space>]}

``dict`` and ``tuple`` nest. A dict's keys come in the space's own order
(gymnasium sorts them), which is also the order of its leaves: the order in
which a model or an ONNX graph takes them.

Everything about a space lives here once: :func:`describe_space` (server
side, takes a gymnasium space duck-typed), :func:`check_space` (either side,
for a description that came from a peer), :func:`leaves` (the flat view),
and :func:`check_value` / :func:`check_column`, which hold one value or one
stacked column of values against a description and name the key path of the
first thing wrong.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence, Union

import numpy as np

from .errors import InvalidMessage

__all__ = [
    "describe_space",
    "check_space",
    "leaves",
    "format_path",
    "check_value",
    "check_column",
    "SpaceMismatch",
    "MAX_SPACE_DEPTH",
    "MAX_SPACE_LEAVES",
    "MAX_KEY_BYTES",
]

DISCRETE = "discrete"
BOX = "box"
MULTI_DISCRETE = "multi_discrete"
MULTI_BINARY = "multi_binary"
DICT = "dict"
TUPLE = "tuple"

#: Nesting a peer may send: a dict of tuples of boxes is depth 3.
MAX_SPACE_DEPTH = 8
#: Leaf spaces in one description; a simulator with more sensors than this
#: should stack them into a Box.
MAX_SPACE_LEAVES = 256
#: Length of one dict key in UTF-8 bytes; keys appear in every error message.
MAX_KEY_BYTES = 64

#: One step of a key path: a dict key or a tuple index.
PathPart = Union[str, int]


class SpaceMismatch(InvalidMessage, ValueError):
    """A value (or a column of values) does not fit its space.

    ``path`` is the key path of the offending part, e.g. ``('camera',)``;
    the message starts with it in the form :func:`format_path` writes.
    """

    def __init__(self, message: str, path: tuple = ()) -> None:
        super().__init__(message)
        self.path = path


def describe_space(space: Any) -> dict:
    """The wire description of a gymnasium space.

    ``Discrete``, ``Box`` (any numeric dtype), ``MultiDiscrete``,
    ``MultiBinary`` and ``Dict``/``Tuple`` of those, nested.

    Raises:
        TypeError: the space is of another kind (``Text``, ``Graph``,
            ``Sequence``, ...), or nests deeper or wider than a peer accepts.
    """
    desc = _describe(space)
    try:
        check_space(desc)
    except InvalidMessage as exc:
        raise TypeError(f"cannot describe this space on the wire: {exc}") from exc
    return desc


def _describe(space: Any) -> dict:
    name = type(space).__name__
    if name == "Discrete":
        return {"kind": DISCRETE, "n": int(space.n), "start": int(getattr(space, "start", 0))}
    if name == "Box":
        return {
            "kind": BOX,
            "shape": [int(d) for d in space.shape],
            "dtype": np.dtype(space.dtype).str,
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if name == "MultiDiscrete":
        return {"kind": MULTI_DISCRETE, "nvec": np.asarray(space.nvec, dtype=np.int64)}
    if name == "MultiBinary":
        return {"kind": MULTI_BINARY, "shape": [int(d) for d in space.shape]}
    if name == "Dict":
        return {"kind": DICT, "spaces": {str(key): _describe(sub) for key, sub in space.spaces.items()}}
    if name == "Tuple":
        return {"kind": TUPLE, "spaces": [_describe(sub) for sub in space.spaces]}
    raise TypeError(
        f"cannot describe a {name} space on the wire "
        "(Discrete, Box, MultiDiscrete, MultiBinary, Dict and Tuple only)"
    )


def _bound(value: Any) -> np.ndarray:
    """A Box bound as sent: 0-d when every element is the same (an image's 0 and 255)."""
    array = np.asarray(value)
    if array.ndim and array.size and (array == array.flat[0]).all():
        return np.asarray(array.flat[0], dtype=array.dtype)
    return array


def check_space(desc: Mapping[str, Any]) -> dict:
    """Check a space description received from a peer; return it.

    Raises:
        InvalidMessage: the description is malformed, nests deeper than
            :data:`MAX_SPACE_DEPTH`, has more than :data:`MAX_SPACE_LEAVES`
            leaves or a dict key that is empty or over :data:`MAX_KEY_BYTES`.
            The message names the key path.
    """
    count = [0]
    _check_space(desc, (), 1, count)
    return desc


def _check_space(desc: Any, path: tuple, depth: int, count: list) -> None:
    where = f"space{format_path(path)}"
    if depth > MAX_SPACE_DEPTH:
        raise InvalidMessage(f"{where}: spaces nest deeper than {MAX_SPACE_DEPTH}")
    if not isinstance(desc, dict):
        raise InvalidMessage(f"{where}: a space description must be a map")
    kind = desc.get("kind")
    if kind == DICT:
        subspaces = desc.get("spaces")
        if not isinstance(subspaces, dict) or not subspaces:
            raise InvalidMessage(f"{where}: dict space needs 'spaces', a non-empty map of str keys")
        for key, sub in subspaces.items():
            if type(key) is not str or not key or len(key.encode("utf-8")) > MAX_KEY_BYTES:
                raise InvalidMessage(
                    f"{where}: dict space keys must be non-empty strings of at most {MAX_KEY_BYTES} bytes"
                )
            _check_space(sub, path + (key,), depth + 1, count)
        return
    if kind == TUPLE:
        subspaces = desc.get("spaces")
        if not isinstance(subspaces, list) or not subspaces:
            raise InvalidMessage(f"{where}: tuple space needs 'spaces', a non-empty list")
        for index, sub in enumerate(subspaces):
            _check_space(sub, path + (index,), depth + 1, count)
        return
    count[0] += 1
    if count[0] > MAX_SPACE_LEAVES:
        raise InvalidMessage(f"{where}: more than {MAX_SPACE_LEAVES} leaf spaces")
    if kind == DISCRETE:
        if type(desc.get("n")) is not int or desc["n"] < 1:
            raise InvalidMessage(f"{where}: discrete space needs a positive int 'n'")
        if type(desc.get("start", 0)) is not int:
            raise InvalidMessage(f"{where}: discrete space 'start' must be an int")
        return
    if kind == BOX:
        shape = _check_shape(desc.get("shape"), f"{where}: box space")
        try:
            dtype = np.dtype(desc.get("dtype"))
        except (TypeError, ValueError, SyntaxError, OverflowError) as exc:
            raise InvalidMessage(f"{where}: box space has a bad dtype {desc.get('dtype')!r}") from exc
        if dtype.kind not in "biuf" or dtype.shape:
            raise InvalidMessage(f"{where}: box space dtype must be a plain bool, int or float, not {dtype.str!r}")
        for bound in ("low", "high"):
            value = desc.get(bound)
            if not isinstance(value, np.ndarray) or value.shape not in (tuple(shape), ()):
                raise InvalidMessage(f"{where}: box space '{bound}' must be an array of shape {shape}")
        return
    if kind == MULTI_DISCRETE:
        nvec = desc.get("nvec")
        if not isinstance(nvec, np.ndarray) or nvec.dtype.kind not in "iu" or not (nvec >= 1).all():
            raise InvalidMessage(f"{where}: multi_discrete space needs an int array 'nvec' of positive counts")
        return
    if kind == MULTI_BINARY:
        _check_shape(desc.get("shape"), f"{where}: multi_binary space")
        return
    raise InvalidMessage(f"{where}: unknown space kind {kind!r}")


def _check_shape(shape: Any, what: str) -> list:
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise InvalidMessage(f"{what} needs 'shape', a list of non-negative ints")
    return shape


def leaves(desc: Mapping[str, Any]) -> Iterator[tuple[tuple, dict]]:
    """Yield ``(path, leaf description)`` for every non-container space, in order.

    The order is the one models take their inputs in: dict keys in the
    description's order, tuple entries by index, depth first.
    """
    kind = desc["kind"]
    if kind == DICT:
        for key, sub in desc["spaces"].items():
            for path, leaf in leaves(sub):
                yield (key,) + path, leaf
    elif kind == TUPLE:
        for index, sub in enumerate(desc["spaces"]):
            for path, leaf in leaves(sub):
                yield (index,) + path, leaf
    else:
        yield (), desc


def format_path(path: Sequence[PathPart]) -> str:
    """``('camera', 0)`` → ``"['camera'][0]"``: a key path as Python would index it."""
    return "".join(f"[{part!r}]" for part in path)


def check_value(desc: Mapping[str, Any], value: Any, what: str = "observation") -> Any:
    """Hold one value (one step's observation or action) against its space.

    Returns the value with each leaf as a numpy array of the space's dtype
    (a Discrete as an int64 0-d array), so a caller can keep what it checked.

    Raises:
        SpaceMismatch: a missing or extra key, a tuple of the wrong length, a
            leaf of the wrong shape, a dtype that does not cast to the
            space's (``same_kind``), a NaN or infinity in a float leaf, an
            integer out of the space's range. The message starts with
            ``what`` and the key path.
    """
    return _check_nested(desc, value, (), what, None)


def check_column(desc: Mapping[str, Any], column: Any, length: int, what: str = "observations") -> Any:
    """Hold a column of ``length`` stacked values against their space.

    The stacked form of a nested space is the same nesting with one array per
    leaf whose first axis is the step: a dict of ``(length, *shape)`` arrays
    for a dict of boxes. Checks run once per leaf over the whole column, with
    no Python call per step.

    Raises:
        SpaceMismatch: as :func:`check_value`, or a leaf whose first axis is
            not ``length``.
    """
    return _check_nested(desc, column, (), what, length)


def _check_nested(desc: Mapping[str, Any], value: Any, path: tuple, what: str, length: Any) -> Any:
    kind = desc["kind"]
    if kind == DICT:
        spaces = desc["spaces"]
        if not isinstance(value, dict):
            raise _mismatch(what, path, f"expected a map of {sorted(spaces)}, got {type(value).__name__}")
        for key in spaces:
            if key not in value:
                raise _mismatch(what, path + (key,), "missing key")
        if len(value) != len(spaces):
            extra = next(key for key in value if key not in spaces)
            raise _mismatch(what, path + (extra,) if isinstance(extra, str) else path, "unexpected key")
        return {key: _check_nested(sub, value[key], path + (key,), what, length) for key, sub in spaces.items()}
    if kind == TUPLE:
        spaces = desc["spaces"]
        if not isinstance(value, (list, tuple)) or len(value) != len(spaces):
            raise _mismatch(what, path, f"expected a list of {len(spaces)} entries")
        return [_check_nested(sub, item, path + (i,), what, length) for i, (sub, item) in enumerate(zip(spaces, value))]
    return _check_leaf(desc, value, path, what, length)


def _check_leaf(desc: Mapping[str, Any], value: Any, path: tuple, what: str, length: Any) -> np.ndarray:
    kind = desc["kind"]
    lead = () if length is None else (length,)
    if kind == DISCRETE:
        shape, dtype = (), np.dtype(np.int64)
    elif kind == BOX:
        shape, dtype = tuple(desc["shape"]), np.dtype(desc["dtype"])
    elif kind == MULTI_DISCRETE:
        shape, dtype = desc["nvec"].shape, np.dtype(np.int64)
    else:
        shape, dtype = tuple(desc["shape"]), np.dtype(np.int8)
    array = value if isinstance(value, np.ndarray) else _as_array(value, path, what)
    if array.shape != lead + shape:
        raise _mismatch(what, path, f"shape {list(array.shape)}, expected {list(lead + shape)}")
    if array.dtype.kind not in "biuf":
        raise _mismatch(what, path, f"dtype {array.dtype.str} is not numeric")
    if kind == BOX and array.dtype != dtype and not np.can_cast(array.dtype, dtype, "same_kind"):
        raise _mismatch(what, path, f"dtype {array.dtype.str} does not cast to the space's {dtype.str}")
    if kind != BOX and array.dtype.kind == "f":
        raise _mismatch(what, path, f"dtype {array.dtype.str}: {kind} values are integers")
    if array.dtype.kind == "f" and array.size and not np.isfinite(array).all():
        raise _mismatch(what, path, "NaN or infinity")
    if array.size and kind != BOX:
        low, high = _int_range(desc)
        if (array < low).any() or (array > high).any():
            raise _mismatch(what, path, f"value out of the {kind} space's range")
    return array if array.dtype == dtype else array.astype(dtype)


def _int_range(desc: Mapping[str, Any]) -> tuple:
    kind = desc["kind"]
    if kind == DISCRETE:
        return desc.get("start", 0), desc.get("start", 0) + desc["n"] - 1
    if kind == MULTI_DISCRETE:
        return 0, desc["nvec"] - 1
    return 0, 1


def _as_array(value: Any, path: tuple, what: str) -> np.ndarray:
    if isinstance(value, (bool, int, float, np.generic)):
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        try:
            array = np.asarray(value)
        except ValueError as exc:
            raise _mismatch(what, path, f"ragged list ({exc})") from exc
        return array
    raise _mismatch(what, path, f"expected an array or number, got {type(value).__name__}")


def _mismatch(what: str, path: tuple, problem: str) -> SpaceMismatch:
    return SpaceMismatch(f"{what}{format_path(path)}: {problem}", path)
