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

from ..protocol.episodes import ACTION_DIST_INPUTS, ACTION_LOGP, EpisodeError, check_episode_state
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


#: ``check_episode_state`` keyword rules that hold data to a pair of spaces (the multi-agent ingest's, per module).
space_rules = _space_rules
