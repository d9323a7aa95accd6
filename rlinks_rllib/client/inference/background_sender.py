"""Off-policy batches sent from a thread of their own, so the simulator's loop never waits for the learner.

The loop hands :class:`BackgroundSender` each batch of episode chunks; the
thread sends it (``EPISODES``, confirmed by the runner's ``ACK``) and asks for
the learner's newest weights when there are some, which the loop picks up
with :meth:`BackgroundSender.newest_weights`. A runner that agreed to
``weights_notice`` names its weights version in every ``ACK``: the thread asks
(``GET_STATE``) as soon as an ``ACK`` names a newer one than it holds, at most
every ``weights_every_s``, so a client follows the learner within one sync
instead of polling. With no version named for ``WEIGHTS_POLL_S`` (no ``ACK``
came), or from a runner that names none (RLlib's own), it asks on a timer.
The hand-over queue holds ``depth`` batches: when the network or the runner
falls that far behind, :meth:`BackgroundSender.send` waits for room (bounded
by ``timeout``), so memory stays bounded and nothing is dropped unseen.

A runner that paces its clients (``off_policy_backlog: pace``) names how many
batches it takes of each at its next ``sample()`` (``paced_in_flight`` in its
``SET_CONFIG``, usually 1): then :meth:`BackgroundSender.send` waits until
fewer than that many batches are handed over and not yet confirmed, so the
loop samples its next batch with the weights that came with the last ``ACK``
instead of running ``max_unacked`` + ``depth`` batches ahead with old ones.

An error in the thread (the learner ended, the connection was lost for good)
is raised again from the loop's next :meth:`~BackgroundSender.send` or
:meth:`~BackgroundSender.check` call.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Mapping, Optional

from ...protocol.config import PACED_IN_FLIGHT_KEY
from ...protocol.extensions import Extension
from ..errors import ServerTimeout
from ..network.connection import WeightsNotice, WeightsUpdate
from ..network.shared_client import SharedClient

__all__ = ["BackgroundSender", "WEIGHTS_POLL_S", "WeightsSchedule", "paced_in_flight"]

_STOP = object()

#: Seconds between two weight requests when the runner names no version in its
#: ACKs (RLlib's own server, or no ACK came for that long).
WEIGHTS_POLL_S = 1.0


def paced_in_flight(config: Mapping[str, Any]) -> Optional[int]:
    """The runner's ``paced_in_flight`` from its ``SET_CONFIG`` description; ``None`` when absent or not a
    whole number of at least 1 (then the client is not held to it: a runner's mistake never stalls it)."""
    value = config.get(PACED_IN_FLIGHT_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


class WeightsSchedule:
    """When an off-policy client asks for weights: the rule, without the I/O.

    Args:
        weights_every_s: the least seconds between two requests. ``None``:
            as soon as the runner names newer weights, and every
            ``WEIGHTS_POLL_S`` from a runner that names none. A number is also
            the polling period for a runner that names none.
        weights_seq_no: the version held now.
        now: the clock's reading now (``time.monotonic()``).
    """

    def __init__(self, weights_every_s: Optional[float], weights_seq_no: int, now: float) -> None:
        self.floor_s = 0.0 if weights_every_s is None else weights_every_s
        #: Polling period when no version is named (RLlib's server): ``weights_every_s`` as it always was.
        self.poll_s = WEIGHTS_POLL_S if weights_every_s is None else weights_every_s
        #: With notices, the wait after the last one before asking anyway (no ACK traffic).
        self.silence_s = max(self.floor_s, WEIGHTS_POLL_S)
        self.held = weights_seq_no
        self._asked_at = now
        self._since = now  # what counts as "heard from" before the first notice

    def due(self, now: float, notices: bool, notice: Optional[WeightsNotice]) -> bool:
        """Whether to ask for weights now.

        Args:
            notices: the runner agreed to ``weights_notice``.
            notice: the version its newest ``ACK`` named, if any.
        """
        since_asked = now - self._asked_at
        if not notices:
            return since_asked >= self.poll_s
        if notice is not None and notice.seq_no > self.held:
            return since_asked >= self.floor_s
        heard_at = notice.at if notice is not None else self._since
        return since_asked >= self.silence_s and now - heard_at >= self.silence_s

    def got(self, weights_seq_no: int, now: float) -> None:
        """Weights of version ``weights_seq_no`` came in answer to a request sent at ``now``."""
        self.held = weights_seq_no
        self._asked_at = now


class BackgroundSender:
    """A daemon thread that delivers batches over a :class:`SharedClient`.

    Args:
        client: the shared connection.
        timeout: seconds :meth:`send` may wait for room, and :meth:`close`
            for the thread to deliver what it holds.
        weights_every_s: least seconds between two weight requests (see
            :class:`WeightsSchedule`; ``None``: as soon as the runner names newer weights).
        weights_seq_no: the version of the weights the client holds now.
        depth: batches the hand-over queue holds.
        in_flight: the runner's ``paced_in_flight``: at most this many batches
            handed over and not yet confirmed; ``None``: only ``depth`` and the
            client's ``max_unacked`` bound them.
        logger: where delivery failures are logged.
    """

    def __init__(self, client: SharedClient, *, timeout: float, weights_every_s: Optional[float],
                 weights_seq_no: int = 0, depth: int = 4, in_flight: Optional[int] = None,
                 logger: Optional[logging.Logger] = None) -> None:
        if in_flight is not None and in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {in_flight}")
        self._client = client
        self._timeout = timeout
        self._schedule = WeightsSchedule(weights_every_s, weights_seq_no, time.monotonic())
        #: Paced: one slot per batch handed over and not yet confirmed (taken by send(), given back on its ACK).
        self._slots = None if in_flight is None else threading.BoundedSemaphore(in_flight)
        self._queue: queue.Queue = queue.Queue(maxsize=depth if in_flight is None else max(depth, in_flight))
        self._log = logger or logging.getLogger(__name__)
        self._lock = threading.Lock()
        self._newest: Optional[WeightsUpdate] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="rlinks-sender", daemon=True)
        self._thread.start()

    def send(self, chunks: list) -> None:
        """Hand a batch to the thread; waits while ``depth`` batches are queued (paced: ``in_flight`` unconfirmed).

        Raises:
            ServerTimeout: no room within ``timeout`` (the runner takes nothing).
            The thread's error, if it failed (e.g. TrainingEnded).
        """
        deadline = time.monotonic() + self._timeout
        if self._slots is not None:
            self._take_slot(deadline)
        while True:
            self.check()
            try:
                self._queue.put(chunks, timeout=min(0.5, max(0.0, deadline - time.monotonic())))
                return
            except queue.Full:
                if time.monotonic() >= deadline:
                    raise ServerTimeout(
                        f"the runner took no batch for {self._timeout:g} s ({self._queue.maxsize} waiting to be sent)"
                    ) from None

    def _take_slot(self, deadline: float) -> None:
        """Wait until fewer than ``in_flight`` batches are handed over and unconfirmed (bounded by ``deadline``)."""
        while not self._slots.acquire(timeout=min(0.5, max(0.0, deadline - time.monotonic()))):
            self.check()
            if time.monotonic() >= deadline:
                raise ServerTimeout(f"the runner confirmed none of this client's batches for {self._timeout:g} s "
                                    f"(paced: it takes them one sample() at a time)")

    def check(self) -> None:
        """Raise the thread's error, if it had one."""
        if self._error is not None:
            raise self._error

    def newest_weights(self) -> Optional[WeightsUpdate]:
        """The weights fetched since the last call, or ``None``."""
        with self._lock:
            update, self._newest = self._newest, None
        return update

    def close(self) -> None:
        """Deliver what is queued, wait for its ACKs (bounded by ``timeout``), and end the thread.

        Raises:
            The thread's error, if it failed.
        """
        try:
            self._queue.put(_STOP, timeout=self._timeout)
        except queue.Full:
            self._log.warning("the sender thread took nothing for %g s; closing without it", self._timeout)
            return
        self._thread.join(self._timeout)
        self.check()

    def _run(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    self._client.call(self._client.raw.flush)
                    return
                self._client.call(self._client.raw.send_episodes, item)
                raw = self._client.raw
                if self._slots is not None:
                    self._client.call(raw.flush)  # its ACK: the runner handed it to RLlib
                    self._slots.release()
                now = time.monotonic()
                if self._schedule.due(now, Extension.WEIGHTS_NOTICE.value in raw.server_extensions,
                                      raw.weights_notice):
                    update = self._client.call(raw.get_state)
                    self._schedule.got(update.seq_no, now)
                    with self._lock:
                        self._newest = update
        except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread, raised there
            self._error = exc
            self._drain()

    def _drain(self) -> None:
        """Empty the queue after a failure, so a waiting :meth:`send` or :meth:`close` is not stuck."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return
