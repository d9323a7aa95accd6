"""The body codec: numpy values in msgpack-numpy's map form, without pickle.

Byte compatibility is checked against msgpack-numpy itself, the codec RLlib's
peers use (``msgpack.packb(x, default=msgpack_numpy.encode, use_bin_type=True)``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgpack
import msgpack_numpy
import numpy as np
import pytest

from rlinks_rllib.protocol import DecodeError, FrameDecoder, UnsafePayload, encode_message, encode_message_parts
from rlinks_rllib.protocol.codec import decode_body, encode_body
from rlinks_rllib.protocol.limits import ZERO_COPY_MIN_BYTES

ROOT = Path(__file__).resolve().parent.parent

SAFE_DTYPES = [
    "?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
    "f2", "f4", "f8", "c8", "c16", ">i4", ">f8", ">c16", "S5", "U3",
]  # fmt: skip
SHAPES = [(), (0,), (3,), (2, 3, 4), (0, 5), (1, 1, 1, 1)]


def reference(obj) -> bytes:
    """What msgpack-numpy (and so RLlib) writes for ``obj``."""
    return msgpack.packb(obj, default=msgpack_numpy.encode, use_bin_type=True)


def ours(obj) -> bytes:
    return b"".join(bytes(p) for p in encode_body(obj))


def sample(dtype: str, shape: tuple) -> np.ndarray:
    """Deterministic, non-trivial values of ``dtype`` in ``shape``."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    rng = np.random.default_rng(7)
    if dtype.kind == "U":
        return np.array((["ab", "xyz", ""] * count)[:count], dtype=dtype).reshape(shape)
    if dtype.kind in "fc":
        values = rng.standard_normal(count)
        if dtype.kind == "c":
            values = values + 1j * rng.standard_normal(count)
        return values.astype(dtype).reshape(shape)
    if dtype.kind == "b":
        return (rng.integers(0, 2, size=count) == 1).reshape(shape)
    raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8).tobytes()
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def raw_body(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def array_map(**fields) -> dict:
    base = {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [2], b"data": b"\x00" * 8}
    base.update({k.encode(): v for k, v in fields.items()})
    return base


# --------------------------------------------------------------------------
# Round trips and byte identity


@pytest.mark.parametrize("dtype", SAFE_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_safe_dtypes_round_trip_and_match_msgpack_numpy(dtype, shape):
    array = sample(dtype, shape)
    body = ours({"a": array})
    assert body == reference({"a": array})
    back = decode_body(body)["a"]
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


@pytest.mark.parametrize("dtype", ["f4", "u1", "c16", ">i2"])
def test_large_arrays_are_zero_copy_and_byte_identical(dtype):
    array = sample(dtype, (64, 128))
    assert array.nbytes >= ZERO_COPY_MIN_BYTES
    parts = encode_body({"x": [1, array, "after"]})
    views = [p for p in parts if isinstance(p, memoryview)]
    assert len(views) == 1 and np.shares_memory(np.asarray(views[0]), array)
    assert ours({"x": [1, array, "after"]}) == reference({"x": [1, array, "after"]})


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[:, ::2],  # strided
        lambda a: a.T,  # Fortran order
        lambda a: np.asfortranarray(a),
        lambda a: a[::-1],  # negative stride
        lambda a: np.broadcast_to(a[0], a.shape),  # zero stride
    ],
    ids=["strided", "transposed", "fortran", "reversed", "broadcast"],
)
@pytest.mark.parametrize("rows", [3, 300])  # small and large (zero-copy) paths
def test_non_contiguous_arrays_encode_in_c_order(make, rows):
    array = make(np.arange(rows * 40, dtype=np.float32).reshape(rows, 40))
    assert not array.flags.c_contiguous
    body = ours({"a": array})
    assert body == reference({"a": array})
    back = decode_body(body)["a"]
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_mixed_structure_is_byte_identical():
    big = np.ones((100, 100), dtype=np.float32)
    value = {
        "type": "EPISODES",
        "episodes": [
            {"obs": [np.zeros(4, np.float32), big, np.int64(3)], "r": 1.0, "n": None, "b": b"\x00\x01"},
            {"nested": {"deep": [big, {"k": np.bool_(True)}]}, "t": (1, 2, big)},
        ],
        "s": "é",
        "i": -(2**63),
        "u": 2**64 - 1,
    }
    assert ours(value) == reference(value)


@pytest.mark.parametrize(
    "scalar",
    [np.float32(1.5), np.float16(-2), np.int8(-3), np.int64(2**40), np.uint64(2**64 - 1), np.bool_(True),
     np.complex64(1 + 2j), np.uint8(255)],
    ids=lambda s: type(s).__name__,
)
def test_numpy_scalars_round_trip_and_match(scalar):
    body = ours({"v": scalar})
    assert body == reference({"v": scalar})
    back = decode_body(body)["v"]
    assert type(back) is type(scalar) and back == scalar


def test_python_subclass_scalars_travel_as_python_values():
    # np.float64 is a float and np.str_ a str: msgpack packs them natively, as
    # msgpack-numpy does, and they come back as plain Python values.
    value = {"f": np.float64(0.25), "s": np.str_("x"), "b": np.bytes_(b"y")}
    assert ours(value) == reference(value)
    assert decode_body(ours(value)) == {"f": 0.25, "s": "x", "b": b"y"}


def test_python_complex_is_read_but_never_written():
    # msgpack-numpy writes a Python complex as {b"complex": True, b"data": repr};
    # we read that, but send complex values only as numpy scalars or arrays.
    assert decode_body(reference({"c": 1 + 2j})) == {"c": 1 + 2j}
    with pytest.raises(TypeError):
        encode_body({"c": 1 + 2j})


def test_we_decode_what_msgpack_numpy_writes_and_vice_versa():
    value = {"a": sample("f8", (5, 7)), "b": [sample("u2", (3,)), np.int32(5)], "big": sample("u1", (80, 80))}
    mine = decode_body(reference(value))
    theirs = msgpack.unpackb(ours(value), object_hook=msgpack_numpy.decode, raw=False)
    for back in (mine, theirs):
        np.testing.assert_array_equal(back["a"], value["a"])
        np.testing.assert_array_equal(back["b"][0], value["b"][0])
        assert back["b"][1] == 5 and back["b"][1].dtype == np.int32
        np.testing.assert_array_equal(back["big"], value["big"])


# --------------------------------------------------------------------------
# Decoded arrays: read-only views of msgpack's bytes


@pytest.mark.parametrize("shape", [(3, 4), (200, 100)])
def test_decoded_arrays_are_read_only_views(shape):
    array = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    back = decode_body(ours({"a": array}))["a"]
    assert not back.flags.writeable
    with pytest.raises(ValueError):
        back[0, 0] = 1
    owner = back
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    # The memory belongs to the bytes object msgpack made for the bin field:
    # exactly the array's data, no further copy.
    assert type(owner) is bytes and len(owner) == array.nbytes


def test_decoding_from_a_frame_does_not_alias_the_fed_buffer():
    array = np.arange(2000, dtype=np.float64)
    frame = bytearray(encode_message({"type": "SET_STATE", "state": {"w": array}}))
    [message] = FrameDecoder().feed(frame)
    frame[:] = b"\xff" * len(frame)
    np.testing.assert_array_equal(message["state"]["w"], array)


# --------------------------------------------------------------------------
# Refused on encode


@pytest.mark.parametrize(
    "value",
    [
        np.array([1, "a", None], dtype=object),
        np.zeros(3, dtype=[("x", "<f4"), ("y", "<i4")]),
        np.zeros(3000, dtype=[("x", "<f4"), ("y", "<i4")]),  # large path
        np.zeros(2, dtype="V8"),
        np.zeros((2,), dtype=[("x", "<f4")])[0],  # np.void scalar
        np.array(["2020-01-01"], dtype="datetime64[D]"),
    ],
    ids=["object", "structured", "structured-large", "void", "void-scalar", "datetime"],
)
def test_unsafe_arrays_refused_on_encode(value):
    with pytest.raises(UnsafePayload):
        encode_body({"a": value})
    with pytest.raises(UnsafePayload):
        encode_message({"type": "SET_STATE", "state": {"a": value}})


@pytest.mark.parametrize("value", [{1, 2}, object(), np.datetime64("2020-01-01")])
def test_unencodable_values_raise_type_error(value):
    with pytest.raises((TypeError, UnsafePayload)):
        encode_body({"a": value})


# --------------------------------------------------------------------------
# Refused on decode


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": b"O", "type": "|O", "data": b"\x80\x04N."},
        {"kind": "O", "type": "|O", "data": b"\x80\x04N."},
        {"kind": b"V", "type": [["x", "<f4"]], "data": b"\x00" * 8},
        {"kind": b"", "type": "|O", "data": b"\x00" * 16},
        {"kind": b"", "type": "|V4"},
        {"kind": b"", "type": "<M8[ns]", "data": b"\x00" * 16},
        {"kind": b"", "type": "<m8[s]", "data": b"\x00" * 16},
        {"kind": b"", "type": "(2,)<f4", "shape": [1]},
        {"type": [["x", "<f4"]]},
    ],
    ids=["pickle", "pickle-str-kind", "structured", "object-dtype", "void", "datetime", "timedelta",
         "subarray", "descr-list"],
)
def test_unsafe_arrays_refused_on_decode(fields):
    with pytest.raises(UnsafePayload):
        decode_body(raw_body({"a": array_map(**fields)}))


def test_pickled_scalar_refused():
    with pytest.raises(UnsafePayload):
        decode_body(raw_body({"a": {b"nd": False, b"type": "|O", b"data": b"\x80\x04N."}}))


@pytest.mark.parametrize(
    "fields",
    [
        {"shape": [3]},  # 3 * 4 != 8
        {"shape": [2, 2]},
        {"data": b"\x00" * 9},
        {"shape": [-2]},
        {"shape": [2.0]},
        {"shape": [True, 2]},
        {"shape": "2"},
        {"shape": None},
        {"shape": [1] * 65 + [2]},  # numpy's 64-dimension limit
        {"data": "\x00" * 8},  # str instead of bin: an old, use_bin_type=False peer
        {"data": None},
        {"nd": 1},
        {"nd": None},
        {"type": "not-a-dtype"},
        {"type": "(2,)|01"},  # numpy raises SyntaxError for this one
        {"type": "<f4" * 10},
        {"kind": b"X"},
        {"kind": 1},
        {"type": "S0", "shape": [3], "data": b""},
    ],
    ids=repr,
)
def test_malformed_arrays_refused(fields):
    with pytest.raises(DecodeError) as info:
        decode_body(raw_body({"a": array_map(**fields)}))
    assert not isinstance(info.value, UnsafePayload)


@pytest.mark.parametrize("descr", [4, None, b"<f4"])
def test_non_string_dtype_refused(descr):
    # msgpack-numpy writes a list here for structured dtypes, so anything but
    # a str is treated as a request for one.
    with pytest.raises(UnsafePayload):
        decode_body(raw_body({"a": array_map(type=descr)}))


@pytest.mark.parametrize(
    "scalar",
    [
        {b"nd": False, b"type": "<f4", b"data": b"\x00" * 3},
        {b"nd": False, b"type": "<f4", b"data": b"\x00" * 4, b"shape": []},
        {b"nd": False, b"type": "<f4"},
        {b"complex": True, b"data": "not a number"},
        {b"complex": True, b"data": "1" * 100},
        {b"complex": 1, b"data": "1+2j"},
        {b"complex": True},
    ],
    ids=repr,
)
def test_malformed_scalars_refused(scalar):
    with pytest.raises(DecodeError):
        decode_body(raw_body({"a": scalar}))


def test_huge_zero_size_shape_is_harmless():
    back = decode_body(raw_body({"a": array_map(shape=[0, 2**40], data=b"")}))["a"]
    assert back.shape == (0, 2**40) and back.nbytes == 0


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xc1",  # never used
        b"\x82\xa1a",  # truncated map
        b"\x81\xa1a\x01\x01",  # trailing byte
        b"\x81\x91\x01\x02",  # list as map key
        b"\xd4\x01\x00",  # ext type 1
        b"\xc7\x01\xff\x00",  # timestamp ext (-1)
        b"\x91" * 2000 + b"\x01",  # deeper than msgpack's stack
        b"\xa2\xff\xfe",  # invalid utf-8 in str
    ],
    ids=repr,
)
def test_malformed_bodies_refused(body):
    with pytest.raises(DecodeError):
        decode_body(body)


def test_bin_map_keys_and_non_str_keys_survive():
    assert decode_body(raw_body({b"k": 1, 2: 3})) == {b"k": 1, 2: 3}


# --------------------------------------------------------------------------
# RLlib's msgpack_numpy.patch() must not reach our codec (decoder side: test_protocol_fuzz.py)


def test_patched_msgpack_does_not_reach_the_encoder(msgpack_numpy_patched):
    with pytest.raises(UnsafePayload):
        encode_body({"a": np.array([object()], dtype=object)})
    big = np.zeros(10000, np.uint8)
    parts = encode_message_parts({"type": "SET_STATE", "state": {"w": big}})
    assert any(isinstance(p, memoryview) and np.shares_memory(np.asarray(p), big) for p in parts)


# --------------------------------------------------------------------------
# The benchmark must keep running


def test_bench_codec_quick_runs():
    script = ROOT / "benchmarks" / "bench_codec.py"
    result = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "GB/s" in result.stdout and "ratio" in result.stdout
