"""The wire form of plain samples: dicts of arrays that are not RL episodes (the ``samples`` extension).

A robot-learning team's actors ``put`` one dict per step (a camera image, an
action chunk, an index); a ``SAMPLES`` message carries a list of them::

    {"type": "SAMPLES", "samples": [{"image_0": ndarray, "action": ndarray, "index": 3}, ...], "seq": 7}

Arrays travel as every RLlink array does (PROTOCOL.md 4: plain msgpack maps,
never pickle); a value may also be an int, a float, a bool or a short str.
``seq`` numbers the message for the ``ack`` extension exactly as it numbers
``EPISODES``: the server confirms it once the consumer has taken it, and a
message resent after a reconnect is recognised by its ``seq``.

Two fields let the consumer confirm late (when its training loop asks for
the next batch) without either side waiting on the other for ever:

* the server's ``PONG`` offer names ``samples_window``: how many samples one
  client may leave unconfirmed, enough to fill the consumer's batches. A
  client holds at least that many in flight (its own default otherwise).
* ``"flush": true`` on a ``SAMPLES`` message says nothing more comes until
  what was sent is confirmed: the consumer hands over a partial batch now
  instead of waiting to fill it. A flush alone is an un-numbered message with
  an empty ``samples`` list; a client sends one only to a server that named a
  ``samples_window`` (older servers refuse an empty list).

:func:`read_samples` checks a list as a receiver must; :func:`check_sample`
checks one dict as a sender should before it queues it, so a sender can't put
on the wire what a receiver refuses. Both raise
:class:`~.errors.InvalidMessage` (a ``ValueError`` too, for callers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ._msgpack import Packer
from .codec import Buffer, encode_body
from .errors import InvalidMessage
from .messages import MessageType

__all__ = ["SampleError", "MAX_SAMPLES_PER_MESSAGE", "MAX_SAMPLE_KEYS", "MAX_KEY_CHARS", "MAX_TEXT_CHARS",
           "SAMPLES_WINDOW", "FLUSH", "EncodedSample", "check_sample", "read_samples", "read_samples_window",
           "encode_sample", "samples_body", "sample_nbytes"]

#: The key of the server's ``PONG`` offer that names how many samples a client may leave unconfirmed.
SAMPLES_WINDOW = "samples_window"
#: The ``SAMPLES`` field that says nothing more comes until what was sent is confirmed.
FLUSH = "flush"
#: The largest ``samples_window`` a client takes from a server (a hostile one can't make it hold more).
MAX_SAMPLES_WINDOW = 1 << 20

#: Most samples one ``SAMPLES`` message may carry.
MAX_SAMPLES_PER_MESSAGE = 4096
#: Most keys one sample may have.
MAX_SAMPLE_KEYS = 256
#: Longest key of a sample.
MAX_KEY_CHARS = 128
#: Longest str value of a sample.
MAX_TEXT_CHARS = 4096
#: numpy kinds a sample's array may have: bool, signed/unsigned integer, float, complex.
_ARRAY_KINDS = frozenset("biufc")


class SampleError(InvalidMessage, ValueError):
    """A sample is not a map of short str keys to numeric arrays, numbers, bools or short strings."""


def check_sample(sample: Any, where: str = "sample") -> dict[str, Any]:
    """``sample`` checked as one sample; numpy scalars become 0-d arrays. Returns a new dict.

    Raises:
        SampleError: not a non-empty map of at most ``MAX_SAMPLE_KEYS`` str keys
            (1 to ``MAX_KEY_CHARS`` chars) to numeric arrays, ints, floats, bools
            or strs of at most ``MAX_TEXT_CHARS`` chars.
    """
    if not isinstance(sample, Mapping):
        raise SampleError(f"{where} must be a map of names to arrays, got {type(sample).__name__}")
    if not 0 < len(sample) <= MAX_SAMPLE_KEYS:
        raise SampleError(f"{where} must have 1 to {MAX_SAMPLE_KEYS} keys, has {len(sample)}")
    checked: dict[str, Any] = {}
    for key, value in sample.items():
        if type(key) is not str or not 0 < len(key) <= MAX_KEY_CHARS:
            raise SampleError(f"{where}: keys must be strs of 1 to {MAX_KEY_CHARS} chars, got {str(key)[:64]!r}")
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in _ARRAY_KINDS or value.dtype.fields is not None:
                raise SampleError(f"{where}[{key!r}]: dtype {value.dtype} is not a numeric array")
        elif type(value) in (int, float, bool):
            pass
        elif type(value) is str:
            if len(value) > MAX_TEXT_CHARS:
                raise SampleError(f"{where}[{key!r}]: a str value may have at most {MAX_TEXT_CHARS} chars")
        else:
            raise SampleError(f"{where}[{key!r}]: values must be numeric arrays, ints, floats, bools or strs, "
                              f"got {type(value).__name__}")
        checked[key] = value
    return checked


def read_samples(samples: Any, flush: Any = False) -> list[dict[str, Any]]:
    """The ``samples`` of a ``SAMPLES`` message, checked; empty only in a flush.

    Raises:
        SampleError: ``flush`` is not a bool; ``samples`` is not a list of 1
            (0 with ``flush``) to ``MAX_SAMPLES_PER_MESSAGE`` samples, or a
            sample is malformed (:func:`check_sample`).
    """
    if type(flush) is not bool:
        raise SampleError("SAMPLES: 'flush' must be a bool")
    least = 0 if flush else 1
    if not isinstance(samples, list) or not least <= len(samples) <= MAX_SAMPLES_PER_MESSAGE:
        raise SampleError(f"SAMPLES: 'samples' must be a list of {least} to {MAX_SAMPLES_PER_MESSAGE} maps")
    return [check_sample(sample, f"samples[{i}]") for i, sample in enumerate(samples)]


def read_samples_window(offer_extra: Mapping[str, Any]) -> Optional[int]:
    """The ``samples_window`` a server's offer names, or ``None`` if it names none or a malformed one.

    A malformed value is ignored rather than refused: the window only tunes
    how much a client keeps in flight, and the client's own default is safe.
    """
    value = offer_extra.get(SAMPLES_WINDOW)
    if type(value) is not int or value < 1:
        return None
    return min(value, MAX_SAMPLES_WINDOW)


@dataclass(frozen=True)
class EncodedSample:
    """One sample as msgpack, checked, in buffers of its own (the caller may reuse its arrays at once).

    Attributes:
        parts: the packed sample map; large arrays as copies of their bytes.
        nbytes: the size of ``parts``.
    """

    parts: tuple[Buffer, ...]
    nbytes: int


def encode_sample(sample: Any, alloc: Optional[Callable[[int], np.ndarray]] = None) -> EncodedSample:
    """``sample`` checked (:func:`check_sample`) and packed as it goes inside a ``SAMPLES`` message.

    Packing a sample once, when it is put, is both the copy that frees the
    caller's arrays and the work the message needs: a message of many samples
    is then their buffers behind a small head (:func:`samples_body`).

    Args:
        alloc: where a large array's copy goes: a writable buffer of the
            size asked (a pool of reused buffers saves the page faults of
            fresh memory); ``None``: new ``bytes``.

    Raises:
        SampleError: the sample is malformed.
    """
    checked = check_sample(sample)
    parts = tuple(part if isinstance(part, bytes) else _copy(part, alloc) for part in encode_body(checked))
    return EncodedSample(parts, sum(len(part) for part in parts))


def _copy(part: memoryview, alloc: Optional[Callable[[int], np.ndarray]]) -> Buffer:
    if alloc is None:
        return bytes(part)
    buffer = alloc(part.nbytes)
    view = memoryview(buffer)
    view[:] = part
    return view


_PACKER = Packer(use_bin_type=True, autoreset=True)
_TYPE_AND_SAMPLES_KEYS = _PACKER.pack("type") + _PACKER.pack(MessageType.SAMPLES.value) + _PACKER.pack("samples")


def samples_body(samples: Sequence[EncodedSample], seq: Optional[int] = None, flush: bool = False) -> list[Buffer]:
    """The body of ``SAMPLES`` for samples packed by :func:`encode_sample`, as buffers.

    The same bytes as encoding ``{"type": "SAMPLES", "samples": [...], "seq": seq, "flush": true}``
    (``seq`` and ``flush`` only when given), without packing the samples again.

    Raises:
        SampleError: more than ``MAX_SAMPLES_PER_MESSAGE`` samples, or none outside a flush.
    """
    if not (0 if flush else 1) <= len(samples) <= MAX_SAMPLES_PER_MESSAGE:
        raise SampleError(f"SAMPLES: 1 to {MAX_SAMPLES_PER_MESSAGE} samples a message (0 only in a flush), "
                          f"got {len(samples)}")
    tail = b""
    if seq is not None:
        tail += _PACKER.pack("seq") + _PACKER.pack(seq)
    if flush:
        tail += _PACKER.pack(FLUSH) + _PACKER.pack(True)
    keys = 2 + (seq is not None) + flush
    parts: list[Buffer] = [_PACKER.pack_map_header(keys) + _TYPE_AND_SAMPLES_KEYS + _PACKER.pack_array_header(len(samples))]
    for sample in samples:
        parts.extend(sample.parts)
    if tail:
        parts.append(tail)
    return parts


def sample_nbytes(sample: Mapping[str, Any]) -> int:
    """The bytes of a sample's arrays (what a consumer buffers for it); 8 per other value."""
    return sum(value.nbytes if isinstance(value, np.ndarray) else 8 for value in sample.values())
