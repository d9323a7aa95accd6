"""SAC and DQN trained from external simulators through ``rlinks learner``, and SAC's buffer under resends.

The training runs use small settings that learn in a few minutes on two
CPU cores (the shipped configs are RLlib's tuned ones, measured by
``benchmarks/bench_sac.py``). SAC's simulators are paced
(``off_policy_backlog: pace``) so that the dummy clients, which step as fast
as they can, leave the learner its share of the two cores; DQN's run
unpaced against the default backlog drop. Both runs to their
targets (DQN's 33 to 230 s, then SAC's three minutes of one core) start with
the session, one after the other, and train beside the other tests
(tests/head_start.py). DQN goes first: its simulators step flat out, and
under that load test_cpp_client's reconnect test, five minutes in, ended in
a protocol error once (a client race still open); paced SAC takes one core.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness import CliRun, train_through_cli

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


#: The bound of DQN's run to 150 from its start (33 to 230 s here; 60 iterations of about 7 s at most).
DQN_BOUND_S = 600


def _dqn_to_150(tmp_path: Path, cancelled: threading.Event) -> CliRun:
    """The shipped DQN config to 150, two simulators in local mode, unpaced against the backlog's drop.

    The mean is over the last 20 episodes, not RLlib's 100: DQN on CartPole
    rises, often falls back and rises again, and the slower window missed a
    peak (131.6 at iteration 8, 33 at 12, 150 only at 37: 215 s where the
    runs that caught it took 33 s).
    """
    from rlinks_rllib.bundled import bundled_config

    spec = yaml.safe_load(bundled_config("dqn_cartpole").read_text())
    spec["stop"] = {"reward": 150, "iters": 60}
    spec["reporting"] = {**spec.get("reporting", {}), "metrics_num_episodes_for_smoothing": 20}
    return train_through_cli(tmp_path, ["--config", _config(tmp_path, spec)],
                             ["-n", "2", "--", "--off-policy", "--max-steps", "1000000000"],
                             timeout_s=DQN_BOUND_S - 180, cancelled=cancelled)


@pytest.mark.head_start(_dqn_to_150, bound_s=DQN_BOUND_S)
def test_dqn_on_cartpole_from_simulators_running_its_q_network_reaches_150(head_start):
    """QPolicy explores along epsilon at RLlib's step count; the run goes beside the other tests, before SAC's."""
    run = head_start
    assert run.returncode == 0 and run.reached >= 150, run.learner_log[-3000:]
    assert "running QPolicy here, off-policy" in run.client_out
    assert "dropped" in run.learner_log  # unpaced: more steps came than DQN took, and the live line says so
    print(f"\nDQN reached {run.reached:.1f} in {run.seconds:.0f} s, beside the suite's other tests")


#: The bound of SAC's run to -400 from its start (it took 185 s alone, 186 s at load 6), within the module's timeout.
SAC_BOUND_S = 870


def _sac_to_minus_400(tmp_path: Path, cancelled: threading.Event) -> CliRun:
    """``SAC_SMALL`` to -400: one simulator runs the policy in numpy, the other is served by the runner.

    The learner stops on the mean return of the last 5 episodes, which the
    two simulators end at about the same rate: one mode still playing at
    -1,200 would keep that mean far below it. Paced, neither simulator
    may keep the other out: a client that gets no batch taken or no actions
    for 120 s fails, and so does the test.
    """
    return train_through_cli(tmp_path, ["--config", _config(tmp_path, SAC_SMALL)],
                             ["-n", "1", "--", "--env", "Pendulum-v1", "--off-policy"],
                             more_clients=[["-n", "1", "--", "--env", "Pendulum-v1", "--served-actions"]],
                             timeout_s=SAC_BOUND_S - 180, cancelled=cancelled)


@pytest.mark.head_start(_sac_to_minus_400, bound_s=SAC_BOUND_S)
def test_sac_on_pendulum_from_a_local_and_a_served_simulator_reaches_minus_400(head_start):
    """The issue's target, both modes at once. The run starts with the session and trains beside the
    other tests (tests/head_start.py): alone it took 185 s, three minutes the suite has no room for in a
    row (to -700 took 158 s: SAC's curve is steep, so no nearer target is much shorter)."""
    run = head_start
    assert run.returncode == 0 and run.reached >= -400, run.learner_log[-3000:]
    assert "running NumpyPolicy here, off-policy" in run.client_out
    assert "the runner computes the actions" in run.client_out
    print(f"\nSAC reached {run.reached:.1f} in {run.seconds:.0f} s, beside the suite's other tests")


def _pendulum_chunks(rng: np.random.Generator, episodes: int, chunk_steps: int) -> list[list[dict]]:
    """Episodes of a real Pendulum under random actions, each cut into chunks of ``chunk_steps``."""
    import gymnasium as gym

    from rlinks_rllib.protocol.episode_builder import EpisodeBuilder

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
