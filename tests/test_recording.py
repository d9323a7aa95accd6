"""Recording what runners receive as RLlib offline data, and training RLlib's BC from it.

The writer on its own (rotation, the temporary name, the caps, uint8 images),
then a real runner recording real clients: killed with SIGKILL while it
records, it leaves only whole files that Ray Data reads; a recording of a good
CartPole controller played by real clients trains BC (``rlinks learner``) to
at least 80% of the controller's return on gymnasium's CartPole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from harness import RLINKS, ROOT
from rlinks_rllib.server.recorder import TEMP_PREFIX, UNTRAINED_DIR, Recorder, episode_columns, read_columns

MB = 1_000_000


def controller(obs: np.ndarray) -> int:
    """A scripted CartPole controller that keeps the pole up for all 500 steps."""
    return int(obs[2] + 0.5 * obs[3] + 0.01 * obs[1] > 0)


def chunk(steps: int, *, obs_shape=(4,), dtype=np.float32, seed: int = 0, terminated: bool = True,
          t_started: int = 0) -> SingleAgentEpisode:
    """An episode chunk as a runner hands it to RLlib (numpy buffers, RLlib's extra model outputs)."""
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        obs = rng.integers(0, 256, (steps + 1, *obs_shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(steps + 1, *obs_shape)).astype(dtype)
    episode = SingleAgentEpisode(
        observations=list(obs), actions=list(rng.integers(0, 2, steps)), rewards=list(np.ones(steps, np.float32)),
        extra_model_outputs={"action_logp": list(np.full(steps, -0.69, np.float32)),
                             "action_dist_inputs": list(np.zeros((steps, 2), np.float32))},
        terminated=terminated, t_started=t_started, len_lookback_buffer=0)
    episode.to_numpy()
    return episode


def files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.parquet"))


def temps(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{TEMP_PREFIX}*"))


# -- the writer ------------------------------------------------------------------------------


def test_rows_are_rllibs_offline_columns_one_per_step():
    episode = chunk(5, terminated=True, t_started=10)
    columns = episode_columns([episode])
    assert set(columns) == {"eps_id", "obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "t",
                            "action_logp", "action_dist_inputs"}
    assert len(columns["obs"]) == 5
    np.testing.assert_array_equal(columns["new_obs"][:-1], columns["obs"][1:])
    assert columns["terminateds"].tolist() == [False] * 4 + [True]
    assert columns["t"].tolist() == [10, 11, 12, 13, 14]
    # A chunk whose episode goes on ends neither terminated nor truncated.
    assert not episode_columns([chunk(3, terminated=False)])["terminateds"].any()


def test_files_rotate_by_size_and_appear_only_whole(tmp_path):
    recorder = Recorder(tmp_path, max_file_bytes=60_000, max_total_bytes=10 * MB, threaded=False)
    recorder.add([chunk(10, seed=0)])
    # Open: only a temporary file whose name readers skip.
    assert files(tmp_path) == [] and len(temps(tmp_path)) == 1
    for seed in range(1, 20):
        recorder.add([chunk(200, seed=seed)])
    recorder.close()
    assert temps(tmp_path) == []
    written = files(tmp_path)
    assert len(written) > 2
    assert all(path.stat().st_size <= 60_000 for path in written)
    rows = sum(pq.read_table(path).num_rows for path in written)
    stats = recorder.stats()
    assert rows == stats["record_steps"] == 19 * 200 + 10
    assert stats["record_files"] == len(written) and stats["record_bytes"] == sum(p.stat().st_size for p in written)


def test_a_file_open_too_long_is_closed_by_the_writer_thread(tmp_path):
    recorder = Recorder(tmp_path, max_file_bytes=10 * MB, max_total_bytes=100 * MB, max_file_s=0.2)
    recorder.add([chunk(50)])
    deadline = time.monotonic() + 10
    while not files(tmp_path):
        assert time.monotonic() < deadline, "the open file was never closed"
        time.sleep(0.05)
    assert temps(tmp_path) == []
    recorder.close()


def test_the_total_cap_stops_recording_and_counts_what_was_not_written(tmp_path, caplog):
    recorder = Recorder(tmp_path, max_file_bytes=50_000, max_total_bytes=200_000, threaded=False)
    for seed in range(40):
        recorder.add([chunk(200, seed=seed)])
    recorder.close()
    stats = recorder.stats()
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert on_disk <= 200_000 and stats["record_bytes"] == on_disk
    assert stats["record_dropped_steps"] > 0
    assert stats["record_steps"] + stats["record_dropped_steps"] == 40 * 200
    assert sum(pq.read_table(p).num_rows for p in files(tmp_path)) == stats["record_steps"]
    assert "reached record_max_total_mb" in caplog.text and "stops recording" in caplog.text


def test_rotation_at_the_total_cap_deletes_the_oldest_files_and_counts_them(tmp_path, caplog):
    recorder = Recorder(tmp_path, max_file_bytes=50_000, max_total_bytes=150_000, at_cap="rotate", threaded=False)
    for seed in range(40):
        recorder.add([chunk(200, seed=seed)])
    recorder.close()
    stats = recorder.stats()
    written = files(tmp_path)
    assert sum(p.stat().st_size for p in written) <= 150_000
    assert stats["record_deleted_files"] > 0 and stats["record_dropped_steps"] == 0
    assert stats["record_files"] - stats["record_deleted_files"] == len(written)
    assert written[-1].name.endswith(f"-{stats['record_files']:06d}.parquet")  # the newest are kept
    assert "deletes its oldest files" in caplog.text


def test_uint8_images_stay_uint8_and_compress_and_rllibs_reader_gets_arrays(tmp_path, ray_local):
    from rlinks_rllib.training.prelearner import arrays_from_raw

    image = np.zeros((11, 84, 84, 3), np.uint8)
    image[:, 20:40, 30:50] = 200
    image[3, 0, 0] = 7
    episode = chunk(10, obs_shape=(84, 84, 3), dtype=np.uint8)
    episode.observations.data[:] = image
    recorder = Recorder(tmp_path, max_file_bytes=10 * MB, max_total_bytes=100 * MB, threaded=False)
    recorder.add([episode])
    recorder.close()
    (path,) = files(tmp_path)
    columns = read_columns(path)
    assert columns["obs"].dtype == np.uint8 and columns["obs"].shape == (10, 84, 84, 3)
    np.testing.assert_array_equal(columns["obs"], image[:-1])
    np.testing.assert_array_equal(columns["new_obs"], image[1:])
    assert path.stat().st_size < image.nbytes / 10  # zstd pages
    # What RLlib's OfflinePreLearner is given, through rlinks' prelearner: arrays again.
    batch = ray_local.data.read_parquet(str(tmp_path)).take_batch(10)
    space = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    decoded = arrays_from_raw(batch, space)
    np.testing.assert_array_equal(decoded["obs"], image[:-1])
    np.testing.assert_array_equal(decoded["new_obs"], image[1:])


def test_untrained_episodes_go_where_a_reader_of_the_folder_does_not_look(tmp_path):
    recorder = Recorder(tmp_path, max_file_bytes=MB, max_total_bytes=10 * MB, threaded=False)
    recorder.add([chunk(10)], trained=True)
    recorder.add([chunk(7)], trained=False)
    recorder.close()
    assert [pq.read_table(p).num_rows for p in files(tmp_path)] == [10]
    assert [pq.read_table(p).num_rows for p in files(tmp_path / UNTRAINED_DIR)] == [7]
    assert recorder.stats()["record_untrained_steps"] == 7


def test_a_write_error_stops_recording_loudly_not_the_caller(tmp_path, caplog):
    folder = tmp_path / "rec"
    recorder = Recorder(folder, max_file_bytes=MB, max_total_bytes=10 * MB, threaded=False)
    folder.rmdir()
    folder.write_text("a file where the folder was")  # every write now fails with an OSError
    recorder.add([chunk(10)])
    recorder.add([chunk(5)])
    recorder.close()
    stats = recorder.stats()
    assert stats["record_errors"] == 1 and stats["record_dropped_steps"] == 15 and stats["record_steps"] == 0
    assert "recording stops" in caplog.text


# -- a real runner, real clients ---------------------------------------------------------------

#: A simulator that plays the scripted controller through EnvClient (log_action): its own actions are recorded.
CONTROLLER_CLIENT = '''
import argparse
import gymnasium as gym
from rlinks_rllib.client import EnvClient, TrainingEnded

parser = argparse.ArgumentParser()
parser.add_argument("--address", required=True)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
env = gym.make("CartPole-v1")
episodes, total, ret = 0, 0.0, 0.0
with EnvClient(args.address, inference="local") as client:
    try:
        obs, _ = env.reset(seed=args.seed)
        while True:
            action = int(obs[2] + 0.5 * obs[3] + 0.01 * obs[1] > 0)
            client.log_action(obs, action)
            obs, reward, terminated, truncated, _ = env.step(action)
            ret += reward
            client.report(reward, obs, terminated, truncated)
            if terminated or truncated:
                episodes, total, ret = episodes + 1, total + ret, 0.0
                obs, _ = env.reset()
    except TrainingEnded:
        pass
print(f"summary: episodes={episodes} mean_return={total / max(episodes, 1):.1f}", flush=True)
'''

RECORD_CONFIG = """\
algorithm: PPO
spaces: {{from_env: CartPole-v1}}
training: {{train_batch_size_per_learner: 1000, minibatch_size: 250, num_epochs: 1}}
env_runners: {{num_env_runners: 0, sample_timeout_s: 30}}
learners: {{num_learners: 0}}
rlinks: {{host: 127.0.0.1, port: 0, {rlinks}}}
"""


def start_record(tmp_path: Path, out: Path, rlinks: str, *extra: str) -> tuple[subprocess.Popen, str]:
    """``rlinks record`` in a session of its own (its Ray processes too); the runner's HOST:PORT once it listens."""
    config = tmp_path / "record.yaml"
    config.write_text(RECORD_CONFIG.format(rlinks=rlinks))
    run = tmp_path / "record_run"
    log = open(tmp_path / "record.log", "w")
    proc = subprocess.Popen([*RLINKS, "record", "--config", str(config), "--out", str(out), "--output", str(run),
                             *extra], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 120
    while not (run / "endpoints.json").exists():
        assert proc.poll() is None, (tmp_path / "record.log").read_text()
        assert time.monotonic() < deadline, "rlinks record never listened"
        time.sleep(0.3)
    time.sleep(0.2)  # written whole (write_json_whole), but give the runner's log its line
    (entry,) = json.loads((run / "endpoints.json").read_text())
    return proc, f"{entry['host']}:{entry['port']}"


def start_clients(tmp_path: Path, address: str, n: int) -> list[subprocess.Popen]:
    script = tmp_path / "controller_client.py"
    script.write_text(CONTROLLER_CLIENT)
    env = {**os.environ, "RLINKS_SHUTDOWN_GRACE_S": "1"}  # end soon after the recorder does
    return [subprocess.Popen([sys.executable, str(script), "--address", address, "--seed", str(i)], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(n)]


def stop_all(procs: list[subprocess.Popen], *, group: bool = False) -> None:
    for proc in procs:
        if proc.poll() is None:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        proc.wait(timeout=30)


@pytest.mark.timeout(300)
def test_a_recording_of_real_clients_trains_bc_to_80_percent_of_the_policy_that_played(tmp_path):
    """``rlinks record`` with two controller clients, then ``rlinks learner --config bc_cartpole --input``."""
    out = tmp_path / "recording"
    recorder, address = start_record(tmp_path, out, "record_max_file_mb: 0.2", "--stop-steps", "10000")
    clients = start_clients(tmp_path, address, 2)
    try:
        assert recorder.wait(timeout=180) == 0, (tmp_path / "record.log").read_text()
        outputs = [client.communicate(timeout=60)[0] for client in clients]
    finally:
        stop_all(clients)
        stop_all([recorder], group=True)
    returns = [float(line.split("mean_return=")[1]) for text in outputs for line in text.splitlines()
               if line.startswith("summary:")]
    assert len(returns) == 2, outputs
    played = sum(returns) / len(returns)
    assert temps(out) == []
    rows = sum(pq.read_table(p).num_rows for p in files(out))
    assert rows >= 10_000 and len(files(out)) > 1

    target = 0.8 * played
    learner = subprocess.run(
        [*RLINKS, "learner", "--config", "bc_cartpole", "--input", str(out), "--output", str(tmp_path / "bc"),
         "--stop-reward", f"{target:.1f}", "--stop-iters", "25"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert learner.returncode == 0, learner.stdout[-3000:] + learner.stderr[-3000:]
    reached = float(learner.stdout.split("done: mean return ")[1].split()[0])
    assert reached >= target
    print(f"\nBC from {rows} recorded steps: mean return {reached:.1f}, the controller's {played:.1f}")


@pytest.mark.timeout(300)
def test_a_runner_killed_while_it_records_leaves_only_whole_files_ray_data_reads(tmp_path, ray_local):
    out = tmp_path / "recording"
    recorder, address = start_record(tmp_path, out, "record_max_file_mb: 0.02, record_max_file_s: 1.0")
    clients = start_clients(tmp_path, address, 2)
    try:
        deadline = time.monotonic() + 120
        while len(files(out)) < 3:
            assert recorder.poll() is None, (tmp_path / "record.log").read_text()
            assert time.monotonic() < deadline, "no files were recorded"
            time.sleep(0.2)
        os.kill(recorder.pid, signal.SIGKILL)  # the runner (num_env_runners: 0: the driver's own) dies mid-file
        recorder.wait(timeout=30)
    finally:
        stop_all(clients)
        stop_all([recorder], group=True)  # what is left of its Ray
    whole = files(out)
    rows = sum(pq.read_table(path).num_rows for path in whole)  # each one has its footer
    assert rows > 0
    assert all(path.name.startswith(TEMP_PREFIX) for path in out.iterdir() if path not in whole)
    dataset = ray_local.data.read_parquet(str(out))  # as RLlib's OfflineData reads input_
    assert dataset.count() == rows
    batch = dataset.take_batch(5)
    assert batch["obs"].shape == (5, 4) and batch["obs"].dtype == np.float32


def test_a_runner_records_what_it_hands_rllib_and_counts_its_cap(tmp_path, ray_local):
    """The runner's hook, in this process: every step RLlib trains on is in the files, rotation counted in the metrics."""
    from harness import dummy_client_cmd, ppo_config, processes, running

    out = tmp_path / "recording"
    config = ppo_config(num_env_runners=0, train_batch=500, num_epochs=1, env_config={
        "record_dir": str(out), "record_max_file_mb": 0.01, "record_max_total_mb": 0.03, "record_at_cap": "rotate"})
    with running(config.build_algo()) as algo:
        runner = algo.env_runner_group.local_env_runner
        host, port = runner.address
        with processes([dummy_client_cmd(host, port) for _ in range(2)]):
            results = [algo.train() for _ in range(3)]
    # Stopped: the recorder has written everything and closed its files.
    stats = runner.get_transport_stats()
    metrics = runner.get_metrics()["rlinks"]
    sampled = int(results[-1]["env_runners"]["num_env_steps_sampled_lifetime"])
    assert stats["record_steps"] == sampled
    # Counted in RLlib's metrics as well: what the last iteration reported, and what came since.
    reported = results[-1]["env_runners"]["rlinks"].get("record_deleted_files", 0)
    assert stats["record_deleted_files"] > 0
    assert reported + metrics["record_deleted_files"].peek() == stats["record_deleted_files"]
    on_disk = sum(p.stat().st_size for p in files(out))
    assert temps(out) == [] and on_disk <= 30_000 and on_disk == stats["record_bytes"]
    rows = sum(pq.read_table(p).num_rows for p in files(out))
    assert 0 < rows < sampled  # the oldest files were deleted
