"""Large frames decode without copying their arrays, and exactly as msgpack's C path does.

A body of at least ``ZERO_COPY_MIN_BODY_BYTES`` that the decoder owns is read
by ``codec._ViewReader``, a Python msgpack reader that hands large bins out as
views of the body. These tests pin that it gives the very values the C path
gives (test vectors, generated values), that hostile bodies get the C path's
outcome and nothing else, that the arrays really are views of the frame (and
never of a buffer the caller may reuse), and the other receive-side details:
frame sizes, body buffers that are not zero-filled, ``recv_into``.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlinks_rllib.protocol import FrameDecoder, ProtocolError, codec, encode_message
from rlinks_rllib.protocol.codec import decode_body, encode_body
from rlinks_rllib.protocol.errors import DecodeError
from rlinks_rllib.protocol.limits import HEADER_BYTES, ZERO_COPY_MIN_BODY_BYTES, ZERO_COPY_MIN_BYTES

VECTORS = Path(__file__).resolve().parent / "vectors"
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

IMAGE = (480, 640, 3)


@contextlib.contextmanager
def view_reader_for_everything():
    """Send every shared body, however small or busy, through the view reader first."""
    saved = codec.ZERO_COPY_MIN_BODY_BYTES, codec._VIEW_MIN_OBJECTS
    codec.ZERO_COPY_MIN_BODY_BYTES, codec._VIEW_MIN_OBJECTS = 1, 1 << 30
    try:
        yield
    finally:
        codec.ZERO_COPY_MIN_BODY_BYTES, codec._VIEW_MIN_OBJECTS = saved


def views(body: bytes):
    """The view reader's own result, no fallback to C."""
    with view_reader_for_everything():
        return codec._decode_views(memoryview(body))


def outcome(fn):
    """``("ok", value)`` or ``("error", class name, message)``; anything but ProtocolError escapes."""
    try:
        return ("ok", fn())
    except ProtocolError as exc:
        return ("error", type(exc).__name__, str(exc))


def assert_identical(got, want) -> None:
    """Equal values of equal types (dtypes and shapes included; NaN equals NaN)."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_identical(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_identical(g, w)
    elif isinstance(want, (np.ndarray, np.generic)):
        assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == want


def assert_same_outcome(body: bytes) -> None:
    """The shared path (view reader, C as fallback) ends exactly as the C path does."""
    want = outcome(lambda: decode_body(body))
    with view_reader_for_everything():
        got = outcome(lambda: decode_body(body, share=True))
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        assert_identical(got[1], want[1])
    else:
        assert got == want


def frame_bodies(stream: bytes) -> list[bytes]:
    """The bodies of the whole frames in a stream (stops at the first bad header)."""
    bodies, pos = [], 0
    while pos + HEADER_BYTES <= len(stream):
        header = stream[pos : pos + HEADER_BYTES]
        if not header.isdigit():
            break
        size = int(header)
        body = stream[pos + HEADER_BYTES : pos + HEADER_BYTES + size]
        if body:
            bodies.append(body)
        pos += HEADER_BYTES + size
    return bodies


def base_buffer(array: np.ndarray):
    """What finally owns an array's memory, following ``.base`` and memoryviews."""
    owner = array
    while True:
        if isinstance(owner, np.ndarray) and owner.base is not None:
            owner = owner.base
        elif isinstance(owner, memoryview):
            owner = owner.obj
        else:
            return owner


def images_message(steps: int = 2, seed: int = 0) -> tuple[dict, np.ndarray]:
    frames = np.random.default_rng(seed).integers(0, 256, size=(steps + 1, *IMAGE), dtype=np.uint8)
    message = {"type": "SET_STATE", "state": {"frames": frames, "small": np.arange(3.0), "n": steps}}
    return message, frames


def receive_via_recv_into(frame: bytes, decoder: FrameDecoder) -> dict:
    """Read ``frame`` off a real socket the way the server does: header by feed, body by recv_into."""
    tx, rx = socket.socketpair()
    tx.settimeout(10)
    rx.settimeout(10)
    sender = threading.Thread(target=tx.sendall, args=(frame,), daemon=True)
    sender.start()
    try:
        while decoder.next_read_buffer() is None:
            assert decoder.feed(rx.recv(HEADER_BYTES - decoder.buffered_bytes)) == []
        while True:
            view = decoder.next_read_buffer()
            assert view is not None
            n = rx.recv_into(view)
            del view
            assert n, "sender closed early"
            messages = decoder.advance(n)
            if messages:
                return messages[0]
    finally:
        sender.join(10)
        tx.close()
        rx.close()


# --------------------------------------------------------------------------
# Identical to the C path


@pytest.mark.parametrize("name", sorted(p.stem for p in VECTORS.glob("*.json")))
def test_vector_bodies_decode_identically(name):
    for body in frame_bodies((VECTORS / f"{name}.bin").read_bytes()):
        assert_same_outcome(body)
        if name.startswith("valid_"):
            # The reader handled it on its own (no fallback to C hid a difference).
            assert_identical(views(body), decode_body(body))


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.floats(allow_nan=True),
    st.floats(width=32, allow_nan=False).map(np.float32),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.integers(ZERO_COPY_MIN_BYTES - 1, ZERO_COPY_MIN_BYTES + 9).map(lambda size: bytes(i % 251 for i in range(size))),
)
arrays = hnp.arrays(
    dtype=st.sampled_from(["?", "i1", "<i4", ">i8", "u2", "<f4", ">f8", "<c16", "S3", "<U2"]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40),
)
keys = st.one_of(st.text(max_size=8), st.binary(max_size=8), st.integers(-5, 5), st.none())
values = st.recursive(
    st.one_of(scalars, arrays),
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=20,
)


@PROPERTY
@given(values)
def test_generated_values_decode_identically(value):
    body = b"".join(bytes(p) for p in encode_body(value))
    assert_same_outcome(body)
    want = outcome(lambda: decode_body(body))
    if want[0] == "ok":  # (a generated map may look like a malformed array map)
        assert_identical(views(body), want[1])


@PROPERTY
@given(values)
def test_generated_values_decode_identically_from_plain_msgpack(value):
    # Bodies msgpack itself writes (numpy values as msgpack-numpy would), not only ours.
    body = msgpack.packb(value, use_bin_type=True, default=lambda obj: codec.array_map(obj, obj.tobytes()))
    assert_same_outcome(body)


def test_large_bins_outside_array_data_stay_bytes():
    blob = b"\x07" * ZERO_COPY_MIN_BYTES
    value = {"blob": blob, b"data": blob, "list": [blob, blob], "nested": {b"data": blob}}
    body = msgpack.packb({**value, blob: 1}, use_bin_type=True)
    assert_identical(views(body), decode_body(body))
    got = views(body)
    assert type(got["blob"]) is bytes and type(got[b"data"]) is bytes and type(got[blob]) is int
    assert type(views(msgpack.packb(blob, use_bin_type=True))) is bytes


def test_extension_types_get_the_c_paths_answer():
    assert_same_outcome(msgpack.packb({"x": msgpack.ExtType(5, b"abc")}, use_bin_type=True))
    assert_same_outcome(msgpack.packb({"x": msgpack.Timestamp(1, 2)}, use_bin_type=True))
    with view_reader_for_everything(), pytest.raises(DecodeError, match="extension type 5"):
        decode_body(msgpack.packb([msgpack.ExtType(5, b"")]), share=True)


# --------------------------------------------------------------------------
# Hostile bodies


HOSTILE = [
    b"\xc6\xff\xff\xff\xff",  # bin32 of 4 GiB
    b"\xdb\xff\xff\xff\xff",  # str32 of 4 GiB
    b"\xdd\xff\xff\xff\xff\x00",  # array32 of 4 G items
    b"\xdf\xff\xff\xff\xff\x00\x00",  # map32 of 4 G pairs
    b"\x81\xc4\x02nd\xdd\x00\x00\x10\x00",  # array map whose nd is a truncated array
    b"\x91" * 100_000 + b"\x00",  # deeper than any msgpack reader follows
    b"\x91" * 40 + b"\x00",  # deeper than the view reader follows, not than C
    b"\x81" * 40 + b"\x00",
    b"\x81\x90\x00",  # unhashable key
    b"\xa2\xff\xfe",  # bad UTF-8
    b"\xc1",  # never used
    b"\x00\x00",  # trailing byte
    b"\x82\xc4\x02nd\xc3\xc4\x04kind\xc4\x01O",  # object array
    b"\xcb\x7f\xf0",  # truncated float
    b"",
]


@pytest.mark.parametrize("body", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_bodies_get_the_c_paths_answer(body):
    assert_same_outcome(body)


def test_every_truncation_of_a_large_body_is_refused_like_c():
    message, _ = images_message(1)
    body = b"".join(bytes(p) for p in encode_body(message))
    assert len(body) > ZERO_COPY_MIN_BODY_BYTES
    cuts = sorted({*range(0, 300), *range(len(body) - 300, len(body)), *range(0, len(body), 9973)})
    for cut in cuts:
        with pytest.raises(DecodeError):
            decode_body(body[:cut], share=True)
        with pytest.raises(DecodeError):
            views(body[:cut])


@PROPERTY
@given(st.binary(max_size=200), st.data())
def test_random_and_mutated_bodies_only_raise_decode_errors(junk, data):
    assert_same_outcome(junk)
    value = data.draw(values)
    body = bytearray(b"".join(bytes(p) for p in encode_body(value)))
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    assert_same_outcome(bytes(body))
    for raw in (junk, bytes(body)):  # the reader itself lets nothing else out either
        with contextlib.suppress(DecodeError, codec._Fallback):
            views(raw)


def test_object_budget_falls_back_to_c_with_the_same_result():
    # A large body made of many tiny objects: past its budget the view reader
    # gives up at once and C decodes it.
    value = {"type": "SET_STATE", "state": {"xs": list(range(300_000)), "w": np.ones(70_000, np.float64)}}
    body = b"".join(bytes(p) for p in encode_body(value))
    assert len(body) > ZERO_COPY_MIN_BODY_BYTES
    reader = codec._ViewReader(memoryview(body))
    assert reader.budget < 300_000
    with pytest.raises(codec._Fallback):
        codec._decode_views(memoryview(body))
    assert_identical(decode_body(body, share=True), decode_body(body))


# --------------------------------------------------------------------------
# Views into the frame, only where that is safe


def test_image_frame_from_the_decoders_own_buffer_is_not_copied():
    message, frames = images_message()
    frame = encode_message(message)
    decoder = FrameDecoder()
    decoder.feed(frame[:100])
    buffer = decoder.next_read_buffer().obj
    got = decoder.feed(frame[100:])[0]["state"]
    array = got["frames"]
    np.testing.assert_array_equal(array, frames)
    assert base_buffer(array) is buffer  # a view into the frame body, not a copy
    assert not array.flags.writeable and array.flags.aligned
    assert type(base_buffer(got["small"])) is bytes  # small arrays are copied out


def test_image_frame_read_with_recv_into_is_not_copied():
    message, frames = images_message(1)
    frame = encode_message(message)
    decoder = FrameDecoder()
    got = receive_via_recv_into(frame, decoder)["state"]["frames"]
    np.testing.assert_array_equal(got, frames)
    owner = base_buffer(got)
    assert isinstance(owner, np.ndarray) and owner.nbytes == len(frame) - HEADER_BYTES
    assert decoder.last_frame_bytes == len(frame) and decoder.last_frame_sizes == (len(frame),)


def test_image_frame_fed_as_bytes_is_a_view_of_those_bytes():
    message, frames = images_message(1)
    frame = encode_message(message)
    for fed in (frame, memoryview(frame)):
        got = FrameDecoder().feed(fed)[0]["state"]["frames"]
        np.testing.assert_array_equal(got, frames)
        assert np.shares_memory(got, np.frombuffer(frame, np.uint8))


@pytest.mark.parametrize("wrap", [bytearray, lambda b: memoryview(bytearray(b))], ids=["bytearray", "memoryview"])
def test_image_frame_fed_in_a_reusable_buffer_is_copied(wrap):
    message, frames = images_message(1)
    chunk = wrap(encode_message(message))
    got = FrameDecoder().feed(chunk)[0]["state"]["frames"]
    chunk[:] = b"\x00" * len(chunk)  # the caller reuses its buffer
    np.testing.assert_array_equal(got, frames)


def test_large_frame_assembled_from_a_reused_chunk_does_not_alias_the_chunk():
    # The server's way: one reused read buffer, fed as memoryview slices.
    message, frames = images_message(1)
    frame = encode_message(message)
    decoder = FrameDecoder()
    chunk = bytearray(256 * 1024)
    messages = []
    for start in range(0, len(frame), len(chunk)):
        piece = frame[start : start + len(chunk)]
        chunk[: len(piece)] = piece
        messages += decoder.feed(memoryview(chunk)[: len(piece)])
        chunk[:] = b"\xff" * len(chunk)
    np.testing.assert_array_equal(messages[0]["state"]["frames"], frames)


def test_unaligned_large_arrays_are_copied_once_into_aligned_memory():
    values = np.arange(ZERO_COPY_MIN_BODY_BYTES // 8 + 1000, dtype=np.float64)
    for pad in range(8):  # shift the data to every offset mod 8
        body = b"".join(bytes(p) for p in encode_body({"p": "x" * pad, "w": values}))
        got = decode_body(body, share=True)["w"]
        np.testing.assert_array_equal(got, values)
        assert got.flags.aligned and not got.flags.writeable


# --------------------------------------------------------------------------
# Receive-side details


def test_body_buffer_is_not_zero_filled_and_takes_recv_into():
    decoder = FrameDecoder()
    decoder.feed(b"%08d" % (10 * 1024 * 1024))
    view = decoder.next_read_buffer()
    assert isinstance(view.obj, np.ndarray) and view.obj.dtype == np.uint8  # np.empty, not bytearray(n)
    assert not view.readonly and view.format == "B" and len(view) == 10 * 1024 * 1024


def test_frame_sizes_are_reported_per_message():
    small = encode_message({"type": "PING"})
    other = encode_message({"type": "SET_STATE", "state": {"w": np.arange(5000.0)}})
    decoder = FrameDecoder()
    assert decoder.last_frame_bytes == 0 and decoder.last_frame_sizes == ()
    stream = small + other + small + other[:20]
    messages = decoder.feed(stream)
    assert len(messages) == 3
    assert decoder.last_frame_sizes == (len(small), len(other), len(small))
    assert decoder.last_frame_bytes == len(small)
    assert decoder.feed(other[20:100]) == [] and decoder.last_frame_sizes == ()
    view = decoder.next_read_buffer()
    view[:] = other[100:]
    del view
    assert len(decoder.advance(len(other) - 100)) == 1
    assert decoder.last_frame_sizes == (len(other),) and decoder.last_frame_bytes == len(other)
