"""The wire form of plain samples: dicts of arrays that are not RL episodes (the ``samples`` extension).

A robot-learning team's actors ``put`` one dict per step (a camera image, an
action chunk, an index); a ``SAMPLES`` message carries a list of them::

    {"type": "SAMPLES", "samples": [{"image_0": ndarray, "action": ndarray, "index": 3}, ...], "seq": 7}

Arrays travel as every RLlink array does (PROTOCOL.md 4: plain msgpack maps,
never pickle); a value may also be an int, a float, a bool or a short str.
``seq`` numbers the message for the ``ack`` extension exactly as it numbers
``EPISODES``: the server confirms it once the consumer has taken it, and a
message resent after a reconnect is recognised by its ``seq``.

:func:`read_samples` checks a list as a receiver must; :func:`check_sample`
checks one dict as a sender should before it queues it, so a sender can't put
on the wire what a receiver refuses. Both raise
:class:`~.errors.InvalidMessage` (a ``ValueError`` too, for callers).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .errors import InvalidMessage

__all__ = ["SampleError", "MAX_SAMPLES_PER_MESSAGE", "MAX_SAMPLE_KEYS", "MAX_KEY_CHARS", "MAX_TEXT_CHARS",
           "check_sample", "read_samples", "sample_nbytes"]

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


def read_samples(samples: Any) -> list[dict[str, Any]]:
    """The ``samples`` of a ``SAMPLES`` message, checked.

    Raises:
        SampleError: not a list of 1 to ``MAX_SAMPLES_PER_MESSAGE`` samples, or
            a sample is malformed (:func:`check_sample`).
    """
    if not isinstance(samples, list) or not 0 < len(samples) <= MAX_SAMPLES_PER_MESSAGE:
        raise SampleError(f"SAMPLES: 'samples' must be a list of 1 to {MAX_SAMPLES_PER_MESSAGE} maps")
    return [check_sample(sample, f"samples[{i}]") for i, sample in enumerate(samples)]


def sample_nbytes(sample: Mapping[str, Any]) -> int:
    """The bytes of a sample's arrays (what a consumer buffers for it); 8 per other value."""
    return sum(value.nbytes if isinstance(value, np.ndarray) else 8 for value in sample.values())
