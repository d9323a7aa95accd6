"""Many clients, dying clients and the runner's lifecycle, against real RLlib objects."""

from __future__ import annotations

import signal
import socket
import threading
import time

import numpy as np
import pytest

from harness import CARTPOLE, dummy_client_cmd, ppo_config, processes, running, train
from rlinks_rllib.client import ClientError, RLinkClient
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.protocol import encode_message
from rlinks_rllib.server.env_runner import runner_addresses

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _random_chunks(builder: EpisodeBuilder, rng: np.random.Generator, steps: int) -> list[dict]:
    """``steps`` CartPole-shaped steps with made-up data, cut into episodes of up to 40 steps."""
    for _ in range(steps):
        if builder.episode_id is None:
            builder.reset(rng.normal(size=4).astype(np.float32))
        done = rng.random() < 1 / 40
        builder.step(int(rng.integers(2)), 1.0, rng.normal(size=4).astype(np.float32), done, False,
                     extra={"action_logp": np.float32(-0.69), "action_dist_inputs": np.zeros(2, np.float32)})
    return builder.take_chunks()


class _LightClient(threading.Thread):
    """An on-policy client that sends exactly what the runner asks for, until told to stop."""

    def __init__(self, address: str, stop: threading.Event, seed: int) -> None:
        super().__init__(daemon=True)
        self.address, self.stop_event = address, stop
        self.rng = np.random.default_rng(seed)
        self.steps_sent = 0
        self.weights_seen: set[int] = set()
        self.wants: list[int] = []
        self.error: BaseException | None = None
        # Held from the check of stop to the count of a batch: once halt() returns,
        # steps_sent is final (the batch it counted last may still be on its way).
        self._counting = threading.Lock()

    def halt(self) -> None:
        """Stop starting batches; on return ``steps_sent`` no longer changes."""
        with self._counting:
            self.stop_event.set()

    def run(self) -> None:
        builder = EpisodeBuilder()
        try:
            with RLinkClient(self.address, timeout=60.0) as client:
                update = client.get_state()
                while True:
                    with self._counting:
                        if self.stop_event.is_set():
                            break
                        chunks = _random_chunks(builder, self.rng, update.want_steps)
                        self.steps_sent += sum(c["t"] - c["t_started"] for c in chunks)
                    update = client.send_episodes_and_get_state(chunks)
                    self.weights_seen.add(update.seq_no)
                    self.wants.append(update.want_steps)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            if not self.stop_event.is_set():
                self.error = exc


def _light_clients(host: str, port: int, count: int) -> list[_LightClient]:
    """``count`` started light clients of the runner at ``host:port``, sharing one stop event."""
    stop = threading.Event()
    clients = [_LightClient(f"{host}:{port}", stop, seed) for seed in range(count)]
    for client in clients:
        client.start()
    return clients


def _transport_stats(algo) -> dict:
    return algo.env_runner_group.foreach_env_runner(lambda r: r.get_transport_stats(), local_env_runner=False)[0]


def test_sixty_four_clients_on_one_runner_all_send_and_all_get_weights(ray_local):
    with running(ppo_config(num_env_runners=1, train_batch=2048, num_epochs=1, minibatch_size=512).build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        clients = _light_clients(host, port, 64)
        results = train(algo, 4)
        # Stop sending; every client's last batch reaches the runner (and it is
        # parked there until the algorithm stops, which answers it with ERROR).
        for client in clients:
            client.halt()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stats = _transport_stats(algo)
            if stats["steps_in"] == sum(c.steps_sent for c in clients):
                break
            time.sleep(0.2)
    for client in clients:
        client.join(timeout=30)
    assert not [c.error for c in clients if c.error is not None]
    assert stats["errors_total"] == 0
    assert all(c.steps_sent > 0 for c in clients), [c.steps_sent for c in clients]
    assert all(max(c.weights_seen) >= 1 for c in clients), "every client got trained weights"
    sampled = results[-1]["env_runners"]["num_env_steps_sampled_lifetime"]
    assert stats["steps_in"] == sum(c.steps_sent for c in clients)
    assert sampled + stats["inbox_steps"] == stats["steps_in"]


def test_a_runner_with_every_client_is_asked_for_the_whole_update(ray_local):
    """Shares follow the clients (server/delivery/shares.py): two runners, both clients on the first.

    With equal shares the first runner's clients would be asked for 100
    steps each (half of the update, split in two) and it would wait out
    ``extend_after_s`` every iteration before asking for more.
    """
    from rlinks_rllib import RLinkShares

    config = ppo_config(num_env_runners=2, train_batch=400, num_epochs=1, minibatch_size=200,
                        env_config={"extend_after_s": 1.0}).callbacks(RLinkShares)
    with running(config.build_algo()) as algo:
        (_, host, port), _ = runner_addresses(algo)
        clients = _light_clients(host, port, 2)
        results = train(algo, 5)
        for client in clients:
            client.halt()
    for client in clients:
        client.join(timeout=30)
    assert not [c.error for c in clients if c.error is not None]
    assert [c.wants[-1] for c in clients] == [200, 200], [c.wants for c in clients]
    assert results[-1]["env_runners"]["rlinks"]["clients_by_runner"] == {"w1": 2, "w2": 0}
    assert results[-1]["env_runners"]["rlinks"]["policy_lag_max"] == 0


def test_clients_killed_mid_frame_and_mid_episode_do_not_break_training(ray_local):
    with running(ppo_config(num_env_runners=1).build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        with processes([dummy_client_cmd(host, port) for _ in range(3)]) as procs:
            first = train(algo, 2)
            # One client dies mid-episode (SIGKILL: no goodbye)...
            procs[0].send_signal(signal.SIGKILL)
            # ...and a stranger connects, starts a frame and vanishes mid-frame.
            frame = encode_message({"type": "EPISODES", "episodes": [{"id_": "x" * 1000}]})
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(encode_message({"type": "PING"}))
                sock.recv(100)
                sock.sendall(frame[: len(frame) // 2])
            rest = train(algo, 4)
            stats = _transport_stats(algo)
    sampled = [r["env_runners"]["num_env_steps_sampled_lifetime"] for r in first + rest]
    assert all(b > a for a, b in zip(sampled, sampled[1:])), sampled
    assert stats["clients_connected"] == 2
    assert stats["errors"].get("bad_frame", 0) == 1


def test_appo_trains_off_policy_with_our_clients(ray_local):
    """EPISODES at any time, GET_STATE for the current weights."""
    from ray.rllib.algorithms.appo import APPOConfig

    from rlinks_rllib import RLinkEnvRunner

    config = (
        APPOConfig()
        .environment(observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
                     env_config={"port": 0})
        # The driver's runner serves (remote runners: configs/appo_cartpole.yaml, tests/test_async_learners.py).
        .env_runners(env_runner_cls=RLinkEnvRunner, num_env_runners=0, rollout_fragment_length=50)
        .training(lr=5e-4, vf_loss_coeff=0.05, entropy_coeff=0.0, train_batch_size_per_learner=500)
        .reporting(min_time_s_per_iteration=0.5)
    )
    with running(config.build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        with processes([dummy_client_cmd(host, port, "--off-policy") for _ in range(2)]):
            results = []
            for _ in range(30):
                results.append(algo.train())
                stats = algo.env_runner.get_transport_stats()
                if stats["weights_seq_no"] >= 3 and len(results) >= 3:
                    break
    assert stats["weights_seq_no"] >= 3, "the learner trained and its weights reached the runner"
    assert stats["errors_total"] == 0 and stats["clients_connected"] == 2
    assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] > 5000
    assert "policy_lag_mean" in results[-1]["env_runners"]["rlinks"]


def _local_runner(sample_timeout_s: float = 4.0, **env_config):
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib import RLinkEnvRunner

    config = PPOConfig().environment(
        observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
        env_config={"port": 0, **env_config},
    ).env_runners(num_env_runners=0, sample_timeout_s=sample_timeout_s)
    return RLinkEnvRunner(config=config, worker_index=0)


def test_stop_is_prompt_with_clients_connected_waiting_and_gone(ray_local):
    runner = _local_runner()
    host, port = runner.address
    waiting = RLinkClient(f"{host}:{port}", timeout=30.0)
    waiting.connect()
    idle = RLinkClient(f"{host}:{port}", timeout=30.0)
    idle.connect()
    gone = socket.create_connection((host, port), timeout=5)
    gone.close()
    # `waiting` sends until the update is full; then it is parked until new
    # weights that never come.
    outcome: list = []

    def fill_the_update() -> None:
        builder, rng = EpisodeBuilder(), np.random.default_rng(0)
        update = waiting.get_state()
        while True:
            result = _catch(waiting.send_episodes_and_get_state, _random_chunks(builder, rng, update.want_steps))
            if isinstance(result, ClientError):
                outcome.append(result)
                return
            update = result

    blocked = threading.Thread(target=fill_the_update)
    blocked.start()
    deadline = time.monotonic() + 20
    while runner.get_transport_stats()["steps_in"] < runner._update_steps and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    assert blocked.is_alive(), "the client should be waiting for weights"
    started = time.monotonic()
    runner.stop()
    assert time.monotonic() - started < 5
    blocked.join(timeout=10)
    assert isinstance(outcome[0], ClientError)  # told the runner is stopping, not left hanging
    with pytest.raises(RuntimeError, match="listener"):
        runner.assert_healthy()
    waiting.close()
    idle.close()


def _catch(fn, *args):
    try:
        return fn(*args)
    except ClientError as exc:
        return exc


def test_sample_waits_for_connected_clients_and_returns_before_the_timeout(ray_local):
    runner = _local_runner()
    host, port = runner.address
    try:
        with RLinkClient(f"{host}:{port}", timeout=30.0):
            started = time.monotonic()
            assert runner.sample() == []
            waited = time.monotonic() - started
        assert 2.9 <= waited < 4.0, waited  # sample_wait_fraction (0.75) of sample_timeout_s, for a client that may send
    finally:
        runner.stop()


@pytest.mark.timeout(120)
def test_a_runner_nobody_is_connected_to_answers_at_once(ray_local):
    """RLlib's round waits for every runner: one restarted on a node its clients left must not hold it up.

    With the whole ``sample_wait_fraction`` of this hour-long timeout the
    call would outlast the test's time limit (scheduler.IDLE_POLL_S).
    """
    runner = _local_runner(sample_timeout_s=3600.0)
    try:
        for _ in range(3):
            assert runner.sample() == []
    finally:
        runner.stop()


def test_a_runner_told_to_stop_handing_over_still_counts_its_samples_as_none(ray_local):
    """After ``stop_handing`` (SIGTERM), sample() hands over nothing and says so: 0 steps, not NaN.

    A sum logged nothing since the last ``get_metrics()`` reads NaN, and PPO's
    driver failed to count it (``ValueError: cannot convert float NaN to
    integer``) instead of stopping with a checkpoint.
    """
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED

    runner = _local_runner(sample_timeout_s=3600.0)
    try:
        runner.sample()
        runner.get_metrics()
        runner.stop_handing()
        assert runner.sample() == []
        assert int(runner.get_metrics()[NUM_ENV_STEPS_SAMPLED].peek()) == 0
    finally:
        runner.stop()


def test_a_port_in_use_fails_the_runner_loudly(ray_local):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            _local_runner(port=port)
