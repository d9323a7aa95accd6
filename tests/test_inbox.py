"""The inbox between the network thread and ``sample()``: bounded, and a waiting take wakes on time.

A put wakes a waiting :meth:`Inbox.take` only once the steps held reach what
it waits for (not on every batch); these tests pin that it still returns as
soon as they do, that ``close()`` wakes it, and that a timeout hands over
whatever is held.
"""

from __future__ import annotations

import threading
import time

from rlinks_rllib.server.network.inbox import Batch, Inbox

WAIT_S = 10.0  # far above any wake-up delay; a test that hits it has failed


def batch(steps: int, nbytes: int = 100) -> Batch:
    return Batch(episodes=[], steps=steps, nbytes=nbytes, weights_seq_no=0, client="c")


class Taker:
    """One ``take`` in a thread, and when it returned."""

    def __init__(self, inbox: Inbox, min_steps: int, timeout: float = WAIT_S) -> None:
        self.result: list[Batch] | None = None
        self.returned_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(inbox, min_steps, timeout), daemon=True)
        self._thread.start()

    def _run(self, inbox: Inbox, min_steps: int, timeout: float) -> None:
        self.result = inbox.take(min_steps, timeout)
        self.returned_at = time.monotonic()

    def join(self) -> list[Batch]:
        self._thread.join(WAIT_S + 5)
        assert not self._thread.is_alive(), "take() did not return"
        return self.result

    @property
    def waiting(self) -> bool:
        return self._thread.is_alive()


def wait_until_waiting(inbox: Inbox, count: int = 1) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(inbox._wants) < count:
        assert time.monotonic() < deadline, "take() never started waiting"
        time.sleep(0.001)


def test_take_returns_as_soon_as_enough_steps_arrive():
    inbox = Inbox(max_steps=1000, max_bytes=1 << 20)
    taker = Taker(inbox, 10)
    wait_until_waiting(inbox)
    for _ in range(3):
        inbox.put(batch(3))  # 9 steps: not enough yet
    time.sleep(0.05)
    assert taker.waiting
    inbox.put(batch(3))
    put_at = time.monotonic()
    got = taker.join()
    assert [b.steps for b in got] == [3, 3, 3, 3]
    assert taker.returned_at - put_at < 2.0  # woken by the put, not by the timeout
    assert inbox.steps == 0 and inbox._wants == []


def test_enough_steps_already_held_returns_without_waiting():
    inbox = Inbox(max_steps=1000, max_bytes=1 << 20)
    inbox.put(batch(5))
    inbox.put(batch(5))
    started = time.monotonic()
    got = inbox.take(4, WAIT_S)
    assert [b.steps for b in got] == [5]  # whole batches, oldest first, until min_steps
    assert time.monotonic() - started < 1.0
    assert inbox.steps == 5


def test_close_wakes_a_waiting_take():
    inbox = Inbox(max_steps=1000, max_bytes=1 << 20)
    inbox.put(batch(2))
    taker = Taker(inbox, 100)
    wait_until_waiting(inbox)
    closed_at = time.monotonic()
    inbox.close()
    assert [b.steps for b in taker.join()] == [2]
    assert taker.returned_at - closed_at < 2.0
    assert inbox.take(100, WAIT_S) == []  # and later takes return at once


def test_timeout_takes_what_is_held():
    inbox = Inbox(max_steps=1000, max_bytes=1 << 20)
    inbox.put(batch(3))
    started = time.monotonic()
    got = inbox.take(10, 0.1)
    assert [b.steps for b in got] == [3]
    assert 0.09 <= time.monotonic() - started < WAIT_S
    assert inbox.take(10, 0.0) == [] and inbox._wants == []


def test_each_waiting_take_wakes_when_its_own_count_is_met():
    inbox = Inbox(max_steps=1000, max_bytes=1 << 20)
    small, large = Taker(inbox, 2), Taker(inbox, 50)
    wait_until_waiting(inbox, 2)
    inbox.put(batch(2))
    assert [b.steps for b in small.join()] == [2]  # a waiting take never takes early
    assert large.waiting
    inbox.put(batch(50))
    assert [b.steps for b in large.join()] == [50]
    assert inbox.steps == 0 and inbox._wants == []


def test_fullness_and_drain_callback():
    drained = []
    inbox = Inbox(max_steps=10, max_bytes=1000, on_drained=lambda: drained.append(True))
    assert not inbox.put(batch(4, 100))
    assert inbox.put(batch(6, 100))  # 10 steps: full
    assert inbox.full() and len(inbox) == 2
    inbox.take(1, 0.0)
    assert not inbox.full() and drained == [True]
    assert inbox.put(batch(1, 2000))  # full by bytes
    assert inbox.nbytes == 2100


def test_a_full_inbox_ends_a_waiting_take():
    # A share of large observations can be more than the inbox holds: once it
    # is full nothing more comes in until something is taken, so waiting on
    # would only wait out the timeout (with reading paused).
    inbox = Inbox(max_steps=1000, max_bytes=1000)
    taker = Taker(inbox, 4000)
    wait_until_waiting(inbox)
    assert not inbox.put(batch(16, 600))
    time.sleep(0.05)
    assert taker.waiting
    assert inbox.put(batch(16, 600))  # full by bytes
    full_at = time.monotonic()
    assert [b.steps for b in taker.join()] == [16, 16]
    assert taker.returned_at - full_at < 2.0
    # And a take that finds it full does not wait at all.
    inbox.put(batch(16, 1200))
    started = time.monotonic()
    assert [b.steps for b in inbox.take(4000, WAIT_S)] == [16]
    assert time.monotonic() - started < 2.0
