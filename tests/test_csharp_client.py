"""The C# client in ``clients/csharp``: a third implementation of ``docs/PROTOCOL.md``, for Unity and .NET.

Built with Mono's ``mcs`` (Debian's ``mono-mcs`` and ``mono-runtime``,
installed by ``tests/system_packages.py`` where the suite runs as root) into
``build/csharp-pytest``, rebuilt only when a source changed; the Unity-only
file (``Runtime/Unity/``) is left out, as it needs UnityEngine. Then held to
the shared vectors and to Python's names, run against rlinks' own runner
server (without Ray) and scripted peers, and trained to a mean return of 450
with a real ``rlinks learner`` (a head start: it runs beside the other tests).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from client_peers import (UPDATE_STEPS, FakeLearner, ScriptedRunner, ServedPeer, ack_seq_2_then_drop, directory_of,
                          drop_before_acking_seq_2, pong_instead_of_weights, refuse_batches_as_bad_episode, rows_of,
                          shutting_down_for_good, summary_of)
from peers import free_port
from system_packages import require_debian_packages
from rlinks_rllib.protocol.errors import ErrorCode
from rlinks_rllib.protocol.extensions import Extension
from rlinks_rllib.protocol.messages import OLD_API_TYPES, MessageType

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "clients" / "csharp"
BUILD = ROOT / "build" / "csharp-pytest"
VECTORS = ROOT / "tests" / "vectors"
MONO_PACKAGES = ("mono-mcs", "mono-runtime")

# ----------------------------------------------------------------------
# Building

_build_lock = threading.Lock()


def _mcs(out: Path, sources: list[Path], *options: str) -> None:
    command = ["mcs", "-langversion:7.2", "-nologo", "-warnaserror+", f"-out:{out}", "-r:System.dll", "-r:System.Core.dll",
               *options, *map(str, sources)]
    built = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if built.returncode != 0:
        pytest.fail(f"clients/csharp does not build ({out.name}):\n{built.stdout[-6000:]}\n{built.stderr[-6000:]}")


def build_csharp() -> Path:
    """The library, the CartPole sample and the vector replayer in build/csharp-pytest (kept while the sources match)."""
    require_debian_packages(*MONO_PACKAGES, purpose="the C# client's tests (mcs builds it, mono runs it)")
    library = sorted(p for p in (SOURCE / "Runtime").rglob("*.cs") if "Unity" not in p.relative_to(SOURCE).parts)
    sample, vectors = SOURCE / "Samples~" / "CartPole" / "CartPole.cs", SOURCE / "Tests~" / "Vectors.cs"
    agent = SOURCE / "Samples~" / "CartPoleAgent" / "CartPoleAgent.cs"
    policy, scenarios = SOURCE / "Tests~" / "PolicyVectors.cs", SOURCE / "Tests~" / "Scenarios.cs"
    digest = hashlib.sha256()
    for path in [*library, sample, vectors, agent, policy, scenarios]:
        digest.update(path.name.encode() + path.read_bytes())
    with _build_lock:
        stamp = BUILD / "sources.sha256"
        if stamp.exists() and stamp.read_text() == digest.hexdigest():
            return BUILD
        BUILD.mkdir(parents=True, exist_ok=True)
        _mcs(BUILD / "Rlinks.dll", library, "-target:library")
        for source, exe in ((sample, "cartpole.exe"), (vectors, "vectors.exe"), (policy, "policy_vectors.exe"),
                            (scenarios, "scenarios.exe")):
            _mcs(BUILD / exe, [source], f"-r:{BUILD / 'Rlinks.dll'}")
        _mcs(BUILD / "cartpole_agent.exe", [agent, sample], f"-r:{BUILD / 'Rlinks.dll'}", "-main:AgentProgram")
        stamp.write_text(digest.hexdigest())
    return BUILD


@pytest.fixture(scope="session")
def csharp() -> Path:
    return build_csharp()


def cartpole(build: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["mono", str(build / "cartpole.exe"), *args], capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------
# The spec, byte for byte


def _frames(stream: bytes) -> list[bytes]:
    bodies, at = [], 0
    while at + 8 <= len(stream) and stream[at:at + 8].isdigit():
        n = int(stream[at:at + 8])
        bodies.append(stream[at + 8:at + 8 + n])
        at += 8 + n
    return bodies


def _same(got, want, where: str) -> None:
    if isinstance(want, float) or isinstance(got, float):
        assert isinstance(got, (int, float)) and not isinstance(got, bool), f"{where}: {got!r} != {want!r}"
        assert got == want or (math.isnan(got) and math.isnan(want)), f"{where}: {got!r} != {want!r}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            _same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (a, b) in enumerate(zip(got, want)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


def test_every_vector_passes(csharp):
    """Each case fed in one piece and byte by byte: the same messages as its JSON, the same error and when,
    and the canonical ones encoded again to exactly their bytes."""
    specs = {p.stem: json.loads(p.read_text()) for p in sorted(VECTORS.glob("*.json"))}
    cases = "".join(f"{name} {spec['max_frame_bytes']}\n" for name, spec in specs.items())
    result = subprocess.run(["mono", str(csharp / "vectors.exe"), str(VECTORS)], input=cases, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    replays = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["name"] for r in replays] == list(specs)
    for replay in replays:
        name, spec = replay["name"], specs[replay["name"]]
        for how in ("whole", "bytewise"):
            got = replay[how]
            _same(got["messages"], spec["messages"], f"{name} ({how})")
            if spec["error"] is None:
                assert got["error"] is None, f"{name} ({how}): {got['error']}"
            else:
                assert got["error"] is not None, f"{name} ({how}): no error, expected {spec['error']['code']}"
                assert (got["error"]["code"], got["error"]["when"]) == (spec["error"]["code"], spec["error"]["when"]), \
                    f"{name} ({how}): {got['error']} != {spec['error']}"
            if spec.get("canonical"):
                bodies = _frames((VECTORS / f"{name}.bin").read_bytes())
                assert got["encoded"] == [b.hex() for b in bodies[:len(got["encoded"])]], f"{name}: not byte-exact"
    print(f"\nC#: {len(replays)} vectors replayed whole and byte by byte, "
          f"{sum(1 for s in specs.values() if s.get('canonical'))} of them byte-exact")


def test_error_codes_message_types_and_extensions_are_pythons(csharp):
    result = subprocess.run(["mono", str(csharp / "vectors.exe"), "--names"], capture_output=True, text=True, timeout=60)
    names = json.loads(result.stdout)
    assert sorted(names["error_codes"]) == sorted(code.value for code in ErrorCode)
    assert sorted(names["message_types"] + names["old_api_types"]) == sorted(t.value for t in MessageType)
    assert sorted(names["old_api_types"]) == sorted(t.value for t in OLD_API_TYPES)
    assert sorted(names["extensions"]) == sorted(e.value for e in Extension)


def test_the_local_policy_computes_what_the_python_client_computes(csharp, tmp_path):
    """``tests/vectors/policy``: the MLP's outputs, log-probabilities, the Box action the env gets; and the refusals."""
    import msgpack

    def close(got, want, where):
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=1e-5, atol=1e-6, err_msg=where)

    checked = 0
    for kind in ("mlp", "logp", "action_for_env"):
        spec = json.loads((VECTORS / "policy" / f"{kind}.json").read_text())
        packed = tmp_path / f"{kind}.msgpack"
        packed.write_bytes(msgpack.packb(spec))  # read there by the C# client's own codec
        result = subprocess.run(["mono", str(csharp / "policy_vectors.exe"), kind, str(packed)], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        assert len(lines) == len(spec["cases"]) + len(spec.get("refused", []))
        for case, got in zip(spec["cases"], lines):
            key = {"mlp": "dist_inputs", "logp": "logp", "action_for_env": "for_env"}[kind]
            close(got[key], case[key], f"{kind}: {case.get('name', case)}")
        for case, got in zip(spec.get("refused", []), lines[len(spec["cases"]):]):
            assert got["name"] == case["name"] and got["refused"], f"{kind}: {case['name']} was not refused"
        checked += len(lines)
    print(f"\nC#: {checked} policy vectors")


# ----------------------------------------------------------------------
# Against rlinks' runner server


def test_trains_on_policy_with_want_steps_and_acks(csharp):
    with FakeLearner() as learner:
        result = cartpole(csharp, "--address", f"127.0.0.1:{learner.port}", "--max-steps", "1000", "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert "running the MLP here, on-policy batches" in result.stderr
    summary = summary_of(result.stdout)
    assert summary["steps"] == 1000 and summary["episodes"] > 10
    assert summary["weights_seq_no"] == learner.updates >= 1000 // UPDATE_STEPS
    assert summary["steps_acked"] == summary["steps_sent"] == learner.server.stats.steps_in == UPDATE_STEPS * (1000 // UPDATE_STEPS)
    assert learner.server.stats.duplicates == 0
    by_id: dict[str, list[dict]] = {}
    for chunk in learner.chunks:
        by_id.setdefault(chunk["id_"], []).append(chunk)
    assert any(len(chunks) > 1 for chunks in by_id.values())
    for chunks in by_id.values():  # chunks of one episode follow on from each other
        for before, after in zip(chunks, chunks[1:]):
            assert after["t_started"] == before["t"] and not before["is_terminated"]
            np.testing.assert_array_equal(after["observations"]["data"][0], before["observations"]["data"][-1])
    chunk = learner.chunks[0]  # the recorded log-probabilities are those of the actions under the recorded logits
    logits = chunk["extra_model_outputs"]["action_dist_inputs"]["data"].astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    taken = log_probs[np.arange(len(logits)), chunk["actions"]["data"]]
    np.testing.assert_allclose(chunk["extra_model_outputs"]["action_logp"]["data"], taken, atol=1e-5)


def test_n_envs_with_local_inference_share_one_connection(csharp):
    with FakeLearner() as learner:
        result = cartpole(csharp, "--address", f"127.0.0.1:{learner.port}", "--envs", "4", "--max-steps", "800")
    assert result.returncode == 0, result.stderr
    assert "4 env(s)" in result.stderr
    summary = summary_of(result.stdout)
    assert summary["steps"] == 800 and summary["steps_acked"] == summary["steps_sent"] >= 700
    assert len({chunk["id_"] for chunk in learner.batches[0] if chunk["t_started"] == 0}) >= 4


def test_follows_the_directory_to_a_runner(csharp):
    with FakeLearner() as learner, directory_of(learner) as directory:
        result = cartpole(csharp, "--address", f"127.0.0.1:{directory.address[1]}", "--max-steps", "200")
    assert result.returncode == 0, result.stderr
    assert f"connected to 127.0.0.1:{learner.port}" in result.stderr
    assert summary_of(result.stdout)["steps"] == 200 and learner.server.stats.steps_in == 3 * UPDATE_STEPS


def test_waits_for_a_learner_that_is_not_up_yet(csharp):
    """ConnectWait: the runner starts 3 s after the client, more than the 5 quick attempts take."""
    port = free_port()
    client = subprocess.Popen(["mono", str(csharp / "cartpole.exe"), "--address", f"127.0.0.1:{port}", "--max-steps", "100",
                               "--connect-wait", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        assert client.poll() is None, client.communicate()
        with ScriptedRunner(port=port):
            out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate(timeout=10)
    assert client.returncode == 0, err
    assert "waiting up to 30 s for the learner at" in err and summary_of(out)["steps"] == 100
    refused = cartpole(csharp, "--address", f"127.0.0.1:{free_port()}", "--connect-wait", "0", "--retry-attempts", "2")
    assert refused.returncode == 1 and "could not connect" in refused.stderr and "after 2 attempt(s)" in refused.stderr


@pytest.fixture
def secret_file(tmp_path) -> str:
    from client_peers import SECRET

    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    return str(path)


@pytest.fixture(scope="module")
def rsa_certs(tmp_path_factory) -> dict[str, str]:
    """The suite's test certificates with RSA keys: Mono 6.8's TLS can't read an EC certificate (.NET and Unity can)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    from test_auth_tls import make_certificates

    return make_certificates(tmp_path_factory.mktemp("rsa-certs"), key="rsa")


def test_auth_and_tls(csharp, rsa_certs, secret_file, tmp_path):
    certs = rsa_certs
    wrong = tmp_path / "wrong"
    wrong.write_text("another secret of enough length")
    tls_and_auth = dict(tls_cert_file=certs["server"], tls_key_file=certs["server_key"], auth_secret_file=secret_file)
    with FakeLearner(**tls_and_auth) as learner:
        address = f"tls://localhost:{learner.port}"
        good = cartpole(csharp, "--address", address, "--ca-file", certs["ca"], "--secret-file", secret_file, "--max-steps", "200")
        assert good.returncode == 0, good.stderr
        assert summary_of(good.stdout)["steps"] == 200 and learner.server.stats.steps_in == 3 * UPDATE_STEPS
        refused = cartpole(csharp, "--address", address, "--ca-file", certs["ca"], "--secret-file", str(wrong),
                           "--max-steps", "10", "--retry-attempts", "1")
        assert refused.returncode == 1 and "auth_failed" in refused.stderr, refused.stderr
        untrusted = cartpole(csharp, "--address", address, "--ca-file", certs["other_ca"], "--secret-file", secret_file,
                             "--max-steps", "10")
        assert untrusted.returncode == 1 and "not trusted" in untrusted.stderr, untrusted.stderr
    with FakeLearner() as learner:  # a client with a secret won't talk to a server that can't prove it knows it
        unproven = cartpole(csharp, "--address", f"127.0.0.1:{learner.port}", "--secret-file", secret_file, "--max-steps", "10")
    assert unproven.returncode == 1 and "did not agree to authenticate" in unproven.stderr, unproven.stderr


def test_ml_agents_style_agents_join_act_and_take_over(csharp):
    """Samples~/CartPoleAgent: Agents in ML-Agents' shape on one AgentDriver; the heuristic's steps go as take-overs."""
    with FakeLearner() as learner:
        result = subprocess.run(["mono", str(csharp / "cartpole_agent.exe"), "--address", f"127.0.0.1:{learner.port}",
                                 "--agents", "3", "--max-steps", "600", "--teacher"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    summary = summary_of(result.stdout)
    assert summary["steps"] >= 590 and summary["takeover_steps"] > 0 and summary["steps_acked"] == summary["steps_sent"] > 0
    marked = [c for c in learner.chunks if "rlinks_takeover" in (c.get("extra_model_outputs") or {})]
    assert marked and len({c["id_"] for c in learner.batches[0] if c["t_started"] == 0}) >= 3


def scenario(build: Path, address: str, name: str, *mode: str) -> tuple[list[str], list[str]]:
    """``Tests~/Scenarios.cs``: a short EnvClient script; its refused calls' messages and its other lines."""
    result = subprocess.run(["mono", str(build / "scenarios.exe"), address, name, *mode], capture_output=True, text=True,
                            timeout=60)
    lines = result.stdout.splitlines()
    assert result.returncode in (0, 3), result.stdout + result.stderr
    return [line[len("error: "):] for line in lines if line.startswith("error: ")], lines


def test_calls_out_of_order_are_refused_saying_what_to_do(csharp):
    with ScriptedRunner() as server:
        refusals, lines = scenario(csharp, server.address, "misuse")
    assert lines[-1] == "done", lines
    assert refusals == [
        "env 0 reported without an action: call Act() first",
        "env 0 acted and its outcome was not reported: call Report() before Act() again",
        "env 0: the reward NaN is not finite",
        "env 0: 3 floats, but the runner's observations have 4",
        "env 0: Act() was given another observation than its last Report() gave (call StartEpisode() for a new episode)",
        "Act: 2 envs and 1 observations",
    ]
    assert server.batch_messages() == []


TAKEN_REFUSALS = ["action 2 is not in 0..1", "a Box action for the Discrete space Discrete(2)"]


def test_log_action_take_over_and_an_untrained_episode_local(csharp):
    """The simulator's own actions go with the policy's log-probability of them (as NumpyPolicy computes it),
    the take-over is marked, and the episode not trained on is never sent."""
    from client_peers import PARAMS, check_chunk
    from rlinks_rllib.client import NumpyPolicy

    with ScriptedRunner(extensions=("want_steps", "ack", "takeover")) as server:
        refusals, lines = scenario(csharp, server.address, "taken")
    assert refusals == TAKEN_REFUSALS and lines[-1] == "done", lines
    assert "episodes=2 takeover_steps=1" in lines
    [(_, message)] = server.batch_messages()
    first, second = (check_chunk(state) for state in message["episodes"])  # env 1's steps are not there
    assert first["is_terminated"] and first["actions"]["data"][:2].tolist() == [1, 0] and second["t_started"] == 0
    extra = first["extra_model_outputs"]
    assert extra["rlinks_takeover"]["data"].tolist() == [False, True, False]
    assert "rlinks_takeover" not in second["extra_model_outputs"]
    expected = NumpyPolicy(PARAMS, {"kind": "discrete", "n": 2}).outputs_for(first["observations"]["data"][:2], np.array([1, 0]))
    np.testing.assert_allclose(extra["action_dist_inputs"]["data"][:2], expected.action_dist_inputs, rtol=1e-5)
    np.testing.assert_allclose(extra["action_logp"]["data"][:2], expected.action_logp, rtol=1e-5, atol=1e-6)


def test_take_over_needs_a_runner_that_keeps_it_out_of_on_policy_updates(csharp):
    with ScriptedRunner() as server:  # want_steps and ack only
        _, lines = scenario(csharp, server.address, "taken")
    assert lines[-1].startswith("not agreed: ") and "did not agree to takeover" in lines[-1], lines
    assert server.batch_messages() == []


def test_served_log_action_take_over_and_untrained_episodes_go_as_their_columns(csharp):
    with ServedPeer(extensions=("served_actions", "served_taken", "takeover", "want_steps", "ack")) as peer:
        refusals, lines = scenario(csharp, peer.address, "taken", "served")
    assert refusals == TAKEN_REFUSALS and lines[-1] == "done", lines
    assert "episodes=2 takeover_steps=1" in lines
    assert peer.errors == [] and peer.violations == []
    acts = [rows for _, rows in peer.acts]
    assert acts[0].env == [1] and acts[0].start.tolist() == [True] and acts[0].train.tolist() == [False]
    assert acts[1].env == [0] and acts[1].taken_mask.tolist() == [True] and np.asarray(acts[1].taken).tolist() == [1]
    assert acts[2].env == [1] and acts[2].train.tolist() == [False]
    assert acts[3].env == [1, 0] and acts[3].terminated.tolist() == [True, False]
    assert acts[3].takeover.tolist() == [False, True] and np.asarray(acts[3].taken).tolist() == [0, 0]
    assert acts[4].env == [0] and acts[4].taken_mask is None and acts[4].takeover is None
    assert acts[-1].terminated.tolist() == [True]  # Close() sends the last ending row


_rng = np.random.default_rng(5)
#: Two modules of RLlib's default MLP: movers (2 observations, 3 actions) and turners (3 observations, 2 actions).
MODULE_PARAMS = {
    name: {"encoder.actor_encoder.net.mlp.0.weight": _rng.standard_normal((8, size)).astype(np.float32),
           "encoder.actor_encoder.net.mlp.0.bias": np.zeros(8, np.float32),
           "pi.net.mlp.0.weight": _rng.standard_normal((actions, 8)).astype(np.float32),
           "pi.net.mlp.0.bias": np.zeros(actions, np.float32),
           "pi.log_std_clip_param_const": np.array([20.0], np.float32)}
    for name, size, actions in (("mover", 2, 3), ("turner", 3, 2))
}


def _multi_agent_config(mapping) -> dict:
    from client_peers import CONFIG

    def box(size):
        return {"kind": "box", "shape": [size], "dtype": "<f4", "low": np.float32(-5), "high": np.float32(5)}

    modules = {"mover": {"observation_space": box(2), "action_space": {"kind": "discrete", "n": 3, "start": 0}, "trained": True},
               "turner": {"observation_space": box(3), "action_space": {"kind": "discrete", "n": 2, "start": 0}, "trained": True}}
    return dict(CONFIG, observation_space=box(2), action_space=modules["mover"]["action_space"],
                multi_agent={"modules": modules, "agent_mapping": mapping, "count_steps_by": "env_steps"})


class MultiAgentRunner(ScriptedRunner):
    """A scripted runner of two modules; without a mapping table it answers GET_MODULES by the agent's prefix."""

    def __init__(self, mapping) -> None:
        super().__init__(config=_multi_agent_config(mapping), extensions=("want_steps", "ack", "multi_agent"),
                         on_message=self._modules)

    @staticmethod
    def _modules(server, conn, message):
        if message["type"] != "GET_MODULES":
            return None
        conn.send({"type": "MODULES", "modules": {a: "mover" if a.startswith("mover") else "turner" for a in message["agents"]}})
        return HANDLED

    def set_state(self, agreed: frozenset[str]) -> dict:
        message = {"type": "SET_STATE", "state": {"rl_module": MODULE_PARAMS, "weights_seq_no": self.weights_seq_no}}
        if "want_steps" in agreed:
            message["want_steps"] = self.want_steps
        return message


@pytest.mark.parametrize("mapping", [[["mover_*", "mover"], ["turn_?", "turner"]], None], ids=["table", "get_modules"])
def test_many_agents_two_modules_join_leave_and_take_turns(csharp, mapping):
    """Multi-agent chunks (PROTOCOL.md 7.6) that rlinks' own check takes: each agent's complete steps under its
    module, the ticks of its observations, a mover joining, one leaving, turners acting every other tick."""
    from rlinks_rllib.protocol.multi_agent import check_multi_agent_state

    with MultiAgentRunner(mapping) as server:
        refusals, lines = scenario(csharp, server.address, "multi")
    assert lines[0] == "multi-agent: True" and lines[-1] == "done", lines
    assert refusals == [f"127.0.0.1:{server.port} serves several modules (multi_agent): use ActAgents and ReportAgents"]
    assert ("GET_MODULES" in server.types()) == (mapping is None)
    [(_, message)] = server.batch_messages()
    rules = {"mover": dict(obs_shape=(2,), obs_dtype=np.dtype(np.float32), num_actions=3),
             "turner": dict(obs_shape=(3,), obs_dtype=np.dtype(np.float32), num_actions=2)}
    chunks = [check_multi_agent_state(state, lambda agent, claimed: (claimed, rules[claimed])) for state in message["episodes"]]
    assert message["timesteps"] == sum(c.env_steps for c in chunks) >= UPDATE_STEPS
    first = chunks[0]
    assert (first.env_t_started, first.env_t) == (0, 5) and first.is_truncated
    ticks = {a.agent_id: a.env_t.tolist() for a in first.agents}
    # turn_b's last action got no observation before "__all__": its step ends on the last one it saw.
    assert ticks == {"mover_0": [0, 1, 2, 3], "turn_a": [0, 2, 4, 5], "turn_b": [1, 3, 5], "mover_1": [2, 3, 4, 5]}, ticks
    agents = {a.agent_id: a for a in first.agents}
    assert agents["mover_0"].state["is_terminated"] and agents["turn_a"].state["rewards"]["data"].tolist() == [0.75, 1.0, 0.0]
    assert {a.module_id for a in first.agents} == {"mover", "turner"}
    last = chunks[-1]  # 64 ticks: 12 episodes of 5, then the 13th cut after 4 ticks, to go on in the next batch
    assert (last.env_t - last.env_t_started, last.is_terminated, last.is_truncated) == (4, False, False)


# ----------------------------------------------------------------------
# Against scripted peers


def test_a_dropped_connection_resends_the_unacknowledged_batch(csharp):
    with ScriptedRunner(on_message=drop_before_acking_seq_2) as server:
        result = cartpole(csharp, "--address", server.address, "--max-steps", str(4 * UPDATE_STEPS))
    assert result.returncode == 0, result.stderr
    assert server.errors == []
    assert [(b.conn, b.seq, b.duplicate) for b in server.batches][:3] == [(0, 1, False), (0, 2, False), (1, 2, True)]
    assert len(set(server.client_ids)) == 1
    summary = summary_of(result.stdout)
    assert summary["reconnects"] == 1 and summary["batches_resent"] == 1
    assert summary["steps_acked"] == summary["steps_sent"] == 4 * UPDATE_STEPS  # nothing lost


def test_an_acknowledged_on_policy_batch_is_never_sent_again(csharp):
    with ScriptedRunner(on_message=ack_seq_2_then_drop) as server:
        result = cartpole(csharp, "--address", server.address, "--max-steps", str(3 * UPDATE_STEPS))
    assert result.returncode == 0, result.stderr
    batches = server.batch_messages()
    assert [(conn, m.get("seq")) for conn, m in batches][:3] == [(0, 1), (0, 2), (1, None)]
    assert batches[2][1]["episodes"] == [] and batches[2][1]["type"] == "EPISODES_AND_GET_STATE"


def test_off_policy_batches_go_without_waiting_for_weights(csharp):
    from client_peers import CONFIG

    off_policy = dict(CONFIG, on_policy=False, algorithm="APPO")
    with ScriptedRunner(config=off_policy) as server:
        result = cartpole(csharp, "--address", server.address, "--max-steps", "1000", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert "off-policy batches" in result.stderr and "EPISODES_AND_GET_STATE" not in server.types()
    assert [m["timesteps"] for _, m in server.batch_messages()] == [64] * 15 + [40]  # the rest when closing
    summary = summary_of(result.stdout)
    assert summary["steps_acked"] == summary["steps_sent"] == 1000


def test_a_server_error_is_reported_with_its_code(csharp):
    with ScriptedRunner(on_message=refuse_batches_as_bad_episode) as server:
        result = cartpole(csharp, "--address", server.address, "--max-steps", "100")
    assert result.returncode == 1 and "bad_episode: rewards: NaN" in result.stderr, result.stderr


def test_the_learner_shutting_down_ends_the_run(csharp):
    """shutting_down, then every reconnection refused the same way: the learner's end, not a failure to connect."""
    with ScriptedRunner(on_message=shutting_down_for_good) as server:
        result = cartpole(csharp, "--address", server.address, "--max-steps", "1000", "--retry-attempts", "2")
    assert result.returncode == 0, result.stderr
    assert "the learner stopped" in result.stderr and server.connections == 3  # the first, then 2 attempts
    assert summary_of(result.stdout)["steps"] == 2 * UPDATE_STEPS


def test_a_reply_out_of_turn_is_unexpected_message(csharp):
    with ScriptedRunner(on_message=pong_instead_of_weights) as server:
        result = cartpole(csharp, "--address", server.address, "--max-steps", "100")
    assert result.returncode == 1 and "unexpected_message" in result.stderr, result.stderr


def test_served_actions_rows_are_those_of_section_10_5(csharp):
    with ServedPeer() as peer:
        result = cartpole(csharp, "--address", peer.address, "--served-actions", "--envs", "2", "--max-steps", "600")
    assert result.returncode == 0, result.stderr
    assert "actions served by the learner" in result.stderr
    assert peer.violations == [] and peer.errors == []
    assert all(len(rows.env) >= 2 for _, rows in peer.acts)  # both envs in each ACT
    rows = rows_of(peer.acts)
    first = {}
    for _, env, fields in rows:
        first.setdefault(env, fields)
    assert sorted(first) == [0, 1] and all(f["start"] for f in first.values())
    ended = [f for _, _, f in rows if f["terminated"] or f["truncated"]]
    assert ended, "no episode ended in 600 steps"


# ----------------------------------------------------------------------
# Training with a real learner

#: The bound of the C# run to 450 from its start (the C++ clients' run takes about 2 minutes alone).
TRAIN_BOUND_S = 600


def _train_csharp_clients_to_450(tmp_path: Path, cancelled: threading.Event) -> dict:
    """`rlinks learner --config ppo_cartpole` (2 runners) to 450, with 4 C# CartPoles given the directory's address:
    two run the policy in C#, two (2 envs each) are served by the runners."""
    build = build_csharp()
    output, log_path = tmp_path / "run", tmp_path / "learner.log"
    started = time.monotonic()
    log = open(log_path, "w+")
    learner = subprocess.Popen([sys.executable, "-m", "rlinks_rllib", "learner", "--config", "configs/ppo_cartpole.yaml",
                                "--port", "0", "--output", str(output), "--stop-reward", "450"],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    clients: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + 180
        while not (output / "directory.json").exists():
            assert learner.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline and not cancelled.is_set(), "the learner never listened"
            time.sleep(0.5)
        directory = json.loads((output / "directory.json").read_text())
        address = f"{directory['host']}:{directory['port']}"
        arguments = [["--seed", str(i)] for i in range(2)] + [["--served-actions", "--envs", "2", "--seed", str(10 + i)] for i in range(2)]
        clients = [subprocess.Popen(["mono", str(build / "cartpole.exe"), "--address", address, *args],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for args in arguments]
        deadline = time.monotonic() + TRAIN_BOUND_S - 120
        while learner.poll() is None:
            assert not cancelled.is_set(), "cancelled"
            assert time.monotonic() < deadline, "the learner did not reach 450 in time: " + log_path.read_text()[-2000:]
            for client in clients:  # a client ends (0) when the learner has stopped; before, it failed
                if client.poll() not in (None, 0):
                    raise AssertionError(f"a C# client ended before the learner:\n{client.communicate()[0][-3000:]}")
            time.sleep(1)
        outputs = [c.communicate(timeout=60)[0] for c in clients]
    finally:
        for proc in clients:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        if learner.poll() is None:
            learner.send_signal(signal.SIGINT)  # the learner stops RLlib and Ray itself
            try:
                learner.wait(timeout=120)
            except subprocess.TimeoutExpired:
                learner.kill()
                learner.wait(timeout=10)
        log.close()
    text = log_path.read_text()
    return {"returncode": learner.returncode, "log": text, "outputs": outputs, "seconds": time.monotonic() - started}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.head_start(_train_csharp_clients_to_450, bound_s=TRAIN_BOUND_S)
def test_csharp_clients_local_and_served_train_ppo_cartpole_to_450(head_start):
    """One learner, both kinds of C# clients: 450 holds only if neither is left behind."""
    run = head_start
    assert run["returncode"] == 0, run["log"][-3000:]
    reached = float(re.search(r"done: mean return ([\d.]+)", run["log"]).group(1))
    assert reached >= 450
    outputs = run["outputs"]
    assert sum("actions served by the learner" in text for text in outputs) == 2, outputs
    assert sum("running the MLP here" in text for text in outputs) == 2, outputs
    for text in outputs:
        assert "the learner stopped" in text and summary_of(text)["steps"] > 0, text
    steps = sum(summary_of(t)["steps"] for t in outputs)
    print(f"\nC# clients (2 local, 2 served x 2 envs) trained PPO CartPole to {reached:.1f} in {run['seconds']:.0f} s "
          f"({steps:.0f} env steps)")
