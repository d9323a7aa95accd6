"""Decoding an ``EPISODES`` body a column at a time.

RLlib's clients send each column of an episode chunk as a list with one
msgpack-numpy map per step (an observation, the action distribution's
inputs, ...). Decoded with msgpack's ``object_hook`` that is a Python call,
a dict and a small numpy array per step and column, and then the episode
check stacks them again. This module is the hot path for such bodies: it
knows where the columns of a single-agent episode state lie (``episodes``,
then each state's ``observations``, ``actions``, ``rewards`` and
``extra_model_outputs`` buffers, then their ``data``), and when a column's
steps are all encoded alike (the same msgpack-numpy header bytes, the same
length: what every msgpack-numpy writer produces for one dtype and shape)
it checks every step's header with one numpy comparison and takes all the
steps' data as one stacked array in one copy. Everything else of the body is
read by msgpack's C unpacker with the usual hook, piece by piece.

The result is the message the hooked decoder (:func:`~.codec.decode_body`)
returns, except that a stacked column comes back as one array with a step
axis and its buffer ``finalized`` (as RLlib's own ``to_numpy`` leaves it),
which :func:`~.episodes.check_episode_state` takes as the same episode.
Whenever the body is not laid out as expected, or anything in it is odd or
refused, :func:`decode_columns` gives up and returns :data:`NOT_COLUMNS`:
the caller then decodes the whole body with the hook, which has the last
word, so what is refused, and why, stays exactly what it was.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from ._msgpack import Packer, Unpacker, bin_header
from .arrays import COMPLEX, ND, array_map, decode_map
from .episodes import (
    ACTIONS,
    BUFFER_DATA,
    BUFFER_FINALIZED,
    EXTRA_MODEL_OUTPUTS,
    OBSERVATIONS,
    REWARDS,
)
from .errors import ProtocolError

__all__ = ["NOT_COLUMNS", "decode_columns", "wants_columns"]

#: Returned by :func:`decode_columns` when the body needs the general decoder.
NOT_COLUMNS = object()

#: How a body of one of the two episode messages starts: a small map whose
#: first key is ``type`` (what both RLlib's and our encoders write first).
_TYPE_KEY = b"\xa4type"
_EPISODES_TYPES = (b"\xa8EPISODES", b"\xb6EPISODES_AND_GET_STATE")
_EPISODES = "episodes"
#: The bytes of msgpack-numpy's ``nd`` key, and of an episode state's ``id_`` key.
_ARRAY_KEY = b"\xc4\x02nd"
_ID_KEY = b"\xa3id_"
#: A buffer's ``data`` key, as RLlib writes it (first).
_DATA_KEY = b"\xa4data"
#: Per-step arrays per state from which reading columns pays (a state of
#: stacked columns has about five arrays).
_MIN_ARRAYS_PER_STATE = 12
_BUFFERS = frozenset({OBSERVATIONS, ACTIONS, REWARDS})
#: msgpack's C unpacker refuses nesting deeper than this (its stack size).
_MSGPACK_MAX_DEPTH = 1024
_CONTAINERS = (dict, list)
#: Header bytes by (is an array, dtype string, shape); bounded, as few kinds travel.
_TEMPLATES: dict[tuple, bytes | None] = {}
_MAX_TEMPLATES = 256


class _NotColumns(Exception):
    """The body is not laid out as this reader expects; decode it with the hook."""


def wants_columns(body: Any) -> bool:
    """Whether ``body`` looks like an episodes body with per-step arrays, worth :func:`decode_columns`.

    A cheap look (its first bytes, and two byte counts in C): an
    ``EPISODES``/``EPISODES_AND_GET_STATE`` body with many more numpy maps
    than episode states. A body of stacked columns (our client's) has a few
    arrays per state, and msgpack's C decoder with the hook reads it faster
    in one go. :func:`decode_columns` decides the rest.
    """
    head = bytes(body[:30])
    if len(head) < 15 or not 0x81 <= head[0] <= 0x8F or head[1:6] != _TYPE_KEY:
        return False
    if not head[6:].startswith(_EPISODES_TYPES):
        return False
    data = body if type(body) is bytes else bytes(body)  # bytes.count runs in C; memoryview has none
    return data.count(_ARRAY_KEY) >= _MIN_ARRAYS_PER_STATE * max(1, data.count(_ID_KEY))


def decode_columns(body: Any, ext_hook: Any) -> Any:
    """Decode an episodes body with its columns stacked; :data:`NOT_COLUMNS` if it can't.

    Args:
        body: the whole body (bytes-like).
        ext_hook: the codec's ``ext_hook`` (refuses extension types).
    """
    data = memoryview(body)
    if data.format != "B" or data.ndim != 1:
        data = data.cast("B")
    size = len(data)
    reader = _Reader(data, Unpacker(None, raw=False, strict_map_key=False, object_hook=decode_map,
                                    ext_hook=ext_hook, use_list=True, max_buffer_size=size))
    try:
        reader.unpacker.feed(data)
        value = reader.message()
        if reader.unpacker.tell() != size:
            return NOT_COLUMNS  # trailing bytes: the hooked decoder names them
    except (_NotColumns, ProtocolError, msgpack.OutOfData, msgpack.StackError, ValueError, TypeError,
            OverflowError, KeyError, IndexError):
        return NOT_COLUMNS
    return value


class _Reader:
    """Reads the levels above the columns itself, each value below them in one C call."""

    __slots__ = ("body", "unpacker", "unpack", "tell")

    def __init__(self, body: memoryview, unpacker: Any) -> None:
        self.body = body
        self.unpacker = unpacker
        self.unpack = unpacker.unpack
        self.tell = unpacker.tell

    def _starts_map(self) -> bool:
        first = self.body[self.unpacker.tell()]
        return 0x80 <= first <= 0x8F or first == 0xDE or first == 0xDF

    def _holds_array_steps(self) -> bool:
        """Whether the buffer map here may hold a column worth stacking.

        RLlib writes a buffer's ``data`` first; when that list's first step is
        not an array map (plain ints or floats, as RLlib's clients send actions
        and rewards), the whole buffer is one value for C. Any other layout is
        read key by key (:meth:`_buffer`).
        """
        body, at = self.body, self.tell()
        if not 0x81 <= body[at] <= 0x8F or body[at + 1:at + 6] != _DATA_KEY:
            return True
        kind = body[at + 6]
        step_at = at + (7 if 0x90 <= kind <= 0x9F else 9 if kind == 0xDC else 11 if kind == 0xDD else 0)
        return bool(step_at) and step_at < len(body) and body[step_at] in (0x83, 0x85)

    def _value(self, depth: int) -> Any:
        """One value the general way (C, with the hook), no deeper than msgpack allows the whole body."""
        start = self.tell()
        value = self.unpack()
        limit = _MSGPACK_MAX_DEPTH - depth
        # Each level of nesting takes a byte at least: only a long value can be that deep.
        if self.tell() - start >= limit and type(value) in _CONTAINERS and _deeper_than(value, limit):
            raise _NotColumns  # read whole, the body would be too deep for msgpack
        return value

    def message(self) -> dict:
        unpack, out = self.unpack, {}
        for _ in range(self.unpacker.read_map_header()):
            key = unpack()  # a key is a scalar, or unhashable and refused below
            if type(key) is str and key == _EPISODES and _starts_array(self.body[self.unpacker.tell()]):
                out[key] = [self._state() if self._starts_map() else self._value(3)
                            for _ in range(self.unpacker.read_array_header())]
            else:
                out[key] = self._value(2)
        return _hooked(out)

    def _state(self) -> dict:
        unpack, out = self.unpack, {}
        for _ in range(self.unpacker.read_map_header()):
            key = unpack()
            if type(key) is str and (key in _BUFFERS or key == EXTRA_MODEL_OUTPUTS) and self._starts_map():
                if key == EXTRA_MODEL_OUTPUTS:
                    extras = {}
                    for _ in range(self.unpacker.read_map_header()):
                        name = unpack()
                        extras[name] = self._buffer(5) if self._holds_array_steps() else self._value(5)
                    out[key] = _hooked(extras)
                else:
                    out[key] = self._buffer(4) if self._holds_array_steps() else self._value(4)
            else:
                out[key] = self._value(4)
        return _hooked(out)

    def _buffer(self, depth: int) -> dict:
        unpack, out, stacked = self.unpack, {}, None
        for _ in range(self.unpacker.read_map_header()):
            key = unpack()
            if type(key) is str and key == BUFFER_DATA and _starts_array(self.body[self.unpacker.tell()]):
                if stacked is not None:
                    raise _NotColumns  # data twice
                value = self._column(depth + 1)
                if type(value) is np.ndarray:
                    stacked = value
            else:
                value = self._value(depth + 1)
            out[key] = value
        if stacked is not None:
            # Stacked from a per-step list: the buffer is finalized now.
            if out.get(BUFFER_DATA) is not stacked or out.get(BUFFER_FINALIZED) is not False:
                raise _NotColumns
            out[BUFFER_FINALIZED] = True
        return _hooked(out)

    def _column(self, depth: int) -> Any:
        """A per-step list: one stacked array when its steps are alike, else the list the hook makes."""
        unpacker, body = self.unpacker, self.body
        at = unpacker.tell()
        kind = body[at]
        step_at = at + (1 if kind <= 0x9F else 3 if kind == 0xDC else 5)
        if step_at >= len(body) or body[step_at] not in (0x83, 0x85):
            return self._value(depth)  # not a list of array maps: one piece, in C
        count = unpacker.read_array_header()
        if not count:
            return []  # what looked like its first step is the next value
        start = unpacker.tell()
        first = self._value(depth + 1)
        stride = unpacker.tell() - start
        if type(first) is np.ndarray or isinstance(first, np.generic):
            template = _encoded(first)
            head = stride - first.nbytes
            if (template is not None and first.nbytes and len(template) == head
                    and start + count * stride <= len(body)):
                rows = np.frombuffer(body, np.uint8, count * stride, start).reshape(count, stride)
                # Every step's header, byte for byte the first's: one copy and one memcmp.
                if rows[:, :head].tobytes() == template * count:
                    skipped = unpacker.read_bytes((count - 1) * stride)
                    if len(skipped) != (count - 1) * stride:
                        raise _NotColumns
                    steps = np.ascontiguousarray(rows[:, head:]).view(first.dtype)
                    steps.flags.writeable = False
                    return steps.reshape(count, *first.shape)
        return [first] + [self._value(depth + 1) for _ in range(count - 1)]


def _starts_array(first: int) -> bool:
    return 0x90 <= first <= 0x9F or first == 0xDC or first == 0xDD


def _hooked(obj: dict) -> Any:
    """What msgpack's ``object_hook`` makes of a map this reader built itself."""
    return decode_map(obj) if ND in obj or COMPLEX in obj else obj


def _encoded(value: Any) -> bytes | None:
    """msgpack-numpy's bytes for ``value`` up to where its data begins; ``None`` for other dtypes."""
    key = (type(value) is np.ndarray, value.dtype.str, value.shape)
    template = _TEMPLATES.get(key)
    if template is None:
        template = _template(value)
        if len(_TEMPLATES) < _MAX_TEMPLATES:
            _TEMPLATES[key] = template
    return template


def _template(value: Any) -> bytes | None:
    try:
        head = array_map(value, b"")
    except ProtocolError:
        return None
    packed = Packer(use_bin_type=True).pack(head)
    # The empty bin (0xc4 0x00) packed last gives way to the real data's bin header.
    return packed[:-2] + bin_header(value.nbytes)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep."""
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [child for node in level if type(node) in (dict, list)
                 for child in (node.values() if type(node) is dict else node)
                 if type(child) in (dict, list)]
    return False
