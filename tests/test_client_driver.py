"""The client as a driver of the protocol Connection: what the split into modules added.

``ask_directory`` (one question to a directory, for tools), the retry policy's
verdicts, and a reconnect that has to send an on-policy batch again whose
weights were already delivered.
"""

from __future__ import annotations

import random

import pytest

from peers import CLOSE, HANDLED, RLinkTestServer, free_port, make_episode
from rlinks_rllib.client import (
    AuthenticationFailed,
    ClientError,
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    RLinkClient,
    ServerError,
    ServerTimeout,
    TLSFailed,
)
from rlinks_rllib.client.network.directory import ask_directory
from rlinks_rllib.client.network.retry import RetryPolicy
from rlinks_rllib.protocol.errors import RLinksError
from rlinks_rllib.server.network.directory import Directory, Endpoint

pytestmark = pytest.mark.timeout(60)

FAST = dict(timeout=5.0, connect_timeout=2.0, backoff_initial=0.01, backoff_cap=0.05)


def test_ask_directory_lists_the_runners_least_loaded_first():
    directory = Directory("127.0.0.1", 0).start()
    try:
        directory.update([Endpoint(1, "127.0.0.1", 5001), Endpoint(2, "127.0.0.1", 5002)])
        runners = ask_directory(f"127.0.0.1:{directory.address[1]}", timeout=5.0)
    finally:
        directory.stop()
    assert sorted((r["worker_index"], r["host"], r["port"]) for r in runners) == [
        (1, "127.0.0.1", 5001), (2, "127.0.0.1", 5002)
    ]


def test_ask_directory_refuses_a_runner_and_reports_a_dead_port():
    server = RLinkTestServer().start()
    try:
        with pytest.raises(ClientError, match="not an rlinks directory"):
            ask_directory(server.address, timeout=5.0)
    finally:
        server.stop()
    with pytest.raises(ConnectFailed, match="could not connect"):
        ask_directory(f"127.0.0.1:{free_port()}", timeout=5.0, connect_timeout=1.0, connect_wait=0)


def test_client_errors_are_rlinks_errors():
    assert issubclass(ClientError, RLinksError)


@pytest.mark.parametrize(
    "exc, retried",
    [
        (ConnectionLost("reset"), True),
        (ConnectionRefusedError("refused"), True),
        (ServerError("shutting_down", "restarting"), True),
        (ServerError("limit_exceeded", "too many clients"), False),
        (AuthenticationFailed("wrong secret"), False),
        (TLSFailed("untrusted certificate"), False),
        (ProtocolViolation("garbage", code="bad_frame"), False),
        (ServerTimeout("no PONG"), False),
    ],
)
def test_retry_policy_retries_network_failures_only(exc, retried):
    assert RetryPolicy.retryable(exc) is retried


def test_retry_policy_backoff_is_bounded():
    policy = RetryPolicy(attempts=3, initial=0.1, cap=0.5, rng=random.Random(0))
    assert all(0 <= policy.delay(n) <= min(0.5, 0.1 * 2**n) for n in range(10))


def test_reconnect_settles_an_answered_on_policy_batch_before_the_next_request():
    """Its SET_STATE came but its ACK did not; after a drop it is sent again, and its second SET_STATE dropped."""
    def script(server, conn, msg):
        if conn.index == 0 and msg["type"] == "EPISODES_AND_GET_STATE":
            server.weights_seq_no += 1
            conn.send(server.set_state(frozenset({"ack", "want_steps"})))  # weights, ACK held back
            return HANDLED
        if conn.index == 0 and msg["type"] == "EPISODES":
            return CLOSE
        return None

    server = RLinkTestServer(on_message=script).start()
    try:
        with RLinkClient(server.address, reliable=True, **FAST) as client:
            assert client.send_episodes_and_get_state([make_episode(2)]).seq_no == 2
            client.send_episodes([make_episode(1)])  # the connection drops after this one
            assert client.get_state().seq_no == 3
            stats = client.stats
    finally:
        server.stop()
    assert server.errors == []
    assert [(b.conn, b.seq, b.duplicate) for b in server.batches] == [(0, 1, False), (0, 2, False), (1, 1, True),
                                                                      (1, 2, True)]
    assert server.types(conn=1) == ["PING", "EPISODES_AND_GET_STATE", "EPISODES", "GET_STATE"]
    assert stats.reconnects == 1 and stats.batches_resent == 2 and stats.unacked == 0
