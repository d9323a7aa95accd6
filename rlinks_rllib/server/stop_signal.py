"""How a stopping learner reaches its remote runners while they wait inside ``sample()``.

A Ray actor runs one call at a time: a runner waiting in ``sample()`` for
steps from connected but silent simulators (up to ``sample_wait_fraction`` of
RLlib's ``sample_timeout_s``, 45 s under the bundled PPO config) would take
a "stop" call only once that wait is over, and RLlib's driver waits for it.
So the learner makes one :class:`StopSignal` actor (no CPU) and hands it to
every runner (``RLinkEnvRunner.watch_stop_signal``); each runner waits on it
from a thread of its own (:func:`wait_for`) and, once it is set, stops
handing steps over at once, in the middle of a ``sample()`` too.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Callable

import ray

__all__ = ["StopSignal", "make_stop_signal", "set_signal", "wait_for"]

logger = logging.getLogger("rlinks_rllib.server")

#: The longest one wait on the signal lasts; a runner's thread asks again until the signal or its own stop.
WAIT_S = 30.0
#: The longest a runner's thread waits for an answer beyond :data:`WAIT_S` (a busy or far GCS).
_ANSWER_GRACE_S = 30.0


class StopSignal:
    """A flag that is set once and that any number of callers can wait on (a Ray actor, see :func:`make_stop_signal`)."""

    def __init__(self) -> None:
        self._set = asyncio.Event()

    async def set(self) -> None:
        """Set the flag: every waiter wakes."""
        self._set.set()

    async def wait(self, timeout_s: float) -> bool:
        """Whether the flag is set, waiting up to ``timeout_s`` for it."""
        try:
            await asyncio.wait_for(self._set.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True


def make_stop_signal():
    """A :class:`StopSignal` actor that asks Ray for no CPU (it only waits)."""
    return ray.remote(num_cpus=0)(StopSignal).remote()


#: How long setting the signal may take (its actor is on the learner's node).
SET_TIMEOUT_S = 10.0


def set_signal(signal) -> bool:
    """Set ``signal`` (again is harmless); whether it was. One that can't be reached is logged, not raised."""
    try:
        ray.get(signal.set.remote(), timeout=SET_TIMEOUT_S)
    except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
        logger.warning("the runners' stop signal could not be set (%s): a sample() under way ends in its own time",
                       exc)
        return False
    return True


def wait_for(signal, done: threading.Event, then: Callable[[], None], name: str) -> threading.Thread:
    """Call ``then`` on a daemon thread once ``signal`` is set; the thread ends without it when ``done`` is set.

    A signal that can no longer be reached (its learner went away) ends the
    thread too, logged at debug: a runner without a learner is stopped by Ray;
    and so does Ray's shutdown of this process, which ends the call under way
    with ``SystemExit``.
    """
    def run() -> None:
        while not done.is_set():
            try:
                if ray.get(signal.wait.remote(WAIT_S), timeout=WAIT_S + _ANSWER_GRACE_S):
                    break
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
                logger.debug("%s: the stop signal can't be reached (%s); no longer watched", name, exc)
                return
            except SystemExit:
                return  # Ray ends a call under way so as its worker shuts down: so does this thread
        else:
            return
        then()

    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    return thread
