"""No confirmed step is lost when RLlib drops a late ``sample()`` result: the runner hands it over again."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from harness import ppo_config, running
from test_hostile_runner import cartpole_chunks
from rlinks_rllib.client import RLinkClient
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.server.env_runner import runner_addresses
from rlinks_rllib.server.delivery.receipts import ReturnedBatches, receipts_wanted


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_receipt_lets_go_of_its_result_and_nothing_else():
    returned = ReturnedBatches(clock=_Clock())
    t1, _ = returned.add(["a"])
    t2, _ = returned.add(["b", "c"])
    assert t2 > t1, "tokens increase even while the clock stands still"
    assert returned.received([t2]) == (["b", "c"], [])
    assert len(returned) == 1


def test_a_result_older_than_one_received_in_an_earlier_iteration_was_dropped():
    returned = ReturnedBatches(clock=_Clock())
    t1, _ = returned.add(["dropped"])
    t2, _ = returned.add(["taken"])
    # One iteration of slack: a late fetch of t1 could still come with the next receipts.
    assert returned.received([t2]) == (["taken"], [])
    t3, _ = returned.add(["next"])
    assert returned.received([]) == ([], ["dropped"])
    assert returned.received([t3]) == (["next"], [])


def test_tokens_of_other_runners_and_old_ones_are_ignored():
    returned = ReturnedBatches(clock=_Clock())
    token, _ = returned.add(["a"])
    assert returned.received([token - 5, token + 5]) == ([], [])
    assert returned.received([token]) == (["a"], [])
    assert returned.received([token]) == ([], [])


def test_without_receipts_the_oldest_results_are_let_go_past_the_bound():
    returned = ReturnedBatches(max_results=2, clock=_Clock())
    assert returned.add(["a"])[1] == []
    assert returned.add(["b"])[1] == []
    assert returned.add(["c"])[1] == ["a"]


def test_the_runner_keeps_its_results_only_when_the_driver_sends_receipts():
    from rlinks_rllib import RLinkReceipts

    assert not receipts_wanted(ppo_config(num_env_runners=1))
    assert receipts_wanted(ppo_config(num_env_runners=1).callbacks(RLinkReceipts))


class _SlowClient(threading.Thread):
    """An on-policy client with acks that takes ``pause_s`` to produce each share it is asked for."""

    def __init__(self, address: str, stop: threading.Event, seed: int, pause_s: float) -> None:
        super().__init__(daemon=True)
        self.address, self.stop_event, self.pause_s = address, stop, pause_s
        self.rng = np.random.default_rng(seed)
        self.error: BaseException | None = None

    def run(self) -> None:
        builder = EpisodeBuilder()
        try:
            with RLinkClient(self.address, timeout=60.0) as client:
                update = client.get_state()
                while not self.stop_event.is_set():
                    chunks = cartpole_chunks(builder, self.rng, update.want_steps)
                    time.sleep(self.pause_s)
                    update = client.send_episodes_and_get_state(chunks)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            if not self.stop_event.is_set():
                self.error = exc


def _stats(algo) -> dict:
    return algo.env_runner_group.foreach_env_runner(lambda r: r.get_transport_stats(), local_env_runner=False)[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_steps_of_a_result_rllib_dropped_are_handed_over_again(ray_local):
    """Freeze the runner past ``sample_timeout_s``: its late result is dropped by RLlib, not lost."""
    from rlinks_rllib import RLinkReceipts

    timeout_s = 3.0
    config = ppo_config(num_env_runners=1, train_batch=400, num_epochs=1, minibatch_size=200)
    config.env_runners(sample_timeout_s=timeout_s).callbacks(RLinkReceipts)
    stop = threading.Event()
    with running(config.build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        pid = algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)[0]
        clients = [_SlowClient(f"{host}:{port}", stop, seed, pause_s=1.0) for seed in range(4)]
        for client in clients:
            client.start()
        handed_again = 0
        for _ in range(4):
            # Frozen longer than the driver waits, most likely while sample() waits for the clients;
            # then two iterations that get results, whose receipts show what the driver missed.
            freezer = threading.Timer(0.5, _freeze, args=(pid, timeout_s + 2.0))
            freezer.start()
            algo.train()
            freezer.join()
            algo.train()
            algo.train()
            handed_again = _stats(algo)["steps_handed_again"]
            if handed_again:
                break
        assert handed_again > 0, "no sample() result was dropped: the test did not test anything"
        # RLlib takes what was handed over again: every step confirmed once, and RLlib has each once.
        for _ in range(2):
            result = algo.train()
        sampled = result["env_runners"]["num_env_steps_sampled_lifetime"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stats = _stats(algo)
            if stats["steps_acked"] == sampled:
                break
            time.sleep(0.2)
        stop.set()
    assert not [c.error for c in clients if c.error is not None]
    assert stats["errors_total"] == 0
    assert stats["steps_acked"] == sampled, f"confirmed {stats['steps_acked']}, the driver got {sampled}"


def _freeze(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
