"""The learner's table: one row per iteration from RLlib's result dict."""

from __future__ import annotations

import math

import numpy as np
import pytest

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


def test_iteration_times_undo_rllibs_moving_average_of_its_timers():
    """RLlib's timers are moving averages; each row gets its own iteration's seconds back (issue #14)."""
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_SAMPLING_TIMER,
        LEARNER_UPDATE_TIMER,
        SYNCH_WORKER_WEIGHTS_TIMER,
        TIMERS,
    )
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from rlinks_rllib.training.timings import TIME_COLUMNS, IterationTimes

    # The Algorithm's own logger, fed as its training_step's log_time() feeds it (an "ema" timer).
    metrics = MetricsLogger(root=True)
    times = IterationTimes()
    # (wall, learner update, sampling, weight sync); sync is not logged in the third iteration.
    pushed = [(3.0, 2.0, 0.9, 0.01), (0.7, 0.5, 0.1, 0.02), (0.8, 0.6, 0.15, None), (0.9, 0.7, 0.1, 0.03)]
    rows = []
    for wall, learn, sample, sync in pushed:
        for key, value in ((LEARNER_UPDATE_TIMER, learn), (ENV_RUNNER_SAMPLING_TIMER, sample),
                           (SYNCH_WORKER_WEIGHTS_TIMER, sync)):
            if value is not None:
                metrics.log_value((TIMERS, key), value, reduce="ema")
        result = {**metrics.compile(), "time_this_iter_s": wall, "training_iteration": len(rows) + 1}
        rows.append(row_from_result(result, time_s=wall, clients=1, previous=rows[-1] if rows else None,
                                    times=times.update(result)))
    # Without undoing it, the fourth learner update would read 1.96 s (the average, still near the first).
    assert result[TIMERS][LEARNER_UPDATE_TIMER] > 1.9
    # An iteration of two training_step calls (min_time_s_per_iteration): the row has both together.
    for _ in range(2):
        metrics.log_value((TIMERS, LEARNER_UPDATE_TIMER), 0.4, reduce="ema")
    result = {**metrics.compile(), "num_training_step_calls_per_iteration": 2}
    assert times.update(result)["learn_s"] == pytest.approx(0.8, abs=1e-3)
    for row, (wall, learn, sample, sync) in zip(rows, pushed):
        assert set(TIME_COLUMNS) <= set(row)
        assert (row["iter_s"], row["learn_s"], row["sample_s"]) == pytest.approx((wall, learn, sample), abs=1e-3)
        assert math.isnan(row["sync_s"]) if sync is None else row["sync_s"] == pytest.approx(sync, abs=1e-3)
    # A row built without timings still has every column (NaN), as progress.csv expects.
    assert all(math.isnan(row_from_result({}, time_s=1.0, clients=0, previous=None)[c]) for c in TIME_COLUMNS)
