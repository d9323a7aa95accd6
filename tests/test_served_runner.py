"""Served actions against a real RLinkEnvRunner: real RLlib PPO, real sockets on 127.0.0.1.

The clients here are written over the protocol's own ``Connection`` on plain
blocking sockets (:class:`ServedClient`), stepping a vectorized CartPole
written below with gymnasium's dynamics, so what is tested is the runner.
"""

from __future__ import annotations

import collections
import math
import socket
import threading
import time

import numpy as np
import pytest

from harness import CARTPOLE, episode_return, ppo_config, rlinks_metrics, running, train
from rlinks_rllib.protocol import encode_message
from rlinks_rllib.protocol.connection import (
    Acked,
    ActionsReceived,
    Connection,
    ErrorReceived,
    HandshakeDone,
    Role,
)
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.protocol.served import act_message
from rlinks_rllib.server.env_runner import runner_addresses

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EXTENSIONS = ("served_actions", "want_steps", "ack")


class ServedError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class ServedClient:
    """A served-actions client: ``Connection(Role.CLIENT)`` on a blocking socket; every wait bounded."""

    def __init__(self, address: tuple[str, int], *, extensions=EXTENSIONS, timeout: float = 60.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        # One small frame per step each way: without this, Nagle and delayed ACKs add ~40 ms a step.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = Connection(Role.CLIENT, extensions=extensions, agent="served-test/0")
        self.conn.start()
        self.handshake = self.next_event()
        assert isinstance(self.handshake, HandshakeDone), self.handshake

    def flush(self) -> None:
        parts = self.conn.data_to_send()
        if parts:
            self.sock.sendall(b"".join(parts))

    def next_event(self):
        """The next event but ACKs; ``ERROR`` raises :class:`ServedError`."""
        self.flush()
        while True:
            event = self.conn.next_event()
            if isinstance(event, ErrorReceived):
                raise ServedError(event.code, event.message)
            if event is not None and not isinstance(event, Acked):
                return event
            if event is None:
                data = self.sock.recv(1 << 16)
                self.conn.receive_data(data) if data else self.conn.receive_eof()

    def act(self, env, obs, reward, start, terminated, truncated, **taken) -> ActionsReceived:
        self.conn.send_act(env, obs, reward, start, terminated, truncated, **taken)
        event = self.next_event()
        assert isinstance(event, ActionsReceived), event
        return event

    def send_raw(self, message: dict) -> None:
        """A message the Connection would refuse to send (the runner must refuse it)."""
        self.sock.sendall(encode_message(message))

    def close(self) -> None:
        self.sock.close()


class CartPoles:
    """``n`` CartPole-v1 envs stepped together: gymnasium's dynamics (Euler, 20 ms), 500-step limit."""

    def __init__(self, n: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, (n, 4))
        self.steps = np.zeros(n, np.int64)

    def reset(self, mask: np.ndarray) -> np.ndarray:
        self.state[mask] = self.rng.uniform(-0.05, 0.05, (int(mask.sum()), 4))
        self.steps[mask] = 0
        return self.state[mask].astype(np.float32)

    def step(self, actions: np.ndarray):
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(actions == 1, 10.0, -10.0)
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos**2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = np.stack([x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot,
                               theta_dot + 0.02 * theta_acc], axis=1)
        self.steps += 1
        terminated = (np.abs(self.state[:, 0]) > 2.4) | (np.abs(self.state[:, 2]) > 12 * 2 * math.pi / 360)
        truncated = ~terminated & (self.steps >= 500)
        return self.state.astype(np.float32), np.ones(len(actions)), terminated, truncated


class Simulator(threading.Thread):
    """One client stepping ``n`` CartPoles with served actions until stopped (or ``max_acts`` ACTs).

    Counts, per weights version, the steps it completed with actions of that version.
    """

    def __init__(self, address, n: int, seed: int, stop: threading.Event, max_acts: int | None = None) -> None:
        super().__init__(daemon=True, name=f"served-sim-{seed}")
        self.address, self.n, self.seed, self.stop_event, self.max_acts = address, n, seed, stop, max_acts
        self.steps_by_version: collections.Counter[int] = collections.Counter()
        self.versions: list[int] = []
        self.acts = 0
        self.error: BaseException | None = None
        self.client: ServedClient | None = None

    def run(self) -> None:
        try:
            self.client = ServedClient(self.address)
            self._run(self.client)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            if not self.stop_event.is_set():
                self.error = exc
        finally:
            if self.client is not None:
                self.client.close()

    def _run(self, client: ServedClient) -> None:
        n, envs = self.n, CartPoles(self.n, self.seed)
        ids = np.arange(n)
        everyone = np.ones(n, bool)
        answer = client.act(ids, envs.reset(everyone), np.zeros(n), everyone, ~everyone, ~everyone)
        acted_with = np.zeros(n, np.int64)
        while not self.stop_event.is_set() and (self.max_acts is None or self.acts < self.max_acts):
            actions = np.empty(n, np.int64)
            actions[answer.env] = answer.actions
            acted_with[answer.env] = answer.weights_seq_no
            self.versions.append(answer.weights_seq_no)
            obs, reward, terminated, truncated = envs.step(actions)
            for version, count in collections.Counter(acted_with.tolist()).items():
                self.steps_by_version[version] += count
            done = terminated | truncated
            first = envs.reset(done)
            k = int(done.sum())
            answer = client.act(
                np.concatenate([ids, ids[done]]), np.concatenate([obs, first]), np.concatenate([reward, np.zeros(k)]),
                np.concatenate([~everyone, np.ones(k, bool)]), np.concatenate([terminated, np.zeros(k, bool)]),
                np.concatenate([truncated, np.zeros(k, bool)]))
            self.acts += 1


def _stats(algo) -> dict:
    return algo.env_runner_group.foreach_env_runner(lambda r: r.get_transport_stats(), local_env_runner=False)[0]


def _sampled_per_iteration(results: list[dict]) -> list[int]:
    lifetime = [r["env_runners"]["num_env_steps_sampled_lifetime"] for r in results]
    return [b - a for a, b in zip([0] + lifetime, lifetime)]


def test_ppo_trains_on_served_actions_on_policy_and_batched(ray_local):
    """(a) PPO reaches 150; (b) lag 0 and exact updates; (c) four clients' ACTs share forward passes."""
    with running(ppo_config(num_env_runners=1).build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        stop = threading.Event()
        sims = [Simulator((host, port), 8, seed, stop) for seed in range(4)]
        for sim in sims:
            sim.start()
        started = time.monotonic()
        try:
            results = train(algo, 40, stop_return=150)
            stats = _stats(algo)
        finally:
            stop.set()
        elapsed = time.monotonic() - started
    for sim in sims:
        sim.join(timeout=30)
    assert not [sim.error for sim in sims if sim.error is not None]
    returns = [episode_return(r) for r in results]
    assert returns[-1] >= 150, returns
    # (b) Every served step reached the learner with the weights it was acted with...
    lags = [rlinks_metrics(r).get("policy_lag_max", 0) for r in results]
    assert max(lags) == 0, lags
    # ...and each update trained on exactly the steps acted with its weights: no ACT was answered
    # with the old weights once the update had its share, and none of those steps waited for the next.
    by_version = collections.Counter()
    for sim in sims:
        by_version.update(sim.steps_by_version)
        assert sim.versions == sorted(sim.versions), "a client got older weights' actions after newer ones"
    versions = sorted(by_version)
    assert len(versions) >= len(results)
    assert [by_version[v] for v in versions[:len(results)]] == _sampled_per_iteration(results)
    assert stats["served_parked"] > 0 and stats["errors_total"] == 0
    # (c) Batched: ACTs of several clients go through one forward pass.
    assert stats["inference_requests"] / stats["inference_batches"] > 1, stats
    metrics = rlinks_metrics(results[-1])
    assert metrics["inference_batch_mean"] > 8 and metrics["served_actions"] > 0
    timers = results[-1].get("timers", {})
    print(f"\n{len(results)} iterations in {elapsed:.0f} s (sampling {timers.get('env_runner_sampling_timer', 0):.1f} s, "
          f"learning {timers.get('learner_update_timer', 0):.1f} s per iteration, smoothed); "
          f"{stats['served_actions'] / elapsed:.0f} actions/s "
          f"overall; {stats['inference_rows'] / max(stats['inference_s'], 1e-9):.0f} rows/s in the forward pass; "
          f"{stats['inference_requests'] / stats['inference_batches']:.2f} ACTs and "
          f"{stats['inference_rows'] / stats['inference_batches']:.1f} rows per batch")


# -- one runner in this process, sampled by hand ------------------------------------


def _local_runner(train_batch: int, off_policy: bool = False, spaces=None, **env_config):
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib import RLinkEnvRunner

    observation_space, action_space = spaces or (CARTPOLE.observation_space, CARTPOLE.action_space)
    config = (
        (APPOConfig() if off_policy else PPOConfig())
        .environment(observation_space=observation_space, action_space=action_space,
                     env_config={"port": 0, **env_config})
        .env_runners(num_env_runners=0, sample_timeout_s=4.0, rollout_fragment_length=50 if off_policy else "auto")
        .training(train_batch_size_per_learner=train_batch)
    )
    return RLinkEnvRunner(config=config, worker_index=0)


@pytest.fixture
def local_runner(ray_local):
    """``make(train_batch, off_policy, **settings)``: a runner in this process; all are stopped, their threads gone."""
    runners = []

    def make(train_batch: int = 4000, off_policy: bool = False, spaces=None, **settings):
        runners.append(_local_runner(train_batch, off_policy, spaces, **settings))
        return runners[-1]

    yield make
    for runner in runners:
        runner.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _runner_threads():
        time.sleep(0.05)
    assert not _runner_threads()


def _runner_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("rlinks-server", "rlinks-inference"))]


def _steps(episodes) -> int:
    return sum(len(e) for e in episodes)


def _fake_chunks(builder: EpisodeBuilder, rng: np.random.Generator, steps: int) -> list[dict]:
    """``steps`` CartPole-shaped steps a client acted on itself (made-up policy outputs)."""
    for _ in range(steps):
        if builder.episode_id is None:
            builder.reset(rng.normal(size=4).astype(np.float32))
        builder.step(int(rng.integers(2)), 1.0, rng.normal(size=4).astype(np.float32), False, False,
                     {"action_logp": np.float32(-0.69), "action_dist_inputs": np.zeros(2, np.float32)})
    return builder.take_chunks()


def test_one_connection_mixes_episodes_and_served_actions(local_runner):
    """(d) EPISODES for env 0 (the client acts itself), ACT for env 1, on one connection."""
    runner = local_runner(train_batch=400)
    client = ServedClient(runner.address)
    rng = np.random.default_rng(1)
    own = EpisodeBuilder()
    envs = CartPoles(1, seed=1)
    answer = client.act([1], envs.reset(np.ones(1, bool)), [0.0], [True], [False], [False])
    served, sent_ids = 0, set()
    for i in range(120):
        obs, reward, terminated, truncated = envs.step(np.asarray(answer.actions))
        if terminated[0] or truncated[0]:  # the episode ends and the next starts, in one ACT
            answer = client.act([1, 1], np.concatenate([obs, envs.reset(np.ones(1, bool))]), [1.0, 0.0],
                                [False, True], [terminated[0], False], [truncated[0], False])
        else:
            answer = client.act([1], obs, reward, [False], terminated, truncated)
        served += 1
        if i % 40 == 39:
            chunks = _fake_chunks(own, rng, 30)
            sent_ids |= {c["id_"] for c in chunks}
            client.conn.send_episodes(chunks, steps=30, timesteps=30, on_policy=False)
            client.flush()
    episodes = runner.sample()  # the update wants 400: times out, then takes the served steps too
    stats = runner.get_transport_stats()
    client.close()
    assert _steps(episodes) == served + 90 == stats["steps_in"]
    assert _steps(e for e in episodes if e.id_ in sent_ids) == 90
    assert stats["served_steps"] == served and stats["served_acts"] == served + 1 and stats["errors_total"] == 0
    for episode in episodes:
        assert len(episode.get_extra_model_outputs("action_logp")) == len(episode)
        assert episode.get_extra_model_outputs("action_dist_inputs").shape == (len(episode), 2)


def test_a_client_that_stops_reporting_is_cut_off_and_its_episodes_arrive_truncated(local_runner):
    """(e) One client goes silent mid-episode; the update still completes, with everyone's data."""
    runner = local_runner(train_batch=64, served_report_timeout_s=1.0)
    silent = ServedClient(runner.address)
    envs = CartPoles(4, seed=0)
    everyone = np.ones(4, bool)
    answer = silent.act(range(4), envs.reset(everyone), np.zeros(4), everyone, ~everyone, ~everyone)
    for _ in range(5):  # 20 steps, no episode ends this early
        obs, reward, terminated, truncated = envs.step(np.asarray(answer.actions))
        assert not (terminated | truncated).any()
        answer = silent.act(range(4), obs, reward, ~everyone, terminated, truncated)
    stop = threading.Event()
    busy = Simulator(runner.address, 2, seed=3, stop=stop)
    busy.start()
    started = time.monotonic()
    episodes = runner.sample()  # 64 steps: the busy client's next ACT waits; the silent one holds up the cut
    waited = time.monotonic() - started
    with pytest.raises(ServedError) as info:
        silent.next_event()
    assert info.value.code == "limit_exceeded" and "served_report_timeout_s" in str(info.value)
    stats = runner.get_transport_stats()
    stop.set()
    runner.stop()
    busy.join(timeout=10)
    assert busy.error is None
    silent_ones = [e for e in episodes if len(e) == 5 and e.is_truncated]
    assert len(silent_ones) == 4, [(len(e), e.is_truncated, e.is_terminated) for e in episodes]
    # Everything the busy client reported (it is parked now, on its last ACT) is there.
    assert _steps(episodes) == 20 + sum(busy.steps_by_version.values()) == stats["served_steps"]
    assert stats["served_expired_envs"] == 4 and stats["errors"] == {"limit_exceeded": 1}
    assert waited < 2.9  # cut when the deadline closed the silent client's episodes, not at sample()'s timeout


def test_off_policy_never_parks_and_hands_over_a_fragment_at_a_time(local_runner):
    # A backlog that holds it all: nothing is dropped (test_offpolicy_flow checks the dropping).
    runner = local_runner(train_batch=500, off_policy=True, off_policy_backlog_steps=10_000)
    stop = threading.Event()
    sim = Simulator(runner.address, 4, seed=5, stop=stop, max_acts=150)  # 600 steps: more than an update
    sim.start()
    sim.join(timeout=60)
    assert sim.error is None and sim.acts == 150
    started = time.monotonic()
    first = runner.sample()
    assert 50 <= _steps(first) and time.monotonic() - started < 1.0  # cut every 50 steps: no waiting
    rest = []
    for _ in range(100):  # a call the surplus of the last covers hands over nothing; the last cuts what is left
        rest += runner.sample()
        if _steps(first) + _steps(rest) >= 600:
            break
    stats = runner.get_transport_stats()
    assert stats["served_parked"] == 0 and stats["errors_total"] == 0 and stats["dropped_backlog_steps"] == 0
    assert _steps(first) + _steps(rest) == stats["served_steps"] == 600


def test_box_actions_reach_the_client_unsquashed_and_the_episode_as_sampled(local_runner):
    import gymnasium as gym

    spaces = (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (1,), np.float32))
    runner = local_runner(train_batch=400, spaces=spaces)
    client = ServedClient(runner.address)
    rng = np.random.default_rng(2)
    answer = client.act([0], rng.normal(size=(1, 3)), [0.0], [True], [False], [False])
    sent = []
    for _ in range(20):
        assert answer.actions.shape == (1, 1) and answer.actions.dtype == np.float32
        sent.append(answer.actions[0])
        answer = client.act([0], rng.normal(size=(1, 3)), [-1.0], [False], [False], [False])
    (episode,) = runner.sample()
    client.close()
    raw = np.asarray(episode.get_actions())
    assert len(episode) == 20 and raw.shape == (20, 1)
    np.testing.assert_allclose(np.asarray(sent), np.clip(-2.0 + (raw + 1.0) * 2.0, -2.0, 2.0), rtol=1e-6)
    assert np.asarray(episode.get_extra_model_outputs("action_dist_inputs")).shape == (20, 2)  # mean, log std


def test_actions_the_simulator_took_are_recorded_and_untrained_episodes_never_arrive(local_runner):
    """served_taken: env 0 takes every other action itself (one past the Box's bound); env 1 is not trained on."""
    import gymnasium as gym

    from rlinks_rllib.client.policies.action_spaces import BoxSpace
    from rlinks_rllib.client.policies.sampling import log_prob

    spaces = (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (1,), np.float32))
    runner = local_runner(train_batch=400, spaces=spaces)
    client = ServedClient(runner.address, extensions=(*EXTENSIONS, "served_taken"))
    assert "served_taken" in client.handshake.extensions
    rng = np.random.default_rng(4)
    both, train = np.array([True, True]), [True, False]
    answer = client.act([0, 1], rng.normal(size=(2, 3)), [0.0, 0.0], both, ~both, ~both, train=train)
    sent, mine = [], []
    for t in range(20):
        sent.append(float(answer.actions[0, 0]))
        own = t % 2 == 1
        taken = np.array([[3.0 if t == 5 else 1.5], [0.0]], np.float32)
        answer = client.act([0, 1], rng.normal(size=(2, 3)), [-1.0, -1.0], ~both, ~both, ~both,
                            taken_mask=[own, False], taken=taken, train=train)
        if own:
            mine += [t + 1] if t + 1 < 20 else []  # the answer is step t + 1's action; step 20 never completes
            assert answer.actions[0, 0] == (2.0 if t == 5 else 1.5)  # answered with itself, clipped to the Box
    (episode,) = runner.sample()  # env 1's steps never arrive
    client.close()
    raw = np.asarray(episode.get_actions())[:, 0]
    assert len(episode) == 20 and runner.get_transport_stats()["served_steps"] == 20
    # Recorded in the form RLlib trains on: squashed back into [-1, 1] from the env's bounds.
    np.testing.assert_allclose(raw[mine], [(1.0 if t == 6 else 0.75) for t in mine], rtol=1e-6)
    np.testing.assert_allclose(np.clip(-2.0 + (raw + 1.0) * 2.0, -2.0, 2.0), sent, rtol=1e-5, atol=1e-6)
    dist = np.asarray(episode.get_extra_model_outputs("action_dist_inputs"))
    logp = np.asarray(episode.get_extra_model_outputs("action_logp"))
    expected = log_prob(BoxSpace((1,), -2.0, 2.0), dist[mine], raw[mine][:, None])
    np.testing.assert_allclose(logp[mine], expected, rtol=1e-5)
    # A taken action that is no action: refused whole, before anything is recorded.
    client = ServedClient(runner.address, extensions=(*EXTENSIONS, "served_taken"))
    with pytest.raises(ServedError, match="NaN") as info:
        client.act([0], np.zeros((1, 3), np.float32), [0.0], [True], [False], [False], taken_mask=[True],
                   taken=np.full((1, 1), np.nan, np.float32))
    assert info.value.code == "bad_episode"
    client.close()


def test_dqn_is_served_and_its_episodes_arrive(ray_local):
    """DQN's module gives actions alone; the runner serves it in numpy (QPolicy), exploring along the schedule."""
    from ray.rllib.algorithms.dqn import DQNConfig

    from rlinks_rllib import RLinkEnvRunner

    config = (
        DQNConfig()
        .environment(observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
                     env_config={"port": 0})
        .env_runners(num_env_runners=0, sample_timeout_s=4.0, rollout_fragment_length=8)
    )
    runner = RLinkEnvRunner(config=config, worker_index=0)
    try:
        client = ServedClient(runner.address)
        assert "served_actions" in client.handshake.extensions
        envs = CartPoles(4, seed=5)
        everyone = np.ones(4, bool)
        answer = client.act(range(4), envs.reset(everyone), np.zeros(4), everyone, ~everyone, ~everyone)
        for _ in range(10):
            obs, reward, terminated, truncated = envs.step(np.asarray(answer.actions))
            done = terminated | truncated
            rows = list(range(4)) + list(np.flatnonzero(done))
            answer = client.act(rows, np.concatenate([obs, envs.reset(done)]), np.concatenate([reward, 0 * reward[done]]),
                                np.concatenate([~everyone, done[done]]), np.concatenate([terminated, ~done[done]]),
                                np.concatenate([truncated, ~done[done]]))
            assert set(np.asarray(answer.actions).tolist()) <= {0, 1}
        client.close()  # its open episodes are cut where they stand
        steps = [_steps(runner.sample()) for _ in range(6)]  # off-policy: a fragment (8 steps) per sample()
        assert sum(steps) == 40, steps
    finally:
        runner.stop()


def _good_start(client: ServedClient, n: int = 1, steps: int = 0) -> None:
    """Start ``n`` envs and report ``steps`` steps of each."""
    envs = CartPoles(n, seed=7)
    everyone = np.ones(n, bool)
    answer = client.act(range(n), envs.reset(everyone), np.zeros(n), everyone, ~everyone, ~everyone)
    for _ in range(steps):
        obs, reward, terminated, truncated = envs.step(np.asarray(answer.actions))
        answer = client.act(range(n), obs, reward, ~everyone, terminated, truncated)


BAD_ACTS = {
    # name: (envs started first, the ACT's columns, the code)
    "obs of another shape": (1, ([0], np.zeros((1, 3), np.float32), [1.0], [False], [False], [False]), "bad_episode"),
    "complex obs": (1, ([0], np.zeros((1, 4), np.complex64), [1.0], [False], [False], [False]), "bad_episode"),
    "NaN obs": (2, ([0, 1], np.array([[0, 0, 0, 0], [0, np.nan, 0, 0]], np.float32), [1.0, 1.0], [False, False],
                    [False, False], [False, False]), "bad_episode"),
    "a row for an env never started": (1, ([0, 9], np.zeros((2, 4), np.float32), [1.0, 1.0], [False, False],
                                           [False, False], [False, False]), "bad_episode"),
    "more rows than twice the envs": (0, (list(range(9)), np.zeros((9, 4), np.float32), [0.0] * 9, [True] * 9,
                                          [False] * 9, [False] * 9), "limit_exceeded"),
    "more envs than the runner holds": (2, ([5, 6, 7], np.zeros((3, 4), np.float32), [0.0] * 3, [True] * 3,
                                            [False] * 3, [False] * 3), "limit_exceeded"),
}


def test_bad_acts_get_the_right_error_and_lose_nothing_else(local_runner):
    """(f) Each bad ACT ends its own connection with the right code; all else reaches RLlib."""
    runner = local_runner(served_max_envs=4)
    good = ServedClient(runner.address)
    _good_start(good, n=1, steps=3)
    for name, (started, columns, code) in BAD_ACTS.items():
        bad = ServedClient(runner.address)
        if started:
            _good_start(bad, n=started, steps=2)  # these steps reach RLlib although the client then fails
        with pytest.raises(ServedError) as info:
            bad.act(*columns)
        assert info.value.code == code, (name, info.value)
        bad.close()
    # Caught by the protocol layer before the runner: a NaN reward, an ACT while one is unanswered.
    bad = ServedClient(runner.address)
    bad.send_raw(act_message([0], np.zeros((1, 4), np.float32), [float("nan")], [True], [False], [False]))
    with pytest.raises(ServedError, match="NaN") as info:
        bad.next_event()
    assert info.value.code == "invalid_message"
    bad.close()
    _good_start(good, n=1, steps=3)  # the good client goes on (a start row truncates its first episode)
    episodes = runner.sample()
    stats = runner.get_transport_stats()
    good.close()
    started_steps = sum(n * 2 for n, _, _ in BAD_ACTS.values())
    assert _steps(episodes) == 6 + started_steps == stats["served_steps"]
    # The failed clients' episodes were closed as truncated, and so was the good client's first one.
    assert sum(e.is_truncated for e in episodes) == sum(n for n, _, _ in BAD_ACTS.values()) + 1
    assert stats["errors"] == {"bad_episode": 4, "limit_exceeded": 2, "invalid_message": 1}


def test_a_runner_with_served_actions_off_does_not_agree_and_refuses_act(local_runner):
    runner = local_runner(served_actions=False)
    client = ServedClient(runner.address)
    assert "served_actions" not in client.handshake.extensions
    client.send_raw(act_message([0], np.zeros((1, 4), np.float32), [0.0], [True], [False], [False]))
    with pytest.raises(ServedError) as info:
        client.next_event()
    assert info.value.code == "unsupported_message"
    client.close()


def test_uint8_observations_are_served_as_float32_like_a_local_client_feeds_them(local_runner):
    """A runner with image-like uint8 observations starts and serves: the module gets float32, as NumpyPolicy gives it."""
    import gymnasium as gym

    spaces = (gym.spaces.Box(0, 255, (16,), np.uint8), gym.spaces.Discrete(3))
    runner = local_runner(train_batch=400, spaces=spaces)
    client = ServedClient(runner.address)
    assert "served_actions" in client.handshake.extensions
    rng = np.random.default_rng(3)
    answer = client.act([0], rng.integers(0, 256, (1, 16), dtype=np.uint8), [0.0], [True], [False], [False])
    for _ in range(5):
        assert answer.actions.shape == (1,) and 0 <= int(answer.actions[0]) < 3
        answer = client.act([0], rng.integers(0, 256, (1, 16), dtype=np.uint8), [1.0], [False], [False], [False])
    client.close()
