"""A take-over as a failure: episodes cut where the teacher takes over (the setting ``takeover_terminates``).

Off-policy, a taken-over step is trained on like any other (takeover.py).
With a teacher that catches the pole, though, the returns hardly depend on
the policy, and SAC's targets bootstrap into the states the teacher owns
through actions never tried there. RLIF's answer: an intervention is a
failure signal. :class:`TakeoverSegments` cuts each episode at every
*onset* (a step of the policy followed by a taken-over step):

* the policy's segment ends *terminated* at the state where the teacher
  took over, with the env's own reward on its last step, as if the pole
  had fallen there: nothing bootstraps into the teacher's states;
* the rest (the teacher's steps, then the policy's after it hands back, up
  to the next onset) goes on as a new episode, ``f"{id}/{n}"`` for the n-th
  onset, starting at the onset's step with the state the teacher took over
  in. Control going back to the policy cuts nothing.

An onset can fall between two chunks: the last step of one was the
policy's, the next chunk starts with a taken-over step. The first must then
be handed on terminated, so the last part of each open episode's chunk
that ends with a policy step is *held* until the next chunk of that episode
comes (then it is known), the episode ends, the caller's bound passes
(:meth:`expire`) or its owner goes (:meth:`release`). A held part is handed
on exactly once; a chunk that does not continue where the held one ends
(a gap) releases it as it is. Open episodes are bounded: past
``max_episodes`` the oldest is forgotten (its held part handed on).

Pure bookkeeping on checked wire states, the clock passed in: numpy only.
Each part is handed with the caller's ``tag`` (the batch it came with).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Optional

import numpy as np

from ...protocol.episodes import ID, IS_TERMINATED, IS_TRUNCATED, T, T_STARTED
from .markers import part_of

__all__ = ["TakeoverSegments", "segment_id", "HOLD_S"]

#: Seconds a held part waits for the next chunk of its episode before it is handed on as it is.
HOLD_S = 2.0
#: Open episodes remembered at most (the oldest is forgotten first, its held part handed on).
MAX_EPISODES = 65_536


def segment_id(episode_id: str, n: int) -> str:
    """The id of the part of episode ``episode_id`` after its ``n``-th onset (the original for 0)."""
    return episode_id if n == 0 else f"{episode_id}/{n}"


@dataclass
class _Open:
    """An episode not yet ended: its onsets so far, and the part held back (with when, and its tag)."""

    onsets: int = 0
    held: Optional[dict] = None
    held_since: float = 0.0
    tag: Any = None


class TakeoverSegments:
    """Cuts chunks into segments at each onset, holding the last policy part of each open episode.

    Args:
        hold_s: how long a held part waits for the next chunk of its episode.
        max_episodes: open episodes remembered at most.
    """

    def __init__(self, hold_s: float = HOLD_S, max_episodes: int = MAX_EPISODES) -> None:
        self.hold_s = hold_s
        self._max_episodes = max_episodes
        self._open: collections.OrderedDict[str, _Open] = collections.OrderedDict()
        self._held = 0
        #: Parts held now, by the tag they came with.
        self._held_by_tag: collections.Counter = collections.Counter()

    @property
    def held(self) -> int:
        """Parts held back now."""
        return self._held

    def held_with(self, tag: Any) -> int:
        """Parts held now that came with ``tag``."""
        return self._held_by_tag.get(tag, 0)

    def segment(self, chunks: Iterable[tuple[dict, Optional[np.ndarray]]], now: float,
                tag: Any = None) -> list[tuple[dict, Any]]:
        """The parts to hand on now, in order, each with its tag: held parts these chunks settle, then theirs.

        ``chunks``: checked states with their take-over markers (``None``: no
        step taken over), in the order their steps were played.
        """
        out: list[tuple[dict, Any]] = []
        for state, marker in chunks:
            steps = state[T] - state[T_STARTED]
            episode_id = state[ID]
            episode = self._open.pop(episode_id, None) or _Open()
            self._open[episode_id] = episode  # the most recent last
            if episode.held is not None:
                held = self._unhold(episode)
                if marker is not None and marker[0] and state[T_STARTED] == held[T]:
                    held[IS_TERMINATED] = True  # the onset fell between the chunks
                    episode.onsets += 1
                out.append((held, episode.tag))
            # Onsets within the chunk: the policy's step i, the teacher's step i+1 (none without a marker).
            onsets = np.flatnonzero(~marker[:-1] & marker[1:]).tolist() if marker is not None else ()
            start = 0
            for i in onsets:
                part = part_of(state, start, i + 1, last=False)
                part[ID] = segment_id(episode_id, episode.onsets)
                part[IS_TERMINATED] = True
                out.append((part, tag))
                episode.onsets += 1
                start = i + 1
            rest = part_of(state, start, steps, last=True) if start else dict(state)
            rest[ID] = segment_id(episode_id, episode.onsets)
            if state[IS_TERMINATED] or state[IS_TRUNCATED]:
                del self._open[episode_id]
                out.append((rest, tag))
            elif marker is None or not marker[-1]:
                episode.held, episode.held_since, episode.tag = rest, now, tag
                self._held += 1
                self._held_by_tag[tag] += 1
            else:
                out.append((rest, tag))
        while len(self._open) > self._max_episodes:
            _, oldest = self._open.popitem(last=False)
            if oldest.held is not None:
                out.append((self._unhold(oldest), oldest.tag))
        return out

    def expire(self, now: float) -> list[tuple[dict, Any]]:
        """Held parts older than ``hold_s``, handed on as they are (not terminated)."""
        if not self._held:
            return []
        return self._release(lambda episode: now - episode.held_since >= self.hold_s)

    def release(self, owner: Optional[Hashable] = None) -> list[tuple[dict, Any]]:
        """Every held part (of ``owner``: a tag whose first item it is), handed on as it is."""
        if not self._held:
            return []
        if owner is None:
            return self._release(lambda episode: True)
        return self._release(lambda episode: isinstance(episode.tag, tuple) and episode.tag[:1] == (owner,))

    def _release(self, due) -> list[tuple[dict, Any]]:
        return [(self._unhold(episode), episode.tag) for episode in self._open.values()
                if episode.held is not None and due(episode)]

    def _unhold(self, episode: _Open) -> dict:
        held, episode.held = episode.held, None
        self._held -= 1
        self._held_by_tag[episode.tag] -= 1
        if not self._held_by_tag[episode.tag]:
            del self._held_by_tag[episode.tag]
        return held
