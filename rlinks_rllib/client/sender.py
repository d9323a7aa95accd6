"""Off-policy batches sent from a thread of their own, so the simulator's loop never waits for the learner.

The loop hands :class:`BackgroundSender` each batch of episode chunks; the
thread sends it (``EPISODES``, confirmed by the runner's ``ACK``) and, at most
every ``weights_every_s``, asks for the learner's newest weights, which the
loop picks up with :meth:`BackgroundSender.newest_weights`. The hand-over
queue holds ``depth`` batches: when the network or the runner falls that far
behind, :meth:`BackgroundSender.send` waits for room (bounded by
``timeout``), so memory stays bounded and nothing is dropped unseen.

An error in the thread (the learner ended, the connection was lost for good)
is raised again from the loop's next :meth:`~BackgroundSender.send` or
:meth:`~BackgroundSender.check` call.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Optional

from .connection import WeightsUpdate
from .errors import ServerTimeout
from .shared_client import SharedClient

__all__ = ["BackgroundSender"]

_STOP = object()


class BackgroundSender:
    """A daemon thread that delivers batches over a :class:`SharedClient`.

    Args:
        client: the shared connection.
        timeout: seconds :meth:`send` may wait for room, and :meth:`close`
            for the thread to deliver what it holds.
        weights_every_s: least seconds between two weight requests.
        depth: batches the hand-over queue holds.
        logger: where delivery failures are logged.
    """

    def __init__(self, client: SharedClient, *, timeout: float, weights_every_s: float, depth: int = 4,
                 logger: Optional[logging.Logger] = None) -> None:
        self._client = client
        self._timeout = timeout
        self._weights_every_s = weights_every_s
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._log = logger or logging.getLogger(__name__)
        self._lock = threading.Lock()
        self._newest: Optional[WeightsUpdate] = None
        self._error: Optional[BaseException] = None
        self._last_weights = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="rlinks-sender", daemon=True)
        self._thread.start()

    def send(self, chunks: list) -> None:
        """Hand a batch to the thread; waits while ``depth`` batches are queued.

        Raises:
            ServerTimeout: no room within ``timeout`` (the runner takes nothing).
            The thread's error, if it failed (e.g. TrainingEnded).
        """
        deadline = time.monotonic() + self._timeout
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
                if time.monotonic() - self._last_weights >= self._weights_every_s:
                    update = self._client.call(self._client.raw.get_state)
                    self._last_weights = time.monotonic()
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
