"""Framing: the 8-digit header, split streams, limits, and the recv_into path.

Every test here drives :class:`FrameDecoder` and the encoders directly; no
socket is involved (see ``test_rllib_interop.py`` for that).
"""

from __future__ import annotations

import re
import tracemalloc

import msgpack
import numpy as np
import pytest

from rlinks_rllib.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    HEADER_BYTES,
    MAX_BODY_BYTES,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    InvalidMessage,
    ProtocolError,
    encode_frame,
    encode_message,
    encode_message_parts,
    parse_header,
)


def raw_frame(obj) -> bytes:
    """A frame around any msgpack value, bypassing our encoder's validation."""
    body = msgpack.packb(obj, use_bin_type=True)
    return b"%08d" % len(body) + body


def assert_same(got, want) -> None:
    """Deep equality that also compares numpy dtypes."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    elif isinstance(want, (np.ndarray, np.generic)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want


def assert_same_messages(got: list[dict], want: list[dict]) -> None:
    assert_same(got, want)


STREAM_MESSAGES = [
    {"type": "PING"},
    {"type": "SET_STATE", "state": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, "x": np.int16(7)},
    {"type": "EPISODES", "episodes": [{"obs": [1.5, 2.5]}], "timesteps": 1},
    {"type": "PONG", "note": "é"},
]


def stream() -> bytes:
    return b"".join(encode_message(m) for m in STREAM_MESSAGES)


# --------------------------------------------------------------------------
# Header


def test_header_is_eight_zero_padded_ascii_digits():
    frame = encode_message({"type": "PING"})
    body = msgpack.packb({"type": "PING"}, use_bin_type=True)
    assert frame == b"%08d" % len(body) + body
    assert frame[:HEADER_BYTES] == b"00000011"
    assert parse_header(b"00000010") == 10
    assert parse_header(b"99999999") == MAX_BODY_BYTES == 10**8 - 1


@pytest.mark.parametrize(
    "header",
    [
        b" 0000010",  # int() strips spaces: RLlib accepts it
        b"0000010 ",
        b"+0000010",  # sign
        b"-0000010",
        b"0000_010",  # int() allows underscores between digits
        b"0x00000a",
        b"0000001a",
        b"1e000001",
        b"\x000000010",
        b"\t0000010",
        b"0000010\n",
        "\u0660\u0660\u0661\u0660".encode(),  # Arabic-Indic digits "0010": int() reads 10
        "\uff11\uff10".encode() + b"00",  # full-width digits
        b"\xff" * 8,
    ],
)
def test_header_strictness(header):
    assert len(header) == HEADER_BYTES
    with pytest.raises(FrameError):
        parse_header(header)
    decoder = FrameDecoder()
    with pytest.raises(FrameError) as info:
        decoder.feed(header + b"\x80" * 16)
    assert info.value.code == "bad_frame"


def test_rllib_int_parsing_is_laxer_than_ours():
    # The cases above that RLlib's ``int(header.decode("utf-8"))`` takes for a length.
    for header in (b" 0000010", b"+0000010", b"0000_010", "\u0660\u0660\u0661\u0660".encode()):
        assert int(header.decode("utf-8")) == 10


@pytest.mark.parametrize("header", [b"", b"0000001", b"000000010"])
def test_parse_header_needs_exactly_eight_bytes(header):
    with pytest.raises(FrameError):
        parse_header(header)


def test_empty_body_refused():
    with pytest.raises(FrameError):
        FrameDecoder().feed(b"00000000")


# --------------------------------------------------------------------------
# Splitting


def test_whole_stream_in_one_chunk():
    assert_same_messages(FrameDecoder().feed(stream()), STREAM_MESSAGES)


def test_one_byte_at_a_time():
    decoder = FrameDecoder()
    got = []
    for i, byte in enumerate(stream()):
        got += decoder.feed(bytes([byte]))
    assert_same_messages(got, STREAM_MESSAGES)
    assert decoder.frames == len(STREAM_MESSAGES)
    assert decoder.bytes_in == len(stream())
    assert not decoder.in_frame
    decoder.eof()


def test_split_at_every_position():
    data = stream()
    for cut in range(len(data) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        assert_same_messages(got, STREAM_MESSAGES)
        decoder.eof()


def test_split_at_every_pair_of_positions():
    data = encode_message({"type": "GET_STATE", "pad": "x" * 20})
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            decoder = FrameDecoder()
            got = decoder.feed(data[:i]) + decoder.feed(data[i:j]) + decoder.feed(data[j:])
            assert got == [{"type": "GET_STATE", "pad": "x" * 20}]


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_feed_takes_any_bytes_like(kind):
    data = stream()
    decoder = FrameDecoder()
    got = decoder.feed(kind(data[:30])) + decoder.feed(kind(data[30:]))
    assert_same_messages(got, STREAM_MESSAGES)


def test_feed_empty_chunk_is_a_no_op():
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"0000") == []
    assert decoder.feed(b"") == []
    assert decoder.in_frame


def test_progress_properties():
    frame = encode_message({"type": "PING", "pad": "y" * 50})
    decoder = FrameDecoder()
    assert (decoder.in_frame, decoder.buffered_bytes, decoder.expected_bytes) == (False, 0, None)
    decoder.feed(frame[:5])
    assert (decoder.in_frame, decoder.buffered_bytes, decoder.expected_bytes) == (True, 5, None)
    decoder.feed(frame[5:12])
    body_len = len(frame) - HEADER_BYTES
    # Once parsed, the header is no longer held: only body bytes count.
    assert (decoder.in_frame, decoder.buffered_bytes, decoder.expected_bytes) == (True, 4, body_len)
    decoder.feed(frame[12:])
    assert (decoder.in_frame, decoder.buffered_bytes, decoder.expected_bytes) == (False, 0, None)


def test_buffer_is_allocated_once_and_filled_in_place():
    """Feeding a big frame one byte at a time does linear work.

    Each byte is written once into one buffer allocated from the header; a
    decoder that re-joined what it had so far (``data += packet``, as RLlib's
    reader does) would make a new buffer on every chunk.
    """
    array = np.arange(64 * 1024, dtype=np.uint32)  # 256 KiB
    frame = encode_message({"type": "SET_STATE", "state": {"w": array}})
    decoder = FrameDecoder()
    assert decoder.feed(frame[:HEADER_BYTES]) == []
    first = decoder.next_read_buffer()
    buffer = first.obj
    assert len(first) == len(frame) - HEADER_BYTES
    del first
    last = len(frame) - 1
    for pos in range(HEADER_BYTES, last):
        assert decoder.feed(frame[pos : pos + 1]) == []
        if pos % 4096 == 0:
            view = decoder.next_read_buffer()
            assert view.obj is buffer
            assert len(view) == last - pos
            del view
    [message] = decoder.feed(frame[last:])
    np.testing.assert_array_equal(message["state"]["w"], array)


# --------------------------------------------------------------------------
# Limits


def test_default_limit():
    assert FrameDecoder().max_frame_bytes == DEFAULT_MAX_FRAME_BYTES == 64 * 1024 * 1024


@pytest.mark.parametrize("bad", [0, -1, MAX_BODY_BYTES + 1])
def test_limit_must_fit_the_header(bad):
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=bad)


def test_frame_at_the_limit_is_accepted():
    frame = encode_message({"type": "PING", "pad": "z" * 100})
    limit = len(frame) - HEADER_BYTES
    assert FrameDecoder(max_frame_bytes=limit).feed(frame) == [{"type": "PING", "pad": "z" * 100}]
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_frame_bytes=limit - 1).feed(frame)


@pytest.mark.parametrize("with_body", [False, True])
def test_oversize_refused_from_its_header_before_the_body_is_buffered(with_body):
    decoder = FrameDecoder(max_frame_bytes=1000)
    chunk = b"00001001" + (b"\x00" * 500 if with_body else b"")
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(chunk)
    assert info.value.code == "frame_too_large"
    assert decoder.buffered_bytes == 0
    assert decoder.next_read_buffer() is None


def test_oversize_refused_when_header_arrives_byte_by_byte():
    decoder = FrameDecoder(max_frame_bytes=10**6)
    for byte in b"9999999":
        assert decoder.feed(bytes([byte])) == []
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"9")
    assert decoder.buffered_bytes == 0


def test_error_spends_the_decoder():
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameTooLarge) as first:
        decoder.feed(b"00000101")
    with pytest.raises(FrameTooLarge) as again:
        decoder.feed(encode_message({"type": "PING"}))
    assert again.value is first.value
    assert decoder.next_read_buffer() is None


def test_messages_before_an_error_are_lost_with_the_chunk():
    # feed() either returns all messages of a chunk or raises: callers that
    # need the good ones first must feed frame by frame.
    decoder = FrameDecoder()
    with pytest.raises(FrameError):
        decoder.feed(encode_message({"type": "PING"}) + b"+0000010")
    assert decoder.frames == 1


def test_encoding_a_body_of_1e8_bytes_raises_before_copying():
    # calloc'd zeros: the pages are never touched, so this costs no memory.
    big = np.zeros(10**8, dtype=np.uint8)
    message = {"type": "SET_STATE", "state": {"w": big}}
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge):
            encode_message_parts(message)
        with pytest.raises(FrameTooLarge):
            encode_message(message)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10**6, f"encoder copied the array before checking its size (peak {peak:,} bytes)"


def test_encoding_a_body_just_under_1e8_bytes_fits_the_header():
    big = np.zeros(10**8 - 200, dtype=np.uint8)
    parts = encode_message_parts({"type": "SET_STATE", "state": {"w": big}})
    size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts[1:])
    assert size < 10**8
    assert parts[0] == b"%08d" % size


def test_encode_frame():
    body = msgpack.packb({"type": "PING"})
    assert encode_frame(body) == b"00000011" + body
    with pytest.raises(FrameTooLarge):
        encode_frame(memoryview(np.zeros(10**8, dtype=np.uint8)))


# --------------------------------------------------------------------------
# recv_into path and end of stream


def test_next_read_buffer_and_advance():
    array = np.arange(5000, dtype=np.float64)
    frame = encode_message({"type": "SET_STATE", "state": {"w": array}})
    decoder = FrameDecoder()
    assert decoder.next_read_buffer() is None
    assert decoder.feed(frame[:20]) == []
    pos = 20
    messages = []
    while (view := decoder.next_read_buffer()) is not None:
        n = min(len(view), 7777)
        view[:n] = frame[pos : pos + n]
        del view
        pos += n
        messages += decoder.advance(n)
    assert pos == len(frame)
    [message] = messages
    np.testing.assert_array_equal(message["state"]["w"], array)
    assert decoder.bytes_in == len(frame)
    assert decoder.frames == 1


def test_advance_without_a_buffer_or_past_its_end():
    decoder = FrameDecoder()
    with pytest.raises(ValueError):
        decoder.advance(1)
    decoder.feed(b"00000100")
    with pytest.raises(ValueError):
        decoder.advance(101)
    with pytest.raises(ValueError):
        decoder.advance(-1)


def test_advance_raises_protocol_errors_and_spends_the_decoder():
    frame = raw_frame({"type": "GET_ACTION", "pad": "p" * 40})
    decoder = FrameDecoder()
    decoder.feed(frame[:10])
    view = decoder.next_read_buffer()
    view[:] = frame[10:]
    del view
    with pytest.raises(InvalidMessage):
        decoder.advance(len(frame) - 10)
    with pytest.raises(InvalidMessage):
        decoder.feed(b"0")


@pytest.mark.parametrize("cut", [1, HEADER_BYTES - 1, HEADER_BYTES, HEADER_BYTES + 1])
def test_eof_mid_frame(cut):
    frame = encode_message({"type": "PING"})
    decoder = FrameDecoder()
    decoder.feed(frame[:cut])
    total = "?" if cut < HEADER_BYTES else str(len(frame))
    with pytest.raises(FrameError, match=re.escape(f"mid-frame after {cut} of {total} bytes")):
        decoder.eof()


def test_eof_between_frames():
    decoder = FrameDecoder()
    decoder.feed(stream())
    decoder.eof()
    FrameDecoder().eof()


def test_every_error_is_a_protocol_error():
    for cls in (FrameError, FrameTooLarge, InvalidMessage):
        assert issubclass(cls, ProtocolError)
    assert issubclass(FrameTooLarge, FrameError)


def test_validate_false_returns_raw_messages():
    frame = raw_frame({"type": "NOT_A_TYPE", "x": 1})
    assert FrameDecoder(validate=False).feed(frame) == [{"type": "NOT_A_TYPE", "x": 1}]
    assert FrameDecoder(validate=False).feed(raw_frame([1, 2])) == [[1, 2]]
