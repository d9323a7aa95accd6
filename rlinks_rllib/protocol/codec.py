"""msgpack bodies with numpy values in them, both ways, without pickle.

:func:`encode_body` writes values the way RLlib's msgpack-numpy peers expect
(``use_bin_type=True``; numpy values in msgpack-numpy's map form) and hands
back a list of buffers: large arrays appear in that list as views of their own
memory, so joining the list into a frame is the only copy of their bytes.

:func:`decode_body` reads a body back into Python and numpy values, refusing
anything that would need pickle. It raises only :class:`DecodeError` (or its
subclass :class:`UnsafePayload`). msgpack's C unpacker does the work, except
that a large body the caller lets it share is read by :class:`_ViewReader`, a
small msgpack reader of our own that hands large bins out as views of the
body, so that large arrays are never copied on the way in.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np

from ._msgpack import Packer as _Packer, bin_header, unpackb as _unpackb
from .arrays import COMPLEX, DATA, KIND, ND, SHAPE, TYPE, array_map, decode_array_map, decode_map
from .columns import NOT_COLUMNS, decode_columns, wants_columns
from .errors import DecodeError, ProtocolError
from .limits import ZERO_COPY_MIN_BODY_BYTES, ZERO_COPY_MIN_BYTES

__all__ = ["encode_body", "decode_body", "Buffer"]

Buffer = bytes | memoryview


class _LargeArray(Exception):
    """Raised inside msgpack's ``default`` hook to hand a large array to the walker."""


def _flat_bytes(array: np.ndarray) -> np.ndarray:
    """The array's bytes as a 1-D uint8 view (a copy only if it isn't C-contiguous)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _default(obj: Any) -> Any:
    """msgpack's ``default`` hook: numpy values in msgpack-numpy's map form; a large array goes to the walker."""
    if isinstance(obj, np.ndarray):
        if obj.nbytes >= ZERO_COPY_MIN_BYTES:
            raise _LargeArray
        return array_map(obj, obj.tobytes())
    if isinstance(obj, np.generic):
        return array_map(obj, obj.tobytes())
    raise TypeError(f"cannot put a {type(obj).__name__} on the wire")


class _BodyWriter:
    """Packs one body into a list of buffers, keeping large arrays out of msgpack's buffer."""

    def __init__(self) -> None:
        self.parts: list[Buffer] = []
        # A plain function, not a bound method: no cycle through the packer,
        # so the writer and its packer's buffer go as soon as the body is made.
        self._packer = _Packer(use_bin_type=True, default=_default, autoreset=True)

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
            self.parts.append(packer.pack(DATA) + bin_header(flat.nbytes))
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


def _refuse_ext(code: int, data: bytes) -> Any:
    raise DecodeError(f"msgpack extension type {code} is not part of RLlink")


def decode_body(body: Buffer, *, share: bool = False, columns: bool = False) -> Any:
    """Unpack one frame body.

    Returns plain Python values with numpy arrays and scalars where the peer
    sent msgpack-numpy maps. Arrays are read-only.

    Args:
        body: the body, without its header.
        share: let arrays of at least ``ZERO_COPY_MIN_BYTES`` be views of
            ``body`` instead of copies, when the body is at least
            ``ZERO_COPY_MIN_BODY_BYTES`` long. Only for a body nobody will
            write to while the arrays live (``bytes``, or a buffer the caller
            hands over for good): the arrays keep it alive, all of it.
            The values are the same either way.
        columns: an ``EPISODES`` body (told by its first bytes) is decoded a
            column at a time (:mod:`.columns`): per-step array maps of a
            single-agent column come back as one stacked, ``finalized``
            array. Anything that path can't take is decoded as without it.

    Raises:
        UnsafePayload: a value asks for pickle (object or structured arrays).
        DecodeError: anything else that is not one complete, valid msgpack value.
    """
    if share and memoryview(body).nbytes >= ZERO_COPY_MIN_BODY_BYTES:
        view = memoryview(body)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        try:
            return _decode_views(view.toreadonly())
        except (_Fallback, DecodeError):
            # Too much work for Python, or refused: C reads it all again and
            # has the last word, so both paths give the same outcome.
            pass
    if columns and wants_columns(body):
        value = decode_columns(body, _refuse_ext)
        if value is not NOT_COLUMNS:
            return value
        # Not laid out as expected, or refused: the hooked decoder below has the last word.
    try:
        return _unpackb(
            body,
            raw=False,
            strict_map_key=False,  # msgpack-numpy's keys are bin, not str
            object_hook=decode_map,
            ext_hook=_refuse_ext,
            use_list=True,
        )
    except ProtocolError:
        raise
    except msgpack.StackError as exc:
        raise DecodeError("body is nested too deeply for msgpack") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        raise DecodeError(f"body is not valid msgpack: {exc}") from exc


# --------------------------------------------------------------------------
# Decoding with views: a msgpack reader for large bodies


class _Fallback(Exception):
    """The body needs more work than :class:`_ViewReader` may spend; decode it in C."""


#: Objects the view reader may build per byte of body (at least the minimum):
#: its Python loop then costs about as much per byte as copying would.
_VIEW_BYTES_PER_OBJECT = 16 * 1024
_VIEW_MIN_OBJECTS = 64
#: Nesting the view reader follows before it hands the body to C, which has
#: its own, deeper, limit.
_VIEW_MAX_DEPTH = 32

_U8 = struct.Struct(">B").unpack_from
_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from
_U64 = struct.Struct(">Q").unpack_from
_I8 = struct.Struct(">b").unpack_from
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_F32 = struct.Struct(">f").unpack_from
_F64 = struct.Struct(">d").unpack_from

#: Fixed-size scalars: first byte -> (reader, size).
_SCALARS = {
    0xCA: (_F32, 4), 0xCB: (_F64, 8),
    0xCC: (_U8, 1), 0xCD: (_U16, 2), 0xCE: (_U32, 4), 0xCF: (_U64, 8),
    0xD0: (_I8, 1), 0xD1: (_I16, 2), 0xD2: (_I32, 4), 0xD3: (_I64, 8),
}  # fmt: skip
#: Lengths of bin, str, array and map: first byte -> (reader, size).
_LENGTHS = {
    0xC4: (_U8, 1), 0xC5: (_U16, 2), 0xC6: (_U32, 4),  # bin
    0xD9: (_U8, 1), 0xDA: (_U16, 2), 0xDB: (_U32, 4),  # str
    0xDC: (_U16, 2), 0xDD: (_U32, 4),  # array
    0xDE: (_U16, 2), 0xDF: (_U32, 4),  # map
}  # fmt: skip
_EXT = frozenset({0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8})


def _decode_views(body: memoryview) -> Any:
    """Decode ``body`` (read-only, format ``B``) as msgpack's C path would, sharing large bins.

    Raises:
        _Fallback: the body holds more objects, or deeper nesting, than this
            reader takes on, or an extension type; nothing of it is returned.
        UnsafePayload, DecodeError: as :func:`decode_body`.
    """
    reader = _ViewReader(body)
    try:
        value = reader.value(0)
    except (ValueError, TypeError, OverflowError, struct.error) as exc:
        # Bad UTF-8 in a str, an unhashable map key, ...: what C raises too.
        raise DecodeError(f"body is not valid msgpack: {exc}") from exc
    if reader.pos != len(body):
        raise DecodeError(f"body is not valid msgpack: {len(body) - reader.pos} bytes after the value")
    return bytes(value) if type(value) is memoryview else value


class _ViewReader:
    """A msgpack reader for the types RLlink uses, returning large bins as views.

    Every length is checked against the bytes left before anything is built,
    and the number of objects it builds is bounded by the body's size, so a
    hostile body costs it no more than copying the body would; past that
    bound it gives up (:class:`_Fallback`).

    A bin of at least ``ZERO_COPY_MIN_BYTES`` comes out as a slice of the
    body. Only the ``data`` field of msgpack-numpy's array map keeps it (the
    array made from it is a view); anywhere else it becomes ``bytes`` as
    soon as its container is built, so no view escapes.
    """

    __slots__ = ("body", "pos", "end", "budget")

    def __init__(self, body: memoryview) -> None:
        self.body = body
        self.pos = 0
        self.end = len(body)
        self.budget = max(_VIEW_MIN_OBJECTS, len(body) // _VIEW_BYTES_PER_OBJECT)

    def _take(self, size: int) -> int:
        """Start of the next ``size`` bytes, which are then consumed."""
        start = self.pos
        if size > self.end - start:
            raise DecodeError("body is not valid msgpack: truncated")
        self.pos = start + size
        return start

    def value(self, depth: int) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise _Fallback
        first = self.body[self._take(1)]
        if first <= 0x7F:
            return first
        if first >= 0xE0:
            return first - 0x100
        if first <= 0x8F:
            return self._map(first & 0x0F, depth)
        if first <= 0x9F:
            return self._array(first & 0x0F, depth)
        if first <= 0xBF:
            return self._str(first & 0x1F)
        if first == 0xC0:
            return None
        if first == 0xC2:
            return False
        if first == 0xC3:
            return True
        scalar = _SCALARS.get(first)
        if scalar is not None:
            read, size = scalar
            return read(self.body, self._take(size))[0]
        length = _LENGTHS.get(first)
        if length is not None:
            read, size = length
            count = read(self.body, self._take(size))[0]
            if first <= 0xC6:
                return self._bin(count)
            if first <= 0xDB:
                return self._str(count)
            if first <= 0xDD:
                return self._array(count, depth)
            return self._map(count, depth)
        if first in _EXT:
            raise _Fallback  # refused, or a msgpack Timestamp: C's business either way
        raise DecodeError(f"body is not valid msgpack: byte 0x{first:02x} starts no value")

    def _bin(self, size: int) -> bytes | memoryview:
        start = self._take(size)
        view = self.body[start : start + size]
        return view if size >= ZERO_COPY_MIN_BYTES else bytes(view)

    def _str(self, size: int) -> str:
        start = self._take(size)
        return str(self.body[start : start + size], "utf-8")

    def _array(self, count: int, depth: int) -> list:
        if depth >= _VIEW_MAX_DEPTH:
            raise _Fallback
        if count > self.end - self.pos:
            raise DecodeError("body is not valid msgpack: truncated")
        items = []
        for _ in range(count):
            item = self.value(depth + 1)
            items.append(bytes(item) if type(item) is memoryview else item)
        return items

    def _map(self, count: int, depth: int) -> Any:
        if depth >= _VIEW_MAX_DEPTH:
            raise _Fallback
        if 2 * count > self.end - self.pos:
            raise DecodeError("body is not valid msgpack: truncated")
        obj = {}
        for _ in range(count):
            key = self.value(depth + 1)
            if type(key) is memoryview:
                key = bytes(key)
            item = self.value(depth + 1)
            if type(item) is memoryview and not (type(key) is bytes and key == DATA):
                item = bytes(item)
            obj[key] = item
        if ND in obj or COMPLEX in obj:
            return decode_array_map(obj)
        data = obj.get(DATA)
        if type(data) is memoryview:
            obj[DATA] = bytes(data)
        return obj
