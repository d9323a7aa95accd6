"""The C++ client in ``clients/cpp``: the second implementation of ``docs/PROTOCOL.md``.

Built with CMake (into ``build/cpp-pytest``, kept between runs), then held to
the shared vectors, run against rlinks' own runner server (without Ray) and
against scripted peers that drop connections at awkward moments, and finally
trained to a mean return of 450 with a real ``rlinks learner``.

Served actions (PROTOCOL.md 10.5) run against :class:`ServedPeer`, a runner
scripted on rlinks' own ``Connection`` that answers each ``ACT`` with a fixed
rule, and (once rlinks' runner serves actions) train with a real learner.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from client_peers import (PARAMS, SECRET, UPDATE_STEPS, FakeLearner, ScriptedRunner, ServedPeer, cartpole_step,
                          check_chunk, check_the_paced_window, directory_of, lean_rule, rows_of, summary_of,
                          weights_before_ack)
from peers import CLOSE, HANDLED
from rlinks_rllib.protocol.config import build_config
from rlinks_rllib.protocol.weights import build_state
from rlinks_rllib.server.network.directory import Endpoint

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "clients" / "cpp"
VECTORS = ROOT / "tests" / "vectors"


# ----------------------------------------------------------------------
# Building


def _compiler() -> Optional[str]:
    return os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)


def _build(name: str, *options: str, targets: tuple[str, ...] = ()) -> Path:
    """Configure and build clients/cpp in build/<name>; only ``targets`` if given (default: all)."""
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
    only = ["--target", *targets] if targets else []
    built = subprocess.run(["cmake", "--build", str(build), "-j2", *only], capture_output=True, text=True, timeout=1200)
    if built.returncode != 0:
        pytest.fail(f"clients/cpp does not build:\n{built.stdout[-6000:]}\n{built.stderr[-6000:]}")
    return build


@pytest.fixture(scope="session")
def cpp() -> Path:
    """The build directory of the default build (no OpenSSL)."""
    return _build("cpp-pytest")


@pytest.fixture(scope="session")
def cpp_openssl() -> Path:
    """A build with -DRLINKS_WITH_OPENSSL=ON (auth and TLS): the library and the CartPole client its tests run."""
    return _build("cpp-pytest-openssl", "-DRLINKS_WITH_OPENSSL=ON", targets=("cartpole",))


def cartpole(build: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(build / "cartpole"), *args], capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------
# Servers to talk to


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


def test_the_local_policy_computes_what_the_python_client_computes(cpp):
    """``tests/vectors/policy``: the MLP's outputs, log-probabilities of given actions, the action the env applies."""
    cases = 0
    for path in (VECTORS / "policy").glob("*.json"):
        spec = json.loads(path.read_text())
        cases += len(spec["cases"]) + len(spec.get("refused", []))
    result = subprocess.run([str(cpp / "policy_vectors_test"), str(VECTORS / "policy")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"{cases} passed, 0 failed"


def test_the_policy_vectors_are_current(tmp_path):
    """Made again, they say the same (to float32 rounding: numpy's matrix products may sum in another order)."""
    generator = VECTORS / "policy" / "make_policy_vectors.py"
    subprocess.run([sys.executable, str(generator), str(tmp_path)], check=True, capture_output=True, timeout=120)
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    assert names == sorted(p.name for p in (VECTORS / "policy").glob("*.json"))

    def same(made, kept, where):
        if isinstance(made, float) and isinstance(kept, float):
            assert made == pytest.approx(kept, rel=1e-5, abs=1e-6), f"{where}: {made} != {kept}"
        elif isinstance(made, (list, dict)):
            assert type(made) is type(kept) and len(made) == len(kept), f"{where}: differs in shape"
            pairs = zip(made, kept) if isinstance(made, list) else ((made[k], kept.get(k)) for k in made)
            for i, (a, b) in enumerate(pairs):
                same(a, b, f"{where}[{i}]")
        else:
            assert made == kept, f"{where}: {made!r} != {kept!r}"

    for name in names:
        same(json.loads((tmp_path / name).read_text()), json.loads((VECTORS / "policy" / name).read_text()),
             f"{name} (stale? run {generator})")


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


def test_n_envs_with_local_inference_share_one_connection(cpp):
    """Four CartPoles in one client, the policy run here: one batch per share of all of them."""
    with FakeLearner() as learner:
        result = cartpole(cpp, "--address", f"127.0.0.1:{learner.port}", "--envs", "4", "--max-steps", "800")
    assert result.returncode == 0, result.stderr
    assert "4 env(s), on-policy batches" in result.stderr
    summary = summary_of(result.stdout)
    assert summary["steps"] == 800 and summary["steps_acked"] == summary["steps_sent"] >= 700
    assert summary["weights_seq_no"] == learner.updates > 10
    # Each env plays its own episodes: the first batch already holds four, each from its first step.
    # (How many episodes 800 steps make depends on the unseeded sampling: 20 in one CI run.)
    first = learner.batches[0]
    assert len({chunk["id_"] for chunk in first if chunk["t_started"] == 0}) >= 4
    assert len({chunk["id_"] for chunk in learner.chunks}) > 4


def test_follows_the_directory_to_a_runner(cpp):
    with FakeLearner() as learner, directory_of(learner) as directory:
        result = cartpole(cpp, "--address", f"{directory.address[0]}:{directory.address[1]}", "--max-steps", "200")
    assert result.returncode == 0, result.stderr
    assert f"connected to 127.0.0.1:{learner.port}" in result.stderr
    assert summary_of(result.stdout)["steps"] == 200 and learner.server.stats.steps_in == 3 * UPDATE_STEPS


def test_tries_the_runner_it_just_lost_last(cpp):
    """A runner cut off from the network is still listed until the learner notices; it must not cost a timeout.

    Runner ``lost``, listed first, never trains: the client's first batch
    waits there for its weights. The client is paused while ``lost`` goes
    away and a black hole (a host that takes connections and never answers)
    takes its port, so it learns of the loss only then, with the directory
    still listing ``lost`` first. It must resend the batch to ``other`` and
    finish there without knocking on the black hole.
    """
    lost = FakeLearner()
    lost.server.start()  # its server only: nobody trains, so no weights ever come back
    client = None
    try:
        with FakeLearner() as other, directory_of(lost) as directory:
            directory.update([Endpoint(1, "127.0.0.1", lost.port, clients=0),
                              Endpoint(2, "127.0.0.1", other.port, clients=5)])
            client = subprocess.Popen(
                [str(cpp / "cartpole"), "--address", f"127.0.0.1:{directory.address[1]}", "--reliable",
                 "--timeout", "10", "--max-steps", str(3 * UPDATE_STEPS), "--seed", "4"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            deadline = time.monotonic() + 30
            while not lost.chunks:
                assert client.poll() is None, client.communicate()[1]
                assert time.monotonic() < deadline, "the client's first batch never reached the runner listed first"
                time.sleep(0.01)
            client.send_signal(signal.SIGSTOP)
            lost.server.stop()
            with socket.socket() as black_hole:
                black_hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                black_hole.bind(("127.0.0.1", lost.port))
                black_hole.listen(8)
                black_hole.setblocking(False)
                client.send_signal(signal.SIGCONT)
                out, err = client.communicate(timeout=60)
                try:
                    knocked = black_hole.accept()
                except BlockingIOError:
                    knocked = None
        assert knocked is None, f"the client knocked on the runner it just lost:\n{err}"
        assert client.returncode == 0, err
        assert f"connected to 127.0.0.1:{lost.port}" in err and f"connection to 127.0.0.1:{lost.port} lost" in err, err
        summary = summary_of(out)
        assert summary["steps"] == 3 * UPDATE_STEPS and summary["reconnects"] == 1 and summary["batches_resent"] == 1
        # The batch ``lost`` never trained on went to ``other``, and all that followed.
        assert lost.server.stats.steps_in == UPDATE_STEPS and other.server.stats.steps_in == 3 * UPDATE_STEPS
    finally:
        if client is not None and client.poll() is None:
            client.kill()  # also ends a stopped process
            client.communicate(timeout=10)
        lost.server.stop()


@pytest.fixture
def tls_and_auth(certs, secret_file) -> dict[str, str]:
    """Runner settings with TLS and the shared secret (SECURITY.md)."""
    return dict(tls_cert_file=certs["server"], tls_key_file=certs["server_key"], auth_secret_file=secret_file)


@pytest.fixture
def wrong_secret_file(tmp_path) -> str:
    path = tmp_path / "wrong"
    path.write_text("another secret of enough length")
    return str(path)


def test_auth_and_tls(cpp_openssl, certs, secret_file, wrong_secret_file, tls_and_auth):
    with FakeLearner(**tls_and_auth) as learner:
        address = f"tls://localhost:{learner.port}"
        good = cartpole(cpp_openssl, "--address", address, "--ca-file", certs["ca"], "--secret-file", secret_file,
                        "--max-steps", "200")
        assert good.returncode == 0, good.stderr
        assert summary_of(good.stdout)["steps"] == 200 and learner.server.stats.steps_in == 3 * UPDATE_STEPS

        refused = cartpole(cpp_openssl, "--address", address, "--ca-file", certs["ca"],
                           "--secret-file", wrong_secret_file, "--max-steps", "10", "--retry-attempts", "1")
        assert refused.returncode == 1 and "auth_failed" in refused.stderr, refused.stderr

        untrusted = cartpole(cpp_openssl, "--address", address, "--ca-file", certs["other_ca"],
                             "--secret-file", secret_file, "--max-steps", "10")
        assert untrusted.returncode == 1 and "not trusted" in untrusted.stderr, untrusted.stderr
    # A client with a secret won't talk to a server that can't prove it knows it.
    with FakeLearner() as learner:
        unproven = cartpole(cpp_openssl, "--address", f"127.0.0.1:{learner.port}", "--secret-file", secret_file,
                            "--max-steps", "10")
    assert unproven.returncode == 1 and "did not agree to authenticate" in unproven.stderr, unproven.stderr


def test_follows_an_authenticated_tls_directory(cpp_openssl, certs, secret_file, tls_and_auth):
    """SECURITY.md's one secret and one CA: given the ``tls://`` directory, the CA and the secret only, the
    client proves itself to the directory (PROTOCOL.md 10.4), then to the runner it is sent to, and trains."""
    with FakeLearner(**tls_and_auth) as learner, directory_of(learner, **tls_and_auth) as directory:
        result = cartpole(cpp_openssl, "--address", f"tls://localhost:{directory.address[1]}", "--ca-file", certs["ca"],
                          "--secret-file", secret_file, "--max-steps", "200")
    assert result.returncode == 0, result.stderr
    assert f"connected to tls://127.0.0.1:{learner.port}" in result.stderr
    assert summary_of(result.stdout)["steps"] == 200 and learner.server.stats.steps_in == 3 * UPDATE_STEPS


@pytest.mark.parametrize("another_secret, error", [
    (True, "refused us: auth_failed: the client did not prove it knows the shared secret"),
    (False, "protocol error (auth_failed): tls://localhost:{port} did not agree to authenticate"),
], ids=["another_secret", "no_secret"])
def test_a_directory_without_the_secret_is_refused(cpp_openssl, certs, secret_file, wrong_secret_file, tls_and_auth,
                                                   another_secret, error):
    """The runner has the client's secret, the directory in front of it another one or none: no retry."""
    settings = dict(tls_and_auth, **({"auth_secret_file": wrong_secret_file} if another_secret else {"auth": "off"}))
    with FakeLearner(**tls_and_auth) as learner, directory_of(learner, **settings) as directory:
        result = cartpole(cpp_openssl, "--address", f"tls://localhost:{directory.address[1]}", "--ca-file", certs["ca"],
                          "--secret-file", secret_file, "--max-steps", "10")
    assert result.returncode == 1 and error.format(port=directory.address[1]) in result.stderr, result.stderr
    assert learner.server.stats.connections_total == 0  # it learned nothing from the directory


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


def test_a_resent_on_policy_batch_whose_weights_came_before_has_its_answer_dropped(cpp):
    # Seq 1 is answered but not yet confirmed when the connection drops under
    # seq 2: both are sent again, and the runner answers each with SET_STATE.
    # Seq 1's second answer is not for the call waiting on seq 2; taken for it,
    # every later call would get the answer meant for the one before.
    def weights_for_seq_1_then_drop(server, conn, message):
        if conn.index == 0 and message.get("seq") == 1:
            server.weights_seq_no += 1
            conn.send(server.set_state(frozenset({"want_steps"})))
            return HANDLED  # no ACK: still pending
        if conn.index == 0 and message.get("seq") == 2:
            return CLOSE
        return None

    with ScriptedRunner(on_message=weights_for_seq_1_then_drop) as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", str(4 * UPDATE_STEPS), "--reliable")
    assert result.returncode == 0, result.stderr
    assert [(b.conn, b.seq) for b in server.batches] == [(0, 1), (0, 2), (1, 1), (1, 2), (1, 3), (1, 4)]
    # The client ends on the weights the runner sent last, not the ones before.
    summary = summary_of(result.stdout)
    assert summary["weights_seq_no"] == server.weights_seq_no
    assert summary["steps_acked"] == summary["steps_sent"] == 4 * UPDATE_STEPS




def test_the_run_ends_after_the_last_batch_is_acknowledged(cpp):
    with ScriptedRunner(on_message=weights_before_ack) as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", str(2 * UPDATE_STEPS))
    assert result.returncode == 0, result.stderr
    assert "not acknowledged" not in result.stderr
    summary = summary_of(result.stdout)
    assert summary["steps_acked"] == summary["steps_sent"] == 2 * UPDATE_STEPS


def test_off_policy_batches_go_without_waiting_for_weights(cpp):
    with ScriptedRunner() as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", "1000", "--off-policy", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert "off-policy batches" in result.stderr and "EPISODES_AND_GET_STATE" not in server.types()
    # A fragment (rollout_fragment_length 64) at a time from the sender thread; the rest when closing.
    assert [m["timesteps"] for _, m in server.batch_messages()] == [64] * 15 + [40]
    summary = summary_of(result.stdout)
    assert summary["steps_acked"] == summary["steps_sent"] == 1000


def test_a_paced_runners_window_keeps_one_batch_sent_and_unconfirmed(cpp):
    """A paced runner names ``paced_in_flight`` 1: the client's off-policy batches wait for the last one's ACK
    (without it, max_unacked and its send queue let it run ahead)."""
    check_the_paced_window(lambda address, steps: cartpole(cpp, "--address", address, "--max-steps", str(steps),
                                                           "--seed", "1"))


def scenario(cpp, address: str, name: str) -> subprocess.CompletedProcess:
    """``tests/env_client_scenarios.cpp``: a short EnvClient script (two envs) against ``address``."""
    return subprocess.run([str(cpp / "env_client_scenarios"), address, name], capture_output=True, text=True,
                          timeout=60)


def test_calls_out_of_order_are_refused_saying_what_to_do(cpp):
    with ScriptedRunner() as server:
        result = scenario(cpp, server.address, "misuse")
    assert result.returncode == 0 and result.stdout.endswith("done\n"), result.stdout + result.stderr
    errors = [line[len("error: "):] for line in result.stdout.splitlines() if line.startswith("error: ")]
    assert errors == [
        "act(obs) is for one env; with num_envs=2, call act(env, obs) or act(envs, rows)",
        "env 0 acted and its outcome was not reported: call report() before act() again",
        "env 1 has no action to report on: call act() first",
        "report(): the reward of env 0 is nan, not a finite float32",
        "report(): 3 floats for 1 env(s), but the runner's observations have 4 each (4 in all)",
        "env 0: act() must take the observation last given to report() (to start a new episode elsewhere, "
        "call start_episode() first)",
        "act(): env 5 is not one of 0..1 (EnvClientOptions::num_envs)",
        "act(): env 1 is named twice",
        "act(): 4 floats for 2 env(s), but the runner's observations have 4 each (8 in all)",
    ]
    assert server.batch_messages() == []  # a refused call changed nothing: no share was completed


def test_episodes_started_and_ended_explicitly(cpp):
    with ScriptedRunner() as server:
        result = scenario(cpp, server.address, "episodes")
    assert result.returncode == 0 and "episodes=2 mean_return=1" in result.stdout, result.stdout + result.stderr
    [(_, message)] = server.batch_messages()
    chunks = [check_chunk(state) for state in message["episodes"]]
    # Env 0's cut episode (truncated after its one step), its next one (running: cut), env 1's (terminated).
    assert [(c["is_terminated"], c["is_truncated"], c["t"] - c["t_started"]) for c in chunks] == [
        (False, True, 1), (False, False, UPDATE_STEPS - 3), (True, False, 2)]
    a, b, c = [0.01, 0.02, 0.03, 0.04], [0.1, 0.2, 0.3, 0.4], [-0.1, 0.0, 0.1, 0.0]
    np.testing.assert_allclose(chunks[0]["observations"]["data"], [a, b])
    np.testing.assert_allclose(chunks[2]["observations"]["data"], [a, b, c])
    assert chunks[2]["rewards"]["data"].tolist() == [0.5, 0.5]
    assert len({chunk["id_"] for chunk in chunks}) == 3


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


def test_a_reliable_client_ends_quietly_when_the_learner_stopped_for_good(cpp):
    """shutting_down, then every reconnection refused the same way: the learner's end, not a failure to connect."""
    def stopped_for_good(server, conn, message):
        if conn.index > 0 or message.get("seq") == 2:
            conn.send({"type": "ERROR", "code": "shutting_down", "message": "the learner is stopping"})
            return CLOSE
        return None

    with ScriptedRunner(on_message=stopped_for_good) as server:
        result = cartpole(cpp, "--address", server.address, "--max-steps", "1000", "--reliable",
                          "--retry-attempts", "2")
    assert result.returncode == 0, result.stderr
    assert "the learner stopped" in result.stderr and server.connections == 3  # the first, then 2 attempts
    assert summary_of(result.stdout)["steps"] == 2 * UPDATE_STEPS


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


# ----------------------------------------------------------------------
# Served actions (PROTOCOL.md 10.5), against a scripted runner


def test_served_actions_rows_are_those_of_section_10_5(cpp):
    envs, ticks = 4, 1000
    with ServedPeer(hold_s=0.05, hold_acts=5) as peer:
        result = cartpole(cpp, "--served-actions", "--envs", str(envs), "--address", peer.address,
                          "--max-steps", str(envs * ticks), "--seed", "5")
    assert result.returncode == 0, result.stderr
    assert peer.errors == [] and peer.violations == []  # one ACT outstanding, and every ACT well-formed
    assert peer.connections == 1 and "served_actions" in peer.agreed[0]
    summary = summary_of(result.stdout)
    assert summary["steps"] == envs * ticks and summary["weights_seq_no"] == 7
    # One ACT per tick, and a last one that reports the last actions' results.
    assert len(peer.acts) == ticks + 1
    assert all(np.asarray(rows.obs).dtype == np.float32 and np.asarray(rows.obs).shape == (len(rows), 4)
               for _, rows in peer.acts)
    first = peer.acts[0][1]
    assert first.env == list(range(envs)) and first.start.all() and not first.reward.any()

    rows = rows_of(peer.acts)
    last_act = len(peer.acts) - 1
    open_at: dict[int, np.ndarray] = {}  # env -> its observation when it last got an action
    action_of: dict[int, int] = {}
    length: dict[int, int] = {}
    returns: list[float] = []
    for index, (act, env, row) in enumerate(rows):
        if row["start"]:
            assert env not in open_at, f"env {env} started again with its episode open"
            assert np.all(np.abs(row["obs"]) <= 0.05)  # CartPole's reset
            length[env] = 0
        else:
            # Reports what the env's last action led to: reward 1, and CartPole's step from there.
            assert env in open_at, f"env {env}: a row outside an episode"
            assert row["reward"] == 1.0
            np.testing.assert_allclose(row["obs"], cartpole_step(open_at[env], action_of[env]), atol=1e-5)
            length[env] += 1
            del open_at[env]
        if row["terminated"] or row["truncated"]:
            # No action is wanted; a start row for the same env follows in the same ACT (but in the last).
            if act < last_act:
                assert rows[index + 1][:2] == (act, env) and rows[index + 1][2]["start"]
            if row["terminated"] or length[env] == 500:
                returns.append(float(length[env]))
            continue
        open_at[env] = row["obs"]
        action_of[env] = lean_rule(row["obs"])
    # The last ACT ends every open episode (truncated: the run stopped); nothing more is wanted.
    assert open_at == {} and not peer.acts[-1][1].wants_action.any()
    assert sum(not r["start"] for _, _, r in rows) == envs * ticks
    assert summary["episodes"] == len(returns) > 10
    assert summary["mean_return_last_20"] == pytest.approx(np.mean(returns[-20:]), abs=0.05)
    assert summary["mean_return_last_20"] > 100  # the rule's ~200; random actions: ~22


@pytest.mark.parametrize("answer, message", [
    (lambda act, envs, actions: (envs[::-1], actions), "for envs [3, 2, 1, 0], but actions were asked for [0, 1, 2, 3]"),
    (lambda act, envs, actions: (envs, actions[:-1]), "3 actions for 4 envs"),
], ids=["wrong_envs", "too_few_actions"])
def test_served_actions_for_other_envs_are_a_clear_error(cpp, answer, message):
    def on_third(act, envs, actions):
        return answer(act, envs, actions) if act == 2 else (envs, actions)

    with ServedPeer(answer=on_third) as peer:
        result = cartpole(cpp, "--served-actions", "--envs", "4", "--address", peer.address, "--max-steps", "100")
    assert result.returncode == 1
    assert "protocol error (invalid_message)" in result.stderr and f"ACTIONS: {message}" in result.stderr, result.stderr
    assert len(peer.acts) == 3 and peer.violations == [] and peer.errors == []


def test_served_actions_start_every_episode_again_after_a_reconnect(cpp):
    def drop_at_the_first_episode_end(conn, act, rows):
        return conn == 0 and bool((rows.terminated | rows.truncated).any())

    with ServedPeer(drop=drop_at_the_first_episode_end) as peer:
        result = cartpole(cpp, "--served-actions", "--envs", "3", "--address", peer.address, "--max-steps", "1500",
                          "--reliable", "--seed", "2")
    assert result.returncode == 0, result.stderr
    assert peer.errors == [] and peer.violations == [] and peer.connections == 2
    assert summary_of(result.stdout)["reconnects"] == 1
    assert "3 episode(s) interrupted" in result.stderr, result.stderr
    # The unanswered ACT held an ending row, a start row and two rows that went on.
    dropped = peer.acts[[conn for conn, _ in peer.acts].index(1) - 1][1]
    assert dropped.start.sum() == 1 and (dropped.terminated | dropped.truncated).sum() == 1
    # The runner closed all three episodes: on the new connection each env starts again, in the same order,
    # the one that had ended only with its start row.
    resent = next(rows for conn, rows in peer.acts if conn == 1)
    assert resent.env == [e for e, s in zip(dropped.env, dropped.start | dropped.wants_action) if s]
    assert resent.start.all() and not (resent.terminated | resent.truncated).any()
    np.testing.assert_array_equal(np.asarray(resent.obs), np.asarray(dropped.obs)[dropped.wants_action])


def test_a_module_this_client_cannot_run_is_served_by_the_runner(cpp, monkeypatch):
    """Inference::automatic: weights that are not RLlib's default MLP make the runner compute the actions."""
    monkeypatch.setitem(PARAMS, "encoder.lstm.weight_ih_l0", np.ones((8, 4), np.float32))
    with ServedPeer() as peer:
        result = cartpole(cpp, "--address", peer.address, "--max-steps", "300")
    assert result.returncode == 0, result.stderr
    assert "unexpected parameter 'encoder.lstm.weight_ih_l0'" in result.stderr
    assert "the runner computes the actions" in result.stderr and "actions served by the learner" in result.stderr
    assert summary_of(result.stdout)["steps"] == 300 and len(peer.acts) == 301


def test_served_actions_need_a_runner_that_serves_them(cpp):
    with ScriptedRunner() as server:  # rlinks' extensions, but not served_actions
        result = cartpole(cpp, "--served-actions", "--address", server.address, "--max-steps", "100")
    assert result.returncode == 3, result.stderr
    assert "does not serve actions" in result.stderr and "served_actions" in result.stderr
    assert server.types() == ["PING"]  # nothing asked of a runner that did not agree


# ----------------------------------------------------------------------
# Actions the simulator takes itself (log_action, take_over) and episodes not trained on


def scenario_of(cpp, address: str, name: str, *mode: str) -> tuple[list[str], list[str]]:
    """Run scenario ``name``; its refused calls' messages and its other lines."""
    result = subprocess.run([str(cpp / "env_client_scenarios"), address, name, *mode], capture_output=True,
                            text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert result.returncode in (0, 3), result.stdout + result.stderr
    return [line[len("error: "):] for line in lines if line.startswith("error: ")], lines


#: What the "taken" scenario's refused calls say, local or served.
TAKEN_REFUSALS = ["action 2 is not one of Discrete(2) (0..1)", "a Box action for Discrete(2)",
                  "log_action(): 0 action(s) for 1 env(s)"]


def test_log_action_take_over_and_an_untrained_episode_local(cpp):
    """The simulator's own actions go with the policy's log-probability of them (as NumpyPolicy computes it),
    the take-over is marked, and the episode not trained on is never sent."""
    from rlinks_rllib.client import NumpyPolicy

    with ScriptedRunner(extensions=("want_steps", "ack", "takeover")) as server:
        refusals, lines = scenario_of(cpp, server.address, "taken")
    assert refusals == TAKEN_REFUSALS and lines[-1] == "done", lines
    assert "episodes=2 takeover_steps=1 takeover_rate=0.2" in lines  # env 1's 0 of 2, env 0's 1 of 3
    [(_, message)] = server.batch_messages()
    first, second = (check_chunk(state) for state in message["episodes"])  # env 1's steps are not there
    assert message["timesteps"] == UPDATE_STEPS and first["is_terminated"] and second["t_started"] == 0
    assert first["actions"]["data"][:2].tolist() == [1, 0]
    extra = first["extra_model_outputs"]
    assert extra["rlinks_takeover"]["data"].tolist() == [False, True, False]
    assert "rlinks_takeover" not in second["extra_model_outputs"]  # a chunk without take-overs has no marker
    policy = NumpyPolicy(PARAMS, {"kind": "discrete", "n": 2})
    obs = first["observations"]["data"][:2]
    expected = policy.outputs_for(obs, np.array([1, 0]))
    np.testing.assert_allclose(extra["action_dist_inputs"]["data"][:2], expected.action_dist_inputs, rtol=1e-5)
    np.testing.assert_allclose(extra["action_logp"]["data"][:2], expected.action_logp, rtol=1e-5, atol=1e-6)


def test_take_over_needs_a_runner_that_keeps_it_out_of_on_policy_updates(cpp):
    with ScriptedRunner() as server:  # want_steps and ack only
        _, lines = scenario_of(cpp, server.address, "taken")
    assert lines[-1].startswith("not agreed: ") and "did not agree to takeover (agent 'rlinks-test-peer/0')" in \
        lines[-1] and "use log_action to record them as the policy's own" in lines[-1], lines
    assert server.batch_messages() == []


def test_served_log_action_take_over_and_untrained_episodes_go_as_their_columns(cpp):
    with ServedPeer(extensions=("served_actions", "served_taken", "takeover", "want_steps", "ack")) as peer:
        refusals, lines = scenario_of(cpp, peer.address, "taken", "served")
    assert refusals == TAKEN_REFUSALS and lines[-1] == "done", lines
    assert "episodes=2 takeover_steps=1 takeover_rate=0.2" in lines
    assert peer.errors == [] and peer.violations == []
    acts = [rows for _, rows in peer.acts]
    # Env 1's episode: every row says it is not trained on.
    assert acts[0].env == [1] and acts[0].start.tolist() == [True] and acts[0].train.tolist() == [False]
    assert acts[1].env == [1] and acts[1].train.tolist() == [False] and acts[1].taken_mask is None
    # Env 1's ending row, then env 0's start row with the simulator's own action.
    assert acts[2].env == [1, 0] and acts[2].terminated.tolist() == [True, False] and acts[2].start.tolist() == [
        False, True]
    assert acts[2].taken_mask.tolist() == [False, True] and np.asarray(acts[2].taken).tolist() == [0, 1]
    assert acts[2].train.tolist() == [False, True] and acts[2].takeover is None
    # The take-over: its own action, marked.
    assert acts[3].env == [0] and acts[3].taken_mask.tolist() == [True] and np.asarray(acts[3].taken).tolist() == [0]
    assert acts[3].takeover.tolist() == [True] and acts[3].reward.tolist() == [0.5]
    # The policy's action again: no taken columns.
    assert acts[4].env == [0] and acts[4].taken_mask is None and acts[4].takeover is None


def test_served_log_action_needs_a_runner_that_records_the_simulators_actions(cpp):
    """Training off, log_action and take_over, each refused before anything is sent; the loop goes on."""
    with ServedPeer() as peer:  # served_actions without served_taken or takeover
        _, lines = scenario_of(cpp, peer.address, "served_only", "served")
    assert lines[-1] == "done", lines
    refusals = [line for line in lines if line.startswith("not agreed: ")]
    assert len(refusals) == 3 and "did not agree to takeover" in refusals[2], lines
    assert all("did not agree to served_taken" in line and "run the policy locally to log your own actions" in line
               for line in refusals[:2])
    assert peer.violations == [] and len(peer.acts) == 2  # the policy's actions, then close's ending rows
    rows = peer.acts[0][1]
    assert rows.env == [0, 1] and rows.start.all() and rows.taken_mask is None and rows.train is None


def test_the_cartpole_teachers_steps_go_as_take_overs(cpp):
    """examples/cartpole.cpp --teacher: where the pole is about to fall the teacher's push is sent with
    take_over (marked, its logp the policy's), elsewhere the policy's action."""
    from rlinks_rllib.client import NumpyPolicy

    with ScriptedRunner(extensions=("want_steps", "ack", "takeover")) as server:
        result = cartpole(cpp, "--address", server.address, "--teacher", "--envs", "2", "--seed", "4",
                          "--max-steps", str(2 * UPDATE_STEPS))
    assert result.returncode == 0, result.stderr
    chunks = [check_chunk(state) for _, m in server.batch_messages() for state in m["episodes"]]
    assert sum(c["t"] - c["t_started"] for c in chunks) == 2 * UPDATE_STEPS
    policy = NumpyPolicy(PARAMS, {"kind": "discrete", "n": 2})
    taught = 0
    for chunk in chunks:
        obs, actions = chunk["observations"]["data"][:-1], chunk["actions"]["data"]
        lean = obs[:, 2] + 0.1 * obs[:, 3]
        teacher = np.abs(lean) > 0.1
        extra = chunk["extra_model_outputs"]
        marker = extra["rlinks_takeover"]["data"] if "rlinks_takeover" in extra else np.zeros(len(obs), bool)
        assert marker.tolist() == teacher.tolist()
        assert actions[teacher].tolist() == (lean[teacher] > 0).astype(int).tolist()
        np.testing.assert_allclose(extra["action_logp"]["data"],
                                   policy.outputs_for(obs, actions).action_logp, rtol=1e-5, atol=1e-6)
        taught += int(teacher.sum())
    assert taught > 0


#: A Box(-2, 2, (1,)) runner with 3-number observations: RLlib's default PPO module, a 3 -> 8 tanh encoder,
#: an 8 -> 2 pi head (mean and log-std).
_box_rng = np.random.default_rng(1)
BOX_PARAMS = {
    "encoder.actor_encoder.net.mlp.0.weight": _box_rng.standard_normal((8, 3)).astype(np.float32),
    "encoder.actor_encoder.net.mlp.0.bias": np.zeros(8, np.float32),
    "pi.net.mlp.0.weight": (0.3 * _box_rng.standard_normal((2, 8))).astype(np.float32),
    "pi.net.mlp.0.bias": np.array([0.0, -0.5], np.float32),
    "pi.log_std_clip_param_const": np.array([20.0], np.float32),
}
BOX_SPACE = {"kind": "box", "shape": [1], "dtype": "<f4", "low": np.full(1, -2.0, np.float32),
             "high": np.full(1, 2.0, np.float32)}
BOX_CONFIG = build_config(
    algorithm="PPO",
    observation_space={"kind": "box", "shape": [3], "dtype": "<f4",
                       "low": np.full(3, -np.inf, np.float32), "high": np.full(3, np.inf, np.float32)},
    action_space=BOX_SPACE, rollout_fragment_length=UPDATE_STEPS, on_policy=True,
    model_config={"fcnet_hiddens": [8], "fcnet_activation": "tanh"},
)


class BoxRunner(ScriptedRunner):
    def set_state(self, agreed: frozenset[str]) -> dict:
        return {"type": "SET_STATE", "state": build_state(BOX_PARAMS, self.weights_seq_no),
                "want_steps": self.want_steps}


def test_box_actions_local_and_logged_are_those_numpy_policy_computes(cpp):
    """Box actions with local inference, held to the Python client's NumpyPolicy: the module's outputs, the
    log-probability of the sampled actions, and logged actions (one past the bound) squashed back into [-1, 1]."""
    from rlinks_rllib.client import NumpyPolicy
    from rlinks_rllib.client.policies.sampling import action_from_env

    with BoxRunner(config=BOX_CONFIG) as server:
        _, lines = scenario_of(cpp, server.address, "taken_box")
    assert lines[-1] == "done", lines
    [(_, message)] = server.batch_messages()
    [chunk] = message["episodes"]
    obs = chunk["observations"]["data"]
    actions, extra = chunk["actions"]["data"], chunk["extra_model_outputs"]
    assert actions.dtype == np.float32 and actions.shape == (UPDATE_STEPS, 1)
    policy = NumpyPolicy(BOX_PARAMS, BOX_SPACE)
    inputs = extra["action_dist_inputs"]["data"]
    np.testing.assert_allclose(inputs, policy.action_dist_inputs(obs[:-1]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(extra["action_logp"]["data"], policy.log_prob_of(inputs, actions), rtol=1e-5,
                               atol=1e-5)
    logged = np.arange(UPDATE_STEPS) % 3 != 2
    taken = np.where(np.arange(UPDATE_STEPS) % 3 == 0, 1.5, 3.0)[logged][:, None]
    np.testing.assert_array_equal(actions[logged], action_from_env(policy.action_space, taken, normalize=True))
    assert actions[logged][:2, 0].tolist() == [0.75, 1.5]  # 3.0 is recorded unclipped, as the Python client does
    expected = policy.outputs_for(obs[:-1][logged], taken)
    np.testing.assert_allclose(extra["action_logp"]["data"][logged], expected.action_logp, rtol=1e-5, atol=1e-5)
    sampled = actions[~logged][:, 0]
    assert np.all(np.abs(sampled - inputs[~logged][:, 0]) > 0)  # sampled, not the mean


# ----------------------------------------------------------------------
# Box actions (examples/pendulum.cpp) against a real RLinkEnvRunner in this process

#: Env steps per update of the Pendulum runner: one whole episode.
PENDULUM_SHARE = 200


def pendulum_runner():
    """An RLinkEnvRunner built from ``configs/ppo_pendulum.yaml``, sampled by hand (its share: one episode)."""
    from rlinks_rllib import RLinkEnvRunner
    from rlinks_rllib.training.config_file import build_algorithm_config, load_spec

    spec = load_spec(ROOT / "configs" / "ppo_pendulum.yaml")
    config = build_algorithm_config(spec, overrides={"rlinks": {"port": 0}, "env_runners": {"num_env_runners": 0}})
    config.training(train_batch_size_per_learner=PENDULUM_SHARE).env_runners(sample_timeout_s=60.0)
    return RLinkEnvRunner(config=config, worker_index=0)


def sample_when_connected(runner) -> list:
    """``runner.sample()`` once a client is connected (30 s at most): a runner without one answers at once."""
    deadline = time.monotonic() + 30
    while runner.get_transport_stats().get("clients_connected", 0) < 1:
        assert time.monotonic() < deadline, "no client connected to the runner"
        time.sleep(0.05)
    return runner.sample()


def check_pendulum_episode(episode, module) -> None:
    """What RLlib received is what it trains on, and the simulator applied that action unsquashed.

    The actions are the Gaussian's samples under the recorded ``action_dist_inputs`` (which the module
    computes from the observations, here by torch), ``action_logp`` is RLlib's log-probability of them,
    and every step follows gymnasium's Pendulum-v1 with the action squashed into [-2, 2] (RLlib's
    ``normalize_actions``) from the observation before.
    """
    import torch

    obs = np.asarray(episode.get_observations(), np.float32)
    actions = np.asarray(episode.get_actions())
    rewards = np.asarray(episode.get_rewards(), np.float64)
    logp = np.asarray(episode.get_extra_model_outputs("action_logp"))
    inputs = np.asarray(episode.get_extra_model_outputs("action_dist_inputs"), np.float32)
    assert actions.dtype == np.float32 and actions.shape == (len(episode), 1) and inputs.shape == (len(episode), 2)
    with torch.no_grad():
        forward = module.forward_inference({"obs": torch.from_numpy(obs[:-1].copy())})
        forward = forward["action_dist_inputs"].numpy()
        dist = module.get_exploration_action_dist_cls().from_logits(torch.from_numpy(inputs))
        expected_logp = dist.logp(torch.from_numpy(actions)).numpy()
    np.testing.assert_allclose(inputs, forward, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logp, expected_logp, rtol=1e-5, atol=1e-5)
    assert np.abs(actions[:, 0] - inputs[:, 0]).mean() > 0.1  # sampled, not the mean
    theta, theta_dot = np.arctan2(obs[:-1, 1], obs[:-1, 0]), obs[:-1, 2].astype(np.float64)
    torque = np.clip(-2.0 + (actions[:, 0] + 1.0) * 2.0, -2.0, 2.0).astype(np.float64)
    new_theta_dot = np.clip(theta_dot + (15.0 * np.sin(theta) + 3.0 * torque) * 0.05, -8.0, 8.0)
    new_theta = theta + new_theta_dot * 0.05
    np.testing.assert_allclose(obs[1:], np.stack([np.cos(new_theta), np.sin(new_theta), new_theta_dot], 1), atol=1e-4)
    angle = (theta + np.pi) % (2 * np.pi) - np.pi
    np.testing.assert_allclose(rewards, -(angle**2 + 0.1 * theta_dot**2 + 0.001 * torque**2), atol=1e-4)


@pytest.mark.timeout(300)
def test_box_actions_reach_rllib_as_it_trains_on_them_local_and_served(cpp, ray_local):
    """configs/ppo_pendulum.yaml's runner; a C++ client runs the Gaussian policy, then one is served its actions.

    (1) The first share comes from the runner's own weights; (2) new weights reach the client and the
    next share comes from them; (3) SIGTERM ends the client at once while it waits for the next
    weights (not at its 120 s timeout); (4) a served client applies the runner's actions.
    """
    runner = pendulum_runner()
    address = "{}:{}".format(*runner.address)
    clients: list[subprocess.Popen] = []

    def pendulum(*args: str) -> subprocess.Popen:
        clients.append(subprocess.Popen([str(cpp / "pendulum"), "--address", address, "--timeout", "120", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        return clients[-1]

    try:
        local = pendulum("--seed", "1")
        (first,) = sample_when_connected(runner)
        assert len(first) == PENDULUM_SHARE and first.is_truncated
        check_pendulum_episode(first, runner.module)

        state = {k: v if k == "pi.log_std_clip_param_const" else v * 1.5 for k, v in runner.module.get_state().items()}
        runner.set_state({"rl_module": state, "weights_seq_no": 1})
        (second,) = runner.sample()
        check_pendulum_episode(second, runner.module)  # the new weights' outputs

        stopping = time.monotonic()
        local.send_signal(signal.SIGTERM)
        out, err = local.communicate(timeout=30)
        assert local.returncode == 0 and "pendulum: stopped" in err, err
        assert time.monotonic() - stopping < 10  # the wait for weights ended at once
        assert summary_of(out)["steps"] == 2 * PENDULUM_SHARE and summary_of(out)["weights_seq_no"] == 1

        runner.set_state({"rl_module": runner.module.get_state(), "weights_seq_no": 2})
        served = pendulum("--served-actions", "--seed", "2")
        (third,) = sample_when_connected(runner)
        check_pendulum_episode(third, runner.module)
        runner.stop()
        out, err = served.communicate(timeout=30)
        assert served.returncode == 0 and "the learner stopped" in err, err
        assert "actions in Box(-2, 2, (1,)), served" in err
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.communicate(timeout=10)
        runner.stop()


@pytest.mark.timeout(300)
def test_served_logged_actions_and_an_untrained_episode_reach_rllib_as_python_records_them(cpp, ray_local):
    """configs/ppo_pendulum.yaml's runner serving a C++ client that takes two actions of three itself
    (served_taken): RLlib gets them squashed back into [-1, 1] with the module's log-probability of them, and
    none of the episode played with training off."""
    import torch

    runner = pendulum_runner()
    client = subprocess.Popen([str(cpp / "env_client_scenarios"), "{}:{}".format(*runner.address), "taken_box",
                               "served"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        (episode,) = sample_when_connected(runner)  # env 0's share; env 1's steps never arrive
        runner.stop()
        out, err = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate(timeout=10)
        runner.stop()
    assert client.returncode == 0 and out.splitlines()[-1] == "done", out + err
    assert len(episode) == PENDULUM_SHARE
    obs = np.asarray(episode.get_observations(), np.float32)
    actions = np.asarray(episode.get_actions())[:, 0]
    inputs = np.asarray(episode.get_extra_model_outputs("action_dist_inputs"), np.float32)
    logp = np.asarray(episode.get_extra_model_outputs("action_logp"))
    np.testing.assert_allclose(obs[:, 2] - obs[0, 2], 0.01 * np.arange(len(obs)), atol=1e-4)  # env 0's
    step = np.arange(PENDULUM_SHARE)
    logged = step % 3 != 2
    # The runner clips a taken action to the Box before squashing it back (PROTOCOL.md 10.5.1): 3.0 is 1.0.
    np.testing.assert_allclose(actions[logged], np.where(step % 3 == 0, 0.75, 1.0)[logged], rtol=1e-6)
    with torch.no_grad():
        forward = runner.module.forward_inference({"obs": torch.from_numpy(obs[:-1].copy())})
        dist = runner.module.get_exploration_action_dist_cls().from_logits(torch.from_numpy(inputs))
        expected_logp = dist.logp(torch.from_numpy(actions[:, None].astype(np.float32))).numpy()
    np.testing.assert_allclose(inputs, forward["action_dist_inputs"].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logp, expected_logp, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------
# Training with a real learner


def _train_with_cpp_clients(cpp, tmp_path, stop_reward: float, client_args) -> tuple[float, list[str], float]:
    """`rlinks learner` (2 runners) to ``stop_reward``, with C++ clients given the directory's one address.

    ``client_args(address)`` lists each client's arguments; ``None`` skips the
    test (it is called once first, to probe). Returns the return reached, each
    client's output and the seconds it took. Stops everything it started.
    """
    output = tmp_path / "run"
    started = time.monotonic()
    learner = subprocess.Popen(
        [sys.executable, "-m", "rlinks_rllib", "learner", "--config", "configs/ppo_cartpole.yaml", "--port", "0",
         "--output", str(output), "--stop-reward", str(stop_reward)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    clients: list[subprocess.Popen] = []
    skip = None
    try:
        deadline = time.monotonic() + 180
        while not (output / "directory.json").exists():
            assert learner.poll() is None, learner.stdout.read()
            assert time.monotonic() < deadline, "the learner never listened"
            time.sleep(0.5)
        directory = json.loads((output / "directory.json").read_text())
        arguments = client_args(f"{directory['host']}:{directory['port']}")
        if isinstance(arguments, str):
            skip = arguments
        else:
            clients = [subprocess.Popen([str(cpp / "cartpole"), *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True) for args in arguments]
            out, _ = learner.communicate(timeout=780)
            client_outputs = [client.communicate(timeout=60)[0] for client in clients]
    finally:
        for proc in clients:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        if learner.poll() is None:
            # Ctrl-C: the learner stops RLlib and Ray (a kill would leave Ray's agents behind).
            learner.send_signal(signal.SIGINT)
            try:
                out, _ = learner.communicate(timeout=120)  # ~50 s on 2 busy cores
            except subprocess.TimeoutExpired:
                learner.kill()
                out, _ = learner.communicate(timeout=10)
    if skip is not None:
        pytest.skip(skip)
    assert learner.returncode == 0, out
    reached = float(re.search(r"done: mean return ([\d.]+)", out).group(1))
    assert reached >= stop_reward
    for text in client_outputs:
        assert "the learner stopped" in text, text
        assert summary_of(text)["steps"] > 0
    return reached, client_outputs, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cpp_clients_local_and_served_train_ppo_cartpole_to_450(cpp, tmp_path):
    """`rlinks learner` with 2 runners; 4 C++ clients given the directory's one address.

    Two run the policy themselves; for the other two, of 2 CartPoles each, the
    runner computes the actions (PROTOCOL.md 10.5). The mean return of 450
    holds only if both kinds play well: neither is left behind.
    """

    def client_args(address):
        probe = cartpole(cpp, "--served-actions", "--address", address, "--max-steps", "0", timeout=120)
        if probe.returncode == 3 and "does not serve actions" in probe.stderr:
            return "rlinks' runner does not agree to served_actions"
        assert probe.returncode == 0, probe.stderr
        local = [["--address", address, "--max-steps", "10000000", "--seed", str(i)] for i in range(2)]
        served = [["--served-actions", "--envs", "2", "--address", address, "--max-steps", "10000000",
                   "--seed", str(10 * i)] for i in range(1, 3)]
        return local + served

    reached, outputs, elapsed = _train_with_cpp_clients(cpp, tmp_path, 450, client_args)
    assert sum("actions served by the learner" in text for text in outputs) == 2, outputs
    print(f"C++ clients (2 local, 2 served) trained PPO CartPole to {reached:.1f} in {elapsed:.0f} s "
          f"({sum(summary_of(t)['steps'] for t in outputs):.0f} env steps)")
