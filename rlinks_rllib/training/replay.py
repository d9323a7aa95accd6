"""Replay buffers that take episode chunks from external simulators as they come.

RLlib's episode replay buffers join the chunks of one episode by id and
assert that each continues the last (``t == t_started``, the same
observation at the seam). A chunk from a simulator can break that without
anything being wrong with the data: a reconnect resends a batch whose
confirmation was lost, a simulator moves to another runner and that
runner's ``sample()`` returns first, a runner dropped the chunk before it
(``off_policy_backlog``), or the buffer evicted the episode's start. An
assertion in the learner would end training for all simulators.

:func:`replay_safe` makes a buffer class that fits each chunk in first:

* it continues the episode (or a later part of it kept under another id): added there;
* it repeats steps the buffer has: the repeated steps are left out (the
  whole chunk, or its first part), never stored twice;
* it starts after a gap, or after its episode left the buffer: it is
  stored as a new episode (its id plus a suffix), which later chunks then
  continue.

Counts are kept on the buffer (:attr:`ReplaySafe.fitted`) and logged.
"""

from __future__ import annotations

import collections
import copy
import logging
import time
from typing import Any, Optional

import numpy as np
import tree
from ray.rllib.callbacks.callbacks import RLlibCallback

__all__ = ["ReplaySafe", "RLinkReplaySafe", "replay_safe", "adopt", "FIT_COUNTERS"]

logger = logging.getLogger("rlinks_rllib.training")

#: The counters of :attr:`ReplaySafe.fitted`.
FIT_COUNTERS = ("chunks_renamed", "chunks_duplicate", "steps_duplicate", "chunks_trimmed")

#: Episodes whose other ids (after a gap) are remembered; the oldest are forgotten first.
_MAX_ALIASED_EPISODES = 65_536
#: Parts one episode may be split into before the oldest part's id is forgotten.
_MAX_PARTS = 8
#: Least seconds between two log lines about fitted chunks.
_LOG_EVERY_S = 60.0


def _same_observation(a: Any, b: Any) -> bool:
    flat_a, flat_b = tree.flatten(a), tree.flatten(b)
    return len(flat_a) == len(flat_b) and all(np.array_equal(x, y) for x, y in zip(flat_a, flat_b))


class ReplaySafe:
    """The mixin :func:`replay_safe` puts before an RLlib single-agent episode buffer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._start_fitting()

    def _start_fitting(self) -> None:
        #: original episode id -> the ids its parts are stored under, oldest first (the original among them).
        self._parts: collections.OrderedDict[str, list[str]] = collections.OrderedDict()
        self.fitted = dict.fromkeys(FIT_COUNTERS, 0)
        self._logged = (0.0, dict(self.fitted))

    def add(self, episodes: Any, *args: Any, **kwargs: Any) -> None:
        chunks = episodes if isinstance(episodes, (list, tuple)) else [episodes]
        for chunk in chunks:
            fitted = self._fit(chunk)
            if fitted is not None:
                super().add([fitted], *args, **kwargs)
        self._log_fitted()

    def _stored(self, episode_id: str) -> Optional[Any]:
        """The episode stored under ``episode_id``, if it is still in the buffer."""
        index = self.episode_id_to_index.get(episode_id)
        if index is None:
            return None
        position = index - self._num_episodes_evicted
        if not 0 <= position < len(self.episodes):
            return None
        stored = self.episodes[position]
        return stored if stored.id_ == episode_id else None

    def _fit(self, chunk: Any) -> Optional[Any]:
        """``chunk`` as it can be added (maybe trimmed or renamed), or None when the buffer has all of it."""
        original = chunk.id_
        parts = self._parts.get(original, [original])
        overlap = None
        for part in reversed(parts):
            stored = self._stored(part)
            if stored is None:
                continue
            if stored.t == chunk.t_started and not stored.is_done:
                if _same_observation(stored.observations[-1], chunk.observations[0]):
                    return self._as(chunk, part)
            elif stored.t_started <= chunk.t_started < stored.t:
                if chunk.t <= stored.t:
                    self.fitted["chunks_duplicate"] += 1
                    self.fitted["steps_duplicate"] += len(chunk)
                    return None
                overlap = overlap or (part, stored)
        if overlap is not None and not overlap[1].is_done:
            part, stored = overlap
            trimmed = chunk.slice(slice(stored.t - chunk.t_started, None), len_lookback_buffer=0)
            if _same_observation(stored.observations[-1], trimmed.observations[0]):
                self.fitted["chunks_trimmed"] += 1
                self.fitted["steps_duplicate"] += len(chunk) - len(trimmed)
                return self._as(trimmed, part)
        if original not in self.episode_id_to_index and original not in self._parts:
            return chunk  # the first chunk of an episode
        return self._as(chunk, self._new_part(original, parts))

    def _new_part(self, original: str, parts: list[str]) -> str:
        """A new id for a part of episode ``original`` that does not continue what the buffer holds."""
        self.fitted["chunks_renamed"] += 1
        part = f"{original}~{len(parts)}"
        while part in self.episode_id_to_index:
            part += "~"
        self._parts[original] = [*parts, part][-_MAX_PARTS:]
        self._parts.move_to_end(original)
        while len(self._parts) > _MAX_ALIASED_EPISODES:
            self._parts.popitem(last=False)
        return part

    @staticmethod
    def _as(chunk: Any, episode_id: str) -> Any:
        if chunk.id_ == episode_id:
            return chunk
        renamed = copy.copy(chunk)  # the buffer deep-copies what it keeps; the caller's chunk stays as it was
        renamed.id_ = episode_id
        return renamed

    def _log_fitted(self) -> None:
        now = time.monotonic()
        logged_at, before = self._logged
        if self.fitted == before or now - logged_at < _LOG_EVERY_S:
            return
        changes = ", ".join(f"{name} {self.fitted[name] - before[name]}" for name in FIT_COUNTERS
                            if self.fitted[name] != before[name])
        logger.info("replay buffer: episode chunks that did not continue their episode (resent, reordered, or after "
                    "a dropped chunk) were fitted in: %s", changes)
        self._logged = (now, dict(self.fitted))


def replay_safe(buffer_cls: type) -> type:
    """A subclass of RLlib's single-agent episode buffer ``buffer_cls`` that fits chunks in (see module docs).

    Raises:
        TypeError: ``buffer_cls`` is not a single-agent ``EpisodeReplayBuffer``.
    """
    from ray.rllib.utils.replay_buffers import EpisodeReplayBuffer, MultiAgentEpisodeReplayBuffer

    if issubclass(buffer_cls, ReplaySafe):
        return buffer_cls
    if not issubclass(buffer_cls, EpisodeReplayBuffer) or issubclass(buffer_cls, MultiAgentEpisodeReplayBuffer):
        raise TypeError(f"{buffer_cls.__name__} is not a single-agent EpisodeReplayBuffer")
    return type(f"ReplaySafe{buffer_cls.__name__}", (ReplaySafe, buffer_cls), {"__module__": __name__})


def adopt(buffer: Any) -> bool:
    """Make an RLlib single-agent episode buffer, already built, fit chunks in from now on; returns whether it did.

    SAC's config check accepts only RLlib's own buffer names, so the buffer
    is changed after the algorithm built it (see :class:`RLinkReplaySafe`).
    """
    if buffer is None or isinstance(buffer, ReplaySafe):
        return False
    try:
        safe = replay_safe(type(buffer))
    except TypeError:
        return False
    buffer.__class__ = safe
    buffer._start_fitting()
    return True


class RLinkReplaySafe(RLlibCallback):
    """The driver's side: once the algorithm is built, its replay buffer fits chunks in (see module docs).

    Add it to an off-policy config fed by ``RLinkEnvRunner`` s
    (``config.callbacks([RLinkReceipts, RLinkShares, RLinkReplaySafe])``;
    ``rlinks learner`` does this). Algorithms without a single-agent episode
    replay buffer (PPO, multi-agent configs) are left as they are.
    """

    def on_algorithm_init(self, *, algorithm: Any, metrics_logger: Optional[Any] = None, **kwargs: Any) -> None:
        if adopt(getattr(algorithm, "local_replay_buffer", None)):
            logger.debug("replay buffer %s fits chunks in", type(algorithm.local_replay_buffer).__name__)
