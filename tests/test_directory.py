"""One address for simulators: the directory sends each to the least-loaded live runner."""

from __future__ import annotations

import socket

import pytest

from harness import CARTPOLE
from rlinks_rllib.client import RLinkClient
from rlinks_rllib.protocol import FrameDecoder, encode_message
from rlinks_rllib.server.directory import Directory, Endpoint

pytestmark = pytest.mark.timeout(120)


def _runner():
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib import RLinkEnvRunner

    config = PPOConfig().environment(
        observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space, env_config={"port": 0},
    ).env_runners(num_env_runners=0, sample_timeout_s=4.0)
    return RLinkEnvRunner(config=config, worker_index=0)


@pytest.fixture
def two_runners_and_a_directory(ray_local):
    runners = [_runner(), _runner()]
    directory = Directory("127.0.0.1", 0).start()
    directory.update([Endpoint(i + 1, *r.address) for i, r in enumerate(runners)])
    yield runners, directory
    directory.stop()
    for runner in runners:
        runner.stop()


def test_clients_given_one_address_spread_over_the_runners(two_runners_and_a_directory):
    runners, directory = two_runners_and_a_directory
    clients = [RLinkClient(f"127.0.0.1:{directory.address[1]}", timeout=10) for _ in range(4)]
    try:
        for client in clients:
            client.connect()
            assert client.get_state().params
        ports = sorted(client.address.port for client in clients)
        assert ports == sorted([runners[0].address[1]] * 2 + [runners[1].address[1]] * 2)
    finally:
        for client in clients:
            client.close()


def test_a_client_finds_another_runner_when_its_own_goes_away(two_runners_and_a_directory):
    runners, directory = two_runners_and_a_directory
    client = RLinkClient(f"127.0.0.1:{directory.address[1]}", timeout=10, reliable=True, retry_attempts=5,
                         backoff_initial=0.05, backoff_cap=0.2)
    try:
        client.connect()
        first = client.address.port
        gone = next(r for r in runners if r.address[1] == first)
        survivor = next(r for r in runners if r.address[1] != first)
        gone.stop()
        # The directory still lists the dead runner first (it has no clients);
        # the client skips it and lands on the live one.
        assert client.get_state().params
        assert client.address.port == survivor.address[1]
        assert client.stats.reconnects == 1
    finally:
        client.close()


def test_a_plain_rllib_client_is_told_where_the_runners_are(two_runners_and_a_directory):
    runners, directory = two_runners_and_a_directory
    with socket.create_connection(directory.address, timeout=5) as sock:
        sock.sendall(encode_message({"type": "PING"}) + encode_message({"type": "GET_CONFIG"}))
        decoder, replies = FrameDecoder(), []
        while len(replies) < 2:
            data = sock.recv(65536)
            if not data:
                break
            replies += decoder.feed(data)
    assert [r["type"] for r in replies] == ["PONG", "ERROR"]
    assert f"127.0.0.1:{runners[0].address[1]}" in replies[1]["message"]
