"""The JavaScript client in ``clients/js`` (``rlinks-client``): a third implementation of ``docs/PROTOCOL.md``.

Its own tests run under Node (``node --test``): every vector in
``tests/vectors/`` and ``tests/vectors/policy/``. Here it is held to the
Python package's lists of error codes, message types and extensions, then
run (``examples/cartpole.mjs``) against rlinks' own runner server without
Ray, against scripted peers that drop connections, and finally trained to
a mean return of 450 by a real ``rlinks learner``.

Skips, saying why, where ``node`` (20 or later) or ``npm`` is missing. The
npm dependencies are installed with ``npm ci`` the first time (registry
access needed once); ``clients/js/node_modules`` is kept between runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from peers import CLOSE, HANDLED
from rlinks_rllib.protocol.errors import ErrorCode
from rlinks_rllib.protocol.extensions import Extension
from rlinks_rllib.protocol.messages import MessageType
import numpy as np
from client_peers import (PARAMS, SECRET, UPDATE_STEPS, FakeLearner, ScriptedRunner, ServedPeer, cartpole_step,
                          check_chunk, check_the_paced_window, directory_of, lean_rule, rows_of, summary_of)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "clients" / "js"
EXAMPLE = PACKAGE / "examples" / "cartpole.mjs"
NODE_MAJOR = 20


#: One ``npm ci`` at a time: a head-start run (test_web_game) may ask for node beside the session's fixture.
_NPM_CI = threading.Lock()


@pytest.fixture(scope="session")
def node() -> str:
    """``node``, with ``clients/js``'s dependencies installed (``npm ci`` when they are not)."""
    return node_with_dependencies()


def node_with_dependencies() -> str:
    """:func:`node` for code that is not a test (a head-start run); skips as it does."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the JavaScript client can't run")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if int(re.match(r"v(\d+)", version).group(1)) < NODE_MAJOR:
        pytest.skip(f"node {version} is older than {NODE_MAJOR}: the JavaScript client needs {NODE_MAJOR} or later")
    installed = [PACKAGE / "node_modules" / name / "package.json" for name in ("typescript", "ws", "onnxruntime-web",
                                                                            "puppeteer-core")]
    with _NPM_CI:
        if not all(path.exists() for path in installed):
            npm = shutil.which("npm")
            if npm is None:
                pytest.skip("npm is not installed: the JavaScript client's dependencies can't be installed")
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PACKAGE, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, f"npm ci failed in clients/js:\n{done.stdout}\n{done.stderr}"
    return node


def cartpole(node: str, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``examples/cartpole.mjs ARGS`` (bounded waits inside, and this timeout outside)."""
    return subprocess.run([node, str(EXAMPLE), "--timeout", "10", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def node_eval(node: str, source: str) -> str:
    done = subprocess.run([node, "--input-type=module", "-e", source], cwd=PACKAGE, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


# ----------------------------------------------------------------------
# Without a server


def test_node_tests_replay_every_vector(node):
    """``node --test``: every vector of tests/vectors and tests/vectors/policy, and the unit tests."""
    tests = sorted(str(path.relative_to(PACKAGE)) for path in (PACKAGE / "test").glob("*.test.js"))
    done = subprocess.run([node, "--test", *tests], cwd=PACKAGE, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    passed = int(re.search(r"^# pass (\d+)", done.stdout, re.M).group(1))
    vectors = len(list((ROOT / "tests" / "vectors").glob("*.bin")))
    assert passed > vectors and re.search(r"^# fail 0$", done.stdout, re.M)


def test_typescript_types_check(node):
    """``npm run typecheck``: index.d.ts compiles, with test/types.ts using the calls the README shows."""
    tsc = PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"
    done = subprocess.run([node, str(tsc), "-p", "tsconfig.json"], cwd=PACKAGE, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-6000:]


def test_error_codes_message_types_and_extensions_are_pythons(node):
    """Nothing spelled by hand in JavaScript drifts from the Python package's lists."""
    lists = json.loads(node_eval(node, """
        import { ErrorCode, ERROR_CODES, MessageType, Extension, GRAPH_METADATA_KEY, POLICY_GRAPH_KEY } from "rlinks-client";
        import { GRAPH_INTERFACE_VERSION } from "./src/onnx_policy.js";
        console.log(JSON.stringify({codes: ErrorCode, sent: [...ERROR_CODES], types: MessageType, extensions: Extension,
                                    graph: [GRAPH_METADATA_KEY, GRAPH_INTERFACE_VERSION, POLICY_GRAPH_KEY]}));
    """))
    assert lists["codes"] == {code.name: code.value for code in ErrorCode}
    from rlinks_rllib.protocol.errors import ERROR_CODES
    assert set(lists["sent"]) == ERROR_CODES
    assert lists["types"] == {kind.name: kind.value for kind in MessageType}
    assert lists["extensions"] == {extension.name: extension.value for extension in Extension}
    from rlinks_rllib.protocol.config import POLICY_GRAPH_KEY
    from rlinks_rllib.protocol.policy_graph import METADATA_KEY, VERSION
    assert lists["graph"] == [METADATA_KEY, VERSION, POLICY_GRAPH_KEY]


def test_auth_proofs_are_pythons(node):
    """HMAC-SHA256 over the same label, roles and nonces as protocol/auth.py, the secret normalized alike."""
    from rlinks_rllib.protocol.auth import normalize_secret, proof
    client_nonce, server_nonce = bytes(range(32)), bytes(range(32, 64))
    padded = "  " + SECRET + "\n"  # surrounding whitespace is not part of the secret
    got = json.loads(node_eval(node, f"""
        import {{ normalizeSecret }} from "rlinks-client";
        import {{ proof }} from "./src/auth.js";
        const secret = normalizeSecret({json.dumps(padded)});
        const c = Uint8Array.from({list(client_nonce)}), s = Uint8Array.from({list(server_nonce)});
        const hex = (b) => Buffer.from(b).toString("hex");
        console.log(JSON.stringify([hex(await proof(secret, "client", c, s)), hex(await proof(secret, "server", c, s))]));
    """))
    secret = normalize_secret(padded)
    assert got == [proof(secret, role, client_nonce, server_nonce).hex() for role in (b"client", b"server")]


# ----------------------------------------------------------------------
# Against rlinks' runner server (no Ray)


def test_trains_on_policy_with_want_steps_and_acks(node):
    with FakeLearner() as learner:
        result = cartpole(node, "--address", f"127.0.0.1:{learner.port}", "--max-steps", "1000", "--seed", "3")
    assert result.returncode == 0, result.stderr
    summary = summary_of(result.stdout)
    # Every batch is one runner share (want_steps), trained on once, with the weights of the update before.
    assert summary["weights_seq_no"] == learner.updates == 1 + 1000 // UPDATE_STEPS
    assert sum(c["t"] - c["t_started"] for c in learner.chunks) == UPDATE_STEPS * (1000 // UPDATE_STEPS)
    stats = learner.server.stats
    assert stats.batches_in == stats.batches_acked == 1000 // UPDATE_STEPS and stats.duplicates == 0
    assert summary["steps_acked"] == summary["steps_sent"] == stats.steps_in
    # The chunks passed the runner's checks (check_episode_state) and carry what PPO needs.
    chunk = learner.chunks[0]
    assert chunk["observations"]["data"].shape == (chunk["t"] - chunk["t_started"] + 1, 4)
    assert {"action_logp", "action_dist_inputs"} <= set(chunk["extra_model_outputs"])
    # Episodes cut at a batch boundary continue with the same id.
    ids = [c["id_"] for c in learner.chunks]
    assert any(c["t_started"] > 0 and c["id_"] in ids[:i] for i, c in enumerate(learner.chunks))


def test_calls_out_of_order_are_refused_saying_what_to_do(node):
    with FakeLearner() as learner:
        said = json.loads(node_eval(node, f"""
            import {{ EnvClient, UsageError }} from "rlinks-client";
            const client = new EnvClient("127.0.0.1:{learner.port}", {{ numEnvs: 2, timeoutMs: 10000 }});
            const refusals = [];
            const refused = async (call) => {{
                try {{ await call(); refusals.push(null); }}
                catch (error) {{ refusals.push(error instanceof UsageError ? error.message : String(error)); }}
            }};
            const obs = [0.01, 0.02, 0.03, 0.04];
            await refused(() => client.report(1, obs));                    // no act() first
            await client.act(obs);
            await refused(() => client.act(obs));                          // act() twice
            await client.report(1, [0.1, 0.1, 0.1, 0.1]);
            await refused(() => client.act(obs));                          // not the observation reported
            await refused(() => client.act(obs, 2));                       // no such env
            await refused(() => client.act([1, 2], 1));                    // the wrong size
            await client.startEpisode(obs);                                // a new episode there: fine
            await client.act(obs);
            await client.act(obs, 1);                                      // envs take turns in any order
            await client.report(0, obs, false, false, 1);
            await client.report(0, obs);
            const both = await Promise.allSettled([client.act(obs, 0), client.act(obs, 1)]);  // not awaited in turn
            refusals.push(both[1].status === "rejected" ? both[1].reason.message : "accepted");
            await client.close();
            console.log(JSON.stringify(refusals));
        """))
    assert "without its act() first" in said[0]
    assert "twice without report() between" in said[1]
    assert "not the observation its last report() gave; call startEpisode(obs)" in said[2]
    assert "env 2 is not one of 0..1 (numEnvs)" in said[3]
    assert "needs 4 numbers, got 2" in said[4]
    assert said[5].startswith("a call while another call of this EnvClient is running: await each call before the next")


def test_several_envs_in_one_client(node):
    with FakeLearner() as learner:
        result = cartpole(node, "--address", f"127.0.0.1:{learner.port}", "--envs", "4", "--max-steps", "800",
                          "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert summary_of(result.stdout)["weights_seq_no"] == learner.updates > 10
    assert len({chunk["id_"] for chunk in learner.chunks}) > 4 * 2  # each env's own episodes


def test_follows_the_directory_to_a_runner(node):
    with FakeLearner() as learner, directory_of(learner) as directory:
        result = cartpole(node, "--address", f"{directory.address[0]}:{directory.address[1]}", "--max-steps", "200")
    assert result.returncode == 0, result.stderr
    assert f"connected to 127.0.0.1:{learner.port}" in result.stderr
    assert summary_of(result.stdout)["steps"] == 200 and learner.server.stats.steps_in == 3 * UPDATE_STEPS


@pytest.fixture
def secret_file(tmp_path) -> str:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return str(path)


def test_shared_secret(node, secret_file):
    """auth (PROTOCOL.md 10.3): the right secret trains; another one, or none, is refused."""
    with FakeLearner(auth="on", auth_secret_file=secret_file) as learner:
        address = f"127.0.0.1:{learner.port}"
        right = cartpole(node, "--address", address, "--max-steps", "100", "--secret-file", secret_file)
        wrong = cartpole(node, "--address", address, "--max-steps", "100", "--unreliable",
                         env={"RLINKS_SECRET": "another secret of enough length"})
        none = cartpole(node, "--address", address, "--max-steps", "100", "--unreliable", env={"RLINKS_SECRET": ""})
    assert right.returncode == 0, right.stderr
    assert summary_of(right.stdout)["steps_acked"] == UPDATE_STEPS
    assert wrong.returncode == 1 and "auth_failed" in wrong.stderr, wrong.stderr
    assert none.returncode == 1 and "auth_failed" in none.stderr, none.stderr


def test_over_websocket_to_a_runner_and_through_the_directory(node, secret_file):
    """ws:// (the ``ws`` package under Node): one RLlink frame body per binary message, on the runners' own ports."""
    with FakeLearner(auth="on", auth_secret_file=secret_file) as learner, \
            directory_of(learner, auth="on", auth_secret_file=secret_file) as directory:
        runner = cartpole(node, "--address", f"ws://127.0.0.1:{learner.port}", "--max-steps", "200",
                          "--secret-file", secret_file)
        through = cartpole(node, "--address", f"ws://127.0.0.1:{directory.address[1]}", "--max-steps", "200",
                           "--secret-file", secret_file)
        steps_in = learner.server.stats.steps_in
    for result in (runner, through):
        assert result.returncode == 0, result.stderr
        assert f"connected to ws://127.0.0.1:{learner.port}" in result.stderr
        assert summary_of(result.stdout)["steps_acked"] == 3 * UPDATE_STEPS
    assert steps_in == 2 * 3 * UPDATE_STEPS


def test_tls_and_wss_with_the_secret(node, certs, secret_file):
    """tls:// (node:tls) and wss:// (ws) to a runner with a certificate and the shared secret (SECURITY.md)."""
    settings = dict(tls_cert_file=certs["server"], tls_key_file=certs["server_key"], auth_secret_file=secret_file)
    with FakeLearner(**settings) as learner:
        results = [cartpole(node, "--address", f"{scheme}://localhost:{learner.port}", "--max-steps", "100",
                            "--ca-file", certs["ca"], "--secret-file", secret_file) for scheme in ("tls", "wss")]
        untrusted = cartpole(node, "--address", f"tls://localhost:{learner.port}", "--max-steps", "10",
                             "--secret-file", secret_file, "--retry-attempts", "1")
    for result in results:
        assert result.returncode == 0, result.stderr
        assert summary_of(result.stdout)["steps_acked"] == UPDATE_STEPS
    assert untrusted.returncode == 1 and "certificate" in untrusted.stderr, untrusted.stderr


# ----------------------------------------------------------------------
# Installed the way JavaScript users install it

#: Imports the package by name, connects, and prints what it got (argv: the address, an origin or "", and
#: Client options as JSON over the defaults here).
CONNECT_AND_SAY = """
    import { Client, ConnectFailed } from "rlinks-client";
    const [address, origin, options] = process.argv.slice(1);
    const client = new Client(address, { retryAttempts: 1, connectWaitMs: 0, ...(origin ? { origin } : {}),
                                         ...JSON.parse(options || "{}") });
    try {
      const state = await client.getState();
      console.log(JSON.stringify({ ok: true, params: state.weights.params.size }));
    } catch (error) {
      console.log(JSON.stringify({ ok: false, refused: error instanceof ConnectFailed, error: `${error.name}: ${error.message}` }));
    } finally {
      client.close();
    }
"""


def npm_in(project: Path, *args: str, timeout: float = 300) -> None:
    """``npm ARGS`` in ``project`` (the registry reachable; no audit, no funding lines)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the package can't be installed into a project")
    done = subprocess.run([npm, *args, "--no-audit", "--no-fund"], cwd=project, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"npm {' '.join(args)} failed in {project}:\n{done.stdout}\n{done.stderr}"


def connect_from(node: str, project: Path, address: str, *node_flags: str, origin: str = "",
                 options: dict | None = None) -> dict:
    done = subprocess.run([node, *node_flags, "--input-type=module", "-e", CONNECT_AND_SAY, address, origin,
                           json.dumps(options or {})], cwd=project, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_npm_install_from_the_checkout_and_from_npm_pack_then_import_and_connect(node, tmp_path):
    """The package has no runtime dependency: a checkout's symlink and a tarball both import and connect.

    ``npm install /path/to/clients/js`` makes a symlink: ``--preserve-symlinks`` resolves imports from the
    project, as a fresh checkout without its own ``node_modules`` would. The tarball from ``npm pack``
    survives a later ``npm install ws``, and then speaks ws:// with the project's ``ws``.
    """
    linked, packed = tmp_path / "linked", tmp_path / "packed"
    for project in (linked, packed):
        project.mkdir()
        (project / "package.json").write_text(json.dumps({"name": project.name, "version": "1.0.0", "private": True}))
    npm_in(linked, "install", str(PACKAGE))
    assert (linked / "node_modules" / "rlinks-client").is_symlink()
    npm_in(PACKAGE, "pack", "--pack-destination", str(tmp_path))
    (tarball,) = tmp_path.glob("rlinks-client-*.tgz")
    npm_in(packed, "install", str(tarball))
    npm_in(packed, "install", "ws@^8.18.0")  # a later install of something else keeps rlinks-client whole
    assert (packed / "node_modules" / "rlinks-client" / "src" / "msgpack.js").is_file()
    with FakeLearner() as learner:
        results = [connect_from(node, linked, f"127.0.0.1:{learner.port}", "--preserve-symlinks"),
                   connect_from(node, packed, f"127.0.0.1:{learner.port}"),
                   connect_from(node, packed, f"ws://127.0.0.1:{learner.port}")]
    for result in results:
        assert result == {"ok": True, "params": len(PARAMS)}, result


def test_a_refused_web_origin_is_reported_with_its_reason_at_once(node):
    """The runner upgrades a page of an origin it does not let in, then closes with 1008 and the reason: the
    client's ConnectFailed carries it, with no retry and no connect wait (one connection: the next would be
    refused alike). A browser reads the same close (it hides an HTTP 403 from the page)."""
    from test_auth_tls import wait_for

    with FakeLearner(ws_allowed_origins=("http://game.example",)) as learner:
        address = f"ws://127.0.0.1:{learner.port}"
        refused = connect_from(node, PACKAGE, address, origin="http://elsewhere.example",
                               options={"retryAttempts": 5, "connectWaitMs": 60_000})
        connections = learner.server.stats.connections_total
        # The refusal, counted once the client has answered the close:
        wait_for(lambda: learner.server.stats.errors["auth_failed"] == 1)
        allowed = connect_from(node, PACKAGE, address, origin="http://game.example")
        plain = connect_from(node, PACKAGE, address)  # a program sends no Origin: let in, as ever
    assert refused["refused"], refused
    assert refused["error"] == (f"ConnectFailed: {address} refused the WebSocket connection (WebSocket close 1008: "
                                "origin 'http://elsewhere.example' is not in the runner's ws_allowed_origins setting)")
    assert connections == 1
    assert allowed == plain == {"ok": True, "params": len(PARAMS)}, (allowed, plain)


def test_a_websocket_closed_as_a_policy_violation_is_not_retried(node):
    """Close 1008 from any WebSocket server (rlinks' runner closes a page it refuses so): ConnectFailed, not retried."""
    from websockets.sync.server import serve

    def refuse(connection) -> None:
        connection.close(1008, "origin 'http://elsewhere.example' is not allowed")

    with serve(refuse, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            said = connect_from(node, PACKAGE, f"ws://127.0.0.1:{server.socket.getsockname()[1]}")
        finally:
            server.shutdown()
    assert said["refused"], said  # ConnectFailed at once (retryAttempts 1, no wait): not ConnectionLost
    assert "(WebSocket close 1008: origin 'http://elsewhere.example' is not allowed)" in said["error"], said


def test_a_page_in_chromium_learns_why_its_origin_is_refused(node, tmp_path):
    """What the runner's close 1008 is for: a browser hid its HTTP 403 from the page (which could only say it
    could not connect), but hands the page the close's reason; the page's ConnectFailed says it, at once."""
    with FakeLearner(ws_allowed_origins=("http://game.example",)) as learner:
        address = f"ws://127.0.0.1:{learner.port}"
        said = page_in_chromium(node, tmp_path, CONNECT_PAGE, "a refused page origin in headless Chromium",
                                f"?address={address}")
        connections = learner.server.stats.connections_total
    assert said["refused"], said
    assert re.fullmatch(rf"ConnectFailed: {address} refused the WebSocket connection \(WebSocket close 1008: "
                        r"origin 'http://127\.0\.0\.1:\d+' is not in the runner's ws_allowed_origins setting\)",
                        said["error"]), said
    assert connections == 1  # no retry, no connect wait


# ----------------------------------------------------------------------
# Against scripted peers: drops, resends, errors


def test_a_dropped_connection_resends_the_unacknowledged_batch(node):
    def drop_before_acking_seq_2(server, conn, message):
        if message.get("seq") == 2 and conn.index == 0:
            return CLOSE  # no ACK: the client must send seq 2 again
        return None

    with ScriptedRunner(on_message=drop_before_acking_seq_2) as server:
        result = cartpole(node, "--address", server.address, "--max-steps", str(4 * UPDATE_STEPS))
    assert result.returncode == 0, result.stderr
    assert server.errors == []
    assert [(b.conn, b.seq, b.duplicate) for b in server.batches][:3] == [(0, 1, False), (0, 2, False), (1, 2, True)]
    assert len(set(server.client_ids)) == 1 and len(server.client_ids[0]) == 32
    summary = summary_of(result.stdout)
    assert summary["reconnects"] == 1 and summary["batches_resent"] == 1
    assert "reconnecting" in result.stderr


def test_an_acknowledged_on_policy_batch_is_never_sent_again(node):
    def ack_seq_2_then_drop(server, conn, message):
        if message.get("seq") == 2 and conn.index == 0:
            conn.send({"type": "ACK", "seq": 2})
            return CLOSE  # RLlib has the batch, but the weights never came
        return None

    with ScriptedRunner(on_message=ack_seq_2_then_drop) as server:
        result = cartpole(node, "--address", server.address, "--max-steps", str(3 * UPDATE_STEPS))
    assert result.returncode == 0, result.stderr
    batches = server.batch_messages()
    assert [(conn, m.get("seq")) for conn, m in batches][:3] == [(0, 1), (0, 2), (1, None)]
    # PROTOCOL.md 10.2: after the reconnect, an empty batch without seq asks for the weights it is owed.
    assert batches[2][1]["episodes"] == [] and batches[2][1]["type"] == "EPISODES_AND_GET_STATE"


def test_a_server_error_is_reported_with_its_code(node):
    def refuse_the_batch(server, conn, message):
        if message["type"] == "EPISODES_AND_GET_STATE":
            conn.send({"type": "ERROR", "code": "bad_episode", "message": "rewards: NaN"})
            return CLOSE
        return None

    with ScriptedRunner(on_message=refuse_the_batch) as server:
        result = cartpole(node, "--address", server.address, "--max-steps", "100")
    assert result.returncode == 1
    assert "bad_episode: rewards: NaN" in result.stderr


def test_the_learner_shutting_down_ends_the_run(node):
    def stopped_for_good(server, conn, message):
        if conn.index > 0 or message.get("seq") == 2:
            conn.send({"type": "ERROR", "code": "shutting_down", "message": "the learner is stopping"})
            return CLOSE
        return None

    with ScriptedRunner(on_message=stopped_for_good) as server:
        result = cartpole(node, "--address", server.address, "--max-steps", "1000", "--retry-attempts", "2")
    assert result.returncode == 0, result.stderr
    assert "the learner stopped" in result.stderr and server.connections == 3  # the first, then 2 attempts
    # The learner's normal end is quiet: no reconnect line, no batch "not acknowledged" (it trains no more).
    assert "reconnecting" not in result.stderr and "not acknowledged" not in result.stderr, result.stderr
    assert summary_of(result.stdout)["steps"] == 2 * UPDATE_STEPS


def test_a_reply_out_of_turn_is_unexpected_message(node):
    def pong_instead_of_weights(server, conn, message):
        if message["type"] == "GET_STATE":
            conn.send({"type": "PONG"})
            return HANDLED
        return None

    with ScriptedRunner(on_message=pong_instead_of_weights) as server:
        result = cartpole(node, "--address", server.address, "--max-steps", "100")
    assert result.returncode == 1 and "unexpected_message" in result.stderr, result.stderr


def test_off_policy_batches_go_without_waiting_for_weights(node):
    with ScriptedRunner() as server:
        result = cartpole(node, "--address", server.address, "--max-steps", "1000", "--off-policy", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert "off-policy batches" in result.stderr and "EPISODES_AND_GET_STATE" not in server.types()
    # A fragment (rollout_fragment_length 64) at a time; the rest when closing.
    assert [m["timesteps"] for _, m in server.batch_messages()] == [64] * 15 + [40]
    summary = summary_of(result.stdout)
    assert summary["steps_acked"] == summary["steps_sent"] == 1000


def test_a_paced_runners_window_keeps_one_batch_sent_and_unconfirmed(node):
    """A paced runner names ``paced_in_flight`` 1: the client's off-policy batches wait for the last one's ACK
    (without it, maxUnacked let it run ahead)."""
    check_the_paced_window(lambda address, steps: cartpole(node, "--address", address, "--max-steps", str(steps),
                                                           "--seed", "1"))


def test_plain_rllib_server_with_a_pickled_config(node):
    """RLlib's own server: a bare PONG (no extension) and a pickle never read; configured by hand."""
    with ScriptedRunner(plain=True, config=b"\x80\x04 an AlgorithmConfig pickle") as server:
        result = cartpole(node, "--address", server.address, "--max-steps", "120", "--fragment-steps", "40")
    assert result.returncode == 0, result.stderr
    batches = server.batch_messages()
    assert len(batches) == 3 and all("seq" not in m for _, m in batches)
    assert [m["timesteps"] for _, m in batches] == [40, 40, 40]
    for _, message in batches:
        for state in message["episodes"]:
            check_chunk(state)
    assert "plain RLlink" in result.stderr


# ----------------------------------------------------------------------
# Served actions (PROTOCOL.md 10.5), against a scripted runner that answers with a fixed rule


def test_served_actions_rows_are_those_of_section_10_5(node):
    steps = 1000
    with ServedPeer(hold_s=0.05, hold_acts=5) as peer:
        result = cartpole(node, "--served-actions", "--address", peer.address, "--max-steps", str(steps), "--seed", "5")
    assert result.returncode == 0, result.stderr
    assert peer.errors == [] and peer.violations == []  # one ACT outstanding, and every ACT well-formed
    assert peer.connections == 1 and "served_actions" in peer.agreed[0]
    summary = summary_of(result.stdout)
    assert summary["steps"] == steps and summary["weights_seq_no"] == 7
    # One ACT per step, and a last one that reports the last action's result.
    assert len(peer.acts) == steps + 1
    assert all(np.asarray(rows.obs).dtype == np.float32 and np.asarray(rows.obs).shape == (len(rows), 4)
               for _, rows in peer.acts)
    first = peer.acts[0][1]
    assert first.env == [0] and first.start.all() and not first.reward.any()
    open_at, action_of, returns, length = None, None, [], 0
    for _, _, row in rows_of(peer.acts):
        if row["start"]:
            assert open_at is None and np.all(np.abs(row["obs"]) <= 0.05)  # CartPole's reset
            length = 0
        else:
            # Reports what the last action led to: reward 1, and CartPole's step from there.
            assert row["reward"] == 1.0
            np.testing.assert_allclose(row["obs"], cartpole_step(open_at, action_of), atol=1e-5)
            length += 1
            open_at = None
        if row["terminated"] or row["truncated"]:
            if row["terminated"] or length == 500:
                returns.append(float(length))
            continue
        open_at, action_of = row["obs"], lean_rule(row["obs"])
    # The last ACT ends the open episode (truncated: the run stopped); nothing more is wanted.
    assert open_at is None and not peer.acts[-1][1].wants_action.any()
    assert summary["episodes"] == len(returns) > 3 and summary["mean_return_last_20"] > 100  # the rule's ~200


def test_served_actions_for_other_envs_are_a_clear_error(node):
    def too_few_on_the_third(act, envs, actions):
        return (envs, actions[:-1]) if act == 2 else (envs, actions)

    with ServedPeer(answer=too_few_on_the_third) as peer:
        result = cartpole(node, "--served-actions", "--address", peer.address, "--max-steps", "100")
    assert result.returncode == 1
    assert "protocol error (invalid_message)" in result.stderr and "ACTIONS: 0 actions for 1 envs" in result.stderr
    assert len(peer.acts) == 3 and peer.violations == [] and peer.errors == []


def test_served_actions_start_every_episode_again_after_a_reconnect(node):
    def drop_at_the_first_episode_end(conn, act, rows):
        return conn == 0 and bool((rows.terminated | rows.truncated).any())

    with ServedPeer(drop=drop_at_the_first_episode_end) as peer:
        result = cartpole(node, "--served-actions", "--envs", "3", "--address", peer.address, "--max-steps", "1500",
                          "--seed", "2")
    assert result.returncode == 0, result.stderr
    assert peer.errors == [] and peer.violations == [] and peer.connections == 2
    assert summary_of(result.stdout)["reconnects"] == 1 and "interrupted by the lost connection" in result.stderr
    # The runner closed every open episode: on the new connection each env's first row starts one.
    first_rows = {}
    for _, env, row in rows_of(peer.acts, conn=1):
        first_rows.setdefault(env, row)
    assert sorted(first_rows) == [0, 1, 2] and all(row["start"] for row in first_rows.values())


def test_a_module_this_client_cannot_run_is_served_by_the_runner(node, monkeypatch):
    """inference 'auto': weights that are not RLlib's default MLP make the runner compute the actions."""
    monkeypatch.setitem(PARAMS, "encoder.lstm.weight_ih_l0", np.ones((8, 4), np.float32))
    with ServedPeer() as peer:
        result = cartpole(node, "--address", peer.address, "--max-steps", "300")
    assert result.returncode == 0, result.stderr
    assert "unexpected parameter 'encoder.lstm.weight_ih_l0'" in result.stderr
    assert "the runner computes the actions" in result.stderr and "actions served by the learner" in result.stderr
    assert summary_of(result.stdout)["steps"] == 300 and len(peer.acts) == 301


def test_served_actions_need_a_runner_that_serves_them(node):
    with ScriptedRunner() as server:  # rlinks' extensions, but not served_actions
        result = cartpole(node, "--served-actions", "--address", server.address, "--max-steps", "100")
    assert result.returncode == 3, result.stderr
    assert "does not serve actions" in result.stderr and "served_actions" in result.stderr
    assert server.types() == ["PING"]  # nothing asked of a runner that did not agree


def served_script(node: str, address: str, body: str, *, options: str = "") -> dict:
    """Run ``body`` (``client`` made for ``address``, a served EnvClient of 2 envs) under Node; its JSON line."""
    done = subprocess.run([node, "--input-type=module", "-e", f"""
        import {{ EnvClient, NotAgreed, UsageError }} from "rlinks-client";
        const client = new EnvClient({json.dumps(address)}, {{ numEnvs: 2, seed: 1, timeoutMs: 30000, retryAttempts: 1,
                                                               {options} }});
        const out = {{}};
        try {{ {body} }} finally {{ await client.close({{ flush: false }}); }}
        console.log(JSON.stringify(out));
    """], cwd=PACKAGE, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


REFUSALS = """
    const refused = async (call) => { try { await call(); return null; } catch (e) { return [e.constructor.name, e.message]; } };
    out.log = await refused(() => client.logAction([0, 0, 0, 0], 1));
    out.untrained = await refused(() => client.startEpisode([0, 0, 0, 0], 1, { train: false }));
    out.act = await client.act([0, 0, 0, 0], 0);   // the client still works
"""


def test_log_action_and_untrained_episodes_need_served_taken(node):
    """A runner that serves actions but records only its own: NotAgreed, nothing sent; the policy run here: UsageError."""
    with ServedPeer() as peer:  # agrees to served_actions, not served_taken
        out = served_script(node, peer.address, REFUSALS, options='inference: "served"')
    assert out["log"][0] == out["untrained"][0] == "NotAgreed"
    assert "did not agree to served_taken" in out["log"][1] and "logAction" in out["log"][1]
    assert out["act"] in (0, 1) and len(peer.acts) == 1 and peer.acts[0][1].taken_mask is None
    with FakeLearner() as learner:
        out = served_script(node, f"127.0.0.1:{learner.port}", REFUSALS, options='inference: "local"')
    assert out["log"][0] == out["untrained"][0] == "UsageError" and 'inference option "served"' in out["log"][1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_log_action_and_an_untrained_episode_against_a_real_runner(node, ray_local):
    """served_taken from JavaScript: env 0 takes every other action itself, env 1 plays an episode never trained on.

    A real RLinkEnvRunner (APPO's, off-policy, in this process) records env 0's 30 steps with the
    actions it took, each with the policy's log-probability of it, and nothing of env 1's 30.
    """
    from test_served_runner import _local_runner

    runner = _local_runner(500, off_policy=True)
    try:
        out = served_script(node, f"ws://127.0.0.1:{runner.address[1]}", """
            await client.startEpisode([0, 0, 0, 0], 1, { train: false });
            out.logged = {}; out.answers = [];
            for (let t = 0; t < 30; t++) {
              const obs = [t / 100, 0, -t / 100, 0];
              for (const env of [0, 1]) {
                const own = env === 0 && t % 2 === 1 ? (t % 4 === 1 ? 1 : 0) : null;
                const action = own === null ? await client.act(obs, env) : await client.logAction(obs, own, env);
                if (own !== null) { out.logged[t] = own; out.answers.push(action === own); }
                await client.report(1, [(t + 1) / 100, 0, -(t + 1) / 100, 0], false, t === 29, env);
              }
            }
            await client.close();
            out.stats = client.stats;
        """, options='inference: "served"')
        episodes = []
        while more := runner.sample():
            episodes += more
        stats = runner.get_transport_stats()
    finally:
        runner.stop()
    assert all(out["answers"]) and len(out["answers"]) == 15  # each logAction answered with its own action
    assert out["stats"]["steps"] == 60
    (episode,) = episodes  # env 1's never arrives
    actions = np.asarray(episode.get_actions())
    assert len(episode) == 30 and stats["served_steps"] == 30 and stats["errors_total"] == 0
    logged = {int(t): a for t, a in out["logged"].items()}
    assert [int(actions[t]) for t in sorted(logged)] == [logged[t] for t in sorted(logged)]
    dist = np.asarray(episode.get_extra_model_outputs("action_dist_inputs"))
    logp = np.asarray(episode.get_extra_model_outputs("action_logp"))
    log_softmax = dist - np.log(np.exp(dist).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(logp, log_softmax[np.arange(30), actions], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------
# Training with a real learner


class Learner:
    """``rlinks learner --config CONFIG [OPTIONS]`` on free ports, for a test's ``with``: stopped with Ctrl-C at the end.

    Attributes:
        address: its directory's ``host:port``, once it listens.
        output: what it printed, once it has exited.
    """

    def __init__(self, config: str | Path, tmp_path: Path, *options: str) -> None:
        self.run = tmp_path / "run"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rlinks_rllib", "learner", "--config", str(config), "--port", "0",
             "--output", str(self.run), *options],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.output = ""

    def __enter__(self) -> "Learner":
        deadline = time.monotonic() + 180
        while not (self.run / "directory.json").exists():
            assert self.process.poll() is None, self.process.stdout.read()
            assert time.monotonic() < deadline, "the learner never listened"
            time.sleep(0.5)
        directory = json.loads((self.run / "directory.json").read_text())
        self.address = f"{directory['host']}:{directory['port']}"
        return self

    def wait(self, timeout: float) -> float:
        """Wait until it stops by its own rule; the mean return it reached."""
        self.output = self.process.communicate(timeout=timeout)[0]
        assert self.process.returncode == 0, self.output
        return float(re.search(r"done: mean return ([\d.]+)", self.output).group(1))

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            # Ctrl-C: the learner stops RLlib and Ray (a kill would leave Ray's agents behind).
            self.process.send_signal(signal.SIGINT)
            try:
                self.output = self.process.communicate(timeout=120)[0]
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.output = self.process.communicate(timeout=10)[0]


def train_with_clients(config: Path, tmp_path: Path, timeout: float, commands) -> tuple[float, list[str], str]:
    """A ``Learner`` for *config* and clients ``commands(its address)`` (run in clients/js) until it stops.

    Returns:
        (the mean return it reached, each client's output with its errors, the learner's output)
    """
    clients: list[subprocess.Popen] = []
    with Learner(config, tmp_path) as learner:
        try:
            clients = [subprocess.Popen(command, cwd=PACKAGE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True) for command in commands(learner.address)]
            reached = learner.wait(timeout=timeout)
            outputs = [client.communicate(timeout=60)[0] for client in clients]
        finally:
            for proc in clients:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
    return reached, outputs, learner.output


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_js_clients_train_ppo_cartpole_to_450(node, tmp_path):
    """`rlinks learner --config ppo_cartpole` (2 runners) to 450; 4 Node clients given the directory's one address."""
    started = time.monotonic()
    reached, outputs, log = train_with_clients(
        ROOT / "configs" / "ppo_cartpole.yaml", tmp_path, 780,
        lambda address: [[node, str(EXAMPLE), "--address", address, "--max-steps", "10000000", "--seed", str(i),
                          "--shutdown-grace", "5"] for i in range(4)])
    assert reached >= 450, log
    for text in outputs:
        assert "the learner stopped" in text, text
        assert summary_of(text)["steps"] > 0
    print(f"Node clients trained PPO CartPole to {reached:.1f} in {time.monotonic() - started:.0f} s "
          f"({sum(summary_of(t)['steps'] for t in outputs):.0f} env steps)")


# ----------------------------------------------------------------------
# The policy graph (PROTOCOL.md 8.1) with onnxruntime-web


GRAPH_STEPS, GRAPH_BATCH = 3, 2
# JavaScript: runGraph(graph bytes, data.json's data) -> what the test compares with Python's OnnxPolicy.
GRAPH_RUN = """
  async function runGraph({ NdArray, OnnxPolicy, BoxSpace, DiscreteSpace }, graph, data) {
    const weights = (scale, seqNo) => ({ seqNo, params: new Map(Object.entries(data.params).map(
      ([name, [shape, values]]) => [name, NdArray.from(Float32Array.from(values, (x) => x * scale), shape)])) });
    const space = data.action.kind === "discrete" ? new DiscreteSpace(data.action.n) : new BoxSpace(data.action.shape, [-2], [2]);
    const policy = await OnnxPolicy.create(graph, weights(1, 1), { space, seed: 5 });
    const rows = (t) => Array.from({ length: data.batch }, (_, r) => {
      let obs = null;                      // each row nested as the space is, from its leaves' key paths
      data.leaves[t].forEach(([path, values]) => {
        if (path.length === 0) { obs = values[r]; return; }
        obs ??= typeof path[0] === "number" ? [] : {};
        let node = obs;
        path.slice(0, -1).forEach((part, i) => { node = node[part] ??= typeof path[i + 1] === "number" ? [] : {}; });
        node[path.at(-1)] = values[r];
      });
      return obs;
    });
    const out = { logits: [], stateful: policy.stateful, acted: [] };
    let states;
    for (let t = 0; t < data.steps; t++) {
      const result = await policy.forward(rows(t), states);
      out.logits.push(result.distInputs.map((row) => Array.from(row)));
      const taken = await policy.act(rows(t)[0], states?.[0]);   // row 0 alone, from the same state
      out.acted.push({ action: typeof taken.action === "number" ? taken.action : Array.from(taken.action),
                       logp: taken.logp, distInputs: Array.from(taken.distInputs) });
      states = result.stateOut ?? undefined;
    }
    policy.setWeights(weights(1.5, 2));    // a SET_STATE: the same session, new inputs
    out.updated = (await policy.forward(rows(0))).distInputs.map((row) => Array.from(row));
    policy.setWeights(weights(1, 1));      // an older set is ignored
    out.afterOlder = (await policy.forward(rows(0))).distInputs.map((row) => Array.from(row));
    return out;
  }
"""
GRAPH_NODE = """
  import { readFileSync, writeFileSync } from "node:fs";
  import * as rlinks from "rlinks-client";
  %s
  const work = process.argv[1];
  const out = await runGraph(rlinks, readFileSync(`${work}/graph.onnx`), JSON.parse(readFileSync(`${work}/data.json`, "utf8")));
  writeFileSync(`${work}/out.json`, JSON.stringify(out));
""" % GRAPH_RUN
# A page that runs it in a browser: the package's sources and onnxruntime-web's ESM build through an import map.
GRAPH_PAGE = """<!doctype html>
<script type="importmap">
  {"imports": {"rlinks-client": "/js/src/index.js",
               "onnxruntime-web": "/js/node_modules/onnxruntime-web/dist/ort.wasm.min.mjs"}}
</script>
<script type="module">
  import * as rlinks from "rlinks-client";
  %s
  try {
    const ort = await import("onnxruntime-web");
    ort.env.wasm.wasmPaths = "/js/node_modules/onnxruntime-web/dist/";
    const graph = new Uint8Array(await (await fetch("graph.onnx")).arrayBuffer());
    window.result = { out: await runGraph(rlinks, graph, await (await fetch("data.json")).json()) };
  } catch (error) {
    window.result = { error: String(error.stack ?? error) };
  }
</script>
""" % GRAPH_RUN
# A page that connects to the learner at ?address=... and puts what came of it in window.result.
CONNECT_PAGE = """<!doctype html>
<script type="importmap">{"imports": {"rlinks-client": "/js/src/index.js"}}</script>
<script type="module">
  import { Client, ConnectFailed } from "rlinks-client";
  const client = new Client(new URLSearchParams(location.search).get("address"),
                            { retryAttempts: 5, connectWaitMs: 60000, warn: () => {} });
  try {
    await client.getState();
    window.result = { ok: true };
  } catch (error) {
    window.result = { refused: error instanceof ConnectFailed, error: `${error.name}: ${error.message}` };
  } finally {
    client.close();
  }
</script>
"""
# puppeteer-core with the system's Chromium: open the page, print what it put in window.result.
GRAPH_BROWSER = """
  import puppeteer from "puppeteer-core";
  const [chromium, url] = process.argv.slice(1);
  const browser = await puppeteer.launch({ executablePath: chromium, headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
  try {
    const page = await browser.newPage();
    await page.goto(url, { waitUntil: "load" });
    await page.waitForFunction(() => window.result !== undefined, { timeout: 120000 });
    console.log(JSON.stringify(await page.evaluate(() => window.result)));
  } finally {
    await browser.close();
  }
"""


def run_graph_in_chromium(node: str, work: Path) -> dict:
    """GRAPH_PAGE in headless Chromium, served over HTTP with clients/js at /js/ and *work*'s files at /."""
    result = page_in_chromium(node, work, GRAPH_PAGE, "a policy graph run in headless Chromium")
    assert "error" not in result, result["error"]
    return result["out"]


def page_in_chromium(node: str, work: Path, page: str, purpose: str, query: str = "") -> dict:
    """``page`` (index.html) in headless Chromium, served over HTTP with clients/js at /js/ and *work*'s files
    at /, opened with ``query``: what it put in ``window.result``."""
    import functools
    import http.server
    import threading

    from test_web_game import chromium_path

    chromium = chromium_path(purpose)
    (work / "js").symlink_to(PACKAGE)
    (work / "index.html").write_text(page)
    handler = functools.partial(type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
                                directory=str(work))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done = subprocess.run([node, "--input-type=module", "-e", GRAPH_BROWSER, chromium,
                               f"http://127.0.0.1:{server.server_address[1]}/index.html{query}"],
                              cwd=PACKAGE, capture_output=True, text=True, timeout=240)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def graph_case(case: str):
    """A small module of RLlib's (PPO's catalog for images, Dict and Tuple observations), and its exported graph."""
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rlinks_rllib.server.graph_export import export_policy_graph
    from rlinks_rllib.training.multi_input import MultiInputPPOCatalog

    conv = dict(conv_filters=[[4, [4, 4], 4], [8, [4, 4], 4]], fcnet_hiddens=[16], fusionnet_hiddens=[16])
    observation, action, model = {
        "image": (gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), gym.spaces.Discrete(3), conv),
        "dict": (gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
                                  "state": gym.spaces.Tuple((gym.spaces.Discrete(3),
                                                             gym.spaces.Box(-1, 1, (4,), np.float32)))}),
                 gym.spaces.Box(-2.0, 2.0, (2,), np.float32), conv),
        "lstm": (gym.spaces.Box(-1, 1, (5,), np.float32), gym.spaces.Discrete(4),
                 dict(use_lstm=True, lstm_cell_size=8, fcnet_hiddens=[8], max_seq_len=4)),
    }[case]
    config = (PPOConfig().environment(observation_space=observation, action_space=action)
              .rl_module(rl_module_spec=RLModuleSpec(catalog_class=MultiInputPPOCatalog),
                         model_config=DefaultModelConfig(**model)))
    module = config.get_rl_module_spec(inference_only=True).build()
    return observation, action, module, export_policy_graph(module)


@pytest.mark.parametrize("case, runtime", [("image", "node"), ("dict", "node"), ("lstm", "node"), ("image", "chromium")])
@pytest.mark.timeout(300)
def test_the_policy_graph_gives_pythons_action_dist_inputs(node, case, runtime, tmp_path):
    """onnxruntime-web (under Node, and in headless Chromium) and Python's OnnxPolicy (onnxruntime) run a graph alike.

    The same graph, weights and observations (an image, a Dict holding a Tuple, an LSTM's state carried
    from step to step) give the same action_dist_inputs; a newer weight set (a SET_STATE) fed to the same
    session changes them as it changes Python's, an older one is ignored; act()'s log-probability is the
    distribution's.
    """
    pytest.importorskip("onnxruntime")
    from rlinks_rllib.client.policies.onnx_policy import OnnxPolicy
    from rlinks_rllib.protocol.spaces import describe_space, leaves

    observation, action, module, graph = graph_case(case)
    params = {name: value.detach().numpy() for name, value in module.state_dict().items()}
    paths = [path for path, _ in leaves(describe_space(observation))]
    observation.seed(3)
    samples = [[observation.sample() for _ in range(GRAPH_BATCH)] for _ in range(GRAPH_STEPS)]

    def leaf(sample, path):
        for part in path:
            sample = sample[part]
        return np.asarray(sample)

    (tmp_path / "graph.onnx").write_bytes(graph)
    (tmp_path / "data.json").write_text(json.dumps({
        "params": {name: [list(value.shape), value.ravel().tolist()] for name, value in params.items()},
        "leaves": [[[list(path), [leaf(s, path).ravel().tolist() if leaf(s, path).ndim else leaf(s, path).item()
                                  for s in step]] for path in paths] for step in samples],
        "action": {"kind": "discrete", "n": int(action.n)} if hasattr(action, "n")
        else {"kind": "box", "shape": list(action.shape)},
        "batch": GRAPH_BATCH, "steps": GRAPH_STEPS,
    }))
    if runtime == "chromium":
        out = run_graph_in_chromium(node, tmp_path)
    else:
        done = subprocess.run([node, "--input-type=module", "-e", GRAPH_NODE, str(tmp_path)], cwd=PACKAGE,
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads((tmp_path / "out.json").read_text())

    space = {"kind": "discrete", "n": int(action.n)} if hasattr(action, "n") else action
    python = OnnxPolicy(graph, params, space)
    assert out["stateful"] == python.stateful == (case == "lstm")

    def stacked(step):
        return {path: np.stack([leaf(s, path) for s in step]) for path in paths}

    def nest(batches):
        if paths == [()]:
            return batches[()]
        return {"camera": batches[("camera",)], "state": [batches[("state", 0)], batches[("state", 1)]]}

    state = python.initial_state(GRAPH_BATCH) if python.stateful else None
    for t, step in enumerate(samples):
        result = python.compute_actions(nest(stacked(step)), state=state)
        np.testing.assert_allclose(out["logits"][t], result.action_dist_inputs, rtol=1e-4, atol=1e-5)
        state = result.state_out
        acted = out["acted"][t]
        np.testing.assert_allclose(acted["distInputs"], result.action_dist_inputs[0], rtol=1e-4, atol=1e-5)
        dist = np.asarray(acted["distInputs"], np.float64)
        if hasattr(action, "n"):
            want = dist[acted["action"]] - np.log(np.exp(dist).sum())
        else:
            mean, log_std = np.split(dist, 2)
            z = (np.asarray(acted["action"]) - mean) / np.exp(log_std)
            want = float(np.sum(-0.5 * z * z - log_std - 0.5 * np.log(2 * np.pi)))
        assert acted["logp"] == pytest.approx(want, abs=1e-4)
    first = nest(stacked(samples[0]))
    initial = python.initial_state(GRAPH_BATCH) if python.stateful else None
    np.testing.assert_allclose(out["afterOlder"], out["updated"])
    python.set_params({name: value * 1.5 for name, value in params.items()})
    updated = python.action_dist_inputs(first, initial)
    np.testing.assert_allclose(out["updated"], updated, rtol=1e-4, atol=1e-5)
    assert not np.allclose(out["updated"], out["logits"][0])  # step 0 again, with the old weights


def shares_from_node(node: str, config, source: str, share: int, new_weights) -> tuple:
    """A real RLinkEnvRunner (in this process, sampled by hand) for *config*, and a Node client running *source*.

    Takes two on-policy shares of *share* steps, after each giving the runner ``new_weights(runner)``
    (numbered 1, 2: the second is what the client's last report waits for), and waits for the client.

    Returns:
        (the client's last line as JSON, [share, share] as lists of episodes, [the weights after each share],
        the runner's transport stats, its module)
    """
    from rlinks_rllib import RLinkEnvRunner

    runner = RLinkEnvRunner(config=config, worker_index=0)
    client = None
    try:
        client = subprocess.Popen([node, "--input-type=module", "-e", source, f"127.0.0.1:{runner.address[1]}"],
                                  cwd=PACKAGE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        shares, weights = [], []
        for seq_no in (1, 2):
            episodes, deadline = [], time.monotonic() + 120
            while sum(len(e) for e in episodes) < share and time.monotonic() < deadline and client.poll() is None:
                episodes += runner.sample()
            shares.append(episodes)
            weights.append(new_weights(runner))
            runner.set_state({"rl_module": weights[-1], "weights_seq_no": seq_no})
        out, err = client.communicate(timeout=120)
        assert client.returncode == 0, err[-3000:]
        return json.loads(out.strip().splitlines()[-1]), shares, weights, runner.get_transport_stats(), runner.module
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        runner.stop()


IMAGE_SHAPE = (16, 16, 3)
IMAGE_SCRIPT = """
    import { EnvClient } from "rlinks-client";
    const client = new EnvClient(process.argv[1], { seed: 2, timeoutMs: 60000, retryAttempts: 1, inference: "local" });
    const image = (t) => Uint8Array.from({ length: %(size)d }, (_, i) => (i * 7 + t * 13) %% 256);
    let obs = image(0);
    for (let t = 0; t < %(steps)d; t++) {
      await client.act(obs);
      const next = image(t + 1), done = (t + 1) %% 20 === 0;
      await client.report(1, next, done, false);
      obs = done ? image(t + 1000) : next;
    }
    await client.close();
    console.log(JSON.stringify({ policy: client.policy.constructor.name, mode: client.mode, stats: client.stats }));
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_image_module_runs_here_as_its_graph_against_a_real_runner(node, ray_local):
    """A Node client runs a real PPO runner's CNN (16x16x3 uint8 images) locally, through its policy graph.

    The runner (in this process, sampled by hand) exports the module and sends it to the client, which
    offered policy_graph; the chunks pass the runner's checks, their observations are the images as
    uint8, and each step's action_dist_inputs and action_logp are what the runner's module gives for
    that image and action: before and after the SET_STATE of new weights (all scaled by 0.5) between
    the two shares of the update.
    """
    import gymnasium as gym
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rlinks_rllib.training.multi_input import MultiInputPPOCatalog

    share = 60
    config = (
        PPOConfig()
        .environment(observation_space=gym.spaces.Box(0, 255, IMAGE_SHAPE, np.uint8),
                     action_space=gym.spaces.Discrete(3), env_config={"port": 0})
        .rl_module(rl_module_spec=RLModuleSpec(catalog_class=MultiInputPPOCatalog),  # it scales uint8 images
                   model_config=DefaultModelConfig(conv_filters=[[4, [4, 4], 4], [8, [4, 4], 4]], fcnet_hiddens=[16]))
        .env_runners(num_env_runners=0, sample_timeout_s=4.0)
        .training(train_batch_size_per_learner=share)
    )
    original = {}

    def scaled(runner):  # the runner's first weights, all halved
        original.update(original or runner.module.get_state())
        return {name: value * 0.5 for name, value in original.items()}

    source = IMAGE_SCRIPT % {"size": int(np.prod(IMAGE_SHAPE)), "steps": 2 * share}
    result, shares, weights, stats, module = shares_from_node(node, config, source, share, scaled)
    assert result["policy"] == "OnnxPolicy" and result["mode"] == "local"
    assert stats["errors_total"] == 0
    assert [sum(len(e) for e in batch) for batch in shares] == [share, share]
    for batch, params in zip(shares, (original, weights[0])):
        module.set_state({k: torch.as_tensor(v) for k, v in params.items()})
        for episode in batch:
            obs = np.asarray(episode.get_observations())[:-1]
            assert obs.dtype == np.uint8 and obs.shape == (len(episode), *IMAGE_SHAPE)
            with torch.no_grad():
                want = module.forward_inference({Columns.OBS: torch.as_tensor(obs)})[Columns.ACTION_DIST_INPUTS].numpy()
            dist = np.asarray(episode.get_extra_model_outputs("action_dist_inputs"))
            np.testing.assert_allclose(dist, want, rtol=1e-4, atol=1e-5)
            actions = np.asarray(episode.get_actions())
            log_softmax = want - np.log(np.exp(want).sum(axis=1, keepdims=True))
            np.testing.assert_allclose(np.asarray(episode.get_extra_model_outputs("action_logp")),
                                       log_softmax[np.arange(len(episode)), actions], rtol=1e-4, atol=1e-5)


LSTM_SCRIPT = """
    import { EnvClient } from "rlinks-client";
    const client = new EnvClient(process.argv[1], { seed: 4, timeoutMs: 60000, retryAttempts: 1, inference: "local" });
    const observe = (t) => [Math.sin(t / 3), Math.cos(t / 5), (t %% 30) / 30, 0.5];
    let obs = observe(0);
    for (let t = 0; t < %(steps)d; t++) {
      await client.act(obs);
      const done = (t + 1) %% 30 === 0;
      await client.report(1, observe(t + 1), done, false);
      obs = observe(t + 1);
    }
    await client.close();
    console.log(JSON.stringify({ policy: client.policy.constructor.name, stateful: client.policy.stateful }));
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_recurrent_module_runs_here_with_its_state_carried_against_a_real_runner(node, ray_local):
    """A Node client runs a real PPO runner's LSTM through its policy graph, its state carried from step to step.

    Episodes of 30 steps over shares of 50: the second share's first chunk continues an episode cut by
    the first, carrying the state_out of the step before it as its lookback. Every chunk's
    action_dist_inputs are the runner module's over the chunk's observations, from the initial state
    (a new episode) or that lookback (a continued one), which is the state_out the first chunk ended with.
    """
    import gymnasium as gym
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rlinks_rllib.training.multi_input import MultiInputPPOCatalog

    share = 50
    config = (
        PPOConfig()
        .environment(observation_space=gym.spaces.Box(-1, 1, (4,), np.float32), action_space=gym.spaces.Discrete(2),
                     env_config={"port": 0})
        .rl_module(rl_module_spec=RLModuleSpec(catalog_class=MultiInputPPOCatalog),
                   model_config=DefaultModelConfig(use_lstm=True, lstm_cell_size=8, fcnet_hiddens=[8], max_seq_len=10))
        .env_runners(num_env_runners=0, sample_timeout_s=4.0)
        .training(train_batch_size_per_learner=share)
    )
    result, shares, _, stats, module = shares_from_node(node, config, LSTM_SCRIPT % {"steps": 2 * share}, share,
                                                        lambda runner: runner.module.get_state())
    assert result == {"policy": "OnnxPolicy", "stateful": True}
    assert stats["errors_total"] == 0
    assert [[len(e) for e in episodes] for episodes in shares] == [[30, 20], [10, 30, 10]]
    ended = {}  # episode id -> the state_out its last chunk ended with
    initial = {k: v.unsqueeze(0) for k, v in module.get_initial_state().items()}
    continued = 0
    for episode in shares[0] + shares[1]:
        state_out = episode.get_extra_model_outputs("state_out")
        if episode.t_started:
            lookback = episode.get_extra_model_outputs("state_out", indices=-1, neg_index_as_lookback=True)
            for key, value in ended[episode.id_].items():
                np.testing.assert_allclose(np.asarray(lookback[key]), value, rtol=1e-6)
            state_in = {k: torch.as_tensor(np.asarray(v))[None] for k, v in ended[episode.id_].items()}
            continued += 1
        else:
            state_in = initial
        obs = torch.as_tensor(np.asarray(episode.get_observations())[:-1])[None]
        with torch.no_grad():
            ref = module.forward_inference({Columns.OBS: obs, Columns.STATE_IN: state_in})
        np.testing.assert_allclose(np.asarray(episode.get_extra_model_outputs("action_dist_inputs")),
                                   ref[Columns.ACTION_DIST_INPUTS][0].numpy(), rtol=1e-4, atol=1e-5)
        for key, value in ref[Columns.STATE_OUT].items():
            np.testing.assert_allclose(np.asarray(state_out[key])[-1], value[0].numpy(), rtol=1e-4, atol=1e-5)
        ended[episode.id_] = {k: np.asarray(v)[-1] for k, v in state_out.items()}
    assert continued == 1


SIDES_CONFIG = """
description: PPO on Sides, an 8x8 grey image bright on its left or right half; the action names the side
algorithm: PPO
spaces:
  observation: {box: {low: 0, high: 255, shape: [8, 8, 1], dtype: uint8}}
  action: {discrete: 2}
training: {lr: 0.001, train_batch_size_per_learner: 400, minibatch_size: 100, num_epochs: 6, gamma: 0.9}
model: {conv_filters: [[8, [4, 4], 4]], fcnet_hiddens: [32], fusionnet_hiddens: [32]}
env_runners: {num_env_runners: 1, sample_timeout_s: 60}
learners: {num_learners: 0}
rlinks: {host: 127.0.0.1, port: 5555}
stop: {reward: 9, iters: 30}
"""
SIDES_CLIENT = """
    import { EnvClient } from "rlinks-client";
    const client = new EnvClient(process.argv[1], { inference: "local", seed: Number(process.argv[2]) });
    const image = (side) => Uint8Array.from({ length: 64 }, (_, i) => ((i % 8 < 4) === (side === 0) ? 255 : 0));
    const ending = await client.run(async () => {
      for (;;) {
        let side = Math.random() < 0.5 ? 0 : 1;
        let obs = image(side);
        for (let t = 0; t < 10; t++) {
          const action = await client.act(obs);
          const next = Math.random() < 0.5 ? 0 : 1;
          await client.report(action === side ? 1 : 0, image(next), false, t === 9);
          side = next;
          obs = image(next);
        }
      }
    });
    console.log(JSON.stringify({ ending, policy: client.policy.constructor.name, steps: client.stats.steps }));
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_js_clients_train_a_cnn_on_images_through_its_graph(node, tmp_path):
    """`rlinks learner` with a CNN on 8x8 uint8 images; 2 Node clients run it as its graph and it learns.

    Sides: each step's image is bright on one half and the action that names that half scores 1, ten
    steps an episode: random play scores 5, the target is 9.
    """
    config = tmp_path / "sides.yaml"
    config.write_text(SIDES_CONFIG)
    started = time.monotonic()
    reached, outputs, log = train_with_clients(
        config, tmp_path, 480,
        lambda address: [[node, "--input-type=module", "-e", SIDES_CLIENT, address, str(seed)] for seed in range(2)])
    assert reached >= 9, log
    for out in outputs:
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["ending"] == "training_ended" and summary["policy"] == "OnnxPolicy", out[-2000:]
    print(f"Node clients trained a CNN on images to {reached:.2f} in {time.monotonic() - started:.0f} s")
