"""On-policy scheduling without sockets: who is parked, who is released, and asked for how much."""

from __future__ import annotations

import numpy as np
import pytest

from rlinks_rllib.server.delivery.scheduler import GRACE_POLL_S, IDLE_POLL_S, Release, SamplePacer, SamplePlan, Scheduler, WeightsChange


def scheduler(update_steps: int = 100, clients: str = "abc", *, on_policy: bool = True,
              plain: str = "") -> Scheduler[str]:
    s: Scheduler[str] = Scheduler(update_steps, on_policy=on_policy)
    for c in clients:
        s.client_ready(c, f"id-{c}", tells_steps=c not in plain)
    return s


def deliver_all(s: Scheduler[str], wants: dict[str, int]) -> dict[str, list[Release[str]]]:
    """Every client sends what it was asked for, on-policy; return what each got back."""
    out = {}
    for client, want in wants.items():
        s.delivered(client, want, s.weights_seq_no)
        out[client] = s.on_policy_batch(client)
    return out


def test_clients_are_parked_once_the_update_is_promised_and_released_by_new_weights():
    s = scheduler(100, "abc")
    wants = {c: s.state_requested(c) for c in "abc"}
    assert wants == {"a": 34, "b": 34, "c": 32} and sum(wants.values()) == 100
    replies = deliver_all(s, wants)
    assert replies == {"a": [], "b": [], "c": []}
    assert s.parked == ("a", "b", "c") and s.budget.complete
    releases = s.new_weights(1)
    assert releases == [Release("a", 34), Release("b", 33), Release("c", 33)]
    assert s.parked == () and s.weights_seq_no == 1 and not s.budget.complete


def test_a_client_is_answered_at_once_while_the_update_still_needs_unpromised_steps():
    s = scheduler(100, "ab")
    assert s.state_requested("a") == 50
    s.delivered("a", 30, 0)
    # b has not asked yet and a sent less than it was asked for: a goes on.
    assert s.on_policy_batch("a") == [Release("a", 50)]
    assert s.parked == () and s.budget.received + s.budget.promised == 100


def test_want_steps_never_add_up_to_more_than_the_update():
    rng = np.random.default_rng(0)
    clients = "abcdefg"
    s = scheduler(1000, clients)
    # What each client was asked for, and the weights version it holds (None: parked).
    holds: dict[str, tuple[int, int] | None] = {c: (s.state_requested(c), 0) for c in clients}
    for seq_no in range(1, 30):
        for client in rng.permutation(list(clients)):
            if holds[client] is None:
                continue
            want, version = holds[client]
            sent = int(rng.integers(0, want + 1))  # sometimes less than asked
            s.delivered(client, sent, version)
            holds[client] = None
            for release in s.on_policy_batch(client):
                holds[release.client] = (release.want_steps, s.weights_seq_no)
            assert s.budget.received + s.budget.promised <= s.budget.target == 1000
        releases = s.new_weights(seq_no)
        assert sum(r.want_steps for r in releases) <= 1000
        for release in releases:
            holds[release.client] = (release.want_steps, seq_no)
        assert s.budget.promised <= 1000


def test_a_parked_client_that_leaves_is_forgotten():
    s = scheduler(100, "ab")
    deliver_all(s, {c: s.state_requested(c) for c in "ab"})
    assert s.parked == ("a", "b")
    assert s.client_left("b") == []
    assert s.parked == ("a",) and s.clients == 1
    assert s.new_weights(1) == [Release("a", 100)]


def test_a_client_that_leaves_with_a_promise_hands_it_to_a_parked_one():
    s = scheduler(100, "ab")
    assert s.state_requested("a") == 50 and s.state_requested("b") == 50
    assert deliver_all(s, {"a": 50}) == {"a": []}  # b still owes 50: a waits
    assert s.client_left("b") == [Release("a", 50)]
    assert s.parked == () and s.budget.promised == 50


def test_extension_after_the_grace_period_releases_the_parked_with_shares():
    pacer = SamplePacer(update_steps=100, extend_steps=40, extend_after_s=5.0, on_policy=True)
    s = scheduler(100, "ab")
    pacer.new_weights(1)
    s.new_weights(1)
    wants = {c: s.state_requested(c) for c in "ab"}
    deliver_all(s, wants)
    assert s.parked == ("a", "b")
    # Not complete yet for the runner: sample() waits as long as it may.
    assert pacer.plan(now=0.0, wait_s=30.0) == SamplePlan(30.0)
    pacer.sampled(100, now=10.0)
    # Called again with unchanged weights: answer quickly, extend nothing...
    assert pacer.plan(now=11.0, wait_s=30.0) == SamplePlan(GRACE_POLL_S)
    assert pacer.plan(now=14.9, wait_s=0.01) == SamplePlan(0.01)
    # ...until the grace period is over.
    plan = pacer.plan(now=15.0, wait_s=30.0)
    assert plan == SamplePlan(30.0, extend_steps=40)
    releases = s.extend(plan.extend_steps)
    assert releases == [Release("a", 20), Release("b", 20)]
    assert s.budget.target == 140 and s.weights_seq_no == 1
    # Extending again before the extension is delivered changes nothing.
    assert s.extend(40) == [] and s.budget.target == 140
    # New weights start over.
    pacer.new_weights(2)
    assert pacer.plan(now=16.0, wait_s=30.0) == SamplePlan(30.0)


def test_a_runner_without_clients_answers_within_the_idle_poll_and_extends_nothing():
    pacer = SamplePacer(update_steps=100, extend_steps=40, extend_after_s=5.0, on_policy=True)
    pacer.new_weights(1)
    assert pacer.plan(now=0.0, wait_s=30.0, clients=0) == SamplePlan(IDLE_POLL_S)
    assert pacer.plan(now=0.0, wait_s=0.01, clients=0) == SamplePlan(0.01)
    pacer.sampled(100, now=1.0)
    assert pacer.plan(now=60.0, wait_s=30.0, clients=0) == SamplePlan(IDLE_POLL_S)  # past the grace period
    assert pacer.plan(now=60.0, wait_s=30.0, clients=1) == SamplePlan(30.0, extend_steps=40)


def test_new_weights_with_a_new_share_split_it_among_the_parked():
    s = scheduler(100, "ab")
    s.new_weights(1)
    deliver_all(s, {c: s.state_requested(c) for c in "ab"})
    assert s.parked == ("a", "b")
    assert s.new_weights(2, update_steps=300) == [Release("a", 150), Release("b", 150)]
    assert s.update_steps == 300 and s.budget.target == 300
    deliver_all(s, {"a": 150, "b": 150})
    assert s.new_weights(3) == [Release("a", 150), Release("b", 150)]  # and it stays


def test_sample_waits_for_the_rest_of_the_share_then_a_fragment():
    pacer = SamplePacer(update_steps=100, extend_steps=40, extend_after_s=5.0, on_policy=True)
    pacer.new_weights(1)
    assert pacer.steps_to_take() == 100
    pacer.sampled(70, now=1.0)  # a sample() that came up short
    assert pacer.steps_to_take() == 30  # the clients were asked for the rest only
    pacer.sampled(30, now=2.0)
    assert pacer.steps_to_take() == 40  # the share is in: a fragment of an extension
    pacer.new_weights(2, update_steps=300)  # a bigger share from now on (shares.py)
    assert pacer.steps_to_take() == 300
    off = SamplePacer(update_steps=100, extend_steps=40, extend_after_s=5.0, on_policy=False)
    assert off.steps_to_take() == 40


def test_extend_before_the_update_is_complete_is_a_no_op():
    s = scheduler(100, "a")
    s.state_requested("a")
    s.delivered("a", 60, 0)
    assert s.extend(50) == [] and s.budget.target == 100


def test_forced_weights_release_nobody():
    pacer = SamplePacer(update_steps=100, extend_steps=100, extend_after_s=5.0, on_policy=True)
    s = scheduler(100, "a")
    pacer.new_weights(3)
    s.new_weights(3)
    deliver_all(s, {"a": s.state_requested("a")})
    pacer.sampled(100, now=1.0)
    assert s.parked == ("a",)
    assert pacer.weights_change(0) is WeightsChange.FORCED
    s.replace_weights(pacer.weights_seq_no)  # what the runner does with forced weights
    assert s.parked == ("a",) and s.weights_seq_no == 3
    assert pacer.steps_since_weights == 100  # still the same update for the pacer
    assert pacer.weights_change(3) is WeightsChange.STALE
    assert pacer.weights_change(2) is WeightsChange.STALE
    assert pacer.weights_change(4) is WeightsChange.NEW


def test_off_policy_never_parks():
    s = scheduler(100, "ab", on_policy=False, plain="b")
    assert s.state_requested("a") == 100 and s.state_requested("b") is None
    for _ in range(10):
        s.delivered("a", 100, 0)
        assert s.on_policy_batch("a") == [Release("a", 100)]
        assert s.on_policy_batch("b") == [Release("b", None)]
    assert s.parked == ()
    pacer = SamplePacer(update_steps=100, extend_steps=100, extend_after_s=5.0, on_policy=False)
    pacer.sampled(1000, now=0.0)
    assert pacer.plan(now=1.0, wait_s=30.0) == SamplePlan(30.0)


def test_plain_clients_are_parked_and_released_without_want_steps():
    s = scheduler(100, "ab", plain="b")
    assert s.state_requested("a") == 50 and s.state_requested("b") is None
    s.delivered("b", 70, 0)  # a plain client sends what it likes
    assert s.on_policy_batch("b") == []  # 70 received + 50 promised: nothing left to give
    s.delivered("a", 50, 0)
    assert s.on_policy_batch("a") == []
    assert s.new_weights(1) == [Release("b", None), Release("a", 50)]
    assert s.budget.promised == 50  # b's half of the split can't be promised to it


def test_steps_sampled_with_old_weights_do_not_count_for_the_update():
    s = scheduler(100, "a")
    s.new_weights(2)
    s.state_requested("a")
    s.delivered("a", 100, 1)  # sampled before the client got version 2
    assert s.budget.received == 0 and not s.budget.complete
    s.delivered("a", 100, 2)
    assert s.budget.complete


def test_unknown_clients_are_harmless():
    s = scheduler(100, "")
    assert s.client_left("ghost") == []
    s.delivered("ghost", 10, 0)
    assert s.budget.received == 0


@pytest.mark.parametrize("update_steps", [1, 7, 100, 4000])
@pytest.mark.parametrize("parked", [1, 3, 64])
def test_releases_share_exactly_what_the_update_needs(update_steps, parked):
    clients = [f"c{i}" for i in range(parked)]
    s: Scheduler[str] = Scheduler(update_steps, on_policy=True)
    for c in clients:
        s.client_ready(c, c, tells_steps=True)
    s.delivered(clients[0], update_steps, 0)
    for c in clients:
        assert s.on_policy_batch(c) == []
    releases = s.new_weights(1)
    assert [r.client for r in releases] == clients
    assert sum(r.want_steps for r in releases) == update_steps


# -- served actions (ACT) -------------------------------------------------------


def test_served_steps_count_and_an_act_is_parked_once_the_update_has_them_all():
    s = scheduler(100, "a")
    s.delivered("a", 60, 0)
    assert s.act_received("a") == [Release("a", None, actions=True)]
    s.delivered("a", 40, 0)
    assert s.act_received("a") == [] and s.parked == ("a",)
    # Answered only by new weights, with actions (not weights).
    assert s.new_weights(1) == [Release("a", None, actions=True)]
    assert s.parked == () and s.budget.received == 0


def test_an_act_is_parked_when_the_rest_of_the_update_is_promised_to_others():
    s = scheduler(100, "ab")
    assert s.state_requested("a") == 50  # a runs its own policy and was asked for 50
    s.delivered("b", 50, 0)  # b's served steps
    assert s.act_received("b") == []  # the other 50 are a's: b waits
    s.delivered("a", 50, 0)
    assert s.on_policy_batch("a") == []
    assert s.parked == ("b", "a")
    assert s.new_weights(1) == [Release("b", None, actions=True), Release("a", 50)]


def test_a_parked_act_is_released_by_a_freed_promise_and_by_an_extension():
    s = scheduler(100, "ab")
    s.state_requested("a")
    s.delivered("b", 50, 0)
    assert s.act_received("b") == []
    assert s.client_left("a") == [Release("b", None, actions=True)]
    s.delivered("b", 50, 0)
    assert s.act_received("b") == [] and s.budget.complete
    assert s.extend(20) == [Release("b", None, actions=True)]
    assert s.budget.target == 120


def test_an_act_of_a_client_that_still_owes_its_promised_steps_is_answered():
    s = scheduler(100, "a")
    assert s.state_requested("a") == 100  # GET_STATE with want_steps: the whole update is a's
    s.delivered("a", 30, 0)  # then it serves its envs
    assert s.act_received("a") == [Release("a", None, actions=True)]
    s.delivered("a", 70, 0)
    assert s.act_received("a") == [] and s.parked == ("a",)


def test_off_policy_never_parks_an_act():
    s = scheduler(100, "a", on_policy=False)
    for _ in range(5):
        s.delivered("a", 100, 0)
        assert s.act_received("a") == [Release("a", None, actions=True)]
    assert s.parked == ()


def test_served_episodes_are_cut_on_policy_only_when_no_step_of_these_weights_can_still_come():
    s = scheduler(100, "ab")
    s.delivered("a", 80, 0)
    assert not s.served_cut_due(80, outstanding=0)  # the update needs more
    s.delivered("b", 30, 0)
    assert s.budget.complete
    assert not s.served_cut_due(110, outstanding=8)  # 8 actions still out: their steps belong here
    assert s.served_cut_due(110, outstanding=0)
    assert not s.served_cut_due(0, outstanding=0)  # nothing to cut


def test_served_episodes_are_cut_off_policy_every_fragment():
    s: Scheduler[str] = Scheduler(1000, on_policy=False, fragment_steps=50)
    assert not s.served_cut_due(49, outstanding=0)
    assert s.served_cut_due(50, outstanding=32)  # off-policy: outstanding steps are fine later
