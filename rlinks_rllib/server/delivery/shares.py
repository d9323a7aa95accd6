"""Update shares that follow the clients: each runner's part of an on-policy update, by its clients.

An on-policy update takes ``total_train_batch_size`` env steps, and by
default each runner is asked for an equal part of it. Simulators don't
spread evenly, though: RLlib restarts a runner on a node its clients left,
a cut-off runner's clients move to another, a simulator stays where the
directory first sent it. A runner with every client then delivers its
equal part and waits out its grace period (``extend_after_s``) before it
asks them for more, every iteration, while one without clients has nothing
to give: five seconds an iteration in the five-host suite.

So the runners log how many clients each has (:data:`CLIENTS_KEY`, beside
the other metrics), and after each iteration the driver's
:class:`RLinkShares` callback hands every runner those counts; a runner
takes, from its next update on, the part of the batch its clients are of
all clients (:func:`update_share`). A config without the callback keeps
equal parts.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from ray.rllib.callbacks.callbacks import RLlibCallback

from ..metrics import RUNNER_METRICS_KEY, per_runner

__all__ = ["CLIENTS_KEY", "RLinkShares", "clients_in", "update_share"]

#: Where a runner logs its client count, under ``env_runners``: ``rlinks/clients_by_runner/w<worker_index>``.
CLIENTS_KEY = (RUNNER_METRICS_KEY, "clients_by_runner")


def update_share(total_steps: int, fragment_steps: int, clients: Mapping[str, int], me: str) -> Optional[int]:
    """Env steps of an update of ``total_steps`` for runner ``me``, given every runner's ``clients``.

    In proportion to ``me``'s clients, rounded up, and never below one
    fragment (what one ``sample()`` takes). ``None`` when the counts say
    nothing about ``me`` or nobody is connected anywhere: keep the share
    it has.
    """
    everyone = sum(max(0, int(n)) for n in clients.values())
    mine = clients.get(me)
    if mine is None or everyone == 0:
        return None
    return max(fragment_steps, math.ceil(total_steps * max(0, int(mine)) / everyone))


def clients_in(result: Mapping[str, Any]) -> dict[str, int]:
    """Every runner's client count in an iteration's result (runner key -> clients)."""
    return {key: values[-1] for key, values in per_runner(result, CLIENTS_KEY[1]).items() if values}


class RLinkShares(RLlibCallback):
    """The driver's side: after each iteration, tell the runners how many clients each has.

    Add it to a config with several remote ``RLinkEnvRunner`` s
    (``config.callbacks([RLinkReceipts, RLinkShares])``; ``rlinks learner``
    does this). The call does not wait: it runs on each runner before the
    next ``sample()`` the driver sends it.
    """

    def on_train_result(self, *, algorithm: Any, result: dict, metrics_logger: Optional[Any] = None,
                        **kwargs: Any) -> None:
        clients = clients_in(result)
        if not clients:
            return
        group = getattr(algorithm, "env_runner_group", None)
        if group is None or group.num_remote_env_runners() < 2:
            return
        group.foreach_env_runner(lambda runner: runner.take_shares(clients), local_env_runner=False,
                                 timeout_seconds=0.0)
