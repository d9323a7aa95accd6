"""The on-policy bookkeeping and the inbox, without sockets."""

from __future__ import annotations

import threading
import time

from rlinks_rllib.server.delivery.budget import UpdateBudget
from rlinks_rllib.server.network.inbox import Batch, Inbox


def test_promises_never_exceed_what_the_update_needs():
    budget = UpdateBudget(100)
    assert [budget.assign(c, 40) for c in "abc"] == [40, 40, 20]
    assert budget.assign("d", 40) == 0 and budget.should_park()
    budget.record("a", 40)
    budget.record("b", 40)
    assert not budget.complete
    budget.record("c", 20)
    assert budget.complete and budget.should_park()


def test_a_client_that_leaves_frees_its_promise():
    budget = UpdateBudget(100)
    budget.assign("a", 60)
    budget.assign("b", 40)
    budget.forget("b")
    assert budget.unassigned == 40 and not budget.should_park()


def test_extend_asks_for_more_with_the_same_weights():
    budget = UpdateBudget(50)
    budget.record("a", 50)
    assert budget.complete
    budget.extend(50)
    assert not budget.complete and budget.unassigned == 50


def test_split_is_exact():
    assert UpdateBudget.split(10, 3) == [4, 3, 3]
    assert sum(UpdateBudget.split(2000, 64)) == 2000
    assert UpdateBudget.split(5, 0) == []


def _batch(steps: int) -> Batch:
    return Batch(episodes=[], steps=steps, nbytes=steps * 10, weights_seq_no=0, client="c")


def test_take_waits_for_enough_steps_and_keeps_the_rest():
    inbox = Inbox(max_steps=1000, max_bytes=10**6)
    threading.Timer(0.2, lambda: [inbox.put(_batch(30)) for _ in range(3)]).start()
    taken = inbox.take(50, timeout=5)
    assert sum(b.steps for b in taken) >= 50 and len(inbox) + len(taken) == 3


def test_take_returns_what_it_has_on_timeout():
    inbox = Inbox(max_steps=1000, max_bytes=10**6)
    inbox.put(_batch(10))
    started = time.monotonic()
    assert [b.steps for b in inbox.take(50, timeout=0.2)] == [10]
    assert time.monotonic() - started < 2


def test_full_inbox_reports_and_drains():
    drained = []
    inbox = Inbox(max_steps=100, max_bytes=10**6, on_drained=lambda: drained.append(True))
    assert not inbox.put(_batch(60))
    assert inbox.put(_batch(60))  # never dropped, only reported full
    inbox.take(100, timeout=0)
    assert drained == [True] and not inbox.full()


def test_close_wakes_a_waiting_take():
    inbox = Inbox(max_steps=100, max_bytes=10**6)
    threading.Timer(0.2, inbox.close).start()
    started = time.monotonic()
    assert inbox.take(50, timeout=30) == []
    assert time.monotonic() - started < 5
