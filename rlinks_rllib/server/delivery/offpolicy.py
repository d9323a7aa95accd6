"""What an off-policy runner hands RLlib per ``sample()``, and what becomes of the rest.

RLlib's off-policy algorithms (DQN, SAC) hold their replay ratio
(``training_intensity``) by assuming that every ``sample()`` returns one
rollout fragment per env: a fixed number of updates follows each call.
External simulators run at their own speed, so the runner makes that
assumption true instead of handing over whatever has arrived:

* :class:`StepCredit` keeps the steps handed over at one fragment per call
  on average. A call that hands over more (batches are taken whole) makes
  the next calls hand over nothing until the surplus is used up; a call
  that came up short (slow simulators) lets the next ones take more.
* The backlog is bounded (``off_policy_backlog_steps``): the data RLlib
  gets is the freshest, never a queue minutes old. With
  ``off_policy_backlog: drop`` the oldest batches beyond it are dropped
  (confirmed to their clients, so never sent again, and counted); with
  ``pace`` the inbox holds no more than that, so reading from clients
  pauses and their sends wait: the simulators are paced to the learner.
  A paced runner also tells its clients to keep no more than
  :data:`PACED_IN_FLIGHT` batches sent and unconfirmed (``paced_in_flight``
  in ``SET_CONFIG``): what they send is then sampled with weights a few
  updates old, not the learner's of a minute ago (each client used to keep
  up to ``max_unacked`` batches in flight, sampled with old weights, while
  the paced runner took one fragment per ``sample()``). Not under
  ``takeover_terminates``: there a message is confirmed with the next chunk
  of its episodes (takeover_held.py), which a client holding one batch in
  flight would send only after the 2 s hold.
* :class:`EpisodeAliases` gives a chunk whose episode lost an earlier chunk
  to a drop a fresh episode id: RLlib's replay buffer joins the chunks of
  one id and refuses one that does not continue the last.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable

__all__ = ["PACED_IN_FLIGHT", "StepCredit", "EpisodeAliases", "backlog_steps"]

#: Batches a paced client keeps sent and not yet confirmed: one, a fragment (a client's batches are fragments),
#: what a ``sample()`` takes next.
PACED_IN_FLIGHT = 1

#: The default backlog, in fragments (sample() calls' worth of steps).
_DEFAULT_BACKLOG_FRAGMENTS = 4

#: The default backlog is never smaller than this many steps: a few clients' batches.
_MIN_DEFAULT_BACKLOG = 64


def backlog_steps(setting: int, fragment_steps: int) -> int:
    """The backlog bound for ``setting`` (0: the default, a few fragments)."""
    if setting > 0:
        return setting
    return max(_DEFAULT_BACKLOG_FRAGMENTS * fragment_steps, _MIN_DEFAULT_BACKLOG)


class StepCredit:
    """One fragment per ``sample()`` on average, however the simulators' batches fall.

    ``balance`` is the steps handed over beyond one fragment per call so
    far: positive after a call that took whole batches past the fragment,
    negative after calls that came up short. The debt is bounded by
    ``max_debt`` so that a long gap without simulators does not make one
    later call take an unbounded number of steps.
    """

    def __init__(self, fragment_steps: int, max_debt: int) -> None:
        if fragment_steps < 1:
            raise ValueError(f"fragment_steps must be positive, got {fragment_steps}")
        self.fragment_steps = fragment_steps
        self.max_debt = max(0, max_debt)
        self.balance = 0

    def wanted(self) -> int:
        """Steps this call should hand over; 0: the surplus covers it, hand over nothing and don't wait."""
        return max(0, self.fragment_steps - self.balance)

    def handed(self, steps: int) -> None:
        """This call handed over ``steps``."""
        self.balance = max(-self.max_debt, self.balance + steps - self.fragment_steps)


class EpisodeAliases:
    """Fresh episode ids for chunks that no longer continue what RLlib got of their episode.

    After a chunk of episode ``e`` is dropped, the next chunk of ``e`` that
    is handed over starts a new id (``e`` plus a suffix), and the chunks
    after it follow that id. Bounded: at most ``max_episodes`` episodes are
    remembered (the oldest forgotten first); an episode that ends is
    forgotten at once.
    """

    def __init__(self, max_episodes: int = 65_536) -> None:
        self.max_episodes = max_episodes
        #: original id -> (alias in use or None, gap pending, aliases made)
        self._state: collections.OrderedDict[str, list] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._state)

    def dropped(self, episodes: Iterable[Any]) -> None:
        """These chunks were not handed over: their episodes' next chunks start new ids."""
        for episode in episodes:
            if episode.is_done:
                self._state.pop(episode.id_, None)
                continue
            entry = self._state.get(episode.id_)
            if entry is None:
                entry = self._state[episode.id_] = [None, True, 0]
            entry[1] = True
            self._state.move_to_end(episode.id_)
            while len(self._state) > self.max_episodes:
                self._state.popitem(last=False)

    def rename(self, episodes: Iterable[Any]) -> int:
        """Give chunks handed over now the id their episode goes by; returns how many were renamed."""
        renamed = 0
        for episode in episodes:
            original = episode.id_
            entry = self._state.get(original)
            if entry is None:
                continue
            if entry[1]:
                entry[2] += 1
                entry[0] = f"{original}~{entry[2]}"
                entry[1] = False
            episode.id_ = entry[0]
            renamed += 1
            if episode.is_done:
                del self._state[original]
        return renamed
