"""Shared-secret authentication and TLS, from the HMAC up to a runner inside RLlib.

Most tests run our real server (:class:`RLinkServer`, no Ray) and our real
client over loopback; certificates are made per test session with the
``openssl`` command-line tool. One test wires everything through
``env_config`` into an :class:`RLinkEnvRunner`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from peers import TEST_PARAMS, make_episode
from rlinks_rllib.client import ConnectFailed, RLinkClient
from rlinks_rllib.client.errors import AuthenticationFailed, TLSFailed
from rlinks_rllib.protocol import FrameDecoder, encode_message, make_offer, parse_offer
from rlinks_rllib.protocol import auth
from rlinks_rllib.protocol.episodes import check_episode_state
from rlinks_rllib.protocol.errors import AuthFailed
from rlinks_rllib.server.network.listener import RLinkServer, exposure_warning
from rlinks_rllib.server.settings import RLinkSettings, rlinks_env_config

pytestmark = pytest.mark.timeout(60)

SECRET = "correct-horse-battery-staple-42"
FAST = dict(timeout=5.0, connect_timeout=2.0, retry_attempts=1, backoff_initial=0.01, backoff_cap=0.05)


# ----------------------------------------------------------------------
# Certificates


def make_certificates(directory: Path, key: str = "ec") -> dict[str, str]:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate, with openssl.

    ``key`` "rsa" makes RSA keys instead of P-256 ones (Mono 6.8's TLS reads no EC certificate).

    The same commands as in docs/SECURITY.md, with short lifetimes. Returns
    file paths by name: ca, ca_key, server, server_key, client, client_key,
    and other_ca (a CA that signed nothing here).

    Raises:
        subprocess.CalledProcessError: openssl failed.
    """
    d = Path(directory)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"] if key == "ec" else ["-newkey", "rsa:2048", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=30)

    for ca in ("ca", "other_ca"):
        run("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
            "-subj", f"/CN=rlinks test {ca}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    leaves = {
        "server": ("/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        "client": ("/CN=simulator-1", "extendedKeyUsage=clientAuth\n"),
    }
    for name, (subject, ext) in leaves.items():
        (d / f"{name}.ext").write_text(
            ext + "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
        )
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    files = {"ca": "ca.pem", "ca_key": "ca.key", "other_ca": "other_ca.pem", "server": "server.pem",
             "server_key": "server.key", "client": "client.pem", "client_key": "client.key"}
    return {name: str(d / file) for name, file in files.items()}


@pytest.fixture
def secret_file(tmp_path) -> str:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return str(path)


# ----------------------------------------------------------------------
# A real server without Ray


def _ingest(wire: list) -> tuple[list, int]:
    episodes = [check_episode_state(w, allow_empty=True) for w in wire]
    return episodes, sum(e["t"] - e["t_started"] for e in episodes)


@contextlib.contextmanager
def serving(*, on_policy: bool = False, update_steps: int = 64, **settings) -> Iterator[RLinkServer]:
    server = RLinkServer(
        RLinkSettings(port=0, **settings), port=0, ingest=_ingest,
        config_message=lambda _with_graph: {"type": "SET_CONFIG", "config": {"version": 1}},
        update_steps=update_steps, on_policy=on_policy,
    )
    server.replace_weights(TEST_PARAMS, 1)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> list[dict]:
    """Send ``data`` on a fresh connection; return every message until the server closes."""
    decoder = FrameDecoder(validate=False)
    messages: list[dict] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            messages += decoder.feed(chunk)
    return messages


def ping(**offer_extra) -> bytes:
    return encode_message({"type": "PING", "rlinks": make_offer(["ack", "auth"], **offer_extra)})


# ----------------------------------------------------------------------
# protocol/auth.py


def test_proofs_verify_both_ways_and_never_contain_the_secret():
    secret = auth.normalize_secret(SECRET)
    client, server = auth.ClientAuth(secret), auth.ServerAuth(secret)
    ping_offer = parse_offer({"rlinks": make_offer(["auth"], **client.offer())})
    pong_offer = parse_offer({"rlinks": make_offer(["auth"], **server.challenge(ping_offer))})
    answer = client.respond(pong_offer)
    ok = server.accept(answer)
    client.confirm(ok)
    for message in (answer, ok):
        assert len(message["proof"]) == auth.PROOF_BYTES
        assert secret not in encode_message(message)
    assert answer["proof"] != ok["proof"]


def test_wrong_secret_replay_and_reflection_are_refused():
    secret, other = auth.normalize_secret(SECRET), auth.normalize_secret("another-secret-of-some-length")
    client, server = auth.ClientAuth(other), auth.ServerAuth(secret)
    offer = parse_offer({"rlinks": make_offer(["auth"], **client.offer())})
    server.challenge(offer)
    with pytest.raises(AuthFailed):
        server.accept(client.respond(parse_offer({"rlinks": make_offer(["auth"], auth_nonce=server.nonce)})))

    # A recorded, valid AUTH does not open a second connection (fresh server nonce).
    client = auth.ClientAuth(secret)
    first = auth.ServerAuth(secret)
    recorded_ping = parse_offer({"rlinks": make_offer(["auth"], **client.offer())})
    first.challenge(recorded_ping)
    recorded = client.respond(parse_offer({"rlinks": make_offer(["auth"], auth_nonce=first.nonce)}))
    first.accept(recorded)
    second = auth.ServerAuth(secret)
    second.challenge(recorded_ping)
    with pytest.raises(AuthFailed):
        second.accept(recorded)

    # The server's proof, reflected back as a client's, is refused (roles differ).
    server = auth.ServerAuth(secret)
    server.challenge(recorded_ping)
    forged = {"type": "AUTH", "proof": auth.proof(secret, b"server", client.nonce, server.nonce)}
    with pytest.raises(AuthFailed):
        server.accept(forged)


@pytest.mark.parametrize("offer", [None, {"version": 1, "extensions": ["ack"]},
                                   {"version": 1, "extensions": ["auth"]},
                                   {"version": 1, "extensions": ["auth"], "auth_nonce": b"short"},
                                   {"version": 1, "extensions": ["auth"], "auth_nonce": "x" * 32}])
def test_a_missing_or_malformed_challenge_is_an_auth_failure(offer):
    server = auth.ServerAuth(auth.normalize_secret(SECRET))
    with pytest.raises(AuthFailed):
        server.challenge(parse_offer({} if offer is None else {"rlinks": offer}))
    with pytest.raises(AuthFailed):
        server.accept({"type": "AUTH", "proof": b"\0" * 32})


def test_secrets_are_normalized_bounded_and_read_from_env_or_file(tmp_path):
    assert auth.normalize_secret(f"  {SECRET}\n") == SECRET.encode()
    with pytest.raises(ValueError, match="at least 16"):
        auth.normalize_secret("short")
    with pytest.raises(ValueError, match="longer"):
        auth.normalize_secret(b"x" * (auth.MAX_SECRET_BYTES + 1))
    assert auth.load_secret(environ={}) is None
    assert auth.load_secret(environ={"RLINKS_SECRET": SECRET}) == SECRET.encode()
    path = tmp_path / "s"
    path.write_bytes(SECRET.encode() + b"\n")
    path.chmod(0o644)
    assert auth.load_secret(str(path), environ={"RLINKS_SECRET": "ignored-when-a-file-is-given"}) == SECRET.encode()
    assert not auth.secret_file_is_private(str(path))
    path.chmod(0o600)
    assert auth.secret_file_is_private(str(path))
    with pytest.raises(OSError):
        auth.load_secret(str(tmp_path / "missing"))


def test_auth_setting_modes(secret_file):
    assert RLinkSettings().auth_secret(environ={}) is None
    assert RLinkSettings().auth_secret(environ={"RLINKS_SECRET": SECRET}) == SECRET.encode()
    assert RLinkSettings(auth_secret_file=secret_file).auth_secret(environ={}) == SECRET.encode()
    assert RLinkSettings(auth="off", auth_secret_file=secret_file).auth_secret() is None
    with pytest.raises(ValueError, match="no secret"):
        RLinkSettings(auth="on").auth_secret(environ={})
    with pytest.raises(ValueError, match="auth"):
        RLinkSettings(auth="yes")
    with pytest.raises(ValueError, match="tls_cert_file"):
        RLinkSettings(tls_key_file="k.pem")
    # No setting holds the secret itself: env_config is logged, pickled and checkpointed.
    assert [k for k in rlinks_env_config() if "secret" in k] == ["auth_secret_file"]


def test_loud_warning_beyond_loopback_without_auth():
    assert exposure_warning(RLinkSettings(), authenticated=False, address=("127.0.0.1", 1)) is None
    assert exposure_warning(RLinkSettings(host="::1"), authenticated=False, address=("::1", 1)) is None
    assert exposure_warning(RLinkSettings(host="localhost"), authenticated=False, address=("localhost", 1)) is None
    loud = exposure_warning(RLinkSettings(host="0.0.0.0"), authenticated=False, address=("0.0.0.0", 5555))
    assert "WITHOUT AUTHENTICATION" in loud and "RLINKS_SECRET" in loud
    quiet = exposure_warning(RLinkSettings(host="10.0.0.7"), authenticated=True, address=("10.0.0.7", 5555))
    assert "without TLS" in quiet
    tls = RLinkSettings(host="10.0.0.7", tls_cert_file="c.pem")
    assert exposure_warning(tls, authenticated=True, address=("10.0.0.7", 5555)) is None


# ----------------------------------------------------------------------
# Authentication over sockets


def test_client_with_the_secret_is_served(secret_file):
    with serving(auth="on", auth_secret_file=secret_file) as server:
        port = server.address[1]
        with RLinkClient(f"127.0.0.1:{port}", secret=SECRET, **FAST) as client:
            assert client.server_extensions == {"ack", "want_steps", "auth", "takeover", "timestep", "weights_notice"}  # off-policy
            assert client.get_state().seq_no == 1
            client.send_episodes([make_episode(4)])
            wait_for(lambda: server.stats.steps_in == 4)
            server.confirm(server.inbox.take(4, 1.0))  # what sample() does
        assert client.stats.batches_acked == 1 and not server.stats.errors


def test_secret_from_the_environment(secret_file, monkeypatch):
    monkeypatch.setenv("RLINKS_SECRET", SECRET)
    with serving(auth_secret_file=secret_file) as server:
        with RLinkClient(f"127.0.0.1:{server.address[1]}", **FAST) as client:
            assert client.authenticated and "auth" in client.server_extensions
            client.get_state()


@pytest.mark.parametrize("secret", ["the-wrong-secret-entirely", None])
def test_wrong_or_no_secret_is_refused_and_counted(secret_file, secret, monkeypatch):
    monkeypatch.delenv("RLINKS_SECRET", raising=False)
    with serving(auth_secret_file=secret_file) as server:
        client = RLinkClient(f"127.0.0.1:{server.address[1]}", secret=secret, **FAST)
        with pytest.raises(AuthenticationFailed) as info:
            client.connect()
        assert info.value.code == "auth_failed"
        client.close()
        wait_for(lambda: server.stats.errors["auth_failed"] == 1 and server.stats.clients_connected == 0)
        assert server.stats.batches_in == 0


def test_client_with_a_secret_refuses_a_server_that_does_not_authenticate(monkeypatch):
    monkeypatch.delenv("RLINKS_SECRET", raising=False)
    with serving() as server:
        client = RLinkClient(f"127.0.0.1:{server.address[1]}", secret=SECRET, **FAST)
        with pytest.raises(AuthenticationFailed, match="proves it knows"):
            client.connect()
        client.close()


def test_client_refuses_a_server_with_another_secret(tmp_path):
    other = tmp_path / "other"
    other.write_text("a-different-secret-on-the-server")
    other.chmod(0o600)
    with serving(auth_secret_file=str(other)) as server:
        # The server refuses us first; either way nothing but auth_failed happens.
        with pytest.raises(AuthenticationFailed):
            RLinkClient(f"127.0.0.1:{server.address[1]}", secret=SECRET, **FAST).connect()


def test_unauthenticated_peer_is_closed_before_any_other_message_is_read(secret_file):
    episodes = encode_message({"type": "EPISODES", "episodes": [make_episode(3)]})
    with serving(auth_secret_file=secret_file) as server:
        port = server.address[1]
        # RLlib's own client: a bare PING (pipelined with a batch).
        replies = raw_exchange(port, encode_message({"type": "PING"}) + episodes)
        assert [(m["type"], m.get("code")) for m in replies] == [("ERROR", "auth_failed")]
        # A batch instead of a PING.
        assert raw_exchange(port, episodes)[-1]["code"] == "auth_failed"
        # The handshake, then a batch instead of AUTH.
        replies = raw_exchange(port, ping(auth_nonce=os.urandom(32)) + episodes)
        assert [m["type"] for m in replies] == ["PONG", "ERROR"] and replies[1]["code"] == "auth_failed"
        assert "proof" not in str(replies[0]) and set(replies[0]["rlinks"]) >= {"auth_nonce"}
        # A made-up proof.
        replies = raw_exchange(port, ping(auth_nonce=os.urandom(32))
                               + encode_message({"type": "AUTH", "proof": os.urandom(32)}) + episodes)
        assert [m["type"] for m in replies] == ["PONG", "ERROR"]
        wait_for(lambda: server.stats.errors["auth_failed"] == 4)
        assert server.stats.batches_in == 0 and set(server.stats.errors) == {"auth_failed"}


def test_frames_before_the_handshake_are_capped(secret_file):
    with serving(auth_secret_file=secret_file) as server:
        replies = raw_exchange(server.address[1], b"%08d" % (1 << 20))
        assert replies[-1]["code"] == "frame_too_large"
    with serving() as server:  # without auth too
        assert raw_exchange(server.address[1], b"%08d" % (1 << 20))[-1]["code"] == "frame_too_large"


def test_handshake_deadline_covers_authentication(secret_file):
    with serving(auth_secret_file=secret_file, handshake_timeout_s=0.5) as server:
        started = time.monotonic()
        replies = raw_exchange(server.address[1], ping(auth_nonce=os.urandom(32)))  # then no AUTH
        assert [m["type"] for m in replies] == ["PONG", "ERROR"] and replies[1]["code"] == "limit_exceeded"
        assert time.monotonic() - started < 3


# ----------------------------------------------------------------------
# Limits that need no attacker


def test_idle_client_is_cut_off():
    with serving(idle_timeout_s=0.5) as server:
        replies = raw_exchange(server.address[1], encode_message({"type": "PING"}))
        assert [m["type"] for m in replies] == ["PONG", "ERROR"] and replies[1]["code"] == "limit_exceeded"
        assert "idle" in replies[1]["message"]


def test_too_many_episodes_in_one_message_is_refused_whole():
    with serving(max_episodes_per_message=2) as server:
        batch = encode_message({"type": "EPISODES", "episodes": [make_episode(1, seed=i) for i in range(3)]})
        with socket.create_connection(server.address, timeout=5) as sock:
            sock.sendall(encode_message({"type": "PING"}))
            sock.recv(4096)
            sock.sendall(batch)
            decoder = FrameDecoder(validate=False)
            reply = []
            while not reply:
                reply = decoder.feed(sock.recv(4096))
        assert reply[0]["code"] == "limit_exceeded" and server.stats.batches_in == 0


# ----------------------------------------------------------------------
# TLS


def test_tls_round_trip_with_large_frames_both_ways(certs):
    big = {"w": np.arange(600_000, dtype=np.float32).reshape(1000, 600)}  # ~2.4 MB of weights
    with serving(tls_cert_file=certs["server"], tls_key_file=certs["server_key"]) as server:
        server.replace_weights(big, 3)
        with RLinkClient(f"tls://localhost:{server.address[1]}", ca_file=certs["ca"], **FAST) as client:
            assert client.tls
            np.testing.assert_array_equal(client.get_state().params["w"], big["w"])
            episodes = [make_episode(2000, seed=i) for i in range(4)]  # many buffers in one frame
            client.send_episodes(episodes)
            wait_for(lambda: server.stats.steps_in == 8000)
            batches = server.inbox.take(1, 1.0)
            server.confirm(batches)
            client.flush()
            assert client.stats.batches_acked == 1
        # By IP address too (the certificate names 127.0.0.1).
        with RLinkClient(f"tls://127.0.0.1:{server.address[1]}", ca_file=certs["ca"], **FAST) as client:
            client.get_state()


def test_tls_with_authentication_and_client_certificates(certs, secret_file):
    settings = dict(tls_cert_file=certs["server"], tls_key_file=certs["server_key"],
                    tls_client_ca_file=certs["ca"], auth_secret_file=secret_file)
    with serving(**settings) as server:
        address = f"tls://localhost:{server.address[1]}"
        with RLinkClient(address, ca_file=certs["ca"], cert_file=certs["client"], key_file=certs["client_key"],
                         secret=SECRET, **FAST) as client:
            assert "auth" in client.server_extensions
            client.get_state()
        # No client certificate: the TLS layer refuses before a byte of RLlink.
        with pytest.raises(ConnectFailed, match="client certificate"):
            RLinkClient(address, ca_file=certs["ca"], secret=SECRET, **FAST).connect()
        wait_for(lambda: server.stats.tls_handshakes_failed >= 1)
        assert server.stats.frames_in == 3  # PING and AUTH and GET_STATE of the good client only


def test_untrusted_server_certificate_is_refused_without_retrying(certs):
    with serving(tls_cert_file=certs["server"], tls_key_file=certs["server_key"]) as server:
        port = server.address[1]
        client = RLinkClient(f"tls://localhost:{port}", ca_file=certs["other_ca"], **{**FAST, "retry_attempts": 5})
        started = time.monotonic()
        with pytest.raises(TLSFailed, match="not trusted"):
            client.connect()
        assert time.monotonic() - started < 2
        # A certificate for another host name.
        with pytest.raises(TLSFailed):
            RLinkClient(f"tls://localhost:{port}", ca_file=certs["ca"], tls_server_name="learner.example",
                        **FAST).connect()
        wait_for(lambda: server.stats.tls_handshakes_failed == 2)


def test_plain_client_on_a_tls_port_and_tls_client_on_a_plain_port_fail_cleanly(certs):
    with serving(tls_cert_file=certs["server"], tls_key_file=certs["server_key"]) as server:
        with pytest.raises(ConnectFailed, match="tls://"):
            RLinkClient(f"127.0.0.1:{server.address[1]}", **FAST).connect()
        wait_for(lambda: server.stats.tls_handshakes_failed == 1)
    with serving() as server:
        with pytest.raises(ConnectFailed):
            RLinkClient(f"tls://localhost:{server.address[1]}", ca_file=certs["ca"], **FAST).connect()
        wait_for(lambda: server.stats.errors["bad_frame"] == 1)


def test_tls_handshakes_in_progress_count_against_max_clients_and_time_out(certs):
    settings = dict(tls_cert_file=certs["server"], tls_key_file=certs["server_key"], max_clients=2,
                    handshake_timeout_s=1.0)
    with serving(**settings) as server:
        port = server.address[1]
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        try:
            wait_for(lambda: server.stats.connections_total == 2)
            with socket.create_connection(("127.0.0.1", port), timeout=5) as third:
                third.settimeout(5)
                assert third.recv(10) == b""  # closed at once, before any TLS
            assert server.stats.connections_refused == 1
            # The two silent ones are cut at the handshake deadline...
            for sock in held:
                sock.settimeout(5)
                assert sock.recv(10) == b""
            wait_for(lambda: server.stats.tls_handshakes_failed == 2)
            # ...and a real client gets in.
            with RLinkClient(f"tls://localhost:{port}", ca_file=certs["ca"], **FAST) as client:
                client.get_state()
        finally:
            for sock in held:
                sock.close()


def test_tls_options_need_a_tls_address(certs):
    with pytest.raises(ValueError, match="tls://"):
        RLinkClient("127.0.0.1:5555", ca_file=certs["ca"])
    with pytest.raises(ValueError, match="cert_file"):
        RLinkClient("tls://127.0.0.1:5555", key_file=certs["client_key"])
    with pytest.raises(ValueError, match="secret"):
        RLinkClient("127.0.0.1:5555", extensions=["ack", "auth"])


# ----------------------------------------------------------------------
# Through env_config into an RLinkEnvRunner


@pytest.mark.timeout(120)
def test_env_runner_serves_tls_and_auth_from_env_config(ray_local, certs, secret_file):
    from ray.rllib.algorithms.ppo import PPOConfig

    from harness import CARTPOLE
    from rlinks_rllib import RLinkEnvRunner
    from rlinks_rllib.protocol.episode_builder import EpisodeBuilder

    env_config = rlinks_env_config(port=0, auth="on", auth_secret_file=secret_file, tls_cert_file=certs["server"],
                                   tls_key_file=certs["server_key"])
    config = (PPOConfig().environment(observation_space=CARTPOLE.observation_space,
                                      action_space=CARTPOLE.action_space, env_config=env_config)
              .env_runners(num_env_runners=0, sample_timeout_s=4.0, rollout_fragment_length=32))
    runner = RLinkEnvRunner(config=config, worker_index=0)
    try:
        host, port = runner.address
        builder, rng = EpisodeBuilder(), np.random.default_rng(0)
        builder.reset(rng.normal(size=4).astype(np.float32))
        for _ in range(32):
            builder.step(0, 1.0, rng.normal(size=4).astype(np.float32), False, False,
                         extra={"action_logp": np.float32(-0.7), "action_dist_inputs": np.zeros(2, np.float32)})
        with RLinkClient(f"tls://localhost:{port}", ca_file=certs["ca"], secret=SECRET, **FAST) as client:
            client.get_state()
            client.send_episodes(builder.take_chunks())
            episodes = runner.sample()
            assert sum(len(e) for e in episodes) == 32
            client.flush()  # confirmed once sample() handed the batch to RLlib
            assert client.stats.batches_acked == 1
        with pytest.raises(AuthenticationFailed):
            RLinkClient(f"tls://localhost:{port}", ca_file=certs["ca"], secret="not-the-runners-secret",
                        **FAST).connect()
        stats = runner.get_transport_stats()
        assert stats["errors"] == {"auth_failed": 1} and stats["steps_acked"] == 32
    finally:
        runner.stop()
