"""On-policy scheduling: which client gets weights when, and how many steps it is asked for.

An on-policy learner (PPO) trains on a batch sampled with one set of weights,
then sends new weights. Every ``EPISODES_AND_GET_STATE`` gets exactly one
``SET_STATE`` back, carrying the weights the client's *next* data will be
sampled with: the current ones while the update still needs steps nobody has
promised; otherwise the new ones, so the client waits ("is parked") until
they come. Clients that speak ``want_steps`` are told how many steps to send
next, and the promises never add up to more than the update needs (see
:class:`~.budget.UpdateBudget`), so their data reaches the learner with a
policy lag of 0.

Served actions (``served_actions``) follow the same rule step by step: a
step the runner recorded for an ``ACT`` counts like a step that came in
``EPISODES``, and once the update has all it needs an ``ACT`` that wants
actions is parked too, to be answered with the new weights' actions. The
episodes the runner records are cut into the inbox only when no step of the
current weights can still come (every served client has reported, see
:meth:`Scheduler.served_cut_due`), so none is left behind for the next
update with a lag of 1.

Two objects, one per thread that reports to them:

* :class:`Scheduler`, on the server's loop thread: the budget, the parked
  clients, and whom to release (new weights, a client that left with a
  promise, an update extended). The listener reports what happened and
  carries out the :class:`Release`\\ s it gets back.
* :class:`SamplePacer`, on RLlib's actor thread (``sample()`` and
  ``set_state()``): whether weights are new, and when a repeated
  ``sample()`` with unchanged weights should extend the update rather than
  wait (the grace period, ``extend_after_s``).

Pure bookkeeping: no sockets, threads, asyncio or Ray; time comes in as ``now``.
"""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass
from typing import Generic, Hashable, Optional, TypeVar

from .budget import UpdateBudget

__all__ = ["Scheduler", "Release", "SamplePacer", "SamplePlan", "WeightsChange", "GRACE_POLL_S", "IDLE_POLL_S"]

#: How long a repeated ``sample()`` waits during the grace period.
GRACE_POLL_S = 0.05
#: How long a ``sample()`` waits while no client is connected: short, because
#: RLlib's round waits for every runner (a runner restarted on a node its
#: clients left would otherwise slow every round), but not zero, so that a
#: learner nobody connects to yet doesn't call ``sample()`` in a busy loop.
IDLE_POLL_S = 0.2

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Release(Generic[K]):
    """Answer ``client`` now, with the current weights.

    Attributes:
        client: whom to send to (the key it was reported with).
        want_steps: env steps to ask it for; ``None`` for a client that can't
            be told (and for an ``ACT``).
        actions: the request is an ``ACT``: answer it with actions computed
            with the current weights, not with the weights themselves.
    """

    client: K
    want_steps: Optional[int]
    actions: bool = False


@dataclass(frozen=True)
class _Client:
    client_id: str
    tells_steps: bool


class Scheduler(Generic[K]):
    """The loop thread's side: the coming update's budget and the clients parked until new weights.

    Clients are identified by any hashable key (the listener uses its
    sessions); promises are kept per ``client_id``, so a client that
    reconnects keeps what it was asked for.

    Args:
        update_steps: env steps one on-policy update takes from this runner.
        on_policy: whether clients are parked between updates; off-policy,
            every request is answered at once.
        fragment_steps: (off-policy) served steps held before they are cut
            into the inbox; ``update_steps`` if not given.
    """

    def __init__(self, update_steps: int, *, on_policy: bool, fragment_steps: Optional[int] = None) -> None:
        self.update_steps = update_steps
        self.on_policy = on_policy
        self.fragment_steps = fragment_steps or update_steps
        self.budget = UpdateBudget(update_steps)
        #: The version of the weights served now.
        self.weights_seq_no = 0
        self._clients: dict[K, _Client] = {}
        #: Parked clients, in the order they arrived -> whether what waits is an ACT.
        self._parked: collections.OrderedDict[K, bool] = collections.OrderedDict()

    @property
    def parked(self) -> tuple[K, ...]:
        """The clients waiting for new weights, in the order they arrived."""
        return tuple(self._parked)

    @property
    def clients(self) -> int:
        """Clients past their handshake (those an update's steps are shared among)."""
        return len(self._clients)

    # -- clients come and go -------------------------------------------------

    def client_ready(self, client: K, client_id: str, *, tells_steps: bool) -> None:
        """``client`` finished its handshake; ``tells_steps``: it agreed to ``want_steps``."""
        self._clients[client] = _Client(client_id, tells_steps)

    def client_left(self, client: K) -> list[Release[K]]:
        """``client`` is gone: its promise is free again, for a parked client to take over."""
        info = self._clients.pop(client, None)
        self._parked.pop(client, None)
        if info is not None:
            self.budget.forget(info.client_id)
        releases: list[Release[K]] = []
        while self._parked and not self.budget.should_park():
            waiting, act = self._parked.popitem(last=False)
            releases.append(Release(waiting, None, actions=True) if act else Release(waiting, self._share(waiting)))
        return releases

    # -- requests ------------------------------------------------------------

    def delivered(self, client: K, steps: int, weights_seq_no: int, *, withheld: int = 0) -> None:
        """``client`` sent ``steps`` sampled with weights ``weights_seq_no`` (counted if current).

        ``withheld``: steps it sent besides, which the update does not train
        on (taken over, on-policy): they keep the client's promise but fill
        none of the update, so a client is asked for as many more.
        """
        info = self._clients.get(client)
        if info is not None and weights_seq_no == self.weights_seq_no:
            self.budget.record(info.client_id, steps + withheld)
            self.budget.received -= withheld

    def state_requested(self, client: K) -> Optional[int]:
        """``GET_STATE``: the ``want_steps`` to send with the current weights (``None``: can't be told)."""
        return self._share(client)

    def on_policy_batch(self, client: K) -> list[Release[K]]:
        """``EPISODES_AND_GET_STATE`` (after :meth:`delivered`): answer now, or park until new weights.

        Returns ``[Release(client, ...)]``, or ``[]`` when ``client`` is parked.
        """
        if not self.on_policy or not self.budget.should_park():
            return [Release(client, self._share(client))]
        self._parked[client] = False
        return []

    def act_received(self, client: K) -> list[Release[K]]:
        """An ``ACT`` that wants actions (after :meth:`delivered` of its steps): answer now, or park.

        Parked once the update has all the steps it needs (or they are all
        promised to others): the actions are then computed with the next
        weights. A client that still owes steps it was promised (it asked
        for weights with ``want_steps``, then serves its envs) is answered.

        Returns ``[Release(client, None, actions=True)]``, or ``[]`` when ``client`` is parked.
        """
        info = self._clients.get(client)
        owes = info is not None and self.budget.promised_to(info.client_id) > 0
        if not self.on_policy or owes or not self.budget.should_park():
            return [Release(client, None, actions=True)]
        self._parked[client] = True
        return []

    def served_cut_due(self, held_steps: int, outstanding: int) -> bool:
        """Whether the served episodes held (``held_steps`` complete steps) go to the inbox now.

        On-policy: once the update needs nothing more and no served step of
        the current weights can still come (``outstanding``: actions sent or
        being computed whose steps are not reported yet), so that
        ``sample()`` hands RLlib every step of these weights at once.
        Off-policy: once ``fragment_steps`` are held.
        """
        if held_steps <= 0:
            return False
        if self.on_policy:
            return outstanding == 0 and self.budget.should_park()
        return held_steps >= self.fragment_steps

    # -- the learner ---------------------------------------------------------

    def new_weights(self, seq_no: int, update_steps: Optional[int] = None) -> list[Release[K]]:
        """A new version of the weights: a new update starts, every parked client is released.

        ``update_steps``: what this update and the next take from this runner, if no longer the same.
        """
        if update_steps is not None:
            self.update_steps = update_steps
        self.weights_seq_no = seq_no
        self.budget.next_update(self.update_steps)
        return self._release_parked(self.update_steps)

    def replace_weights(self, seq_no: int) -> None:
        """Serve weights ``seq_no`` from now on without starting an update (setup, forced syncs)."""
        self.weights_seq_no = seq_no

    def extend(self, steps: int) -> list[Release[K]]:
        """The learner needs ``steps`` more with unchanged weights: release the parked with shares of them.

        Only once the update has all it asked for; before that it is a no-op.
        """
        if not self.budget.complete:
            return []
        self.budget.extend(steps)
        return self._release_parked(steps)

    # -- internals -----------------------------------------------------------

    def _share(self, client: K) -> Optional[int]:
        info = self._clients.get(client)
        if info is None or not info.tells_steps:
            return None
        if not self.on_policy:
            return self.update_steps
        fair = -(-self.budget.target // max(1, len(self._clients)))
        return self.budget.assign(info.client_id, fair)

    def _release_parked(self, steps: int) -> list[Release[K]]:
        parked = list(self._parked.items())
        self._parked.clear()
        releases = []
        for (client, act), share in zip(parked, UpdateBudget.split(steps, len(parked))):
            if act:
                releases.append(Release(client, None, actions=True))
                continue
            info = self._clients.get(client)
            want = self.budget.assign(info.client_id, share) if info is not None and info.tells_steps else None
            releases.append(Release(client, want))
        return releases


class WeightsChange(enum.Enum):
    """What weights handed to the runner are."""

    #: Not newer than those served: ignored.
    STALE = "stale"
    #: RLlib's ``weights_seq_no=0`` ("force", at setup): served from now on, but not a new version.
    FORCED = "forced"
    #: A new version: served, and the parked clients are released.
    NEW = "new"


@dataclass(frozen=True)
class SamplePlan:
    """What one ``sample()`` call does before taking from the inbox.

    Attributes:
        wait_s: how long to wait for steps.
        extend_steps: ask the clients for this many more steps with the
            current weights (:meth:`Scheduler.extend`); 0: don't.
    """

    wait_s: float
    extend_steps: int = 0


class SamplePacer:
    """RLlib's thread's side: the weights version, and when a repeated ``sample()`` extends the update.

    RLlib may call ``sample()`` again before sending new weights although
    this runner handed over its whole share: another runner is still short,
    or the learner needs more than this runner's share. Asking our clients
    for more at once would leave surplus steps that reach the next update
    with lag 1, so the pacer first gives the others ``extend_after_s``,
    meanwhile answering quickly so that RLlib's round (which waits for every
    runner) ends as soon as the short runner delivers. For the same reason a
    runner no client is connected to answers within ``idle_poll_s``.

    Args:
        update_steps: env steps one update takes from this runner.
        extend_steps: steps an extension asks for (a rollout fragment).
        extend_after_s: the grace period.
        on_policy: off-policy, ``sample()`` is never paced.
        poll_s: the wait of a ``sample()`` during the grace period.
        idle_poll_s: the wait of a ``sample()`` while no client is connected.
    """

    def __init__(self, *, update_steps: int, extend_steps: int, extend_after_s: float, on_policy: bool,
                 poll_s: float = GRACE_POLL_S, idle_poll_s: float = IDLE_POLL_S) -> None:
        self.update_steps = update_steps
        self.extend_steps = extend_steps
        self.extend_after_s = extend_after_s
        self.on_policy = on_policy
        self.poll_s = poll_s
        self.idle_poll_s = idle_poll_s
        #: The version of the weights served now.
        self.weights_seq_no = 0
        #: Steps ``sample()`` returned since the current version arrived.
        self.steps_since_weights = 0
        #: When those reached ``update_steps``.
        self.share_done_at = 0.0

    def weights_change(self, seq_no: int) -> WeightsChange:
        """What weights numbered ``seq_no`` are (changes nothing; see :meth:`new_weights`)."""
        if not seq_no:
            return WeightsChange.FORCED
        return WeightsChange.NEW if seq_no > self.weights_seq_no else WeightsChange.STALE

    def new_weights(self, seq_no: int, update_steps: Optional[int] = None) -> None:
        """Weights ``seq_no`` (a :attr:`WeightsChange.NEW` version) are served from now on.

        ``update_steps``: what this update and the next take from this runner, if no longer the same.
        """
        self.weights_seq_no = seq_no
        self.steps_since_weights = 0
        if update_steps is not None:
            self.update_steps = update_steps

    def plan(self, now: float, wait_s: float, clients: int = 1) -> SamplePlan:
        """What a ``sample()`` called at ``now``, allowed to wait ``wait_s``, does (``clients``: connected now)."""
        if clients <= 0:
            return SamplePlan(min(wait_s, self.idle_poll_s))
        if not self.on_policy or self.steps_since_weights < self.update_steps:
            return SamplePlan(wait_s)
        if now - self.share_done_at < self.extend_after_s:
            return SamplePlan(min(wait_s, self.poll_s))
        return SamplePlan(wait_s, self.extend_steps)

    def steps_to_take(self) -> int:
        """The steps a ``sample()`` waits for: on-policy, the rest of this runner's share; else one fragment.

        The rest, not a fragment: a share is more than a fragment when this
        runner has more of the clients (see shares.py), and RLlib stops
        sampling once the whole update is in, so a part left behind would
        reach the next update with lag 1; it is less than a fragment after
        a ``sample()`` that came up short (one called before the clients
        were all there), and waiting for more than the clients were asked
        for would wait out the whole timeout. Once the share is in, one
        fragment (of an extension).
        """
        left = self.update_steps - self.steps_since_weights
        if not self.on_policy or left <= 0:
            return self.extend_steps
        return left

    def sampled(self, steps: int, now: float) -> None:
        """``sample()`` returned ``steps`` at ``now``."""
        before = self.steps_since_weights
        self.steps_since_weights += steps
        if before < self.update_steps <= self.steps_since_weights:
            self.share_done_at = now
