"""RLinkClient against servers that misbehave: each must give a clear client error,
never a hang, never code execution."""

from __future__ import annotations

import pickle
import queue
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peers import PeerConnection, PeerServer, RLinkTestServer, make_episode
from rlinks_rllib.client import (
    ClientError,
    ConnectFailed,
    ConnectionLost,
    PickledConfigRefused,
    ProtocolViolation,
    RLinkClient,
    ServerError,
    ServerTimeout,
)
from rlinks_rllib.protocol.framing import encode_frame, encode_message

pytestmark = pytest.mark.timeout(60)

FAST = dict(timeout=2.0, connect_timeout=1.0, retry_attempts=2, backoff_initial=0.01, backoff_cap=0.02, connect_wait=0)
PONG = encode_message({"type": "PONG", "rlinks": {"version": 1, "extensions": ["ack", "want_steps"]}})


def frame(obj) -> bytes:
    return encode_frame(msgpack.packb(obj, use_bin_type=True))


def file_maker(path) -> bytes:
    """A pickle that creates ``path`` when loaded."""

    class MakeFile:
        def __reduce__(self):
            return (open, (str(path), "w"))

    return pickle.dumps(MakeFile())


def pickled_array_state(path) -> bytes:
    """A SET_STATE whose one parameter is msgpack-numpy's object array: its data is a pickle."""
    array = {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": [1], b"data": file_maker(path)}
    return frame({"type": "SET_STATE", "state": {"rl_module": {"w": array}, "weights_seq_no": 1}})


def after_handshake(payload: bytes, *, then_close: bool = False):
    """A handler that answers PING properly, then sends ``payload`` for the next request."""

    def handler(conn: PeerConnection) -> None:
        if conn.recv() is None:
            return
        conn.send_raw(PONG)
        if conn.recv() is None:
            return
        conn.send_raw(payload)
        if then_close:
            conn.close()
        else:
            conn.wait_closed()

    return handler


def answer_ping_with(payload: bytes, *, then_close: bool = False):
    def handler(conn: PeerConnection) -> None:
        if conn.recv() is None:
            return
        conn.send_raw(payload)
        if then_close:
            conn.close()
        else:
            conn.wait_closed()

    return handler


@pytest.fixture
def hostile():
    servers = []

    def start(handler, **kwargs) -> PeerServer:
        server = PeerServer(handler, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
    for server in servers:
        assert server.errors == [], server.errors


def fails_fast(call, exc_type, match=None, limit=3.0):
    started = time.monotonic()
    with pytest.raises(exc_type, match=match) as info:
        call()
    assert time.monotonic() - started < limit
    return info.value


# ----------------------------------------------------------------------
# Garbage and bad frames


def test_garbage_instead_of_a_pong(hostile):
    server = hostile(answer_ping_with(b"HTTP/1.1 400 Bad Request\r\n\r\n"))
    client = RLinkClient(server.address, **FAST)
    exc = fails_fast(client.connect, ProtocolViolation, "8 ASCII digits")
    assert exc.code == "bad_frame"
    assert "is tcp://127.0.0.1" in str(exc) and "RLlink learner's port" in str(exc)
    assert server.connections == 1  # a protocol problem is not retried
    client.close()


def test_huge_length_is_refused_before_reading_the_body(hostile):
    server = hostile(after_handshake(b"99999999" + b"x" * 100))
    client = RLinkClient(server.address, **FAST)
    exc = fails_fast(client.get_state, ProtocolViolation, "exceeds the limit")
    assert exc.code == "frame_too_large"
    assert "max_frame_bytes" in str(exc)
    client.close()


def test_frame_above_a_small_max_frame_bytes(hostile):
    server = hostile(after_handshake(b"00100000"))
    client = RLinkClient(server.address, max_frame_bytes=1000, **FAST)
    exc = fails_fast(client.get_state, ProtocolViolation, "100,000 bytes exceeds the limit of 1,000")
    assert exc.code == "frame_too_large"
    client.close()


@pytest.mark.parametrize(
    "payload, code",
    [
        (encode_frame(b"\xc1"), "bad_body"),  # never-used msgpack byte
        (encode_frame(msgpack.packb(42)), "invalid_message"),  # not a map
        (frame({"kind": "SET_STATE"}), "invalid_message"),  # no type
        (frame({"type": "GET_ACTION"}), "unsupported_message"),  # RLlib's old API
        (frame({"type": "SHUTDOWN_NOW"}), "unsupported_message"),
        (frame({"type": "SET_STATE", "state": 5}), "invalid_message"),
        (frame({"type": "SET_STATE", "state": {"weights_seq_no": 1}}), "invalid_message"),  # no rl_module
        (frame({"type": "SET_STATE", "state": {"rl_module": {"w": "text"}, "weights_seq_no": 1}}), "invalid_message"),
        (encode_frame(b"\x91" * 100_000 + b"\xc0"), "bad_body"),  # nested too deeply
        (frame({"type": "ACK", "seq": 99}), "unexpected_message"),  # never sent
        (frame({"type": "SET_CONFIG", "config": {}}), "unexpected_message"),  # out of turn
        (b"00000000", "bad_frame"),  # empty body
    ],
)
def test_malformed_replies_are_protocol_violations(hostile, payload, code):
    server = hostile(after_handshake(payload))
    client = RLinkClient(server.address, reliable=True, **FAST)
    exc = fails_fast(client.get_state, ProtocolViolation)
    assert exc.code == code, exc
    assert server.connections == 1
    client.close()


def test_malformed_pong(hostile):
    server = hostile(answer_ping_with(frame({"type": "PONG", "rlinks": {"version": "one"}})))
    client = RLinkClient(server.address, **FAST)
    fails_fast(client.connect, ProtocolViolation, "malformed PONG")
    client.close()


def test_ack_from_a_server_that_agreed_to_no_acks(hostile):
    def handler(conn):
        conn.recv()
        conn.send({"type": "PONG"})
        conn.recv()
        conn.send({"type": "ACK", "seq": 1})
        conn.wait_closed()

    server = hostile(handler)
    client = RLinkClient(server.address, **FAST)
    fails_fast(client.get_state, ProtocolViolation, "sent ACK while we waited for SET_STATE")
    client.close()


def test_error_message_is_bounded(hostile):
    server = hostile(after_handshake(frame({"type": "ERROR", "code": "c" * 1000, "message": "m" * 100_000}), then_close=True))
    client = RLinkClient(server.address, **FAST)
    exc = fails_fast(client.get_state, ServerError)
    assert len(exc.code) == 64 and len(exc.message) == 4096
    client.close()


# ----------------------------------------------------------------------
# Pickle


def test_pickled_array_in_weights_is_refused_and_never_loaded(hostile, tmp_path):
    target = tmp_path / "pwned"
    payload = pickled_array_state(target)
    server = hostile(after_handshake(payload))
    client = RLinkClient(server.address, unsafe_allow_pickle=True, **FAST)
    exc = fails_fast(client.get_state, ProtocolViolation, "object arrays are refused")
    assert exc.code == "unsafe_payload"
    client.close()
    assert not target.exists()

    # The payload is live: RLlib's codec (msgpack-numpy) would have run it.
    msgpack_numpy = pytest.importorskip("msgpack_numpy")
    msgpack.unpackb(payload[8:], object_hook=msgpack_numpy.decode, raw=False, strict_map_key=False)
    assert target.exists()


def test_pickled_config_is_refused_and_never_loaded(tmp_path):
    target = tmp_path / "pwned"
    server = RLinkTestServer(config=file_maker(target)).start()
    try:
        client = RLinkClient(server.address, **FAST)
        fails_fast(client.get_config, PickledConfigRefused, "only as a Python pickle")
        client.close()
    finally:
        server.stop()
    assert server.errors == []
    assert not target.exists()


# ----------------------------------------------------------------------
# Silence, trickles, half frames, resets


def test_silent_server_times_out(hostile):
    server = hostile(lambda conn: (conn.recv(), conn.wait_closed()))
    client = RLinkClient(server.address, **{**FAST, "timeout": 0.5})
    exc = fails_fast(client.connect, ServerTimeout, "no PONG", limit=2.0)
    assert isinstance(exc, TimeoutError)
    assert "one client at a time" in str(exc)
    assert server.connections == 1  # a timeout is not retried
    client.close()


def test_silent_after_handshake_times_out(hostile):
    server = hostile(after_handshake(b""))
    client = RLinkClient(server.address, **{**FAST, "timeout": 0.5})
    fails_fast(client.get_state, ServerTimeout, "no SET_STATE", limit=2.0)
    client.close()


def test_on_policy_timeout_says_training_counts(hostile):
    server = hostile(after_handshake(b""))
    client = RLinkClient(server.address, **{**FAST, "timeout": 0.3})
    fails_fast(lambda: client.send_episodes_and_get_state([make_episode(1)]), ServerTimeout, "training step", limit=2.0)
    client.close()


def test_trickling_server_is_bounded_by_the_total_timeout(hostile):
    reply = frame({"type": "SET_STATE", "state": {"rl_module": {}, "weights_seq_no": 1}})

    def handler(conn):
        conn.recv()
        conn.send_raw(PONG)
        conn.recv()
        for byte in reply:
            conn.send_raw(bytes([byte]))
            time.sleep(0.1)
            if server._stop.is_set():
                return

    server = hostile(handler)
    client = RLinkClient(server.address, **{**FAST, "timeout": 0.5})
    fails_fast(client.get_state, ServerTimeout, limit=2.0)
    client.close()


def test_half_frame_then_close(hostile):
    whole = frame({"type": "SET_STATE", "state": {"rl_module": {}, "weights_seq_no": 1}})
    server = hostile(after_handshake(whole[: len(whole) // 2], then_close=True))
    client = RLinkClient(server.address, **FAST)
    exc = fails_fast(client.get_state, ConnectionLost, "mid-frame")
    assert isinstance(exc, ConnectionError)
    client.close()


def test_reset_during_handshake_is_retried_then_gives_up(hostile):
    server = hostile(lambda conn: (conn.recv(), conn.abort()))
    client = RLinkClient(server.address, **FAST)
    fails_fast(client.connect, ConnectFailed, "after 2 attempt")
    assert server.connections == 2
    client.close()


def test_server_that_stops_reading_blocks_sends_only_until_timeout(hostile):
    """A server that never reads: the kernel buffers fill and the send must time out."""

    def handler(conn):
        conn.recv()
        conn.send_raw(PONG)
        deadline = time.monotonic() + 5
        while not server._stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)

    server = hostile(handler)
    client = RLinkClient(server.address, **{**FAST, "timeout": 0.5})
    import numpy as np
    from rlinks_rllib.protocol.episodes import build_episode_state

    steps = 2000
    big = build_episode_state(
        "big", np.zeros((steps + 1, 8192), np.float32), np.zeros(steps, np.int64), np.zeros(steps, np.float32)
    )  # 64 MB: more than loopback buffers hold
    fails_fast(lambda: client.send_episodes([big]), ServerTimeout, "did not take our EPISODES", limit=3.0)
    client.close()


# ----------------------------------------------------------------------
# Fuzz: whatever the server sends, the client ends with a ClientError


def test_random_bytes_give_client_errors(hostile):
    payloads: queue.Queue[bytes] = queue.Queue()
    server = hostile(lambda conn: after_handshake(payloads.get(timeout=5), then_close=True)(conn))

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.one_of(
            st.binary(min_size=1, max_size=64),
            st.binary(max_size=48).map(lambda body: b"%08d" % len(body) + body),
            st.binary(max_size=48).map(lambda body: b"%08d" % (len(body) + 10) + body),
        )
    )
    def check(payload):
        payloads.put(payload)
        client = RLinkClient(server.address, **{**FAST, "retry_attempts": 1})
        started = time.monotonic()
        with pytest.raises(ClientError):
            client.get_state()
        assert time.monotonic() - started < 2.5
        client.close()

    check()


def test_server_that_refuses_a_batch_mid_send_is_heard(hostile):
    """The server says why and closes without reading the rest; the client reports the reason."""
    import numpy as np
    from rlinks_rllib.protocol.episodes import build_episode_state

    def handler(conn):
        conn.recv()
        conn.send_raw(PONG)
        conn.sock.recv(16)  # the start of the big frame
        conn.send({"type": "ERROR", "code": "frame_too_large", "message": "frame of 33,000,000 bytes exceeds 1,000"})
        conn.close()  # unread data: the kernel answers the rest with a reset

    server = hostile(handler)
    client = RLinkClient(server.address, reliable=True, **FAST)
    steps = 1000
    big = build_episode_state(
        "big", np.zeros((steps + 1, 8192), np.float32), np.zeros(steps, np.int64), np.zeros(steps, np.float32)
    )
    exc = fails_fast(lambda: client.send_episodes([big]), ServerError)
    assert exc.code == "frame_too_large"
    assert server.connections == 1  # not retried
    client.close()
