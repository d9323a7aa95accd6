"""One address for simulators: the directory sends each to the least-loaded live runner."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys

import pytest

from harness import CARTPOLE
from rlinks_rllib.client import ConnectionLost, RLinkClient, ask_directory
from rlinks_rllib.client.errors import AuthenticationFailed, TLSFailed
from rlinks_rllib.protocol import FrameDecoder, encode_message
from rlinks_rllib.server.network.directory import Directory, Endpoint

pytestmark = pytest.mark.timeout(120)


def _runner(**settings):
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib import RLinkEnvRunner

    config = PPOConfig().environment(
        observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space, env_config={"port": 0, **settings},
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


def test_a_client_tries_the_runner_it_just_lost_last(two_runners_and_a_directory):
    """A runner cut off from the network is still listed until the learner notices; it must not cost a timeout."""
    runners, directory = two_runners_and_a_directory
    lost, other = runners
    # The directory lists the lost runner first (fewest clients), before and after the loss.
    directory.update([Endpoint(1, *lost.address, clients=0), Endpoint(2, *other.address, clients=5)])
    client = RLinkClient(f"127.0.0.1:{directory.address[1]}", timeout=10, reliable=True, retry_attempts=5,
                         backoff_initial=0.05, backoff_cap=0.2)
    try:
        client.connect()
        assert client.address.port == lost.address[1]
        lost.stop()
        # Where the lost runner listened, a host that takes connections and never answers (a cut link
        # looks like that to a client until its connect or handshake times out).
        with socket.socket() as black_hole:
            black_hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            black_hole.bind(lost.address)
            black_hole.listen(8)
            black_hole.setblocking(False)
            assert client.get_state().params
            assert client.address.port == other.address[1]
            with pytest.raises(BlockingIOError):
                black_hole.accept()  # nobody knocked
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


# ----------------------------------------------------------------------
# TLS and a shared secret on the directory: one secret and one CA for every port

SECRET = "one-secret-for-the-whole-cluster-0123"
OTHER_SECRET = "not-the-secret-of-this-cluster-456789"


def _write_secret(path, secret: str) -> str:
    path.write_text(secret + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def secured(ray_local, certs, tmp_path):
    """Two runners and a directory, all with TLS and the same secret, built from the same settings."""
    from rlinks_rllib.server.settings import RLinkSettings

    secret_file = _write_secret(tmp_path / "secret", SECRET)
    guard = dict(auth="on", auth_secret_file=secret_file, tls_cert_file=certs["server"],
                 tls_key_file=certs["server_key"])
    runners = [_runner(**guard), _runner(**guard)]
    directory = Directory.from_settings(RLinkSettings(host="127.0.0.1", port=0, **guard)).start()
    directory.update([Endpoint(i + 1, *r.address) for i, r in enumerate(runners)])
    yield runners, directory, secret_file
    directory.stop()
    for runner in runners:
        runner.stop()


def test_a_client_with_the_secret_and_the_ca_goes_through_a_tls_directory(secured, certs):
    runners, directory, secret_file = secured
    with RLinkClient(f"tls://localhost:{directory.address[1]}", ca_file=certs["ca"], secret_file=secret_file,
                     timeout=10, retry_attempts=2) as client:
        assert client.get_state().params
        assert client.tls and client.authenticated
        assert client.address.port in {r.address[1] for r in runners}
    found = ask_directory(f"tls://localhost:{directory.address[1]}", ca_file=certs["ca"], secret_file=secret_file)
    assert sorted(e["port"] for e in found) == sorted(r.address[1] for r in runners)


@pytest.mark.parametrize("secret", [OTHER_SECRET, None], ids=["wrong secret", "no secret"])
def test_the_directory_refuses_a_wrong_or_missing_secret_and_says_so(secured, certs, tmp_path, secret, caplog,
                                                                     monkeypatch):
    runners, directory, _ = secured
    monkeypatch.delenv("RLINKS_SECRET", raising=False)
    secret_file = _write_secret(tmp_path / "wrong", secret) if secret else None
    address = f"tls://localhost:{directory.address[1]}"
    with caplog.at_level(logging.WARNING, logger="rlinks_rllib.server"):
        with pytest.raises(AuthenticationFailed) as refused:
            ask_directory(address, ca_file=certs["ca"], secret_file=secret_file)
        with pytest.raises(AuthenticationFailed):
            RLinkClient(address, ca_file=certs["ca"], secret_file=secret_file, timeout=5,
                        retry_attempts=3, backoff_initial=0.01).connect()
    assert "auth_failed" in str(refused.value) or "secret" in str(refused.value)
    for runner in runners:  # nobody learnt a runner's port
        assert str(runner.address[1]) not in str(refused.value)
    assert any("rlinks directory: refused" in r.getMessage() and "auth_failed" in r.getMessage()
               for r in caplog.records)


def test_plain_tcp_to_a_tls_directory_fails_with_a_hint(secured):
    _, directory, secret_file = secured
    with pytest.raises(ConnectionLost, match="tls://"):
        ask_directory(f"127.0.0.1:{directory.address[1]}", secret_file=secret_file, timeout=5)


def test_a_directory_with_another_ca_is_not_trusted(secured, certs):
    _, directory, secret_file = secured
    with pytest.raises(TLSFailed):
        ask_directory(f"tls://localhost:{directory.address[1]}", ca_file=certs["other_ca"], secret_file=secret_file)


def test_rlinks_endpoints_asks_a_secured_directory(secured, certs, tmp_path):
    runners, directory, secret_file = secured
    address = f"tls://localhost:{directory.address[1]}"
    env = {k: v for k, v in os.environ.items() if k != "RLINKS_SECRET"}

    def rlinks(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rlinks_rllib", "endpoints", address, "--ca-file", certs["ca"],
                               *args], capture_output=True, text=True, timeout=60, env=env)

    good = rlinks("--secret-file", secret_file)
    assert good.returncode == 0, good.stderr
    for runner in runners:
        assert f"127.0.0.1:{runner.address[1]}" in good.stdout
    bad = rlinks("--secret-file", _write_secret(tmp_path / "wrong", OTHER_SECRET))
    assert bad.returncode == 1 and "cannot ask" in bad.stderr and "secret" in bad.stderr, bad.stderr
