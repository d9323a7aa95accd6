"""Episode chunks from EnvClient simulators, in the form a training loop of the user's own reads them.

A sample server told its simulators' spaces (:class:`~.server.SampleServer`'s
``episodes``) takes ``EPISODES`` as a runner does: every chunk goes through
:func:`~rlinks_rllib.protocol.episodes.check_episode_state` with the space
rules the runner's :class:`~rlinks_rllib.server.ingest.episodes.EpisodeIngest` uses, a message is taken
whole or not at all, and empty chunks are dropped. What comes out is not an
RLlib episode but one plain dict of numpy arrays per chunk, in one of two
forms (:data:`EPISODE` or :data:`TRANSITIONS`, told apart by its ``"kind"``):

``"episode"`` (the chunk as it was played)::

    {"kind": "episode", "eps_id": str, "t_started": int,
     "obs": [T + 1, ...], "actions": [T, ...], "rewards": [T],
     "terminated": bool, "truncated": bool,   # how the chunk ended (both False: the episode goes on)
     "action_logp": [T], "action_dist_inputs": [T, n], ...}   # the model outputs the chunk carries

``"transitions"`` (what an off-policy update samples)::

    {"kind": "transitions", "eps_id": str, "t_started": int,
     "obs": [T, ...], "actions": [T, ...], "rewards": [T], "next_obs": [T, ...],
     "terminateds": [T] bool, "truncateds": [T] bool,   # True only on the chunk's last step, if it ended so
     "action_logp": [T], ...}

Infos are not kept; lookback entries are cut off.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ..protocol.episodes import (
    ACTIONS,
    BUFFER_DATA,
    BUFFER_LOOKBACK,
    DEFAULT_MAX_STEPS,
    EXTRA_MODEL_OUTPUTS,
    ID,
    IS_TERMINATED,
    IS_TRUNCATED,
    OBSERVATIONS,
    REWARDS,
    T,
    T_STARTED,
    EpisodeError,
    check_episode_state,
)
from ..protocol.errors import ErrorCode
from ..server.errors import IngestError

__all__ = ["EpisodeReader", "KIND", "EPISODE", "TRANSITIONS", "EPISODE_FORMS"]

#: The key that tells an episode chunk from a plain sample (plain samples are as the actor put them).
KIND = "kind"
#: ``"kind"`` of a chunk as it was played (observations ``T + 1``).
EPISODE = "episode"
#: ``"kind"`` of a chunk as ``T`` transitions (``obs``, ``next_obs``, per-step done flags).
TRANSITIONS = "transitions"
#: The forms a reader makes.
EPISODE_FORMS = (EPISODE, TRANSITIONS)


class EpisodeReader:
    """Checks the episodes of one ``EPISODES`` message and returns their chunks as dicts.

    Args:
        observation_space, action_space: the simulators' spaces; data must fit them.
        form: :data:`EPISODE` or :data:`TRANSITIONS` (see the module docs).
        max_steps: most env steps one chunk may hold.

    Raises:
        ValueError: an unknown ``form``, a Dict or Tuple observation space (not read here yet),
            or a ``Discrete`` action space that does not start at 0.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, form: str = EPISODE,
                 max_steps: int = DEFAULT_MAX_STEPS) -> None:
        if form not in EPISODE_FORMS:
            raise ValueError(f"episodes must be one of {EPISODE_FORMS}, got {form!r}")
        if isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
            raise ValueError("a dataset reads episodes of Box or Discrete observations; Dict and Tuple "
                             "observations reach only an RLlib runner for now")
        self.observation_space = observation_space
        self.action_space = action_space
        self.form = form
        from ..server.ingest.episodes import space_rules  # with RLlib's episode classes: only a dataset with simulators pays for it

        self._rules = space_rules(observation_space, action_space)
        self._max_steps = max_steps

    def __call__(self, wire_episodes: Any) -> list[dict[str, Any]]:
        """The message's non-empty chunks, checked, in the order sent.

        Raises:
            IngestError: a chunk is malformed, breaks a limit or does not fit the spaces
                (``bad_episode``), or ``episodes`` is not a list.
        """
        if not isinstance(wire_episodes, list):
            raise IngestError("EPISODES: 'episodes' must be a list of episode states")
        chunks = []
        for i, state in enumerate(wire_episodes):
            try:
                clean = check_episode_state(state, max_steps=self._max_steps, allow_empty=True, keep_infos=False,
                                            **self._rules)
            except EpisodeError as exc:
                raise IngestError(f"episodes[{i}]: {exc}", code=ErrorCode.BAD_EPISODE) from exc
            if clean[T] == clean[T_STARTED]:
                continue  # an empty chunk teaches nothing
            chunks.append(self._transitions(clean) if self.form == TRANSITIONS else self._episode(clean))
        return chunks

    @staticmethod
    def _episode(clean: dict) -> dict[str, Any]:
        chunk = {KIND: EPISODE, "eps_id": clean[ID], "t_started": clean[T_STARTED],
                 "obs": _data(clean[OBSERVATIONS]), "actions": _data(clean[ACTIONS]),
                 "rewards": _data(clean[REWARDS]),
                 "terminated": clean[IS_TERMINATED], "truncated": clean[IS_TRUNCATED]}
        chunk.update(_extras(clean))
        return chunk

    @staticmethod
    def _transitions(clean: dict) -> dict[str, Any]:
        obs = _data(clean[OBSERVATIONS])
        steps = clean[T] - clean[T_STARTED]
        terminateds, truncateds = np.zeros(steps, np.bool_), np.zeros(steps, np.bool_)
        terminateds[-1], truncateds[-1] = clean[IS_TERMINATED], clean[IS_TRUNCATED]
        chunk = {KIND: TRANSITIONS, "eps_id": clean[ID], "t_started": clean[T_STARTED],
                 "obs": obs[:-1], "actions": _data(clean[ACTIONS]), "rewards": _data(clean[REWARDS]),
                 "next_obs": obs[1:].copy(), "terminateds": terminateds, "truncateds": truncateds}
        chunk.update(_extras(clean))
        return chunk


def _data(buffer: dict) -> Any:
    """A checked buffer's steps, its lookback entries cut off."""
    data, lookback = buffer[BUFFER_DATA], buffer[BUFFER_LOOKBACK]
    return data[lookback:] if lookback else data


def _extras(clean: dict) -> dict[str, Any]:
    return {name: _data(buffer) for name, buffer in (clean[EXTRA_MODEL_OUTPUTS] or {}).items()}
