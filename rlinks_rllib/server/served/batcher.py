"""Batched inference for served actions: the observations of many clients, one forward pass.

Each ``ACT`` that is to be answered becomes one request of
:class:`InferenceBatcher`. Requests wait until ``max_rows`` rows are queued,
the oldest has waited ``max_wait_s``, or no other client could send one
(every client with open episodes waits for an answer), then go to the
forward pass together, on one thread of their own, so the server's asyncio loop keeps
reading and writing meanwhile; the results are split back per request on
the loop thread. One batch is in flight at a time: requests that arrive
meanwhile form the next one, so the busier the runner, the larger its
batches.

The forward pass itself (RLlib's exploration forward pass on the runner's
module) comes in as a callable, so this module needs neither Ray nor torch.
A forward pass that costs less than a hop between threads (RLlib's default
MLP run in numpy: tens of microseconds) runs *inline*, on the loop thread,
as soon as a batch is ready: no thread to wake, no second wake-up of the loop.
A request also says which weights its actions must at least be computed
with (an ``ACT`` parked until new weights must never get actions of the old
ones); a result computed with older weights is computed again.

Bounded: a client has at most one ``ACT`` unanswered, so at most one request
per client waits here.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, Optional, TypeVar

import numpy as np

from ...protocol.served import ActRows

__all__ = ["InferenceResult", "Forward", "InferenceBatcher", "ServedPolicy"]

logger = logging.getLogger("rlinks_rllib.server")

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class InferenceResult:
    """Actions for a batch of observations, one row each.

    Attributes:
        actions: as the distribution sampled them: what the episode records.
        actions_for_env: as the client applies them (Box actions unsquashed
            or clipped to the space, as RLlib's ``NormalizeAndClipActions``;
            Discrete as int64): what ``ACTIONS`` carries.
        action_logp: float32 ``(n,)``: their log-probabilities.
        action_dist_inputs: float32 ``(n, ...)``: the distribution's inputs.
        weights_seq_no: the weights version they were computed with.
        seconds: how long the forward pass took.
    """

    actions: np.ndarray
    actions_for_env: np.ndarray
    action_logp: np.ndarray
    action_dist_inputs: np.ndarray
    weights_seq_no: int
    seconds: float = 0.0

    def rows(self, start: int, stop: int) -> "InferenceResult":
        """Rows ``start:stop`` (views)."""
        return InferenceResult(self.actions[start:stop], self.actions_for_env[start:stop],
                               self.action_logp[start:stop], self.action_dist_inputs[start:stop],
                               self.weights_seq_no, self.seconds)


#: Computes actions for a batch of observations (``(n, *obs_shape)``), on the inference thread.
Forward = Callable[[np.ndarray], InferenceResult]


@dataclass
class _Request(Generic[K]):
    key: K
    obs: np.ndarray
    min_seq_no: int
    since: float


class InferenceBatcher(Generic[K]):
    """Collects requests on the loop thread and runs them through ``forward`` in batches.

    Args:
        loop: the server's event loop; every method is called on its thread.
        forward: the forward pass (runs on the inference thread).
        max_rows: rows one batch takes at most (a larger request goes alone).
        max_wait_s: how long the oldest request waits for company.
        on_result: ``(key, result)`` for each request, on the loop thread.
        on_error: ``(keys, exception)`` when the forward pass failed for a batch.
        on_batch: ``(rows, requests, seconds)`` after each batch (metrics).
        all_waiting: whether every client that could send a request has one
            waiting (or parked elsewhere): then waiting longer gains nothing.
        inline: run ``forward`` on the loop thread, from :meth:`submit` or the
            timer (for a forward pass cheaper than a thread hop).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        forward: Forward,
        *,
        max_rows: int,
        max_wait_s: float,
        on_result: Callable[[K, InferenceResult], None],
        on_error: Callable[[list, BaseException], None],
        on_batch: Optional[Callable[[int, int, float], None]] = None,
        all_waiting: Callable[[], bool] = lambda: False,
        inline: bool = False,
    ) -> None:
        self._loop = loop
        self._forward = forward
        self.max_rows = max_rows
        self.max_wait_s = max_wait_s
        self._on_result = on_result
        self._on_error = on_error
        self._on_batch = on_batch
        self._all_waiting = all_waiting
        self._inline = inline
        self._executor = None if inline else ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlinks-inference")
        self._queue: collections.OrderedDict[K, _Request[K]] = collections.OrderedDict()
        self._queued_rows = 0
        self._in_flight: list[_Request[K]] = []
        self._in_flight_rows = 0
        self._cancelled: set[K] = set()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._closed = False
        #: Results computed again because they came from weights older than asked for.
        self.recomputed = 0

    @property
    def rows_waiting(self) -> int:
        """Rows queued or being computed: each will be answered with an action."""
        return self._queued_rows + self._in_flight_rows

    def submit(self, key: K, obs: np.ndarray, *, min_seq_no: int = 0) -> None:
        """Ask for actions for ``obs`` (one row each), computed with weights ``min_seq_no`` or newer.

        Raises:
            RuntimeError: ``key`` has a request waiting already, or the batcher is closed.
        """
        if self._closed:
            raise RuntimeError("the inference batcher is closed")
        if key in self._queue or any(r.key == key for r in self._in_flight):
            raise RuntimeError("a second inference request before the first was answered")
        self._queue[key] = _Request(key, obs, min_seq_no, self._loop.time())
        self._queued_rows += len(obs)
        self._maybe_dispatch()

    def cancel(self, key: K) -> None:
        """Forget ``key``'s request (its client left); a result computed for it is dropped."""
        request = self._queue.pop(key, None)
        if request is not None:
            self._queued_rows -= len(request.obs)
        elif any(r.key == key for r in self._in_flight):
            self._cancelled.add(key)

    def close(self) -> None:
        """Drop what is queued and stop the inference thread (after the batch in flight, if any)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()
        self._queued_rows = 0
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    # -- internals -------------------------------------------------------------

    def _maybe_dispatch(self) -> None:
        if self._in_flight or not self._queue or self._closed:
            return
        waited = self._loop.time() - next(iter(self._queue.values())).since
        if self._queued_rows < self.max_rows and waited < self.max_wait_s and not self._all_waiting():
            if self._timer is None:
                self._timer = self._loop.call_later(self.max_wait_s - waited, self._on_timer)
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch: list[_Request[K]] = []
        rows = 0
        while self._queue:
            request = next(iter(self._queue.values()))
            if batch and rows + len(request.obs) > self.max_rows:
                break
            del self._queue[request.key]
            batch.append(request)
            rows += len(request.obs)
        self._queued_rows -= rows
        self._in_flight, self._in_flight_rows = batch, rows
        obs = batch[0].obs if len(batch) == 1 else np.concatenate([request.obs for request in batch])
        if self._executor is not None:
            future = self._executor.submit(self._forward, obs)
            future.add_done_callback(self._done_from_thread)
            return
        try:
            result = self._forward(obs)
        except Exception as exc:  # noqa: BLE001 - the batch's clients get the error; the server goes on
            self._complete(None, exc)
        else:
            self._complete(result, None)

    def _on_timer(self) -> None:
        self._timer = None
        self._maybe_dispatch()

    def _done_from_thread(self, future: Future) -> None:
        try:
            self._loop.call_soon_threadsafe(self._finished, future)
        except RuntimeError:
            logger.debug("an inference batch finished after the server loop closed; nobody waits for it")

    def _finished(self, future: Future) -> None:
        if future.cancelled():
            self._in_flight, self._in_flight_rows, self._cancelled = [], 0, set()
            return  # closing
        error = future.exception()
        self._complete(None if error is not None else future.result(), error)

    def _complete(self, result: Optional[InferenceResult], error: Optional[BaseException]) -> None:
        """Answer the batch in flight with ``result``, or its clients with ``error``; then the next batch."""
        batch, self._in_flight = self._in_flight, []
        rows, self._in_flight_rows = self._in_flight_rows, 0
        cancelled, self._cancelled = self._cancelled, set()
        if error is not None:
            self._on_error([request.key for request in batch if request.key not in cancelled], error)
            self._maybe_dispatch()
            return
        if self._on_batch is not None:
            self._on_batch(rows, len(batch), result.seconds)
        offset = 0
        again: list[_Request[K]] = []
        whole = len(batch) == 1  # one client's rows (at one agent, every batch): the result as it is
        for request in batch:
            part = result if whole else result.rows(offset, offset + len(request.obs))
            offset += len(request.obs)
            if request.key in cancelled:
                continue
            if result.weights_seq_no < request.min_seq_no:
                again.append(request)
                continue
            try:
                self._on_result(request.key, part)
            except Exception as exc:  # noqa: BLE001 - one client's failure must not lose the others' answers
                logger.exception("rlinks: answering a served ACT failed")
                self._on_error([request.key], exc)
        for request in reversed(again):
            # Older weights than the request was parked for: computed again, first in line.
            self.recomputed += 1
            self._queue[request.key] = request
            self._queue.move_to_end(request.key, last=False)
            self._queued_rows += len(request.obs)
        if again and self._inline:
            # The newer weights come through the loop: let them in before computing again.
            self._loop.call_soon(self._maybe_dispatch)
            return
        self._maybe_dispatch()


@dataclass(frozen=True)
class ServedPolicy:
    """What a runner needs to serve actions (the ``served_actions`` extension).

    Attributes:
        forward: computes actions for a batch of observations (on the inference thread, or inline).
        check_obs: turns an ``ACT``'s rows' ``obs`` into one array of the
            runner's observation shape and dtype, or raises ``IngestError``
            (:class:`~.episodes.ObservationCheck`).
        no_actions: zero actions in the action space's form: the answer to
            an ``ACT`` none of whose rows wants an action.
        inline: ``forward`` is cheaper than a hop to another thread: run it
            on the server's loop thread.
        check_taken: ``served_taken``: turns an ``ACT``'s ``taken`` into one
            array of actions in the env's form, or raises ``IngestError``
            (:class:`~.taken_actions.TakenActionCheck`); ``None``: not offered.
        with_taken: ``(result, mask, taken)``: ``result`` with the masked rows
            holding the simulator's own actions (:func:`~.taken_actions.with_taken`).
    """

    forward: Forward
    check_obs: Callable[[ActRows], np.ndarray]
    no_actions: np.ndarray
    inline: bool = False
    check_taken: Optional[Callable[[ActRows], np.ndarray]] = None
    with_taken: Optional[Callable[[InferenceResult, np.ndarray, np.ndarray], InferenceResult]] = None
