"""TensorBoard event files beside progress.csv (``training/tensorboard.py``), read back with TensorBoard's own reader.

A real ``rlinks learner --output DIR`` trains PPO for two iterations with a
dummy client; TensorBoard's ``EventAccumulator`` then finds RLlib's results
and ours in ``DIR`` at the iterations' env steps. A unit test writes a
result of each kind of value through the same writer and reads it back.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from harness import train_through_cli
from rlinks_rllib.training.tensorboard import OURS, TensorBoardLog, scalars_of

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in ``folder``'s event files, as TensorBoard loads them: tag -> [(step, value)]."""
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_numbers_of_every_kind_are_written_and_the_rest_left_out(tmp_path):
    result = {"env_runners": {"episode_return_mean": np.float32(21.5), "num_env_steps_sampled_lifetime": np.int64(400),
                              "rlinks": {"policy_lag_max": 0, "clients": 2}},
              "learners": {"default_policy": {"total_loss": 0.25, "module_train_batch_size_mean": np.array(64)}},
              "config": {"lr": 0.1}, "done": False, "note": "text", "list": [1, 2], "flag": True}
    assert dict(scalars_of(result)) == {
        "env_runners/episode_return_mean": 21.5, "env_runners/num_env_steps_sampled_lifetime": 400.0,
        "env_runners/rlinks/policy_lag_max": 0.0, "env_runners/rlinks/clients": 2.0,
        "learners/default_policy/total_loss": 0.25, "learners/default_policy/module_train_batch_size_mean": 64.0}
    board = TensorBoardLog(tmp_path)
    board.add(result, {"iteration": 1, "env_steps": 400, "clients": 2, "episode_return_mean": math.nan})
    board.add(result, {"iteration": 2, "env_steps": 800, "clients": 3, "episode_return_mean": 30.0})
    board.close()
    board.close()  # again: nothing
    scalars = read_scalars(tmp_path)
    assert scalars[f"{OURS}/clients"] == [(400, 2.0), (800, 3.0)]
    assert math.isnan(scalars[f"{OURS}/episode_return_mean"][0][1])  # a gap in TensorBoard, not a crash
    assert scalars["learners/default_policy/total_loss"] == [(400, 0.25), (800, 0.25)]
    assert f"{OURS}/env_steps" not in scalars and "config/lr" not in scalars and "flag" not in scalars


@pytest.mark.timeout(300)
def test_a_learners_output_folder_holds_its_run_for_tensorboard(tmp_path):
    run = train_through_cli(tmp_path, ["--config", "ppo_cartpole", "--num-env-runners", "0", "--stop-iters", "2"],
                            ["-n", "1"], timeout_s=240)
    assert run.returncode == 2, run.learner_log[-3000:]  # --stop-iters before the stop reward
    with open(run.output / "progress.csv") as handle:
        steps = [int(row["env_steps"]) for row in csv.DictReader(handle)]
    assert len(steps) == 2
    scalars = read_scalars(run.output)
    # Ours, one point per iteration at its env steps, as progress.csv has them.
    for tag in ("clients", "episode_return_mean", "weights_seq_no", "policy_lag_max", "steps_per_s"):
        assert [step for step, _ in scalars[f"{OURS}/{tag}"]] == steps, tag
    assert all(value == 1 for _, value in scalars[f"{OURS}/clients"])
    # RLlib's, the learner's losses and the runners' own metrics among them.
    assert [step for step, _ in scalars["env_runners/episode_return_mean"]] == steps
    assert any(tag.startswith("learners/default_policy/") and tag.endswith("total_loss") for tag in scalars)
    assert any(tag.startswith("env_runners/rlinks/") for tag in scalars), sorted(scalars)[:40]
