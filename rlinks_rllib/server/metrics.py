"""The numbers an RLinkEnvRunner reports in RLlib's results.

Two kinds: RLlib's own episode metrics (return, length, duration), with an
episode that arrived in several chunks counted once, when its last chunk
arrives; and the transport's own under the ``rlinks`` key (clients, frames,
bytes, errors, inbox depth, policy lag, dropped steps, and for served
actions the rows, actions, forward passes, their mean size and time).
"""

from __future__ import annotations

import collections
import math
import numbers
from typing import Any, Mapping

import numpy as np

from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    EPISODE_AGENT_RETURN_MEAN,
    EPISODE_DURATION_SEC_MEAN,
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_MODULE_RETURN_MEAN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

__all__ = ["RUNNER_METRICS_KEY", "EpisodeTotals", "TransportMetrics", "log_sampled", "log_episodes", "log_episode",
           "log_takeovers", "TAKEOVER_RATE", "TAKEOVER_STEPS", "TAKEOVER_EPISODES"]

#: Results key under which the transport metrics appear.
RUNNER_METRICS_KEY = "rlinks"


def runner_key(worker_index: int) -> str:
    """The key of one runner's entry in a per-runner metric (``receipts``, ``clients_by_runner``)."""
    return f"w{worker_index}"


def per_runner(result: Mapping[str, Any], name: str, *, take: bool = False) -> dict[str, list[int]]:
    """What each runner logged under ``env_runners/rlinks/<name>/<runner_key>`` in an iteration's result.

    Values as integers, a stats object peeked, and NaN (nothing from that
    runner this iteration) and anything not a number left out. ``take``:
    remove the entry from the result (bookkeeping, not a metric).
    """
    rlinks = result.get("env_runners", {}).get(RUNNER_METRICS_KEY)
    if not isinstance(rlinks, dict):
        return {}
    found = rlinks.pop(name, None) if take else rlinks.get(name)
    if not isinstance(found, dict):
        return {}
    values = {}
    for key, value in found.items():
        if hasattr(value, "peek"):
            value = value.peek()
        series = value if isinstance(value, (list, tuple)) else [value]
        values[key] = [int(v) for v in series if isinstance(v, numbers.Real) and math.isfinite(v)]
    return values

#: Chunks of unfinished episodes remembered at most (oldest forgotten first).
_MAX_OPEN_EPISODES = 100_000


class EpisodeTotals:
    """Adds up the chunks of each episode until its last one arrives.

    Also the steps taken over (``takeover``): once this runner has seen one,
    every episode that finishes leaves its take-over rate (taken-over steps /
    steps) in :attr:`takeover_rates`, for :func:`log_takeovers`.
    """

    def __init__(self) -> None:
        self._open: collections.OrderedDict[str, list[float]] = collections.OrderedDict()
        self.seen_takeovers = False
        #: Take-over rates of the episodes finished since :func:`log_takeovers` took them.
        self.takeover_rates: list[float] = []

    def add_tally(self, tally: Any) -> tuple[int, float, float] | None:
        """Account a chunk by its :class:`~.takeover.markers.ChunkTally`; as :meth:`add`."""
        totals = self._open.pop(tally.episode_id, None) or [0, 0.0, 0.0, 0]
        totals[0] += tally.steps
        totals[1] += tally.episode_return
        totals[2] += tally.duration_s
        totals[3] += tally.takeover_steps
        self.seen_takeovers = self.seen_takeovers or tally.takeover_steps > 0
        return self._done(tally.episode_id, totals, tally.done)

    def add(self, episode: Any) -> tuple[int, float, float] | None:
        """Account a chunk; return (length, return, duration) once the episode is done."""
        totals = self._open.pop(episode.id_, None) or [0, 0.0, 0.0, 0]
        totals[0] += len(episode)
        rewards = episode.rewards
        if rewards.finalized and type(rewards.data) is np.ndarray:
            # What the runner's ingest makes: one array, the lookback first.
            totals[1] += float(rewards.data[rewards.lookback:].sum())
        else:
            totals[1] += float(np.sum(episode.get_rewards()))  # get_return() sums in Python
        totals[2] += float(episode.get_duration_s() or 0.0)
        return self._done(episode.id_, totals, episode.is_done)

    def _done(self, episode_id: str, totals: list, done: bool) -> tuple[int, float, float] | None:
        if done:
            if self.seen_takeovers and totals[0]:
                self.takeover_rates.append(totals[3] / totals[0])
            return int(totals[0]), totals[1], totals[2]
        self._open[episode_id] = totals
        while len(self._open) > _MAX_OPEN_EPISODES:
            self._open.popitem(last=False)
        return None


#: Keys under ``rlinks`` of the take-over metrics (the ``takeover`` extension).
TAKEOVER_RATE = "takeover_rate_mean"
TAKEOVER_STEPS = "takeover_steps"
TAKEOVER_EPISODES = "takeover_episodes"


def log_takeovers(metrics: MetricsLogger, totals: EpisodeTotals, steps: int) -> None:
    """The take-over rate per episode (mean over the episodes finished since the last call), the
    taken-over steps (``steps`` more) and the finished episodes with any, once this runner has seen a
    take-over; nothing before."""
    if not totals.seen_takeovers:
        return
    key = RUNNER_METRICS_KEY
    rates, totals.takeover_rates = totals.takeover_rates, []
    metrics.log_value((key, TAKEOVER_STEPS), steps, reduce="lifetime_sum")
    metrics.log_value((key, TAKEOVER_EPISODES), sum(rate > 0 for rate in rates), reduce="lifetime_sum")
    for rate in rates:
        metrics.log_value((key, TAKEOVER_RATE), rate, reduce="mean")  # the episodes since the last reduce


def log_sampled(metrics: MetricsLogger, steps: int, episodes_done: int) -> None:
    """RLlib's per-sample step and episode counters (same keys as SingleAgentEnvRunner)."""
    metrics.log_value(NUM_ENV_STEPS_SAMPLED, steps, reduce="sum")
    metrics.log_value((NUM_AGENT_STEPS_SAMPLED, DEFAULT_AGENT_ID), steps, reduce="sum")
    metrics.log_value((NUM_MODULE_STEPS_SAMPLED, DEFAULT_MODULE_ID), steps, reduce="sum")
    metrics.log_value(NUM_EPISODES, episodes_done, reduce="sum")
    metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, steps, reduce="lifetime_sum", with_throughput=True)
    metrics.log_value((NUM_AGENT_STEPS_SAMPLED_LIFETIME, DEFAULT_AGENT_ID), steps, reduce="lifetime_sum")
    metrics.log_value((NUM_MODULE_STEPS_SAMPLED_LIFETIME, DEFAULT_MODULE_ID), steps, reduce="lifetime_sum")
    metrics.log_value(NUM_EPISODES_LIFETIME, episodes_done, reduce="lifetime_sum")


def log_episodes(metrics: MetricsLogger, finished: list[tuple[int, float, float]], window: int) -> None:
    """The episodes one ``sample()`` finished, as (length, return, duration), into RLlib's episode metrics.

    What nine ``log_value`` calls per episode (``SingleAgentEnvRunner``'s
    way) would leave in ``metrics``, at a fraction of the cost: one
    ``log_value`` per key and call creates the stats object the first time,
    and the other values go to that object's own ``push``. Only the last
    ``window`` episodes are pushed; older ones would leave the window anyway.
    """
    if not finished:
        return
    lengths, returns, durations = zip(*finished[-window:])
    for key, values, reduce in (
        (EPISODE_LEN_MEAN, lengths, "mean"),
        (EPISODE_RETURN_MEAN, returns, "mean"),
        (EPISODE_DURATION_SEC_MEAN, durations, "mean"),
        ((EPISODE_AGENT_RETURN_MEAN, DEFAULT_AGENT_ID), returns, "mean"),
        ((EPISODE_MODULE_RETURN_MEAN, DEFAULT_MODULE_ID), returns, "mean"),
        (EPISODE_LEN_MIN, lengths, "min"),
        (EPISODE_RETURN_MIN, returns, "min"),
        (EPISODE_LEN_MAX, lengths, "max"),
        (EPISODE_RETURN_MAX, returns, "max"),
    ):
        metrics.log_value(key, values[0], reduce=reduce, window=window)
        if len(values) > 1:
            push = metrics._get_key(key).push  # noqa: SLF001 - log_value's own lookup, once per call
            for value in values[1:]:
                push(value)


def log_episode(metrics: MetricsLogger, length: int, ret: float, duration: float, window: int, *,
                agents: dict[str, float] | None = None, modules: dict[str, float] | None = None) -> None:
    """One finished episode, into RLlib's episode metrics (``agents``/``modules``: returns per id, multi-agent)."""
    metrics.log_value(EPISODE_LEN_MEAN, length, window=window)
    metrics.log_value(EPISODE_RETURN_MEAN, ret, window=window)
    metrics.log_value(EPISODE_DURATION_SEC_MEAN, duration, window=window)
    for agent_id, value in (agents or {DEFAULT_AGENT_ID: ret}).items():
        metrics.log_value((EPISODE_AGENT_RETURN_MEAN, agent_id), value, window=window)
    for module_id, value in (modules or {DEFAULT_MODULE_ID: ret}).items():
        metrics.log_value((EPISODE_MODULE_RETURN_MEAN, module_id), value, window=window)
    metrics.log_value(EPISODE_LEN_MIN, length, reduce="min", window=window)
    metrics.log_value(EPISODE_RETURN_MIN, ret, reduce="min", window=window)
    metrics.log_value(EPISODE_LEN_MAX, length, reduce="max", window=window)
    metrics.log_value(EPISODE_RETURN_MAX, ret, reduce="max", window=window)


_COUNTERS = ("connections_total", "connections_refused", "frames_in", "frames_out", "bytes_in",
             "bytes_out", "batches_in", "steps_in", "batches_acked", "steps_acked", "steps_handed_again",
             "duplicates", "errors_total", "tls_handshakes_failed", "accept_errors", "served_acts", "served_rows", "served_actions",
             "served_steps", "served_parked", "served_expired_envs", "inference_batches", "inference_rows",
             "inference_requests", "inference_s")


class TransportMetrics:
    """Logs the network side's counters as deltas, so RLlib sums them over runners."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def _delta(self, name: str, value: int) -> int:
        delta = value - self._last.get(name, 0)
        self._last[name] = value
        return delta

    def log_counter(self, metrics: MetricsLogger, key: tuple, name: str, value: int) -> int:
        """Log counter ``name``'s growth since the last report under ``key``; returns that growth.

        A counter that did not grow is logged once only.

        A lifetime sum, once logged, stays in the logger and reduces to its
        unchanged total: logging 0 again would only cost time (about thirty
        counters per ``get_metrics()``, most of them still).
        """
        first = name not in self._last
        delta = self._delta(name, value)
        if delta or first:
            metrics.log_value(key, delta, reduce="lifetime_sum")
        return delta

    def log(self, metrics: MetricsLogger, snapshot: dict, *, inbox_steps: int, inbox_bytes: int,
            weights_seq_no: int, lags: list[int], dropped_stale_steps: int, dropped_backlog_steps: int = 0) -> None:
        key = RUNNER_METRICS_KEY
        # Gauges: the latest value of this runner (the max over runners once aggregated).
        metrics.log_value((key, "clients_connected"), snapshot["clients_connected"], reduce="max", window=1)
        metrics.log_value((key, "inbox_steps"), inbox_steps, reduce="max", window=1)
        metrics.log_value((key, "inbox_bytes"), inbox_bytes, reduce="max", window=1)
        metrics.log_value((key, "weights_seq_no"), weights_seq_no, reduce="max", window=1)
        # Counters: totals over the run, summed over runners.
        deltas = {name: self.log_counter(metrics, (key, name), name, snapshot.get(name, 0)) for name in _COUNTERS}
        batches = deltas["inference_batches"]
        if batches:
            # Served actions: rows and ACTs per forward pass, and its time, over this report's batches.
            metrics.log_value((key, "inference_batch_mean"), deltas["inference_rows"] / batches, window=100)
            metrics.log_value((key, "inference_acts_per_batch_mean"), deltas["inference_requests"] / batches,
                              window=100)
            metrics.log_value((key, "inference_ms_mean"), 1000.0 * deltas["inference_s"] / batches, window=100)
        for code, count in snapshot["errors"].items():
            self.log_counter(metrics, (key, "errors", code), "error:" + code, count)
        self.log_counter(metrics, (key, "dropped_stale_steps"), "dropped", dropped_stale_steps)
        self.log_counter(metrics, (key, "dropped_backlog_steps"), "dropped_backlog", dropped_backlog_steps)
        if lags:
            metrics.log_value((key, "policy_lag_mean"), sum(lags) / len(lags), window=100)
            metrics.log_value((key, "policy_lag_max"), max(lags), reduce="max", window=100)
