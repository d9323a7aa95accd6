"""RLinkClient against a scripted RLlink server on 127.0.0.1 (tests/peers.py)."""

from __future__ import annotations

import logging
import os
import pickle
import random
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from peers import ABORT, CLOSE, HANDLED, TEST_CONFIG, TEST_PARAMS, RLinkTestServer, free_port, make_episode
from rlinks_rllib.client import (
    Address,
    ClientClosed,
    ClientError,
    ConnectFailed,
    ConnectionLost,
    PickledConfigRefused,
    ProtocolViolation,
    RLinkClient,
    ServerError,
    ServerTimeout,
    TLSNotAvailable,
    WeightsUpdate,
    parse_address,
)
from rlinks_rllib.client.network.connection import backoff_delay
from rlinks_rllib.protocol.episodes import OBSERVATIONS
from rlinks_rllib.protocol.framing import encode_message

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[1]

#: Small waits so a failing test fails fast.
FAST = dict(timeout=5.0, connect_timeout=2.0, backoff_initial=0.01, backoff_cap=0.05)


@pytest.fixture
def serve():
    """Start RLinkTestServers; stop them and check they saw no errors at the end."""
    servers = []

    def start(**kwargs) -> RLinkTestServer:
        server = RLinkTestServer(**kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
    for server in servers:
        assert server.errors == [], server.errors


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


# ----------------------------------------------------------------------
# Handshake


def test_handshake_offers_extensions_and_client_id(serve):
    server = serve()
    with RLinkClient(server.address, **FAST) as client:
        assert client.server_extensions == {"want_steps", "ack"}
        assert client.is_plain_rllib is False
        assert client.server_agent == "rlinks-test-peer/0"
        assert client.connected
    (_, ping), = server.messages
    offer = ping["rlinks"]
    assert offer["version"] == 1
    assert offer["extensions"] == ["ack", "endpoints", "served_actions", "served_taken", "takeover", "timestep",
                                   "want_steps", "weights_notice"]
    assert offer["agent"].startswith("rlinks-rllib-client/")
    assert offer["client_id"] == client.client_id
    assert len(client.client_id) == 32 and int(client.client_id, 16) >= 0


def test_handshake_agrees_on_the_common_subset(serve):
    server = serve(extensions=("ack",))
    with RLinkClient(server.address, **FAST) as client:
        assert client.server_extensions == {"ack"}
    with RLinkClient(server.address, extensions=("want_steps",), **FAST) as client:
        assert client.server_extensions == frozenset()
        assert client.is_plain_rllib is False


def test_handshake_with_plain_rllib_server(serve):
    server = serve(plain=True)
    with RLinkClient(server.address, **FAST) as client:
        assert client.is_plain_rllib is True
        assert client.server_extensions == frozenset()
        assert client.server_agent == ""


def test_handshake_properties_need_a_handshake():
    client = RLinkClient("127.0.0.1:1", **FAST)
    with pytest.raises(ClientError, match="no handshake yet"):
        client.server_extensions
    with pytest.raises(ClientError, match="no handshake yet"):
        client.is_plain_rllib
    client.close()


# ----------------------------------------------------------------------
# Config and weights


def test_get_config_returns_the_description(serve):
    server = serve()
    with RLinkClient(server.address, **FAST) as client:
        config = client.get_config()
    assert config["algorithm"] == "PPO"
    assert config["action_space"] == {"kind": "discrete", "n": 2, "start": 0}
    np.testing.assert_array_equal(config["observation_space"]["high"], TEST_CONFIG["observation_space"]["high"])


def test_get_config_refuses_a_pickle_by_default(serve):
    server = serve(config=pickle.dumps({"not": "unpickled"}))
    with RLinkClient(server.address, **FAST) as client:
        with pytest.raises(PickledConfigRefused, match="unsafe_allow_pickle=True"):
            client.get_config()


def test_get_config_prefers_the_description_next_to_a_pickle(serve):
    server = serve(config=pickle.dumps({"not": "unpickled"}), rlinks_config=TEST_CONFIG)
    with RLinkClient(server.address, unsafe_allow_pickle=True, **FAST) as client:
        assert client.get_config()["algorithm"] == "PPO"


def test_get_config_unpickles_only_when_allowed(serve):
    pytest.importorskip("ray.rllib")
    server = serve(config=pickle.dumps({"pickled": 1}))
    with RLinkClient(server.address, unsafe_allow_pickle=True, **FAST) as client:
        assert client.get_config() == {"pickled": 1}


def test_get_state(serve):
    server = serve()
    with RLinkClient(server.address, **FAST) as client:
        update = client.get_state()
    assert isinstance(update, WeightsUpdate)
    assert update.seq_no == 1
    assert update.want_steps == 64
    assert update.params.keys() == TEST_PARAMS.keys()
    for name, value in TEST_PARAMS.items():
        np.testing.assert_array_equal(update.params[name], value)


def test_get_state_from_plain_server_has_no_want_steps(serve):
    server = serve(plain=True)
    with RLinkClient(server.address, **FAST) as client:
        assert client.get_state().want_steps is None


# ----------------------------------------------------------------------
# Episodes


def test_off_policy_batches_are_numbered_and_acknowledged(serve):
    server = serve()
    with RLinkClient(server.address, **FAST) as client:
        seqs = [client.send_episodes([make_episode(3, seed=i)]) for i in range(5)]
        client.flush()
        stats = client.stats
    assert seqs == [1, 2, 3, 4, 5]
    assert server.seqs() == [1, 2, 3, 4, 5]
    assert stats.batches_sent == 5 and stats.steps_sent == 15
    assert stats.batches_acked == 5 and stats.unacked == 0
    assert stats.batches_resent == 0 and stats.reconnects == 0
    episodes_msgs = [m for _, m in server.messages if m["type"] == "EPISODES"]
    assert [m["timesteps"] for m in episodes_msgs] == [3] * 5


def test_acks_are_drained_between_calls(serve):
    acked = threading.Event()

    def ack_all_at_once(server, conn, msg):
        if msg["type"] == "EPISODES":
            if msg["seq"] == 3:
                conn.send_raw(b"".join(encode_message({"type": "ACK", "seq": seq}) for seq in (1, 2, 3)))
                acked.set()
            return HANDLED if msg["seq"] <= 3 else None
        return None

    server = serve(on_message=ack_all_at_once)
    with RLinkClient(server.address, **FAST) as client:
        for i in range(3):
            client.send_episodes([make_episode(2, seed=i)])
        assert acked.wait(5)
        readable, _, _ = select.select([client._sock], [], [], 5)  # one segment: all three ACKs are here
        assert readable
        assert client.stats.batches_acked == 0
        client.send_episodes([make_episode(2, seed=3)])  # drains them first, without waiting
        assert client.stats.batches_acked == 3 and client.stats.unacked == 1


def test_plain_server_gets_no_seq(serve):
    server = serve(plain=True)
    with RLinkClient(server.address, **FAST) as client:
        assert client.send_episodes([make_episode(2)]) is None
        client.get_state()
        assert client.stats.batches_sent == 1 and client.stats.unacked == 0
    msg = next(m for _, m in server.messages if m["type"] == "EPISODES")
    assert "seq" not in msg


def test_on_policy_round_trip(serve):
    server = serve()
    with RLinkClient(server.address, **FAST) as client:
        first = client.send_episodes_and_get_state([make_episode(4), make_episode(2, seed=1)])
        second = client.send_episodes_and_get_state([make_episode(1)], timesteps=10)
        assert client.stats.batches_acked == 2 and client.stats.unacked == 0
    assert (first.seq_no, second.seq_no) == (2, 3)
    assert first.want_steps == 64
    sent = [m for _, m in server.messages if m["type"] == "EPISODES_AND_GET_STATE"]
    assert [(m["seq"], m["timesteps"], len(m["episodes"])) for m in sent] == [(1, 6, 2), (2, 10, 1)]


def test_on_policy_with_plain_server(serve):
    server = serve(plain=True)
    with RLinkClient(server.address, **FAST) as client:
        update = client.send_episodes_and_get_state([make_episode(3)])
    assert update.seq_no == 2 and update.want_steps is None


def test_episode_objects_with_get_state_are_accepted(serve):
    class Episode:
        def get_state(self):
            return make_episode(2)

    server = serve()
    with RLinkClient(server.address, **FAST) as client:
        client.send_episodes([Episode()])
        assert client.stats.steps_sent == 2
    with pytest.raises(TypeError, match="episodes\\[0\\]"):
        RLinkClient(server.address, **FAST).send_episodes([42])


def test_large_arrays_arrive_intact(serve):
    server = serve()
    steps = 500
    obs = np.random.default_rng(0).standard_normal((steps + 1, 2000)).astype(np.float32)  # 4 MB
    from rlinks_rllib.protocol.episodes import build_episode_state

    episode = build_episode_state("big", obs, np.zeros(steps, dtype=np.int64), np.ones(steps, dtype=np.float32))
    with RLinkClient(server.address, **FAST) as client:
        client.send_episodes_and_get_state([episode])
    msg = next(m for _, m in server.messages if m["type"] == "EPISODES_AND_GET_STATE")
    np.testing.assert_array_equal(msg["episodes"][0][OBSERVATIONS]["data"], obs)


def test_max_unacked_window_waits_for_acks(serve):
    acks_sent_before = {}

    def slow_acks(server, conn, msg):
        if msg["type"] != "EPISODES":
            return None
        acks_sent_before[msg["seq"]] = len(acks)
        if msg["seq"] == 2:
            time.sleep(0.2)
            for seq in (1, 2):
                conn.send({"type": "ACK", "seq": seq})
                acks.append(seq)
            return HANDLED
        return HANDLED if msg["seq"] == 1 else None

    acks: list[int] = []
    server = serve(on_message=slow_acks)
    with RLinkClient(server.address, max_unacked=2, **FAST) as client:
        for _ in range(3):
            client.send_episodes([make_episode(1)])
            assert client.stats.unacked <= 2
        client.flush()
        assert client.stats.batches_acked == 3
    assert server.seqs() == [1, 2, 3]
    # Batch 3 could only leave once the client had an ACK back.
    assert acks_sent_before == {1: 0, 2: 0, 3: 2}


def test_max_unacked_window_is_bounded_by_timeout(serve):
    server = serve(on_message=lambda s, c, m: HANDLED if m["type"] == "EPISODES" else None)
    client = RLinkClient(server.address, max_unacked=2, **{**FAST, "timeout": 0.5})
    client.send_episodes([make_episode(1)])
    client.send_episodes([make_episode(1)])
    started = time.monotonic()
    with pytest.raises(ServerTimeout, match="max_unacked=2"):
        client.send_episodes([make_episode(1)])
    assert time.monotonic() - started < 3
    client.close()
    assert server.seqs() == [1, 2]


def test_context_manager_flushes_then_closes(serve):
    server = serve()
    with RLinkClient(server.address, **FAST) as client:
        for _ in range(3):
            client.send_episodes([make_episode(1)])
    assert client.stats.batches_acked == 3
    assert not client.connected
    with pytest.raises(ClientClosed):
        client.get_state()


# ----------------------------------------------------------------------
# Reliable mode


def test_reliable_resends_unacked_batches_after_a_drop(serve):
    def script(server, conn, msg):
        if conn.index == 0 and msg["type"] == "EPISODES" and msg["seq"] >= 3:
            return HANDLED  # held, but the ACK is "lost"
        if conn.index == 0 and msg["type"] == "EPISODES_AND_GET_STATE":
            return ABORT  # crash mid-call
        return None

    server = serve(on_message=script)
    with RLinkClient(server.address, reliable=True, **FAST) as client:
        client.send_episodes([make_episode(1, seed=1)])
        client.send_episodes([make_episode(1, seed=2)])
        client.flush()
        for seed in (3, 4, 5):
            client.send_episodes([make_episode(1, seed=seed)])
        update = client.send_episodes_and_get_state([make_episode(2, seed=6)])
        stats = client.stats
    assert update.seq_no == 2
    assert server.seqs(conn=0) == [1, 2, 3, 4, 5, 6]
    assert server.seqs(conn=1) == [3, 4, 5, 6]
    assert [b.duplicate for b in server.batches if b.conn == 0] == [False] * 6
    assert [b.duplicate for b in server.batches if b.conn == 1] == [True] * 4
    assert server.types(conn=1) == ["PING", "EPISODES", "EPISODES", "EPISODES", "EPISODES_AND_GET_STATE"]
    assert server.client_ids == [client.client_id] * 2
    assert stats.batches_sent == 6 and stats.steps_sent == 7
    assert stats.batches_resent == 4 and stats.reconnects == 1
    assert stats.batches_acked == 6 and stats.unacked == 0


def test_reliable_does_not_resend_an_acked_on_policy_batch_but_still_gets_its_weights(serve):
    def script(server, conn, msg):
        if conn.index == 0 and msg["type"] == "EPISODES_AND_GET_STATE":
            conn.send({"type": "ACK", "seq": msg["seq"]})
            return CLOSE  # died after taking the batch, before the weights
        return None

    server = serve(on_message=script)
    with RLinkClient(server.address, reliable=True, **FAST) as client:
        update = client.send_episodes_and_get_state([make_episode(2)])
        stats = client.stats
    assert update.seq_no == 2
    # Confirmed means RLlib has it: a restarted runner must not get it twice.
    # The client asks for its weights with an empty batch without seq instead.
    assert [(b.conn, b.seq, b.duplicate) for b in server.batches] == [(0, 1, False), (1, None, False)]
    assert [m["episodes"] for c, m in server.messages if c == 1 and m["type"] == "EPISODES_AND_GET_STATE"] == [[]]
    assert stats.batches_acked == 1 and stats.steps_acked == 2
    assert stats.batches_resent == 0 and stats.reconnects == 1


def test_reliable_notices_a_drop_between_calls_and_resends_a_copy(serve):
    def script(server, conn, msg):
        if conn.index == 0 and msg["type"] == "EPISODES" and msg["seq"] == 2:
            return CLOSE
        return None

    server = serve(on_message=script)
    episode = make_episode(3, seed=2)
    original = episode[OBSERVATIONS]["data"].copy()
    with RLinkClient(server.address, reliable=True, **FAST) as client:
        client.send_episodes([make_episode(1, seed=1)])
        client.send_episodes([episode])
        wait_until(lambda: server.finished == 1)
        assert select.select([client._sock], [], [], 5)[0]  # the FIN is here
        episode[OBSERVATIONS]["data"][:] = -1.0  # the caller reuses its buffer
        client.send_episodes([make_episode(1, seed=3)])
        client.flush()
        stats = client.stats
    assert [(b.conn, b.seq, b.duplicate) for b in server.batches] == [
        (0, 1, False), (0, 2, False), (1, 2, True), (1, 3, False)
    ]
    resent = [m for c, m in server.messages if c == 1 and m["type"] == "EPISODES"][0]
    np.testing.assert_array_equal(resent["episodes"][0][OBSERVATIONS]["data"], original)
    assert stats.reconnects == 1 and stats.batches_resent == 1 and stats.batches_acked == 3


def test_reliable_with_plain_server_never_duplicates_and_warns_once(serve, caplog):
    def script(server, conn, msg):
        if conn.index in (0, 1) and msg["type"] == "EPISODES_AND_GET_STATE":
            return CLOSE
        return None

    server = serve(plain=True, on_message=script)
    with caplog.at_level(logging.WARNING, logger="rlinks_rllib.client.connection"):
        with RLinkClient(server.address, reliable=True, **FAST) as client:
            client.send_episodes_and_get_state([make_episode(2)])
            client.send_episodes_and_get_state([make_episode(2)])
            assert client.stats.reconnects == 2
    assert server.types(conn=1) == ["PING", "GET_STATE", "EPISODES_AND_GET_STATE"]
    assert server.types(conn=2) == ["PING", "GET_STATE"]
    assert len(server.batches) == 2
    lost = [r for r in caplog.records if "may be lost" in r.getMessage()]
    assert len(lost) == 1


def test_without_reliable_a_drop_raises_and_the_next_call_reconnects(serve):
    server = serve(on_message=lambda s, c, m: ABORT if c.index == 0 and m["type"] == "EPISODES_AND_GET_STATE" else None)
    client = RLinkClient(server.address, **FAST)
    with pytest.raises(ConnectionLost, match="lost|closed"):
        client.send_episodes_and_get_state([make_episode(1)])
    assert not client.connected
    assert client.get_state().seq_no == 1
    assert client.stats.reconnects == 1 and server.connections == 2
    client.close()


def test_reliable_gives_up_when_the_connection_keeps_dropping(serve):
    server = serve(on_message=lambda s, c, m: CLOSE if m["type"] == "GET_STATE" else None)
    client = RLinkClient(server.address, reliable=True, retry_attempts=3, **FAST)
    with pytest.raises(ConnectionLost, match="gave up after 3 reconnection"):
        client.get_state()
    assert server.connections == 4
    client.close()


def test_reliable_reconnects_when_the_server_is_shutting_down(serve):
    def script(server, conn, msg):
        if conn.index == 0 and msg["type"] == "GET_STATE":
            conn.send({"type": "ERROR", "code": "shutting_down", "message": "restarting"})
            return CLOSE
        return None

    server = serve(on_message=script)
    with RLinkClient(server.address, reliable=True, **FAST) as client:
        assert client.get_state().seq_no == 1
    assert server.connections == 2


# ----------------------------------------------------------------------
# Errors from the server


def test_server_error_carries_code_and_message_and_is_not_retried(serve):
    def script(server, conn, msg):
        if msg["type"] == "GET_STATE":
            conn.send({"type": "ERROR", "code": "limit_exceeded", "message": "too many clients"})
            return CLOSE
        return None

    server = serve(on_message=script)
    client = RLinkClient(server.address, reliable=True, **FAST)
    with pytest.raises(ServerError) as info:
        client.get_state()
    assert (info.value.code, info.value.message) == ("limit_exceeded", "too many clients")
    assert "limit_exceeded" in str(info.value)
    assert server.connections == 1
    client.close()


def test_unexpected_message_is_a_protocol_violation_and_not_retried(serve):
    def script(server, conn, msg):
        if msg["type"] == "GET_STATE":
            conn.send({"type": "SET_CONFIG", "config": TEST_CONFIG})
            return HANDLED
        return None

    server = serve(on_message=script)
    client = RLinkClient(server.address, reliable=True, **FAST)
    with pytest.raises(ProtocolViolation, match="sent SET_CONFIG while we waited for SET_STATE"):
        client.get_state()
    assert server.connections == 1
    client.close()


# ----------------------------------------------------------------------
# Connecting and backoff


def test_connect_gives_up_after_n_attempts_with_a_clear_message():
    port = free_port()
    client = RLinkClient(f"127.0.0.1:{port}", retry_attempts=3, connect_wait=0, **FAST)
    delays = []
    client._sleep = delays.append
    with pytest.raises(ConnectFailed) as info:
        client.connect()
    text = str(info.value)
    assert f"could not connect to tcp://127.0.0.1:{port} after 3 attempt(s)" in text
    assert "is the learner running and is the port right?" in text
    assert isinstance(info.value, ConnectionError)
    assert len(delays) == 2
    assert 0 <= delays[0] <= 0.01 and 0 <= delays[1] <= 0.02


def test_connect_waits_for_a_learner_that_starts_late():
    port = free_port()
    started: list[RLinkTestServer] = []
    timer = threading.Timer(0.3, lambda: started.append(RLinkTestServer(port=port).start()))
    timer.start()
    try:
        client = RLinkClient(f"127.0.0.1:{port}", retry_attempts=30, backoff_initial=0.05, backoff_cap=0.1, timeout=5.0)
        with client:
            assert client.get_state().seq_no == 1
    finally:
        timer.join(5)
        for server in started:
            server.stop()


class _LongestJitter(random.Random):
    """The jitter's source, drawing the longest wait every time."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_close_from_another_thread_ends_the_wait_between_attempts():
    # Waits of up to a minute between attempts to a port nobody listens on: close() must not wait them out.
    client = RLinkClient(f"127.0.0.1:{free_port()}", retry_attempts=100, backoff_initial=60.0, backoff_cap=60.0,
                         connect_timeout=2.0)
    client._retry.rng = _LongestJitter()
    outcome: list[BaseException] = []

    def connect() -> None:
        try:
            client.connect()
        except ClientError as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=connect)
    waiting.start()
    time.sleep(0.5)  # the first attempt was refused; it waits now
    client.close()
    waiting.join(10)
    assert not waiting.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ClientClosed), outcome


def test_sigterm_stops_a_reliable_dummy_client_that_is_reconnecting():
    """A simulator told to stop while its learner is gone stops, and still says what it did."""
    from harness import DUMMY_CLIENT

    client = subprocess.Popen(
        [sys.executable, str(DUMMY_CLIENT), "--address", f"127.0.0.1:{free_port()}", "--reliable",
         "--retry-attempts", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        time.sleep(2.0)  # started, refused, waiting to try again (60 attempts would take minutes)
        assert client.poll() is None
        client.send_signal(signal.SIGTERM)
        out, _ = client.communicate(timeout=20)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    assert client.returncode == 0, out
    assert "stopped by SIGTERM" in out and "summary: steps=0" in out, out


def test_a_dummy_client_at_its_step_budget_waits_for_its_last_acks():
    """The runner confirms a batch when RLlib takes it, which can come after the weights it answered with."""
    from harness import DUMMY_CLIENT
    from client_peers import UPDATE_STEPS, ScriptedRunner, weights_before_ack

    with ScriptedRunner(on_message=weights_before_ack) as server:
        result = subprocess.run(
            [sys.executable, str(DUMMY_CLIENT), "--address", server.address, "--max-steps", str(2 * UPDATE_STEPS),
             "--timeout", "20"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "not acknowledged" not in output, output
    assert f"steps_sent={2 * UPDATE_STEPS} steps_acked={2 * UPDATE_STEPS}" in output, output


def test_backoff_is_exponential_with_full_jitter():
    rng = random.Random(1)
    for failures in range(8):
        ceiling = min(1.0, 0.1 * 2**failures)
        samples = [backoff_delay(failures, 0.1, 1.0, rng) for _ in range(500)]
        assert 0 <= min(samples) and max(samples) <= ceiling
        assert max(samples) > 0.9 * ceiling and min(samples) < 0.1 * ceiling
    assert backoff_delay(10_000, 0.1, 2.0, rng) <= 2.0


def test_arguments_are_checked():
    for kwargs in (
        {"timeout": 0},
        {"timeout": float("nan")},
        {"connect_timeout": -1},
        {"retry_attempts": 0},
        {"max_unacked": 0},
        {"backoff_initial": -0.1},
        {"max_frame_bytes": 10**8},
        {"extensions": ("compression",)},
    ):
        with pytest.raises(ValueError):
            RLinkClient("localhost:5555", **kwargs)


# ----------------------------------------------------------------------
# Addresses


@pytest.mark.parametrize(
    "text, expected",
    [
        ("localhost:5555", Address("localhost", 5555)),
        ("10.0.0.7:1", Address("10.0.0.7", 1)),
        ("tcp://learner.example:65535", Address("learner.example", 65535)),
        ("TCP://h:80", Address("h", 80)),
        ("[::1]:5555", Address("::1", 5555)),
        ("tcp://[fe80::1%eth0]:7", Address("fe80::1%eth0", 7)),
        ("tls://h:443", Address("h", 443, tls=True)),
        (" h:1 ", Address("h", 1)),
        (("127.0.0.1", 5555), Address("127.0.0.1", 5555)),
    ],
)
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("localhost", "has no port"),
        ("5555", "has no port"),
        ("localhost:", "port must be a number"),
        ("localhost:http", "port must be a number"),
        ("localhost:0", "1..65535"),
        ("localhost:65536", "1..65535"),
        ("localhost:-1", "port must be a number"),
        (":5555", "empty"),
        ("::1:5555", "put IPv6 addresses in brackets"),
        ("[::1]5555", "use \\[ADDR\\]:PORT"),
        ("[::1", "use \\[ADDR\\]:PORT"),
        ("[localhost]:5", "brackets are for IPv6"),
        ("http://h:80", "unknown scheme 'http'"),
        ("tcp://h:80/path", "no path"),
        (("h", 80.0), "port must be an int"),
        (("h", 1, 2), "must be \\(host, port\\)"),
    ],
)
def test_parse_address_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_address(text)


def test_address_str_round_trips():
    for text in ("tcp://h:1", "tcp://[::1]:5555", "tls://h:443"):
        assert str(parse_address(text)) == text


def test_tls_address_builds_a_tls_client(tmp_path):
    client = RLinkClient("tls://localhost:5555")  # the system's CAs; connects lazily
    assert client.tls and str(client.address) == "tls://localhost:5555"
    assert not RLinkClient("tcp://localhost:5555").tls
    assert issubclass(TLSNotAvailable, NotImplementedError)  # still raised by a Python without ssl


def test_ipv6_loopback_if_available():
    import socket

    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    with socket.socket(socket.AF_INET6) as listener:
        try:
            listener.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback")
        listener.listen(1)
        port = listener.getsockname()[1]
        client = RLinkClient(f"[::1]:{port}", retry_attempts=1, timeout=0.3, connect_timeout=1.0)
        with pytest.raises(ServerTimeout, match="PONG"):
            client.connect()  # connected over IPv6; nobody answers the PING
        client.close()


# ----------------------------------------------------------------------
# No Ray


def test_client_works_without_ray(serve):
    server = serve()
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["ray"] = None  # any `import ray...` now raises ImportError
        import numpy as np
        import rlinks_rllib.client as client_pkg
        from rlinks_rllib.client import RLinkClient
        from rlinks_rllib.protocol.episodes import build_episode_state

        episode = build_episode_state("e", np.zeros((3, 4), np.float32), np.zeros(2, np.int64), np.ones(2, np.float32))
        with RLinkClient("{server.address}", timeout=5.0) as client:
            assert client.get_config()["algorithm"] == "PPO"
            assert client.get_state().seq_no == 1
            client.send_episodes([episode])
            assert client.send_episodes_and_get_state([episode]).seq_no == 2
        assert client.stats.batches_acked == 2
        loaded = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
        assert loaded == ["ray"] and sys.modules["ray"] is None, loaded
        print("OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"
