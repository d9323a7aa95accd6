"""Receipts for ``sample()`` results, so that none that RLlib drops is lost.

A remote runner's ``sample()`` result still has to reach the driver, and
RLlib's actor manager drops one that arrives after ``sample_timeout_s`` (a
link cut between the runner's host and the head is enough). The runner
confirmed those batches when ``sample()`` returned them, so their clients
won't send them again: without more, they would be lost.

So a remote runner keeps what it returned (:class:`ReturnedBatches`) under
a receipt token, which it logs with the result's metrics: RLlib fetches
``sample()`` and ``get_metrics()`` in one remote call, so the token reaches
the driver exactly when the episodes do. After each iteration the driver's
:class:`RLinkReceipts` callback hands every runner the tokens that arrived.
The batches of a token that arrived are let go; those of a token older
than one that arrived in an earlier iteration never will arrive: RLlib
dropped them, and the runner hands them to RLlib again.

Confirming only once the receipt came would be the other way; it was tried
and rejected: a runner that dies during the learner's update (after RLlib
got its result, before the receipt) then leaves batches RLlib has
unconfirmed, and their clients send them again elsewhere, to be trained
twice. The window of confirm-on-return is milliseconds instead.

A config without the callback keeps what it had (a result RLlib drops is
lost); a runner in the driver's own process (``num_env_runners=0``) has
nothing to lose on the way.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable, Iterable, Mapping, Optional

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.utils.metrics import metrics_logger

from ..metrics import RUNNER_METRICS_KEY, per_runner

__all__ = ["RECEIPTS_KEY", "ReturnedBatches", "RLinkReceipts", "receipts_in", "receipts_wanted"]

logger = logging.getLogger(__name__)

#: Where a runner logs its receipt tokens, under ``env_runners``: ``rlinks/receipts/w<worker_index>``.
RECEIPTS_KEY = (RUNNER_METRICS_KEY, "receipts")


class ReturnedBatches:
    """Batches a runner returned from ``sample()`` whose receipt has not come back yet.

    Pure bookkeeping (no Ray, no threads): the runner calls it from RLlib's thread.

    Tokens are wall-clock microseconds, strictly increasing within a runner:
    a runner restarted with the same worker index never mistakes the old
    one's tokens for its own, and they stay exact in a float metric.

    Args:
        max_results: results kept waiting for a receipt; past that, the oldest
            is let go without one (the driver is not sending receipts).
        clock: seconds since the epoch.
    """

    def __init__(self, max_results: int = 64, clock: Callable[[], float] = time.time) -> None:
        self.max_results = max_results
        self._clock = clock
        self._held: collections.OrderedDict[int, list[Any]] = collections.OrderedDict()
        self._last_token = 0
        #: The newest token of an earlier call to :meth:`received`: unreceipted tokens below it were dropped.
        self._received_before = 0

    def __len__(self) -> int:
        return len(self._held)

    def add(self, batches: list[Any]) -> tuple[int, list[Any]]:
        """Keep ``batches`` (one ``sample()`` result) until its receipt.

        Returns:
            The token to log with the result, and the batches of the oldest
            results beyond ``max_results`` (let go without a receipt).
        """
        token = self._last_token = max(self._last_token + 1, int(self._clock() * 1e6))
        self._held[token] = batches
        overflow: list[Any] = []
        while len(self._held) > self.max_results:
            overflow += self._held.popitem(last=False)[1]
        return token, overflow

    def received(self, tokens: Iterable[int]) -> tuple[list[Any], list[Any]]:
        """The driver got the results of ``tokens`` (any runner's; others are ignored).

        Returns:
            ``(taken, dropped)``: the batches the driver has, and those of
            results it will never have (older than a token received by an
            earlier call; one iteration of slack for results fetched late).
        """
        taken: list[Any] = []
        newest = 0
        for token in sorted(int(t) for t in tokens):
            batches = self._held.pop(token, None)
            if batches is not None:
                taken += batches
                newest = token
        dropped: list[Any] = []
        while self._held:
            oldest = next(iter(self._held))
            if oldest >= self._received_before:
                break
            dropped += self._held.pop(oldest)
        self._received_before = max(self._received_before, newest)
        return taken, dropped


def receipts_wanted(config: Any) -> bool:
    """Whether the driver of ``config`` sends receipts (its callbacks include :class:`RLinkReceipts`).

    Also needs RLlib's ``item_series`` metric (a list per iteration), which
    older Ray lacks: a result RLlib drops is then lost, as without receipts.
    """
    if "item_series" not in getattr(metrics_logger, "DEFAULT_STATS_CLS_LOOKUP", {}):
        return False
    callbacks = getattr(config, "callbacks_class", None)
    classes = callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]
    return any(isinstance(c, type) and issubclass(c, RLinkReceipts) for c in classes)


def receipts_in(result: Mapping[str, Any]) -> dict[str, list[int]]:
    """Take the receipt tokens out of an iteration's result (they are bookkeeping, not a metric)."""
    return per_runner(result, RECEIPTS_KEY[1], take=True)


class RLinkReceipts(RLlibCallback):
    """The driver's side: after each iteration, tell the runners which results arrived.

    Add it to a config whose runners are remote ``RLinkEnvRunner`` s, so that
    no confirmed step is lost to a ``sample()`` result RLlib drops
    (``config.callbacks(RLinkReceipts)``; ``rlinks learner`` does this).
    The call to the runners does not wait: it runs on each runner before
    the next ``sample()`` the driver sends it.
    """

    def on_train_result(self, *, algorithm: Any, result: dict, metrics_logger: Optional[Any] = None,
                        **kwargs: Any) -> None:
        receipts = receipts_in(result)
        if not receipts:
            return
        group = getattr(algorithm, "env_runner_group", None)
        if group is None or group.num_remote_env_runners() == 0:
            return
        group.foreach_env_runner(lambda runner: runner.take_receipts(receipts), local_env_runner=False,
                                 timeout_seconds=0.0)
