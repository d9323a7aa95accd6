"""SAC and DQN trained from external simulators through ``rlinks learner``, and SAC's buffer under resends.

The training runs use small settings that learn in a few minutes on two
CPU cores (the shipped configs are RLlib's tuned ones, measured by
``benchmarks/bench_sac.py``). SAC's simulators are paced
(``off_policy_backlog: pace``) so that the dummy clients, which step as fast
as they can, leave the learner its share of the two cores; DQN's run
unpaced against the default backlog drop. SAC's run to -400 (three
minutes) is a ``long`` test: ``make test-long``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness import train_through_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: SAC on Pendulum, small: 64x64, uniform replay, one update of 64 per env step.
SAC_SMALL = {
    "description": "SAC on Pendulum-v1, small enough for a test",
    "algorithm": "SAC",
    "spaces": {"from_env": "Pendulum-v1"},
    "training": {"initial_alpha": 1.001, "actor_lr": 0.0002, "critic_lr": 0.0008, "alpha_lr": 0.0009,
                 "target_entropy": "auto", "n_step": 1, "tau": 0.005, "train_batch_size_per_learner": 64,
                 "target_network_update_freq": 1,
                 "replay_buffer_config": {"type": "EpisodeReplayBuffer", "capacity": 100000},
                 "num_steps_sampled_before_learning_starts": 256},
    "model": {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu", "head_fcnet_hiddens": []},
    "env_runners": {"num_env_runners": 0, "rollout_fragment_length": 1},
    "reporting": {"metrics_num_episodes_for_smoothing": 5, "min_sample_timesteps_per_iteration": 200},
    "rlinks": {"host": "127.0.0.1", "off_policy_backlog": "pace"},
    "stop": {"reward": -400, "iters": 60},
}


def _config(tmp_path: Path, spec: dict) -> str:
    path = tmp_path / f"{spec['algorithm'].lower()}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def _sac_from_a_local_and_a_served_simulator(tmp_path, target: float):
    """One simulator runs the policy in numpy, the other is served by the runner; together to ``target``.

    The learner stops on the mean return of the last 5 episodes, which the
    two simulators end at about the same rate: one mode still playing at
    -1,200 would keep that mean far below it. Paced, neither simulator
    may keep the other out: a client that gets no batch taken or no actions
    for 120 s fails, and so does the test.
    """
    spec = {**SAC_SMALL, "stop": {**SAC_SMALL["stop"], "reward": target}}
    run = train_through_cli(tmp_path, ["--config", _config(tmp_path, spec)],
                            ["-n", "1", "--", "--env", "Pendulum-v1", "--off-policy"],
                            more_clients=[["-n", "1", "--", "--env", "Pendulum-v1", "--served-actions"]],
                            timeout_s=720)
    assert run.returncode == 0 and run.reached >= target, run.learner_log[-3000:]
    assert "running NumpyPolicy here, off-policy" in run.client_out
    assert "the runner computes the actions" in run.client_out
    print(f"\nSAC reached {run.reached:.1f} in {run.seconds:.0f} s")


@pytest.mark.long
def test_sac_on_pendulum_from_a_local_and_a_served_simulator_reaches_minus_400(tmp_path):
    """The issue's target: -389.0 in 186 s at load 6, 185 s on a quiet machine (to -700 took 158 s: SAC's
    curve is steep, so no nearer target is much shorter); ``make test-long`` runs it."""
    _sac_from_a_local_and_a_served_simulator(tmp_path, -400)


def test_dqn_on_cartpole_from_simulators_running_its_q_network_reaches_150(tmp_path):
    """The shipped DQN config, clients in local mode: QPolicy explores along epsilon at RLlib's step count."""
    from rlinks_rllib.bundled import bundled_config

    spec = yaml.safe_load(bundled_config("dqn_cartpole").read_text())
    spec["stop"] = {"reward": 150, "iters": 60}
    run = train_through_cli(tmp_path, ["--config", _config(tmp_path, spec)],
                            ["-n", "2", "--", "--off-policy", "--max-steps", "1000000000"],
                            timeout_s=600)
    assert run.returncode == 0 and run.reached >= 150, run.learner_log[-3000:]
    assert "running QPolicy here, off-policy" in run.client_out
    print(f"\nDQN reached {run.reached:.1f} in {run.seconds:.0f} s")


def _pendulum_chunks(rng: np.random.Generator, episodes: int, chunk_steps: int) -> list[list[dict]]:
    """Episodes of a real Pendulum under random actions, each cut into chunks of ``chunk_steps``."""
    import gymnasium as gym

    from rlinks_rllib.client.episode_builder import EpisodeBuilder

    env = gym.make("Pendulum-v1")
    out = []
    for e in range(episodes):
        builder, chunks = EpisodeBuilder(), []
        obs, _ = env.reset(seed=e)
        builder.reset(obs)
        done = False
        while not done:
            action = rng.uniform(-1, 1, size=1).astype(np.float32)
            obs, reward, terminated, truncated, _ = env.step(2 * action)
            done = terminated or truncated
            builder.step(action, float(reward), obs, terminated, truncated,
                         extra={"action_logp": np.float32(-1.0), "action_dist_inputs": np.zeros(2, np.float32)})
            if builder.num_steps % chunk_steps == 0 or done:
                chunks += builder.take_chunks()
        out.append(chunks)
    return out


def test_sac_fits_in_a_repeated_chunk_and_one_after_a_gap_and_trains_on(ray_local, tmp_path):
    """A chunk a second connection sends again (a resend that reached another runner), and one after a
    chunk that never came, reach RLlib's buffer; it stores every step once and SAC keeps training.

    A third simulator keeps sending steps of its own meanwhile: SAC's training step samples until it
    has at least one, so without it a ``train()`` after the last chunk would wait forever.
    """
    from rlinks_rllib.client import ClientError, RLinkClient
    from rlinks_rllib.training.config_file import build_algorithm_config, load_spec
    from rlinks_rllib.training.replay import ReplaySafe

    # One training step per train(), which waits at most a second or so for steps.
    # A backlog that holds every chunk: none is dropped before RLlib's buffer sees it.
    spec = {**SAC_SMALL, "rlinks": {**SAC_SMALL["rlinks"], "port": 0, "off_policy_backlog_steps": 100_000},
            "training": {**SAC_SMALL["training"], "num_steps_sampled_before_learning_starts": 100},
            "env_runners": {**SAC_SMALL["env_runners"], "sample_timeout_s": 2.0},
            "reporting": {"min_sample_timesteps_per_iteration": 0, "min_time_s_per_iteration": 0}}
    algo = build_algorithm_config(load_spec(_config(tmp_path, spec))).build_algo()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        buffer = algo.local_replay_buffer
        assert isinstance(buffer, ReplaySafe)
        rng = np.random.default_rng(0)
        first, second = _pendulum_chunks(rng, episodes=2, chunk_steps=50)
        address = "127.0.0.1:%d" % algo.env_runner.address[1]
        errors: list = []

        def send(batches: list) -> None:
            try:
                with RLinkClient(address, timeout=60.0) as client:
                    for chunk in batches:
                        client.send_episodes([chunk])
                        client.flush()  # in order: the next goes once RLlib has this one
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        def fill() -> None:
            try:
                with RLinkClient(address, timeout=60.0) as client:
                    while not stop.is_set():
                        for chunk in _pendulum_chunks(np.random.default_rng(1), episodes=1, chunk_steps=10)[0]:
                            if stop.wait(0.5):  # about what SAC takes: the others' chunks never queue long
                                return
                            client.send_episodes([chunk])
            except ClientError:
                if not stop.is_set():
                    raise  # before the test ends, a failure is the test's; after, the runner is just gone

        threads.append(threading.Thread(target=fill, daemon=True))
        threads[-1].start()
        # first episode: chunks 0, 1 by one connection, 1 again and 2, 3 by another; second: chunk 1 never sent.
        for batches in ([first[0], first[1]], [first[1], first[2], first[3]], [second[0], second[2], second[3]]):
            threads.append(threading.Thread(target=send, args=(batches,), daemon=True))
            threads[-1].start()
            deadline = time.monotonic() + 120
            while threads[-1].is_alive() and time.monotonic() < deadline:
                result = algo.train()
            assert not threads[-1].is_alive() and not errors, errors
        stored = {e.id_: (e.t_started, e.t) for e in buffer.episodes}
        first_id, second_id = first[0]["id_"], second[0]["id_"]
        assert stored[first_id] == (0, 200)  # chunk 1 once, though it came twice
        assert stored[second_id] == (0, 50) and stored[second_id + "~1"] == (100, 200)  # after the gap
        assert buffer.fitted["chunks_duplicate"] == 1 and buffer.fitted["steps_duplicate"] == 50
        assert buffer.fitted["chunks_renamed"] == 1
        assert result["learners"]["default_policy"]["num_module_steps_trained"] > 0
    finally:
        stop.set()
        algo.stop()
        for thread in threads:
            thread.join(10)
