"""The learner's table: one row per iteration from RLlib's result dict."""

from __future__ import annotations

import math

import numpy as np

from rlinks_rllib.training.report import COLUMNS, row_from_result


def test_counts_come_from_numpy_values_and_a_runnerless_iteration_counts_zero():
    result = {"training_iteration": 3, "env_runners": {
        "num_env_steps_sampled_lifetime": np.int64(6000), "num_env_steps_sampled": np.int64(2000),
        "episode_return_mean": np.float64(41.5), "rlinks": {"weights_seq_no": np.int64(2), "policy_lag_max": 0.0}}}
    row = row_from_result(result, time_s=3.0, clients=4, previous=None)
    assert set(row) == set(COLUMNS)
    assert (row["env_steps"], row["env_steps_iter"], row["weights_seq_no"]) == (6000, 2000, 2)
    # An iteration in which no runner answered (one cut off, one restarting): NaN metrics, not a crash.
    nan = float("nan")
    empty = {"training_iteration": 4, "env_runners": {"num_env_steps_sampled_lifetime": 6000,
                                                      "num_env_steps_sampled": nan,
                                                      "rlinks": {"weights_seq_no": nan, "policy_lag_max": nan}}}
    row = row_from_result(empty, time_s=5.0, clients=0, previous=row)
    assert (row["env_steps_iter"], row["weights_seq_no"], row["policy_lag_max"]) == (0, 0, 0.0)
    assert math.isnan(row["episode_return_mean"])
