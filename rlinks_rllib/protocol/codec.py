"""msgpack bodies with numpy values in them, both ways, without pickle.

:func:`encode_body` writes values the way RLlib's msgpack-numpy peers expect
(``use_bin_type=True``; numpy values in msgpack-numpy's map form) and hands
back a list of buffers: large arrays appear in that list as views of their own
memory, so joining the list into a frame is the only copy of their bytes.

:func:`decode_body` reads a body back into Python and numpy values, refusing
anything that would need pickle. It raises only :class:`DecodeError` (or its
subclass :class:`UnsafePayload`).
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np

# msgpack_numpy.patch(), which RLlib calls whenever it touches msgpack, swaps
# msgpack.Packer/unpackb for wrappers that unpickle object arrays. Bind
# msgpack's own implementations so that patch can never reach this codec.
try:
    from msgpack._cmsgpack import Packer as _Packer, unpackb as _unpackb
except ImportError:  # pragma: no cover - msgpack built without its C extension
    from msgpack.fallback import Packer as _Packer, unpackb as _unpackb

from .arrays import DATA, KIND, ND, SHAPE, TYPE, array_map, decode_array_map, is_array_map
from .errors import DecodeError, ProtocolError
from .limits import ZERO_COPY_MIN_BYTES

__all__ = ["encode_body", "decode_body", "Buffer"]

Buffer = bytes | memoryview


class _LargeArray(Exception):
    """Raised inside msgpack's ``default`` hook to hand a large array to the walker."""


def _bin_header(size: int) -> bytes:
    if size < 1 << 8:
        return struct.pack(">BB", 0xC4, size)
    if size < 1 << 16:
        return struct.pack(">BH", 0xC5, size)
    return struct.pack(">BI", 0xC6, size)


def _flat_bytes(array: np.ndarray) -> np.ndarray:
    """The array's bytes as a 1-D uint8 view (a copy only if it isn't C-contiguous)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


class _BodyWriter:
    """Packs one body into a list of buffers, keeping large arrays out of msgpack's buffer."""

    def __init__(self) -> None:
        self.parts: list[Buffer] = []
        self._packer = _Packer(use_bin_type=True, default=self._default, autoreset=True)

    def _default(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            if obj.nbytes >= ZERO_COPY_MIN_BYTES:
                raise _LargeArray
            return array_map(obj, obj.tobytes())
        if isinstance(obj, np.generic):
            return array_map(obj, obj.tobytes())
        raise TypeError(f"cannot put a {type(obj).__name__} on the wire")

    def write(self, obj: Any) -> None:
        try:
            self.parts.append(self._packer.pack(obj))
        except _LargeArray:
            self._write_structure(obj)

    def _write_structure(self, obj: Any) -> None:
        packer = self._packer
        if isinstance(obj, np.ndarray):
            head = array_map(obj, None)
            del head[DATA]
            self.parts.append(packer.pack_map_header(5))
            for key in (ND, TYPE, KIND, SHAPE):
                self.parts.append(packer.pack(key) + packer.pack(head[key]))
            flat = _flat_bytes(obj)
            self.parts.append(packer.pack(DATA) + _bin_header(flat.nbytes))
            self.parts.append(memoryview(flat))
        elif isinstance(obj, dict):
            self.parts.append(packer.pack_map_header(len(obj)))
            for key, value in obj.items():
                self.write(key)
                self.write(value)
        elif isinstance(obj, (list, tuple)):
            self.parts.append(packer.pack_array_header(len(obj)))
            for value in obj:
                self.write(value)
        else:  # pragma: no cover - only containers can hold a large array
            raise TypeError(f"cannot put a {type(obj).__name__} on the wire")


def encode_body(obj: Any) -> list[Buffer]:
    """Pack ``obj`` as msgpack and return the body as a list of buffers.

    Raises:
        TypeError: ``obj`` holds a value msgpack can't represent.
        UnsafePayload: ``obj`` holds an object or structured numpy array.
    """
    writer = _BodyWriter()
    writer.write(obj)
    return writer.parts


def _object_hook(obj: dict) -> Any:
    if is_array_map(obj):
        return decode_array_map(obj)
    return obj


def _refuse_ext(code: int, data: bytes) -> Any:
    raise DecodeError(f"msgpack extension type {code} is not part of RLlink")


def decode_body(body: Buffer) -> Any:
    """Unpack one frame body.

    Returns plain Python values with numpy arrays and scalars where the peer
    sent msgpack-numpy maps.

    Raises:
        UnsafePayload: a value asks for pickle (object or structured arrays).
        DecodeError: anything else that is not one complete, valid msgpack value.
    """
    try:
        return _unpackb(
            body,
            raw=False,
            strict_map_key=False,  # msgpack-numpy's keys are bin, not str
            object_hook=_object_hook,
            ext_hook=_refuse_ext,
            use_list=True,
        )
    except ProtocolError:
        raise
    except msgpack.StackError as exc:
        raise DecodeError("body is nested too deeply for msgpack") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        raise DecodeError(f"body is not valid msgpack: {exc}") from exc
