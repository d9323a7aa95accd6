"""A live RLinkEnvRunner inside a real PPO keeps training one good client while strangers attack it.

Every attack runs on its own loopback connection against the runner's port
while the algorithm trains; each must end that connection with the right
``ERROR`` code and be counted once in the runner's ``errors`` metrics, and
nothing may reach the inbox, run code, or stop the good client. The limits
are set short here (``frame_timeout_s``, ``handshake_timeout_s``,
``max_clients``) so the slow attacks finish in seconds.
"""

from __future__ import annotations

import collections
import pickle
import select
import socket
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest

from harness import ppo_config, running
from rlinks_rllib.client import RLinkClient
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.protocol import FrameDecoder, encode_message, make_offer
from rlinks_rllib.protocol.episodes import build_episode_state
from rlinks_rllib.server.env_runner import runner_addresses

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MAX_CLIENTS = 40
FLOOD = 300
LIMITS = dict(max_clients=MAX_CLIENTS, handshake_timeout_s=2.0, frame_timeout_s=1.5, max_steps_per_chunk=1000,
              max_episodes_per_message=64)
PING = encode_message({"type": "PING", "rlinks": make_offer(["ack"], agent="attacker")})


def frame(body: bytes) -> bytes:
    return b"%08d" % len(body) + body


def packed(message) -> bytes:
    return frame(msgpack.packb(message, use_bin_type=True))


class _TouchOnUnpickle:
    """Unpickling this creates a file: the stand-in for any code a peer could make us run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def pickle_frame(target: Path) -> bytes:
    """EPISODES whose observations are msgpack-numpy's object array: pickle bytes that touch ``target``."""
    array = {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": [1],
             b"data": pickle.dumps(_TouchOnUnpickle(target))}
    buffer = {"data": array, "lookback": 0, "finalized": True, "space": None}
    return packed({"type": "EPISODES", "episodes": [{"id_": "x", "observations": buffer}]})


def cartpole_state(steps: int, name: str = "big") -> dict:
    return build_episode_state(name, np.zeros((steps + 1, 4), np.float32), np.zeros(steps, np.int64),
                               np.ones(steps, np.float32),
                               extra_model_outputs={"action_logp": np.zeros(steps, np.float32),
                                                    "action_dist_inputs": np.zeros((steps, 2), np.float32)})


def misshapen_episode_frame() -> bytes:
    """A well-formed episode whose observations have 3 numbers where CartPole has 4."""
    state = build_episode_state("bad", np.zeros((3, 3), np.float32), np.zeros(2, np.int64), np.ones(2, np.float32),
                                extra_model_outputs={"action_logp": np.zeros(2, np.float32),
                                                     "action_dist_inputs": np.zeros((2, 2), np.float32)})
    return encode_message({"type": "EPISODES", "episodes": [state]})


# ----------------------------------------------------------------------
# The attacker's side of one connection


def read_until_closed(sock: socket.socket, timeout: float) -> list[dict]:
    """Every message the server sends until it closes (bounded by ``timeout``)."""
    decoder = FrameDecoder(validate=False)
    messages: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        messages += decoder.feed(data)
    return messages


def handshake_on(sock: socket.socket, timeout: float = 10.0) -> None:
    """PING and wait for the PONG, as a client must before sending anything else."""
    sock.sendall(PING)
    decoder = FrameDecoder(validate=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(4096)
        assert data, "the runner closed the connection during the handshake"
        if any(m.get("type") == "PONG" for m in decoder.feed(data)):
            return
    raise AssertionError("no PONG")


def attack(port: int, payload: bytes, *, handshake: bool, timeout: float = 10.0) -> str | None:
    """Connect, optionally do the handshake, send ``payload``; return the code of the ERROR that ends it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        if handshake:
            handshake_on(sock, timeout)
        try:
            sock.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-send: the ERROR is still to be read
        replies = read_until_closed(sock, timeout)
    errors = [m for m in replies if m.get("type") == "ERROR"]
    return errors[-1]["code"] if errors else None


def dribble(port: int, payload: bytes, *, every_s: float = 1.0, timeout: float = 10.0) -> str | None:
    """Handshake, then send ``payload`` one byte every ``every_s`` seconds until the server cuts us off."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        handshake_on(sock, timeout)
        deadline = time.monotonic() + timeout
        for byte in payload:
            if time.monotonic() > deadline:
                break
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            readable, _, _ = select.select([sock], [], [], every_s)
            if readable:
                replies = read_until_closed(sock, 2.0)
                if any(m.get("type") == "ERROR" for m in replies):
                    return [m for m in replies if m.get("type") == "ERROR"][-1]["code"]
        return None


def flood(port: int, count: int, timeout: float = 20.0) -> int:
    """Open ``count`` connections, say nothing, and hold each until the server closes it; return how many it closed."""
    socks = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        open_ = {s.fileno(): s for s in socks}
        deadline = time.monotonic() + timeout
        while open_ and time.monotonic() < deadline:
            readable, _, _ = select.select(list(open_.values()), [], [], 0.2)
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data:
                    del open_[sock.fileno()]
        return count - len(open_)
    finally:
        for sock in socks:
            sock.close()


# ----------------------------------------------------------------------
# The good client


def cartpole_chunks(builder: EpisodeBuilder, rng: np.random.Generator, steps: int) -> list[dict]:
    for _ in range(steps):
        if builder.episode_id is None:
            builder.reset(rng.normal(size=4).astype(np.float32))
        builder.step(int(rng.integers(2)), 1.0, rng.normal(size=4).astype(np.float32), rng.random() < 1 / 30, False,
                     extra={"action_logp": np.float32(-0.69), "action_dist_inputs": np.zeros(2, np.float32)})
    return builder.take_chunks()


class GoodClient(threading.Thread):
    """An on-policy client that sends what the runner asks for until told to stop."""

    def __init__(self, address: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.stop_event = address, stop
        self.steps_sent = 0
        self.updates = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        builder, rng = EpisodeBuilder(), np.random.default_rng(0)
        try:
            client = RLinkClient(self.address, timeout=60.0)
            try:
                update = client.get_state()
                while not self.stop_event.is_set():
                    chunks = cartpole_chunks(builder, rng, update.want_steps)
                    self.steps_sent += sum(c["t"] - c["t_started"] for c in chunks)
                    update = client.send_episodes_and_get_state(chunks)
                    self.updates += 1
            finally:
                client.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            if not self.stop_event.is_set():
                self.error = exc


# ----------------------------------------------------------------------


def test_runner_survives_and_counts_every_attack_while_a_good_client_trains(ray_local, tmp_path):
    config = ppo_config(num_env_runners=1, train_batch=500, num_epochs=1, minibatch_size=250, env_config=LIMITS)
    pwned = tmp_path / "pwned"
    with running(config.build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        stop = threading.Event()
        good = GoodClient(f"{host}:{port}", stop)
        good.start()

        got: dict[str, str | None] = {}
        expected_codes = {
            # Before any handshake.
            # (A stream that starts with "GET " is a WebSocket upgrade: test_websocket_hostile.py.)
            "garbage": ("bad_frame", lambda: attack(port, b"HELO x.example\r\nHost: x\r\n\r\n", handshake=False)),
            "header with spaces": ("bad_frame", lambda: attack(port, b" 0000011" + PING[8:], handshake=False)),
            "header with a sign": ("bad_frame", lambda: attack(port, b"+0000011" + PING[8:], handshake=False)),
            "huge length before PING": ("frame_too_large", lambda: attack(port, b"99999999", handshake=False)),
            "EPISODES before PING": ("unsupported_message",
                                     lambda: attack(port, packed({"type": "EPISODES", "episodes": []}), handshake=False)),
            "malformed offer": ("invalid_message",
                                lambda: attack(port, packed({"type": "PING", "rlinks": "x"}), handshake=False)),
            # After the handshake.
            "length over the limit": ("frame_too_large", lambda: attack(port, b"%08d" % (65 << 20), handshake=True)),
            "length then silence": ("limit_exceeded", lambda: attack(port, b"%08d" % (8 << 20), handshake=True)),
            "one byte a second": ("limit_exceeded", lambda: dribble(port, misshapen_episode_frame())),
            "nested 5000 deep": ("bad_body", lambda: attack(port, frame(b"\x91" * 5000 + b"\xc0"), handshake=True)),
            "pickle": ("unsafe_payload", lambda: attack(port, pickle_frame(pwned), handshake=True)),
            "wrong field type": ("invalid_message",
                                 lambda: attack(port, packed({"type": "EPISODES", "episodes": "all of them"}),
                                                handshake=True)),
            "seq as bool": ("invalid_message",
                            lambda: attack(port, packed({"type": "EPISODES", "episodes": [], "seq": True}),
                                           handshake=True)),
            "episode off the spaces": ("bad_episode", lambda: attack(port, misshapen_episode_frame(), handshake=True)),
            "too many steps in a chunk": ("bad_episode", lambda: attack(
                port, encode_message({"type": "EPISODES", "episodes": [cartpole_state(1001)]}), handshake=True)),
            "too many chunks in a message": ("limit_exceeded", lambda: attack(
                port, encode_message({"type": "EPISODES", "episodes": [cartpole_state(1, f"e{i}") for i in range(65)]}),
                handshake=True)),
            "server message from a client": ("unsupported_message",
                                             lambda: attack(port, packed({"type": "SET_STATE", "state": {}}),
                                                            handshake=True)),
            "old API GET_ACTION": ("unsupported_message",
                                   lambda: attack(port, packed({"type": "GET_ACTION", "observation": [0.0]}),
                                                  handshake=True)),
            "unknown type": ("unsupported_message",
                             lambda: attack(port, packed({"type": "RUN_THIS", "code": "rm -rf /"}), handshake=True)),
        }
        flooded: list[int] = []

        def attacker() -> None:
            for name, (_, run) in expected_codes.items():
                got[name] = run()
            flooded.append(flood(port, FLOOD))

        attack_thread = threading.Thread(target=attacker, daemon=True)
        started = time.monotonic()
        attack_thread.start()
        results = []
        while attack_thread.is_alive() or len(results) < 4:
            assert time.monotonic() - started < 120, "training or the attacks did not finish"
            results.append(algo.train())
        attack_thread.join(timeout=30)
        stats = algo.env_runner_group.foreach_env_runner(lambda r: r.get_transport_stats(),
                                                         local_env_runner=False)[0]
        stop.set()

    good.join(timeout=30)
    assert good.error is None, repr(good.error)
    sampled = [r["env_runners"]["num_env_steps_sampled_lifetime"] for r in results]
    assert all(b - a >= 500 for a, b in zip([0] + sampled, sampled)), sampled
    assert good.updates >= len(results)

    # Each attack got the ERROR it deserved...
    assert got == {name: code for name, (code, _) in expected_codes.items()}
    # ...and the pickle never ran (while the payload itself is live).
    assert not pwned.exists()
    pickle.loads(pickle.dumps(_TouchOnUnpickle(tmp_path / "control")))
    assert (tmp_path / "control").exists()
    # Every flood connection was closed: refused at once, or at the handshake deadline.
    assert flooded == [FLOOD]
    assert stats["connections_refused"] >= FLOOD - MAX_CLIENTS

    # The runner counted each rejection once, by code, and nothing else went wrong.
    counted = collections.Counter(code for code, _ in expected_codes.values())
    counted["limit_exceeded"] += FLOOD
    assert stats["errors"] == dict(counted)
    # Only the good client's steps got in.
    assert sampled[-1] <= stats["steps_in"] <= good.steps_sent
    assert stats["clients_connected"] == 1
