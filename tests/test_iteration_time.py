"""Where a training iteration's time goes (issue #14): RLlib's timers, one iteration at a time."""

from __future__ import annotations

import math

import pytest

from rlinks_rllib.training.report import row_from_result


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

