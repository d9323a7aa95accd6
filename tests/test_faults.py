"""Faults during real PPO training: a client killed mid-frame, a runner killed, the learner restarted.

Each test counts, per client, the env steps **sent** (first sends only),
**confirmed** (``ACK``\\ed by a runner) and, on the learner's side, **taken**
(returned by a runner's ``sample()`` into RLlib's training step, summed over
iterations), and asserts what the ``ack`` extension guarantees:

* A runner confirms a batch when ``sample()`` hands it to RLlib, never
  before. So at any quiet moment (no ``sample()`` running, no ACK in
  transit) the steps confirmed to all clients equal the steps RLlib took,
  exactly: ``confirmed == taken``.
* Nothing confirmed is lost and nothing is taken twice when a client dies,
  when a runner process is killed and Ray restarts it on the same port, or
  when the whole learner is stopped and restored from a checkpoint: steps
  that were still in a runner's inbox were not confirmed, so reliable
  clients resend them after reconnecting, and the new runner takes them.
* What is *not* guaranteed: a batch whose ``sample()`` returned but whose
  ACK never reached the client (the runner died in between) is resent and
  taken twice; a confirmed batch is "in RLlib", not "in a checkpoint", so
  the learner restored from an older checkpoint has not learned from the
  steps confirmed after it. These tests kill runners only between training
  iterations, so the first window never opens here. ``docs/SECURITY.md``
  says the same for users.

Ports are fixed (a free base found per test), since a restarted runner must
listen where its clients reconnect.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from harness import ROOT, ppo_config, running
from rlinks_rllib.client import ClientError, RLinkClient
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.server.env_runner import runner_addresses
from test_hostile_runner import cartpole_chunks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def free_port_base() -> int:
    """A base port whose runner 1 (``base + 1``) is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1] - 1


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class ReliableClient(threading.Thread):
    """An on-policy simulator that reconnects and resends, for as long as the test runs.

    :meth:`finish` closes the client from the test's thread (the one call
    an RLinkClient allows from another thread) and joins.
    """

    def __init__(self, address: str, seed: int) -> None:
        super().__init__(daemon=True, name=f"reliable-client-{seed}")
        # The retry budget (400 attempts, at most 0.5 s apart: over 200 s) outlasts the tests' own wait for
        # Ray to restart a killed runner (150 s): with 80 (about 40 s) a slow restart ended the client first.
        self.client = RLinkClient(address, reliable=True, timeout=60.0, connect_timeout=2.0, retry_attempts=400,
                                  backoff_initial=0.05, backoff_cap=0.5)
        self.rng = np.random.default_rng(seed)
        self.stopping = threading.Event()
        self.updates = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        builder = EpisodeBuilder()
        try:
            update = self.client.get_state()
            while not self.stopping.is_set():
                update = self.client.send_episodes_and_get_state(
                    cartpole_chunks(builder, self.rng, update.want_steps or 100))
                self.updates += 1
        except ClientError as exc:
            if not self.stopping.is_set():
                self.error = exc
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    @property
    def sent(self) -> int:
        return self.client.stats.steps_sent

    @property
    def confirmed(self) -> int:
        return self.client.stats.steps_acked

    def finish(self) -> None:
        self.stopping.set()
        self.client.close()
        self.join(timeout=30)
        assert not self.is_alive(), f"{self.name} did not stop"


def sampled(result: dict) -> int:
    """Env steps the runners' sample() handed to RLlib in one iteration (NaN, when no runner answered: 0)."""
    value = result["env_runners"].get("num_env_steps_sampled", 0)
    return 0 if value != value else int(value)


def taken(results: list[dict]) -> int:
    """Env steps the runners' sample() handed to RLlib, summed over iterations."""
    return sum(sampled(r) for r in results)


def transport_stats(algo) -> dict:
    return algo.env_runner_group.foreach_env_runner(lambda r: r.get_transport_stats(), local_env_runner=False)[0]


def check_books(clients: list[ReliableClient], results: list[dict]) -> dict:
    """Wait for the ACKs in transit, then return sent/confirmed/taken and assert confirmed == taken."""
    books = {"taken": taken(results)}
    wait_for(lambda: sum(c.confirmed for c in clients) == books["taken"], 20,
             f"confirmed == taken ({[c.confirmed for c in clients]} vs {books['taken']})")
    books.update(sent=sum(c.sent for c in clients), confirmed=sum(c.confirmed for c in clients))
    assert books["confirmed"] <= books["sent"]
    return books


_DOOMED = textwrap.dedent("""
    import socket, sys, time
    import numpy as np
    from rlinks_rllib.protocol import FrameDecoder, encode_message, make_offer
    from rlinks_rllib.protocol.episodes import build_episode_state
    sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    sock.sendall(encode_message({"type": "PING", "rlinks": make_offer(["ack"], client_id="doomed")}))
    decoder = FrameDecoder()
    while not decoder.feed(sock.recv(4096)):
        pass
    steps = 400
    state = build_episode_state("doomed-episode", np.zeros((steps + 1, 4), np.float32), np.zeros(steps, np.int64),
                                np.ones(steps, np.float32),
                                extra_model_outputs={"action_logp": np.zeros(steps, np.float32),
                                                     "action_dist_inputs": np.zeros((steps, 2), np.float32)})
    frame = encode_message({"type": "EPISODES", "episodes": [state], "seq": 1})
    sock.sendall(frame[: len(frame) // 2])
    print("HALF", len(frame), flush=True)
    time.sleep(120)
""")


def test_client_killed_mid_frame(ray_local):
    """SIGKILL a client process halfway through a frame: counted as bad_frame, none of it taken."""
    with running(ppo_config(num_env_runners=1, train_batch=500, num_epochs=1).build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        good = [ReliableClient(f"{host}:{port}", seed) for seed in range(2)]
        for client in good:
            client.start()
        doomed = subprocess.Popen([sys.executable, "-c", _DOOMED, str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                                  text=True)
        try:
            results = [algo.train()]
            assert doomed.stdout.readline().startswith("HALF")
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(timeout=10)
            wait_for(lambda: transport_stats(algo)["errors"].get("bad_frame") == 1, 10, "the runner to see the EOF")
            results += [algo.train() for _ in range(3)]
            books = check_books(good, results)
            stats = transport_stats(algo)
            # The good clients keep sending: what they sent by now bounds what the runner had then.
            sent_since = sum(c.sent for c in good)
        finally:
            if doomed.poll() is None:
                doomed.kill()
                doomed.wait(timeout=10)
            doomed.stdout.close()
            for client in good:
                client.finish()
    assert [c.error for c in good] == [None, None]
    assert stats["errors"] == {"bad_frame": 1}
    # The runner took in only what the good clients sent; what it hasn't handed to RLlib is unconfirmed.
    assert stats["steps_acked"] == books["taken"] == books["confirmed"]
    assert stats["steps_acked"] + stats["inbox_steps"] == stats["steps_in"] <= sent_since
    assert all(sampled(r) >= 500 for r in results)


@pytest.mark.parametrize("receipts", [False, True], ids=["confirmed-on-return", "receipts"])
def test_runner_killed_and_restarted_clients_reconnect_and_nothing_confirmed_is_lost(ray_local, receipts):
    """kill -9 the EnvRunner actor; Ray restarts it on the same port; training and the books go on."""
    import os

    from rlinks_rllib import RLinkReceipts

    base = free_port_base()
    config = ppo_config(num_env_runners=1, train_batch=500, num_epochs=1, env_config={"port": base})
    config.fault_tolerance(restart_failed_env_runners=True)
    if receipts:
        config.callbacks(RLinkReceipts)
    with running(config.build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        assert port == base + 1
        clients = [ReliableClient(f"{host}:{port}", seed) for seed in range(2)]
        for client in clients:
            client.start()
        try:
            results = [algo.train() for _ in range(2)]
            before = check_books(clients, results)
            # Kill it while it holds batches it has not handed to RLlib: they must not be lost.
            wait_for(lambda: transport_stats(algo)["inbox_steps"] > 0, 20, "unconfirmed batches in the inbox")
            pid = algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)[0]
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 150
            while sum(sampled(r) > 0 for r in results[2:]) < 3:
                assert time.monotonic() < deadline, "training did not resume after the runner was killed"
                results.append(algo.train())
            after = check_books(clients, results)
            new_pid = algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)[0]
            stats = transport_stats(algo)
        finally:
            for client in clients:
                client.finish()
    assert new_pid != pid
    assert [c.error for c in clients] == [None, None]
    assert all(c.client.stats.reconnects >= 1 for c in clients)
    assert sum(c.client.stats.batches_resent for c in clients) >= 1  # the killed runner's inbox, sent again
    assert after["taken"] >= before["taken"] + 3 * 500
    # The new runner confirmed exactly what it handed to RLlib; the killed one's share was confirmed before.
    assert stats["steps_acked"] == after["confirmed"] - before["confirmed"]
    assert stats["errors_total"] == 0


def test_learner_restored_from_a_checkpoint_on_the_same_ports(ray_local, tmp_path):
    """Stop the whole Algorithm, restore it from a checkpoint; clients wait, reconnect and carry on."""
    from ray.rllib.algorithms.algorithm import Algorithm

    base = free_port_base()
    config = ppo_config(num_env_runners=1, train_batch=500, num_epochs=1, env_config={"port": base})
    algo = config.build_algo()
    clients: list[ReliableClient] = []
    try:
        (_, host, port), = runner_addresses(algo)
        clients = [ReliableClient(f"{host}:{port}", seed) for seed in range(2)]
        for client in clients:
            client.start()
        first = [algo.train() for _ in range(2)]
        books_first = check_books(clients, first)
        wait_for(lambda: transport_stats(algo)["inbox_steps"] > 0, 20, "unconfirmed batches in the inbox")
        checkpoint = algo.save_to_path(str(tmp_path / "checkpoint"))
        algo.stop()  # clients get ERROR shutting_down and keep reconnecting
        algo = Algorithm.from_checkpoint(checkpoint)
        assert runner_addresses(algo)[0][2] == port
        second = [algo.train() for _ in range(2)]
        # One client can fill two updates alone (the runner extends them): the other may still be
        # between attempts when they end, so wait for it rather than stop it first.
        wait_for(lambda: all(c.client.stats.reconnects >= 1 for c in clients), 60, "both clients reconnected")
        books = check_books(clients, first + second)
        stats = transport_stats(algo)
    finally:
        for client in clients:
            client.finish()
        algo.stop()
    assert [c.error for c in clients] == [None, None]
    assert all(c.client.stats.reconnects >= 1 for c in clients)
    assert sum(c.client.stats.batches_resent for c in clients) >= 1  # the stopped learner's inbox, sent again
    assert taken(second) >= 2 * 500 and books["taken"] == books_first["taken"] + taken(second)
    # Batches the old learner held but had not taken were resent to the new one, not lost.
    assert stats["steps_acked"] == books["confirmed"] - books_first["confirmed"]
    assert stats["errors_total"] == 0
