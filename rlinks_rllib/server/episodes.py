"""From the wire form of episodes to RLlib ``SingleAgentEpisode`` objects.

:class:`EpisodeIngest` is the one place where a message's ``episodes`` list
becomes something a Learner trains on. It runs every chunk through
:func:`~rlinks_rllib.protocol.episodes.check_episode_state` with the runner's
own spaces and limits, then through RLlib's ``from_state`` (which ends with
the episode's own ``validate``). A message is accepted whole or not at all.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from ..protocol.episodes import (
    ACTION_DIST_INPUTS,
    ACTION_LOGP,
    BUFFER_DATA,
    OBSERVATIONS,
    EpisodeError,
    check_episode_state,
)
from ..protocol.spaces import SpaceMismatch, check_column, check_value, describe_space
from .errors import IngestError
from .settings import RLinkSettings

__all__ = ["EpisodeIngest"]


def _space_rules(observation_space: gym.Space, action_space: gym.Space) -> dict:
    rules: dict[str, Any] = {}
    if isinstance(observation_space, gym.spaces.Box):
        rules.update(obs_shape=tuple(observation_space.shape), obs_dtype=np.dtype(observation_space.dtype))
    elif isinstance(observation_space, gym.spaces.Discrete):
        rules.update(obs_shape=(), obs_dtype=np.dtype(np.int64))
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError("rlinks: Discrete action spaces must start at 0")
        rules.update(num_actions=int(action_space.n), action_shape=(), action_dtype=np.dtype(np.int64))
    elif isinstance(action_space, gym.spaces.Box):
        rules.update(action_shape=tuple(action_space.shape), action_dtype=np.dtype(action_space.dtype))
    return rules


def _is_nested(space: gym.Space) -> bool:
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


def _check_nested_observations(desc: dict, data: Any) -> Any:
    """Hold a chunk's Dict/Tuple observations against the space; return them in the space's dtypes.

    The stacked form (one array per leaf) is checked a leaf at a time, RLlib's
    per-step list form a step at a time.

    Raises:
        EpisodeError: a missing or extra key, a leaf of another shape or a
            dtype that does not cast, a NaN, a value out of range; the
            message names the key path.
    """
    try:
        if isinstance(data, list):
            return [check_value(desc, value, what=f"{OBSERVATIONS}[{t}]") for t, value in enumerate(data)]
        first = next(_arrays_of(data), None)
        if first is None or first.ndim == 0:
            raise EpisodeError(f"{OBSERVATIONS}: expected one array per leaf of the observation space")
        return check_column(desc, data, len(first), what=OBSERVATIONS)
    except SpaceMismatch as exc:
        raise EpisodeError(str(exc)) from exc


def _arrays_of(data: Any) -> Any:
    """The arrays of a stacked nest, depth first."""
    if isinstance(data, dict):
        for value in data.values():
            yield from _arrays_of(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from _arrays_of(value)
    else:
        yield np.asarray(data)


class EpisodeIngest:
    """Checks and converts the episodes of one message.

    Args:
        observation_space, action_space: the runner's spaces; data must fit them.
        settings: the per-message and per-chunk limits.
        required_extra: model outputs every chunk must carry (the Learner's
            loss needs them: ``action_logp`` and ``action_dist_inputs`` for PPO,
            APPO and IMPALA).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        settings: RLinkSettings,
        required_extra: tuple[str, ...] = (ACTION_LOGP, ACTION_DIST_INPUTS),
    ) -> None:
        self._rules = _space_rules(observation_space, action_space)
        #: A Dict/Tuple observation is held against its space leaf by leaf (the rules cover plain spaces).
        self._nested = describe_space(observation_space) if _is_nested(observation_space) else None
        self._max_steps = settings.max_steps_per_chunk
        self._required_extra = required_extra

    def __call__(self, wire_episodes: list) -> tuple[list[SingleAgentEpisode], int]:
        """Return the message's non-empty chunks as episodes, and their env steps.

        Raises:
            IngestError: a chunk is malformed, breaks a limit, doesn't fit the
                spaces, or fails RLlib's own validation.
        """
        episodes: list[SingleAgentEpisode] = []
        steps = 0
        for i, state in enumerate(wire_episodes):
            try:
                clean = check_episode_state(
                    state,
                    max_steps=self._max_steps,
                    allow_empty=True,
                    required_extra=self._required_extra,
                    **self._rules,
                )
                if self._nested is not None:
                    buffer = clean[OBSERVATIONS]
                    buffer[BUFFER_DATA] = _check_nested_observations(self._nested, buffer[BUFFER_DATA])
            except EpisodeError as exc:
                raise IngestError(f"episodes[{i}]: {exc}") from exc
            if clean["t"] == clean["t_started"]:
                continue  # an empty chunk teaches nothing; RLlib's client sends them
            try:
                # from_state ends with episode.validate(); no second call.
                episode = SingleAgentEpisode.from_state(clean)
            except (AssertionError, ValueError, KeyError, TypeError, IndexError) as exc:
                raise IngestError(f"episodes[{i}] fails RLlib's validation: {exc!r}") from exc
            episodes.append(episode)
            steps += len(episode)
        return episodes, steps
