"""The C++ client in ``clients/cpp``: the second implementation of ``docs/PROTOCOL.md``.

Built with CMake (into ``build/cpp-pytest``, kept between runs), then held to
the shared vectors, run against rlinks' own runner server (without Ray) and
against scripted peers that drop connections at awkward moments, and finally
trained to a mean return of 450 with a real ``rlinks learner``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from peers import CLOSE, HANDLED, RLinkTestServer
from rlinks_rllib.protocol.config import build_config
from rlinks_rllib.protocol.episodes import check_episode_state
from rlinks_rllib.protocol.weights import build_state
from rlinks_rllib.server.directory import Directory, Endpoint
from rlinks_rllib.server.listener import RLinkServer
from rlinks_rllib.server.settings import RLinkSettings

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "clients" / "cpp"
VECTORS = ROOT / "tests" / "vectors"
SECRET = "correct horse battery staple, twice over"

#: Env steps per update of the test servers (their rollout_fragment_length).
UPDATE_STEPS = 64

_rng = np.random.default_rng(0)
#: RLlib's default PPO module for CartPole, small: a 4 -> 8 tanh encoder and a 8 -> 2 pi head.
PARAMS = {
    "encoder.actor_encoder.net.mlp.0.weight": _rng.standard_normal((8, 4)).astype(np.float32),
    "encoder.actor_encoder.net.mlp.0.bias": np.zeros(8, np.float32),
    "pi.net.mlp.0.weight": _rng.standard_normal((2, 8)).astype(np.float32),
    "pi.net.mlp.0.bias": np.zeros(2, np.float32),
    "pi.log_std_clip_param_const": np.array([20.0], np.float32),
}
CONFIG = build_config(
    algorithm="PPO",
    observation_space={"kind": "box", "shape": [4], "dtype": "<f4",
                       "low": np.full(4, -np.inf, np.float32), "high": np.full(4, np.inf, np.float32)},
    action_space={"kind": "discrete", "n": 2, "start": 0},
    rollout_fragment_length=UPDATE_STEPS,
    on_policy=True,
    model_config={"fcnet_hiddens": [8], "fcnet_activation": "tanh"},
)


# ----------------------------------------------------------------------
# Building


def _compiler() -> Optional[str]:
    return os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)


def _build(name: str, *options: str) -> Path:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed: the C++ client can't be built")
    if _compiler() is None:
        pytest.skip("no C++ compiler (c++, g++ or clang++) is installed: the C++ client can't be built")
    build = ROOT / "build" / name
    configure = subprocess.run(["cmake", "-S", str(SOURCE), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", *options],
                               capture_output=True, text=True, timeout=300)
    if configure.returncode != 0:
        if "OPENSSL" in " ".join(options) and "OpenSSL" in configure.stderr:
            pytest.skip("OpenSSL's development files are not installed: no auth/TLS build of the C++ client")
        pytest.fail(f"cmake could not configure clients/cpp:\n{configure.stdout}\n{configure.stderr}")
    built = subprocess.run(["cmake", "--build", str(build), "-j2"], capture_output=True, text=True, timeout=1200)
    if built.returncode != 0:
        pytest.fail(f"clients/cpp does not build:\n{built.stdout[-6000:]}\n{built.stderr[-6000:]}")
    return build


@pytest.fixture(scope="session")
def cpp() -> Path:
    """The build directory of the default build (no OpenSSL)."""
    return _build("cpp-pytest")


@pytest.fixture(scope="session")
def cpp_openssl() -> Path:
    """A build with -DRLINKS_WITH_OPENSSL=ON (auth and TLS)."""
    return _build("cpp-pytest-openssl", "-DRLINKS_WITH_OPENSSL=ON")


def cartpole(build: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(build / "cartpole"), *args], capture_output=True, text=True, timeout=timeout)


def summary_of(output: str) -> dict[str, float]:
    """The numbers of the client's last ``summary:`` line."""
    lines = [line for line in output.splitlines() if line.startswith("summary: ")]
    assert lines, f"no summary line in:\n{output}"
    return {key: float(value) for key, value in re.findall(r"(\w+)=(\S+)", lines[-1])}


def check_chunk(state: dict) -> dict:
    """rlinks' server check of one chunk, with CartPole's spaces and PPO's extra outputs."""
    return check_episode_state(state, obs_shape=(4,), obs_dtype=np.float32, num_actions=2,
                               required_extra=("action_logp", "action_dist_inputs"))


# ----------------------------------------------------------------------
# Servers to talk to


class ScriptedRunner(RLinkTestServer):
    """The scripted peer of ``tests/peers.py`` with CartPole's config and weights the C++ policy runs."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("config", CONFIG)
        kwargs.setdefault("want_steps", UPDATE_STEPS)
        super().__init__(**kwargs)

    def set_state(self, agreed: frozenset[str]) -> dict:
        message = {"type": "SET_STATE", "state": build_state(PARAMS, self.weights_seq_no)}
        if "want_steps" in agreed:
            message["want_steps"] = self.want_steps
        return message

    def batch_messages(self) -> list[tuple[int, dict]]:
        return [(conn, m) for conn, m in self.messages if m["type"] in ("EPISODES", "EPISODES_AND_GET_STATE")]


class FakeLearner:
    """rlinks' own runner server, without Ray; a thread plays RLlib's part.

    Like ``RLinkEnvRunner.sample()`` it takes batches from the inbox and
    confirms them (which sends the ACKs), and every ``UPDATE_STEPS`` env
    steps it publishes new weights, which releases the parked on-policy clients.
    """

    def __init__(self, **settings) -> None:
        self.chunks: list[dict] = []
        self.updates = 1
        self.server = RLinkServer(
            RLinkSettings(port=0, **settings), port=0, ingest=self._ingest,
            config_message=lambda: {"type": "SET_CONFIG", "config": CONFIG},
            update_steps=UPDATE_STEPS, on_policy=True,
        )
        self.server.replace_weights(PARAMS, self.updates)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play_rllib, daemon=True)

    @property
    def port(self) -> int:
        return self.server.address[1]

    def _ingest(self, wire: list) -> tuple[list, int]:
        chunks = [check_chunk(state) for state in wire]
        self.chunks.extend(chunks)
        return chunks, sum(c["t"] - c["t_started"] for c in chunks)

    def _play_rllib(self) -> None:
        steps = 0
        while not self._stop.is_set():
            batches = self.server.inbox.take(UPDATE_STEPS, 0.1)
            self.server.confirm(batches)
            steps += sum(b.steps for b in batches)
            if steps >= UPDATE_STEPS:
                steps = 0
                self.updates += 1
                self.server.publish_weights(PARAMS, self.updates)

    def __enter__(self) -> "FakeLearner":
        self.server.start()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self.server.stop()


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    from test_auth_tls import make_certificates  # the project's one recipe for test certificates

    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def secret_file(tmp_path) -> str:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return str(path)


# ----------------------------------------------------------------------
# The spec, byte for byte


def test_every_vector_passes(cpp):
    cases = len(list(VECTORS.glob("*.json")))
    result = subprocess.run([str(cpp / "vectors_test"), str(VECTORS)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"{cases} passed, 0 failed"


def test_unit_tests_pass(cpp):
    result = subprocess.run([str(cpp / "unit_test")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].endswith(" passed, 0 failed")


# ----------------------------------------------------------------------
# Against rlinks' runner server


def test_trains_on_policy_with_want_steps_and_acks(cpp):
    with FakeLearner() as learner:
        result = cartpole(cpp, "--address", f"127.0.0.1:{learner.port}", "--max-steps", "1000", "--seed", "3")
    assert result.returncode == 0, result.stderr
    summary = summary_of(result.stdout)
    assert summary["steps"] == 1000 and summary["episodes"] > 10
    # Every batch was trained on and answered with the next weights.
    assert summary["weights_seq_no"] == learner.updates >= 1000 // UPDATE_STEPS
    assert sum(c["t"] - c["t_started"] for c in learner.chunks) == UPDATE_STEPS * (1000 // UPDATE_STEPS)
    stats = learner.server.stats
    assert stats.duplicates == 0 and stats.steps_in == UPDATE_STEPS * (1000 // UPDATE_STEPS)
    # Chunks of one episode share its id and follow on from each other.
    by_id: dict[str, list[dict]] = {}
    for chunk in learner.chunks:
        by_id.setdefault(chunk["id_"], []).append(chunk)
    assert any(len(chunks) > 1 for chunks in by_id.values())
    for chunks in by_id.values():
        for before, after in zip(chunks, chunks[1:]):
            assert after["t_started"] == before["t"] and not before["is_terminated"]
            np.testing.assert_array_equal(after["observations"]["data"][0], before["observations"]["data"][-1])
        assert all(len(c["infos"]["data"]) == c["t"] - c["t_started"] + 1 for c in chunks)
    # The recorded log-probabilities are those of the actions under the recorded logits.
    chunk = learner.chunks[0]
    logits = chunk["extra_model_outputs"]["action_dist_inputs"]["data"].astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    taken = log_probs[np.arange(len(logits)), chunk["actions"]["data"]]
    np.testing.assert_allclose(chunk["extra_model_outputs"]["action_logp"]["data"], taken, atol=1e-5)


def test_follows_the_directory_to_a_runner(cpp):
    with FakeLearner() as learner:
        directory = Directory("127.0.0.1", 0).start()
        try:
            directory.update([Endpoint(1, "127.0.0.1", learner.port)])
            result = cartpole(cpp, "--address", f"{directory.address[0]}:{directory.address[1]}",
                              "--max-steps", "200")
        finally:
            directory.stop()
    assert result.returncode == 0, result.stderr
    assert f"connected to 127.0.0.1:{learner.port}" in result.stderr
    assert summary_of(result.stdout)["steps"] == 200 and learner.server.stats.steps_in == 3 * UPDATE_STEPS


def test_auth_and_tls(cpp_openssl, certs, secret_file, tmp_path):
    settings = dict(tls_cert_file=certs["server"], tls_key_file=certs["server_key"], auth_secret_file=secret_file)
    with FakeLearner(**settings) as learner:
        address = f"tls://localhost:{learner.port}"
        good = cartpole(cpp_openssl, "--address", address, "--ca-file", certs["ca"], "--secret-file", secret_file,
                        "--max-steps", "200")
        assert good.returncode == 0, good.stderr
        assert summary_of(good.stdout)["steps"] == 200 and learner.server.stats.steps_in == 3 * UPDATE_STEPS

        wrong = tmp_path / "wrong"
        wrong.write_text("another secret of enough length")
        refused = cartpole(cpp_openssl, "--address", address, "--ca-file", certs["ca"], "--secret-file", str(wrong),
                           "--max-steps", "10", "--retry-attempts", "1")
        assert refused.returncode == 1 and "auth_failed" in refused.stderr, refused.stderr

        untrusted = cartpole(cpp_openssl, "--address", address, "--ca-file", certs["other_ca"],
                             "--secret-file", secret_file, "--max-steps", "10")
        assert untrusted.returncode == 1 and "not trusted" in untrusted.stderr, untrusted.stderr
    # A client with a secret won't talk to a server that can't prove it knows it.
    with FakeLearner() as learner:
        unproven = cartpole(cpp_openssl, "--address", f"127.0.0.1:{learner.port}", "--secret-file", secret_file,
                            "--max-steps", "10")
    assert unproven.returncode == 1 and "did not agree to authenticate" in unproven.stderr, unproven.stderr


def test_without_openssl_auth_and_tls_say_how_to_get_them(cpp, secret_file):
    for args in (["--address", "tls://127.0.0.1:9"], ["--address", "127.0.0.1:9", "--secret-file", secret_file]):
        result = cartpole(cpp, *args, "--max-steps", "10")
        assert result.returncode == 1 and "-DRLINKS_WITH_OPENSSL=ON" in result.stderr, result.stderr


# ----------------------------------------------------------------------
# Against scripted peers: drops, resends, errors, plain RLlib


def test_a_dropped_connection_resends_the_unacknowledged_batch(cpp):
    def drop_before_acking_seq_2(server, conn, message):
        if message.get("seq") == 2 and conn.index == 0:
            return CLOSE  # no ACK: the client must send seq 2 again
        return None

    with ScriptedRunner(on_message=drop_before_acking_seq_2) as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", str(4 * UPDATE_STEPS), "--reliable")
    assert result.returncode == 0, result.stderr
    assert server.errors == []
    assert [(b.conn, b.seq, b.duplicate) for b in server.batches][:3] == [(0, 1, False), (0, 2, False), (1, 2, True)]
    assert len(set(server.client_ids)) == 1 and len(server.client_ids[0]) == 32
    summary = summary_of(result.stdout)
    assert summary["reconnects"] == 1 and summary["batches_resent"] == 1


def test_an_acknowledged_on_policy_batch_is_never_sent_again(cpp):
    def ack_seq_2_then_drop(server, conn, message):
        if message.get("seq") == 2 and conn.index == 0:
            conn.send({"type": "ACK", "seq": 2})
            return CLOSE  # RLlib has the batch, but the weights never came
        return None

    with ScriptedRunner(on_message=ack_seq_2_then_drop) as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", str(3 * UPDATE_STEPS), "--reliable")
    assert result.returncode == 0, result.stderr
    batches = server.batch_messages()
    assert [(conn, m.get("seq")) for conn, m in batches][:3] == [(0, 1), (0, 2), (1, None)]
    # Section 10.2: after the reconnect, an empty batch without seq asks for the weights it is owed.
    assert batches[2][1]["episodes"] == [] and batches[2][1]["type"] == "EPISODES_AND_GET_STATE"
    assert [m.get("seq") for _, m in batches[3:]] == [3]


def test_a_server_error_is_reported_with_its_code(cpp):
    def refuse_the_batch(server, conn, message):
        if message["type"] == "EPISODES_AND_GET_STATE":
            conn.send({"type": "ERROR", "code": "bad_episode", "message": "rewards: NaN"})
            return CLOSE
        return None

    with ScriptedRunner(on_message=refuse_the_batch) as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", "100")
    assert result.returncode == 1
    assert "bad_episode: rewards: NaN" in result.stderr


def test_the_learner_shutting_down_ends_the_run(cpp):
    def stop(server, conn, message):
        if message.get("seq") == 2:
            conn.send({"type": "ERROR", "code": "shutting_down", "message": "the learner is stopping"})
            return CLOSE
        return None

    with ScriptedRunner(on_message=stop) as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", "1000")
    assert result.returncode == 0, result.stderr
    assert "the learner stopped" in result.stderr and summary_of(result.stdout)["steps"] == 2 * UPDATE_STEPS


def test_a_reply_out_of_turn_is_unexpected_message(cpp):
    def pong_instead_of_weights(server, conn, message):
        if message["type"] == "GET_STATE":
            conn.send({"type": "PONG"})
            return HANDLED
        return None

    with ScriptedRunner(on_message=pong_instead_of_weights) as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", "100")
    assert result.returncode == 1 and "unexpected_message" in result.stderr, result.stderr


def test_plain_rllib_server_with_a_pickled_config(cpp):
    with ScriptedRunner(plain=True, config=b"\x80\x04 an AlgorithmConfig pickle") as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", "120", "--fragment-steps", "40")
    assert result.returncode == 0, result.stderr
    batches = server.batch_messages()
    assert len(batches) == 3 and all("seq" not in m for _, m in batches)
    assert [m["timesteps"] for _, m in batches] == [40, 40, 40]
    for _, message in batches:
        for state in message["episodes"]:
            check_chunk(state)
    assert "plain RLlink" in result.stderr


def test_served_actions_are_not_built_yet(cpp):
    result = cartpole(cpp, "--served-actions", "--address", "127.0.0.1:9")
    assert result.returncode == 2 and "not built yet" in result.stderr


# ----------------------------------------------------------------------
# Training with a real learner


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cpp_clients_train_ppo_cartpole_to_450(cpp, tmp_path):
    """`rlinks learner` with 2 runners; 4 C++ clients given the directory's one address."""
    output = tmp_path / "run"
    started = time.monotonic()
    learner = subprocess.Popen(
        [sys.executable, "-m", "rlinks_rllib", "learner", "--config", "configs/ppo_cartpole.yaml", "--port", "0",
         "--output", str(output), "--stop-reward", "450"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    clients: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + 180
        while not (output / "directory.json").exists():
            assert learner.poll() is None, learner.stdout.read()
            assert time.monotonic() < deadline, "the learner never listened"
            time.sleep(0.5)
        directory = json.loads((output / "directory.json").read_text())
        address = f"{directory['host']}:{directory['port']}"
        clients = [
            subprocess.Popen([str(cpp / "cartpole"), "--address", address, "--max-steps", "10000000", "--seed", str(i)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(4)
        ]
        out, _ = learner.communicate(timeout=780)
        client_outputs = [client.communicate(timeout=60)[0] for client in clients]
    finally:
        for proc in (learner, *clients):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    elapsed = time.monotonic() - started
    assert learner.returncode == 0, out
    assert "done: mean return" in out
    reached = float(re.search(r"done: mean return ([\d.]+)", out).group(1))
    assert reached >= 450
    for text in client_outputs:
        assert "the learner stopped" in text, text
        assert summary_of(text)["steps"] > 0
    print(f"C++ clients trained PPO CartPole to {reached:.1f} in {elapsed:.0f} s "
          f"({sum(summary_of(t)['steps'] for t in client_outputs):.0f} env steps)")
