"""Where each training iteration's time went, from RLlib's own timers.

An Algorithm times the phases of its ``training_step`` with
``MetricsLogger.log_time``, whose default reduction is an exponential moving
average (``EmaStats``, coefficient 0.01): ``result["timers"]`` holds that
average, which after a few iterations barely moves. :class:`IterationTimes`
undoes the average, so each iteration gets its own seconds back::

    value_t = (ema_t - (1 - c) * ema_{t-1}) / c

When an iteration calls ``training_step`` k times (``min_time_s_per_iteration``
and the like; RLlib reports k), a timer is pushed k times, and the row gets
their sum, taking the k values as equal (their weights in the average differ
by at most a factor ``(1 - c) ** (k - 1)``)::

    sum_t = k * (ema_t - (1 - c) ** k * ema_{t-1}) / (1 - (1 - c) ** k)

A timer seen for the first time is its own value (the average starts at the
first value pushed; after a restore from a checkpoint the first row reads the
restored average instead). A timer that did not run in the iteration (one
that returned early) reads NaN.
"""

from __future__ import annotations

import math
from typing import Mapping

from ray.rllib.utils.metrics import (
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_UPDATE_TIMER,
    NUM_TRAINING_STEP_CALLS_PER_ITERATION,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

__all__ = ["EMA_COEFF", "PHASES", "TIME_COLUMNS", "IterationTimes"]

#: RLlib's default for ``log_time`` (``EmaStats(ema_coeff=0.01)``), which its algorithms' timers use.
EMA_COEFF = 0.01

#: The columns :meth:`IterationTimes.update` returns, and the RLlib timer each one reads.
PHASES: Mapping[str, str] = {
    "sample_s": ENV_RUNNER_SAMPLING_TIMER,  # synchronous_parallel_sample(): waiting on every runner's sample()
    "learn_s": LEARNER_UPDATE_TIMER,  # learner_group.update(): the learner's own update
    "sync_s": SYNCH_WORKER_WEIGHTS_TIMER,  # new weights to every runner
}

#: Every column :meth:`IterationTimes.update` returns: the iteration's wall seconds, then its phases.
TIME_COLUMNS = ("iter_s", *PHASES)


class IterationTimes:
    """Turns each result's smoothed ``timers`` into that iteration's seconds per phase.

    Feed it every result of one Algorithm, in order; skipping one makes the
    next values wrong (the average would have moved twice).
    """

    def __init__(self, ema_coeff: float = EMA_COEFF) -> None:
        self._coeff = ema_coeff
        self._last: dict[str, float] = {}

    def update(self, result: Mapping) -> dict[str, float]:
        """:data:`TIME_COLUMNS` of the iteration ``result`` reports, in seconds.

        ``iter_s`` is RLlib's ``time_this_iter_s`` (not smoothed); a phase
        whose timer is absent or did not move reads NaN.
        """
        timers = result.get(TIMERS, {})
        calls = max(1, int(result.get(NUM_TRAINING_STEP_CALLS_PER_ITERATION) or 1))
        times = {"iter_s": float(result.get("time_this_iter_s", math.nan))}
        for column, key in PHASES.items():
            times[column] = self._unsmooth(key, timers.get(key), calls)
        return times

    def _unsmooth(self, key: str, ema, calls: int) -> float:
        if ema is None or ema != ema:
            return math.nan
        ema = float(ema)
        last = self._last.get(key)
        self._last[key] = ema
        if last is None:
            return calls * ema  # k pushes into an empty average: ~their mean, the best there is
        if ema == last:
            return math.nan  # not logged this iteration (an exact repeat of the average is no measurement)
        kept = (1.0 - self._coeff) ** calls
        return max(0.0, calls * (ema - kept * last) / (1.0 - kept))
