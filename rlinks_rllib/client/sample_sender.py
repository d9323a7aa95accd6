"""Samples put by a loop, sent from a thread of its own: many per message when they come fast.

``put`` packs a sample (the copy that frees the caller's arrays) and leaves
it here; a daemon thread sends whatever has gathered as one ``SAMPLES``
message, then looks again. A lone sample goes out at once; while a message
is being written the next ones gather behind it, so a loop that puts at
thousands a second pays one frame, one system call and one ``ACK`` per
gathering instead of per sample (group commit, as databases write their
logs). A put that comes alone (:data:`LONE_S` after the last, or the
first after a ``flush``) is sent on the caller's own thread, and so is what
``flush`` finds left: a robot at 50 Hz, or ``put`` then ``flush`` in a loop,
costs no hand-over to the thread.

What waits here is bounded: ``put`` blocks (at most ``timeout``) while the
samples gathered reach the connection's window, and the window bounds what
is sent and unconfirmed. An error in the thread is raised from the loop's
next call.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from ..protocol.samples import MAX_SAMPLES_PER_MESSAGE, EncodedSample
from .errors import ServerTimeout
from .network.shared_client import SharedClient

__all__ = ["SampleSender", "MESSAGE_BYTES"]

#: A put this long after the last one is sent on the caller's thread (no hand-over): puts come slowly.
LONE_S = 0.001
#: The most sample bytes one message gathers (a larger sample goes alone).
MESSAGE_BYTES = 1024 * 1024


class SampleSender:
    """Gathers packed samples and sends them over a :class:`SharedClient`.

    Args:
        client: the shared connection (an actor's).
        timeout: seconds :meth:`put` may wait for room, and :meth:`close` for the thread.
        logger: where the thread's failures are logged.
    """

    def __init__(self, client: SharedClient, *, timeout: float, logger: Optional[logging.Logger] = None) -> None:
        self._client = client
        self._timeout = timeout
        self._log = logger or logging.getLogger(__name__)
        lock = threading.Lock()
        #: The thread waits on it for samples; a put waits on ``_room`` (one lock: each is woken only for itself).
        self._cond = threading.Condition(lock)
        self._room = threading.Condition(lock)
        self._room_waiters = 0
        #: Held from taking a message's samples until it is sent, so messages leave in the order put.
        self._sending = threading.Lock()
        self._gathered: list[EncodedSample] = []
        self._gathered_bytes = 0
        self._idle = True
        self._last_put = 0.0
        self._stopping = False
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="rlinks-samples-sender", daemon=True)
        self._thread.start()

    @property
    def gathered(self) -> int:
        """Samples put and not yet sent."""
        return len(self._gathered)

    def put(self, sample: EncodedSample) -> None:
        """Leave ``sample`` to be sent; waits while as many samples as the window holds are gathered.

        Raises:
            ServerTimeout: no room within ``timeout`` (nothing is being confirmed).
            The thread's error, if it failed (ConnectionLost, ServerError, ...).
        """
        deadline: Optional[float] = None
        with self._cond:
            while not self._room_locked():
                self._check_locked()
                if deadline is None:
                    deadline = time.monotonic() + self._timeout
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ServerTimeout(f"no room to put a sample for {self._timeout:g} s: {len(self._gathered)} "
                                        "samples wait to be sent and the window is full (is the loop taking?)")
                self._room_waiters += 1
                try:
                    self._room.wait(left)
                finally:
                    self._room_waiters -= 1
            self._check_locked()
            now = time.monotonic()
            alone = self._idle and not self._gathered and now - self._last_put >= LONE_S
            self._last_put = now
            self._gathered.append(sample)
            self._gathered_bytes += sample.nbytes
            if self._idle and not alone:
                self._cond.notify()
        if alone and self._sending.acquire(blocking=False):
            # Puts come slowly: send this one here and now, without waking the thread for it.
            try:
                with self._cond:
                    batch = self._take_locked()
                if batch:
                    self._client.call(self._client.raw.send_encoded_samples, batch)
            finally:
                self._sending.release()
        elif alone:
            with self._cond:
                self._cond.notify()

    def flush(self, *, mark: bool = True) -> None:
        """Send what is gathered now, on this thread, marked as a flush (``mark``), and wait for its ``ACK``\\ s.

        Raises:
            ServerTimeout: no confirmation within ``timeout``.
            The thread's error, or what sending raises here.
        """
        if not self._gathered and not self._client.raw.window.pending:
            self.check()
            return
        while True:
            with self._sending:
                with self._cond:
                    self._check_locked()
                    batch = self._take_locked()
                    last = not self._gathered
                if batch or (mark and last):
                    self._client.call(self._client.raw.send_encoded_samples, batch, flush=mark and last)
            if last:
                break
        with self._cond:
            self._last_put = 0.0  # the stream paused here: the next put comes alone
        self._client.call(self._client.raw.flush)

    def check(self) -> None:
        """Raise the thread's error, if it had one."""
        with self._cond:
            self._check_locked()

    def close(self) -> None:
        """End the thread (what is gathered stays unsent: :meth:`flush` first to deliver it)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(self._timeout)

    # ------------------------------------------------------------------

    def _room_locked(self) -> bool:
        """Whether another sample may gather: fewer than the window's samples, and bytes, are waiting."""
        window = self._client.raw.window
        samples = window.max_steps if window.max_steps is not None else window.max_unacked
        size = window.max_bytes if window.max_bytes is not None else MESSAGE_BYTES
        return len(self._gathered) < samples and self._gathered_bytes < size

    def _check_locked(self) -> None:
        if self._error is not None:
            raise self._error

    def _take_locked(self) -> list[EncodedSample]:
        """The next message's samples (at least one): up to ``MESSAGE_BYTES`` and half the window.

        A consumer confirms a message once all of it went to its loop; with
        messages of at most half the window, the part of one message already
        handed on plus a partial batch never fill the window, so the actor
        can always send what completes the batch (a message as large as the
        window could wait on its own tail).
        """
        window = self._client.raw.window
        most = MAX_SAMPLES_PER_MESSAGE if window.max_steps is None else max(1, window.max_steps // 2)
        most = min(most, MAX_SAMPLES_PER_MESSAGE)
        count, size = 0, 0
        for sample in self._gathered:
            if count and (count == most or size + sample.nbytes > MESSAGE_BYTES):
                break
            count += 1
            size += sample.nbytes
        batch, self._gathered = self._gathered[:count], self._gathered[count:]
        self._gathered_bytes -= size
        if self._room_waiters:
            self._room.notify_all()
        return batch

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    self._idle = True
                    while not self._gathered and not self._stopping:
                        self._cond.wait()
                    if self._stopping:
                        return
                    self._idle = False
                with self._sending:
                    try:
                        self._client.call(self._client.raw.wait_for_room)
                    except ServerTimeout as exc:
                        # Nothing was sent: the samples wait on, and put() tells the loop if it must wait too.
                        self._log.debug("the sample sender waits on for room: %s", exc)
                        continue
                    with self._cond:
                        batch = self._take_locked()
                    if batch:  # flush() may have sent them meanwhile
                        self._client.call(self._client.raw.send_encoded_samples, batch)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread, raised there
            self._log.debug("the sample sender stopped: %s", exc)
            with self._cond:
                self._error = exc
                self._room.notify_all()
