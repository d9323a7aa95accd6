"""Hostile input: whatever bytes arrive, the decoder raises ProtocolError or nothing.

Property tests feed random bytes, random msgpack values and mutated valid
frames, split at random places, and check that nothing but
:class:`ProtocolError` ever escapes. A frame whose array asks for pickle is
refused and its payload never runs; RLlib's own reader runs it (shown in a
subprocess).
"""

from __future__ import annotations

import pathlib
import pickle
import subprocess
import sys
import textwrap

import msgpack
import msgpack_numpy
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlinks_rllib.protocol import (
    FrameDecoder,
    MessageType,
    ProtocolError,
    UnsafePayload,
    encode_message,
)

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def frame(body: bytes) -> bytes:
    return b"%08d" % len(body) + body


def feed_in_pieces(data: bytes, cuts: list[int], max_frame_bytes: int = 1 << 20) -> list[dict]:
    """Feed ``data`` split at ``cuts``, then signal end of stream; return the messages."""
    decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    messages = []
    for start, end in zip(bounds, bounds[1:]):
        messages += decoder.feed(data[start:end])
    decoder.eof()
    return messages


def only_protocol_errors(data: bytes, cuts: list[int]) -> None:
    try:
        messages = feed_in_pieces(data, cuts)
    except ProtocolError:
        return
    for message in messages:
        assert isinstance(message, dict) and isinstance(message["type"], str)


# --------------------------------------------------------------------------
# Pickle


class _TouchOnUnpickle:
    """Unpickling this creates a file: a harmless stand-in for any code a peer could run."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def pickle_array(target: pathlib.Path) -> dict:
    """msgpack-numpy's map for an object array, with a payload that touches ``target``."""
    return {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": [1], b"data": pickle.dumps(_TouchOnUnpickle(target))}


def pickle_bomb_frame(target: pathlib.Path) -> bytes:
    """An EPISODES frame whose observations ask msgpack-numpy to unpickle."""
    episode = {"id_": "x", "observations": {"data": pickle_array(target), "lookback": 0, "finalized": True}}
    return frame(msgpack.packb({"type": "EPISODES", "episodes": [episode]}, use_bin_type=True))


def test_pickle_array_refused_and_never_run(tmp_path):
    target = tmp_path / "pwned"
    data = pickle_bomb_frame(target)
    with pytest.raises(UnsafePayload) as info:
        FrameDecoder().feed(data)
    assert info.value.code == "unsafe_payload"
    decoder = FrameDecoder()
    with pytest.raises(UnsafePayload):
        for byte in data:
            decoder.feed(bytes([byte]))
    assert not target.exists()


def test_pickle_array_refused_with_msgpack_patched_by_rllib(msgpack_numpy_patched, tmp_path):
    target = tmp_path / "pwned"
    with pytest.raises(UnsafePayload):
        FrameDecoder().feed(pickle_bomb_frame(target))
    assert not target.exists()


def test_pickle_scalar_refused(tmp_path):
    target = tmp_path / "pwned"
    scalar = {b"nd": False, b"type": "|O", b"data": pickle.dumps(_TouchOnUnpickle(target))}
    with pytest.raises(UnsafePayload):
        FrameDecoder().feed(frame(msgpack.packb({"type": "PING", "x": scalar}, use_bin_type=True)))
    assert not target.exists()


def test_rllibs_reader_would_run_the_payload(tmp_path):
    """The same frame through RLlib's ``get_rllink_message``, in a child process."""
    target = tmp_path / "pwned"
    frame_file = tmp_path / "frame.bin"
    frame_file.write_bytes(pickle_bomb_frame(target))
    script = textwrap.dedent(
        """
        import socket, sys
        from ray.rllib.env.external.rllink import get_rllink_message
        a, b = socket.socketpair()
        a.sendall(open(sys.argv[1], "rb").read())
        print(get_rllink_message(b)[0])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(frame_file)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "EPISODES" in result.stdout
    assert target.exists(), "RLlib's reader did not unpickle the payload"


@FEW
@given(
    wrapper=st.recursive(
        st.just("HOLE"),
        lambda inner: st.one_of(
            st.lists(st.one_of(inner, st.integers(-100, 100), st.text(max_size=3)), min_size=1, max_size=3).filter(
                lambda xs: "HOLE" in str(xs)
            ),
            st.dictionaries(st.text(max_size=4), inner, min_size=1, max_size=2),
        ),
        max_leaves=6,
    ),
    kind=st.sampled_from(["EPISODES", "SET_STATE", "PING", "GET_ACTION", "NOPE"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=4),
)
def test_pickle_anywhere_is_refused(tmp_path_factory, wrapper, kind, cuts):
    target = tmp_path_factory.mktemp("bomb") / "pwned"
    bomb = pickle_array(target)

    def place(node):
        if node == "HOLE":
            return bomb
        if isinstance(node, list):
            return [place(x) for x in node]
        if isinstance(node, dict):
            return {k: place(v) for k, v in node.items()}
        return node

    data = frame(msgpack.packb({"type": kind, "payload": place(wrapper)}, use_bin_type=True))
    with pytest.raises(UnsafePayload):
        feed_in_pieces(data, cuts)
    assert not target.exists()


# --------------------------------------------------------------------------
# Random input


@FUZZ
@given(data=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=5))
def test_random_bytes(data, cuts):
    only_protocol_errors(data, cuts)


@FUZZ
@given(body=st.binary(min_size=1, max_size=200), cuts=st.lists(st.integers(0, 210), max_size=5))
def test_random_body_behind_a_valid_header(body, cuts):
    only_protocol_errors(frame(body), cuts)


ARRAY_KEYS = [b"nd", b"type", b"kind", b"shape", b"data", b"complex"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=16),
    st.sampled_from(["<f4", "|u1", "|O", "V8", "<M8[s]", "S0", "(2,)i4", b"O", b"V", b"", "f"]),
)
array_like = st.dictionaries(
    st.sampled_from(ARRAY_KEYS),
    st.one_of(scalars, st.lists(st.integers(-2, 2**33), max_size=4), st.lists(st.lists(st.text(max_size=3)))),
    max_size=6,
)
values = st.recursive(
    st.one_of(scalars, array_like),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.binary(max_size=3), st.integers(-(2**63), 2**64 - 1)), inner,
                        max_size=4),
    ),
    max_leaves=12,
)
type_names = st.one_of(st.sampled_from([t.value for t in MessageType]), st.text(max_size=10), st.integers(-5, 5))
fields = st.sampled_from(
    ["episodes", "state", "config", "timesteps", "seq", "code", "message", "want_steps", "rlinks", "rlinks_config"]
)


@FUZZ
@given(
    message=st.one_of(
        st.fixed_dictionaries({"type": type_names}, optional={"x": values}).flatmap(
            lambda m: st.dictionaries(fields, values, max_size=4).map(lambda extra: {**extra, **m})
        ),
        values,
    ),
    cuts=st.lists(st.integers(0, 5000), max_size=4),
)
def test_random_msgpack_values(message, cuts):
    only_protocol_errors(frame(msgpack.packb(message, use_bin_type=True)), cuts)


@FUZZ
@given(
    descr=st.one_of(st.text(alphabet="<>|=0123456789biufcSUVOMm?,()[]' :_", max_size=16), st.text(max_size=20)),
    shape=st.lists(st.integers(0, 3), max_size=3),
    data=st.binary(max_size=24),
)
def test_random_dtype_strings(descr, shape, data):
    array = {b"nd": True, b"type": descr, b"kind": b"", b"shape": shape, b"data": data}
    only_protocol_errors(frame(msgpack.packb({"type": "SET_STATE", "state": {"a": array}}, use_bin_type=True)), [])


def corpus() -> list[bytes]:
    rng = np.random.default_rng(0)
    episode = {
        "id_": "abc",
        "observations": {"data": [rng.standard_normal(4).astype(np.float32) for _ in range(3)], "lookback": 0,
                         "finalized": False, "space": None},
        "actions": {"data": np.array([0, 1], np.int64), "lookback": 0, "finalized": True, "space": None},
        "rewards": {"data": [1.0, 1.0], "lookback": 0, "finalized": False, "space": None},
        "t": 2,
    }
    return [
        encode_message({"type": "PING", "rlinks": {"version": 1, "extensions": ["ack", "want_steps"]}}),
        encode_message({"type": "EPISODES_AND_GET_STATE", "episodes": [episode], "timesteps": 2, "seq": 1}),
        encode_message({"type": "SET_STATE", "state": {"rl_module": {"w": np.arange(6, dtype=np.float32).reshape(2, 3),
                                                                     "b": np.zeros(2, np.float16)},
                                                       "weights_seq_no": 7}, "want_steps": 10}),
        encode_message({"type": "ERROR", "code": "bad_frame", "message": "no"}),
        encode_message({"type": "SET_CONFIG", "config": b"\x80\x05K\x01.", "x": [np.int8(1), np.bool_(False)]}),
    ]


CORPUS = corpus()


@st.composite
def mutated_stream(draw):
    frames = draw(st.lists(st.sampled_from(CORPUS), min_size=1, max_size=3))
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0x30, 0x39, 0x7F, 0x80, 0xC1, 0xC4, 0xD4, 0xDE, 0xFF]))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        else:
            del data[pos:]
    if draw(st.booleans()) and len(data) > 8 and len(frames) == 1:
        # Repair the header so the mutated body is decoded, not refused by framing.
        data[:8] = b"%08d" % (len(data) - 8)
    return bytes(data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated_stream(), cuts=st.lists(st.integers(0, 2000), max_size=5))
def test_mutated_valid_frames(data, cuts):
    only_protocol_errors(data, cuts)


# --------------------------------------------------------------------------
# Valid input survives any split


dtypes = st.sampled_from(["?", "i1", "u2", "<i4", ">i8", "u8", "f2", "<f4", ">f8", "c8", "c16", "S3", "U2"])
arrays = dtypes.flatmap(
    lambda d: hnp.arrays(np.dtype(d), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
)
payloads = st.recursive(
    st.one_of(arrays, st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.binary(max_size=5), st.none(),
              st.floats(allow_nan=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8,
)


def same(got, want) -> bool:
    if isinstance(want, np.ndarray):
        return (isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
                and got.tobytes() == np.ascontiguousarray(want).tobytes())
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    return got == want and type(got) is type(want)


@FUZZ
@given(payload=payloads, cuts=st.lists(st.integers(0, 4000), max_size=6))
def test_round_trip_any_split(payload, cuts):
    message = {"type": "SET_STATE", "state": {"p": payload}, "seq_extra": 1}
    data = encode_message(message)
    assert data[8:] == msgpack.packb(message, default=msgpack_numpy.encode, use_bin_type=True)
    [back] = feed_in_pieces(data * 1, cuts)
    assert same(back, message)
