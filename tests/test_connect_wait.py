"""Clients wait (bounded) for a learner that does not listen yet: ``connect_wait`` (DESIGN.md, any start order).

A simulator started beside its learner (Docker Compose, a pod, a job
script, two terminals) tries before the learner listens, and a learner takes
10-30 s to. Every client keeps trying for ``connect_wait`` seconds (60 by
default, ``$RLINKS_CONNECT_WAIT_S``), says so in one line, and backs off as
for a reconnection; ``connect_wait=0`` fails after ``retry_attempts`` as
before. Here: the Python client and the directory lookup against a scripted
server that starts late, the JavaScript client the same way, and a script in
RLlib's old ``PolicyClient`` style started before a real ``rlinks learner``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from peers import RLinkTestServer, free_port
from rlinks_rllib.client import ClientError, ConnectFailed, RLinkClient, ask_directory
from rlinks_rllib.client.network.retry import CONNECT_WAIT_ENV, DEFAULT_CONNECT_WAIT_S, connect_wait
from test_js_client import node  # noqa: F401  (the fixture: node with clients/js's dependencies)

ROOT = Path(__file__).resolve().parents[1]
QUICK = dict(timeout=5.0, connect_timeout=2.0, backoff_initial=0.02, backoff_cap=0.1)
WAIT_LINE = "waiting up to"


def _late_server(port: int, after_s: float) -> tuple[threading.Timer, list[RLinkTestServer]]:
    """An RLinkTestServer that starts listening on ``port`` ``after_s`` seconds from now."""
    started: list[RLinkTestServer] = []
    timer = threading.Timer(after_s, lambda: started.append(RLinkTestServer(port=port).start()))
    timer.start()
    return timer, started


def _stop(timer: threading.Timer, started: list[RLinkTestServer]) -> None:
    timer.cancel()
    timer.join(10)
    for server in started:
        server.stop()


def test_the_default_is_60_s_and_the_variable_sets_it(monkeypatch):
    monkeypatch.delenv(CONNECT_WAIT_ENV, raising=False)
    assert DEFAULT_CONNECT_WAIT_S == 60.0
    assert RLinkClient("127.0.0.1:1").connect_wait == 60.0
    monkeypatch.setenv(CONNECT_WAIT_ENV, "7.5")
    assert RLinkClient("127.0.0.1:1").connect_wait == 7.5
    assert RLinkClient("127.0.0.1:1", connect_wait=0).connect_wait == 0.0  # the argument wins
    for bad in ("soon", "-1", "inf"):
        monkeypatch.setenv(CONNECT_WAIT_ENV, bad)
        with pytest.raises(ValueError, match=CONNECT_WAIT_ENV):
            connect_wait()
    with pytest.raises(ValueError, match="connect_wait"):
        RLinkClient("127.0.0.1:1", connect_wait=-1)


def test_a_client_waits_past_its_attempts_for_a_learner_that_starts_late(caplog):
    port = free_port()
    timer, started = _late_server(port, 1.0)
    try:
        with caplog.at_level(logging.WARNING):
            with RLinkClient(f"127.0.0.1:{port}", retry_attempts=1, connect_wait=30, **QUICK) as client:
                assert client.get_state().seq_no == 1
    finally:
        _stop(timer, started)
    lines = [r.getMessage() for r in caplog.records if WAIT_LINE in r.getMessage()]
    assert len(lines) == 1, lines  # one line, however many attempts
    assert f"for the learner at tcp://127.0.0.1:{port} to listen (connect_wait, ${CONNECT_WAIT_ENV})" in lines[0]


def test_connect_wait_0_fails_as_before_and_a_wait_that_ends_says_so(caplog):
    port = free_port()
    with caplog.at_level(logging.WARNING):
        with pytest.raises(ConnectFailed, match=r"after 2 attempt\(s\): .*is the learner running"):
            RLinkClient(f"127.0.0.1:{port}", retry_attempts=2, connect_wait=0, **QUICK).connect()
    assert not [r for r in caplog.records if WAIT_LINE in r.getMessage()]
    started = time.monotonic()
    with pytest.raises(ConnectFailed, match=r"and 0.5 s \(connect_wait"):
        RLinkClient(f"127.0.0.1:{port}", retry_attempts=1, connect_wait=0.5, **QUICK).connect()
    assert time.monotonic() - started < 10  # bounded (a wait of 0.5 s, plus one attempt)


def test_a_server_that_is_up_but_fails_the_handshake_is_not_waited_for():
    import socket as socketlib

    with socketlib.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        stop = threading.Event()

        def hang_up() -> None:  # takes each connection and closes it: up, but no learner
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                conn.close()

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        try:
            started = time.monotonic()
            with pytest.raises(ConnectFailed) as failed:
                RLinkClient(f"127.0.0.1:{port}", retry_attempts=2, connect_wait=30, **QUICK).connect()
            assert time.monotonic() - started < 20  # the usual attempts, not the 30 s wait
            assert "connect_wait" not in str(failed.value), failed.value
        finally:
            stop.set()
            thread.join(10)


def test_an_actor_says_it_waits_for_a_dataset(caplog):
    from rlinks_rllib.client.actor import RLinkActor

    port = free_port()
    with caplog.at_level(logging.WARNING):
        with pytest.raises(ConnectFailed, match=r"is the dataset running and is the port right"):
            RLinkActor(f"127.0.0.1:{port}", retry_attempts=1, connect_wait=0.3, **QUICK).client.connect()
    lines = [r.getMessage() for r in caplog.records if WAIT_LINE in r.getMessage()]
    assert len(lines) == 1 and f"for the dataset at tcp://127.0.0.1:{port}" in lines[0], lines


def test_the_directory_lookup_waits_too(caplog):
    port = free_port()
    timer, started = _late_server(port, 1.0)
    try:
        with caplog.at_level(logging.WARNING):
            # It reaches the late server (a runner, not a directory): the wait got it there.
            with pytest.raises(ClientError, match="not an rlinks directory"):
                ask_directory(f"127.0.0.1:{port}", timeout=5.0, connect_timeout=2.0, connect_wait=30)
    finally:
        _stop(timer, started)
    assert any(f"the directory at tcp://127.0.0.1:{port} to listen" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConnectFailed, match="could not connect"):
        ask_directory(f"127.0.0.1:{free_port()}", timeout=5.0, connect_timeout=1.0, connect_wait=0)


def test_the_javascript_client_waits_too(node):  # noqa: F811
    port = free_port()
    script = f"""
        import {{ Client, DEFAULT_CONNECT_WAIT_MS }} from "rlinks-client";
        const lines = [];
        const quick = {{ retryAttempts: 1, backoffInitialMs: 20, backoffCapMs: 100, warn: (t) => lines.push(t) }};
        const client = new Client("127.0.0.1:{port}", {{ ...quick, connectWaitMs: 30000 }});
        const state = await client.getState();
        client.close();
        let refused = "";
        try {{ await new Client("127.0.0.1:{free_port()}", {{ ...quick, connectWaitMs: 0 }}).connect(); }}
        catch (error) {{ refused = `${{error.name}}: ${{error.message}}`; }}
        const fromEnv = new Client("127.0.0.1:1").options.connectWaitMs;
        console.log(JSON.stringify({{ default: DEFAULT_CONNECT_WAIT_MS, fromEnv, lines, refused,
                                      seqNo: state.weights.seqNo ?? state.weights.weightsSeqNo ?? null }}));
    """
    timer, started = _late_server(port, 1.0)
    try:
        done = subprocess.run([node, "--input-type=module", "-e", script], cwd=ROOT / "clients" / "js",
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, CONNECT_WAIT_ENV: "12"})
    finally:
        _stop(timer, started)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["default"] == 60_000 and out["fromEnv"] == 12_000
    assert len(out["lines"]) == 1 and out["lines"][0].startswith(f"waiting up to 30 s for the learner at 127.0.0.1:{port}")
    assert out["refused"].startswith("ConnectFailed: could not connect") and "after 1 attempt(s):" in out["refused"]


def test_a_policy_client_script_started_before_its_learner_trains(tmp_path):
    """RLlib's old ``PolicyClient`` style, started 3 s before ``rlinks learner``: it waits, then trains."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", CONNECT_WAIT_ENV: "150"}  # a loaded CI host: Ray may start slowly
    client = subprocess.Popen([sys.executable, str(ROOT / "tests" / "policy_client_cartpole.py"),
                               "--address", f"127.0.0.1:{port}"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    learner = None
    log = open(tmp_path / "learner.log", "w+")
    try:
        time.sleep(3.0)
        assert client.poll() is None, client.communicate(timeout=10)[0]
        learner = subprocess.Popen([sys.executable, "-m", "rlinks_rllib", "learner", "--config", "ppo_cartpole",
                                    "--num-env-runners", "1", "--port", str(port), "--stop-iters", "2",
                                    "--output", str(tmp_path / "run")],
                                   cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        learner.wait(timeout=240)
        out, _ = client.communicate(timeout=90)
    finally:
        for proc in (client, learner):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        log.close()
    learned = (tmp_path / "learner.log").read_text()
    assert learner.returncode == 2, learned[-3000:]  # --stop-iters reached (before any --stop-reward)
    assert "iter    2" in learned or "iter 2" in learned, learned[-3000:]
    assert client.returncode == 0, out
    assert f"waiting up to 150 s for the learner at tcp://127.0.0.1:{port} to listen" in out, out
    assert out.count(WAIT_LINE) == 1, out
    assert "summary: mode=local" in out and "episodes=0 " not in out, out
