"""The wire form of numpy arrays and scalars, as msgpack-numpy writes it.

RLlib's peers pack numpy values with msgpack-numpy, which writes each one as a
msgpack map with *bin* (bytes) keys::

    array:  {b"nd": True,  b"type": "<f4", b"kind": b"", b"shape": [2, 3], b"data": <bin>}
    scalar: {b"nd": False, b"type": "<f4", b"data": <bin>}

msgpack-numpy decodes ``kind == b"O"`` with ``pickle.loads`` and ``kind ==
b"V"`` as a structured dtype. We decode the plain numeric and string kinds
ourselves and refuse everything else, so no byte from the network ever
reaches pickle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import UnsafePayload, DecodeError

__all__ = ["ND", "TYPE", "KIND", "SHAPE", "DATA", "decode_map", "decode_array_map", "array_map", "safe_dtype"]

ND = b"nd"
TYPE = b"type"
KIND = b"kind"
SHAPE = b"shape"
DATA = b"data"
COMPLEX = b"complex"

#: numpy kinds we accept: bool, signed/unsigned int, float, complex, bytes, str.
_SAFE_KINDS = frozenset("biufcSU")

#: Parsed dtypes by their wire string; keeps ``np.dtype(str)`` off the hot path.
#: Bounded: only strings that parsed to a safe dtype get in, and those are few.
_DTYPE_CACHE: dict[str, np.dtype] = {}
_DTYPE_CACHE_MAX = 256


def decode_map(obj: dict) -> Any:
    """msgpack's ``object_hook`` for RLlink bodies: numpy values for msgpack-numpy maps, other maps as they are.

    RLlib's clients send one small array per step, so this runs for most
    maps of a body: the usual case (a 1-d array of a dtype seen before, data
    in ``bytes``) is decoded right here; everything else, valid or not, goes
    through :func:`decode_array_map`.

    Raises:
        UnsafePayload, DecodeError: as :func:`decode_array_map`.
    """
    if ND not in obj:
        if COMPLEX in obj:
            return decode_array_map(obj)
        return obj
    kind = obj.get(KIND)
    if obj[ND] is True and len(obj) == 5 and type(kind) is bytes and not kind:
        data, shape, descr = obj.get(DATA), obj.get(SHAPE), obj.get(TYPE)
        if type(data) is bytes and type(shape) is list and len(shape) == 1 and type(descr) is str:
            dtype = _DTYPE_CACHE.get(descr)
            count = shape[0]
            if dtype is not None and type(count) is int and count >= 0 and count * dtype.itemsize == len(data):
                return np.frombuffer(data, dtype=dtype)
    return decode_array_map(obj)


def safe_dtype(descr: Any) -> np.dtype:
    """The dtype a wire ``type`` string names, if it is one we decode.

    Raises:
        UnsafePayload: an object, structured or sub-array dtype.
        DecodeError: not a dtype string.
    """
    if type(descr) is not str:
        # msgpack-numpy writes a list here for structured (kind "V") dtypes.
        raise UnsafePayload(f"array dtype must be a dtype string, got {type(descr).__name__}")
    dtype = _DTYPE_CACHE.get(descr)
    if dtype is not None:
        return dtype
    if len(descr) > 16:
        raise DecodeError(f"array dtype string too long: {descr[:32]!r}")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError, SyntaxError, OverflowError) as exc:
        # numpy parses some strings with ast.literal_eval: "(2,)|01" is a SyntaxError.
        raise DecodeError(f"not a numpy dtype: {descr!r}") from exc
    if dtype.kind not in _SAFE_KINDS or dtype.hasobject or dtype.fields is not None or dtype.subdtype:
        raise UnsafePayload(f"array dtype {descr!r} (kind {dtype.kind!r}) is not allowed; "
                            "only bool, int, uint, float, complex, bytes and str arrays are")
    if len(_DTYPE_CACHE) < _DTYPE_CACHE_MAX:
        _DTYPE_CACHE[descr] = dtype
    return dtype


def decode_array_map(obj: dict) -> Any:
    """Turn msgpack-numpy's map form back into a numpy array or scalar.

    ``data`` is ``bytes``, or a ``memoryview`` of a buffer nobody writes to
    (see ``codec.decode_body``'s ``share``). The array is a read-only view of
    it; no further copy is made, unless a memoryview's bytes are not aligned
    for the dtype (numpy and torch want aligned data): then it is copied once.

    Raises:
        UnsafePayload: the map asks for an object (pickled) or structured dtype.
        DecodeError: a field is missing or of the wrong type, or ``shape`` times
            the item size disagrees with the length of ``data``.
    """
    if COMPLEX in obj:
        # msgpack-numpy's form of a Python complex: its repr as a string.
        text = obj.get(DATA)
        if obj[COMPLEX] is not True or type(text) not in (str, bytes) or len(text) > 64:
            raise DecodeError("malformed complex value")
        try:
            return complex(text.decode("ascii") if isinstance(text, bytes) else text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DecodeError(f"malformed complex value {text!r}") from exc

    nd = obj[ND]
    kind = obj.get(KIND, b"")
    if type(kind) is not bytes and type(kind) is not str:
        raise DecodeError(f"unknown array kind {kind!r}")
    if kind:
        if kind == b"O" or kind == "O":
            raise UnsafePayload("object arrays are refused: msgpack-numpy would unpickle them")
        if kind == b"V" or kind == "V":
            raise UnsafePayload("structured (kind 'V') arrays are refused")
        raise DecodeError(f"unknown array kind {kind!r}")
    data = obj.get(DATA)
    data_type = type(data)
    if data_type is not bytes and data_type is not memoryview:
        raise DecodeError(f"array data must be bin, got {data_type.__name__}")
    descr = obj.get(TYPE)
    dtype = _DTYPE_CACHE.get(descr) if type(descr) is str else None
    if dtype is None:
        dtype = safe_dtype(descr)

    if nd is False:
        if len(obj) > 3 + (KIND in obj):
            raise DecodeError("unexpected keys in numpy scalar")
        if len(data) != dtype.itemsize:
            raise DecodeError(f"numpy scalar of {dtype} needs {dtype.itemsize} bytes, got {len(data)}")
        return np.frombuffer(data, dtype=dtype)[0]
    if nd is not True:
        raise DecodeError("array map's 'nd' must be true or false")

    shape = obj.get(SHAPE)
    if type(shape) is not list:
        raise DecodeError("array shape must be a list of ints")
    count = 1
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise DecodeError(f"array shape must be non-negative ints, got {shape!r}")
        count *= dim
    if count * dtype.itemsize != len(data):
        raise DecodeError(
            f"array of shape {tuple(shape)} and dtype {dtype} needs "
            f"{count * dtype.itemsize} bytes, data has {len(data)}"
        )
    array = np.frombuffer(data, dtype=dtype)
    if len(shape) != 1:  # frombuffer already gave the one axis
        array = array.reshape(shape)
    if data_type is memoryview and not array.flags.aligned:
        array = array.copy()
        array.flags.writeable = False
    return array


def array_map(value: np.ndarray | np.generic, data: Any) -> dict:
    """msgpack-numpy's map for ``value``, with ``data`` standing for its bytes.

    ``data`` is passed in (bytes, or a marker the encoder replaces) so the
    caller decides whether the bytes are copied.

    Raises:
        UnsafePayload: ``value`` has an object or structured dtype.
    """
    dtype = value.dtype
    if dtype.kind not in _SAFE_KINDS or dtype.hasobject or dtype.fields is not None:
        raise UnsafePayload(f"refusing to encode a {dtype} array: only plain numeric and string dtypes go on the wire")
    if isinstance(value, np.ndarray):
        return {ND: True, TYPE: dtype.str, KIND: b"", SHAPE: list(value.shape), DATA: data}
    return {ND: False, TYPE: dtype.str, DATA: data}
