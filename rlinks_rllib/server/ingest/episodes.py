"""From the wire form of episodes to RLlib ``SingleAgentEpisode`` objects.

:class:`EpisodeIngest` is the one place where a message's ``episodes`` list
becomes something a Learner trains on. It runs every chunk through
:func:`~rlinks_rllib.protocol.episodes.check_episode_state` with the runner's
own spaces and limits, then builds the episode with :func:`episode_from_state`.
A message is accepted whole or not at all.

:func:`episode_from_state` makes the very episode RLlib's
``SingleAgentEpisode.from_state`` makes of a checked state, in a fraction of
its time: a checked state has no spaces to parse and its lengths are known
to agree (what ``from_state``'s closing ``validate`` asserts), so it only
fills the slots. ``tests/test_ingest_fast.py`` holds the two side by side,
slot by slot, so a change in RLlib's episode shows up there.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import defaultdict
from typing import Any, Hashable, Optional

import gymnasium as gym
import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer

from ...protocol.episodes import (
    ACTION_DIST_INPUTS,
    ACTION_LOGP,
    ACTIONS,
    AGENT_ID,
    BUFFER_DATA,
    BUFFER_FINALIZED,
    BUFFER_LOOKBACK,
    CUSTOM_DATA,
    EXTRA_MODEL_OUTPUTS,
    ID,
    INFOS,
    IS_TERMINATED,
    IS_TRUNCATED,
    LAST_STEP_TIME,
    MODULE_ID,
    MULTI_AGENT_EPISODE_ID,
    OBSERVATIONS,
    REWARDS,
    START_TIME,
    T,
    T_STARTED,
    EpisodeError,
    check_episode_state,
)
from ...protocol.spaces import SpaceMismatch, check_column, check_value, describe_space
from ..errors import IngestError
from ..settings import RLinkSettings
from ..takeover.markers import Takeovers, split_takeovers, takeover_marker, tally_of
from ..takeover.segments import TakeoverSegments

__all__ = ["EpisodeIngest", "episode_from_state"]

logger = logging.getLogger("rlinks_rllib.server")

#: What a batch of held parts holds for the metrics: no chunk as played (those came with their own message).
_NO_TALLIES = Takeovers((), 0)

#: What an InfiniteLookbackBuffer without a space holds besides its data.
_NO_SPACE = {k: v for k, v in InfiniteLookbackBuffer().__dict__.items()
             if k not in (BUFFER_DATA, BUFFER_LOOKBACK, BUFFER_FINALIZED)}
_new_buffer = InfiniteLookbackBuffer.__new__
_new_episode = SingleAgentEpisode.__new__


def _buffer(state: dict) -> InfiniteLookbackBuffer:
    buffer = _new_buffer(InfiniteLookbackBuffer)
    buffer.__dict__.update(_NO_SPACE)
    buffer.data = state[BUFFER_DATA]
    buffer.lookback = state[BUFFER_LOOKBACK]
    buffer.finalized = state[BUFFER_FINALIZED]
    return buffer


def episode_from_state(state: dict) -> SingleAgentEpisode:
    """``SingleAgentEpisode.from_state(state)`` for a state :func:`check_episode_state` returned.

    Only for such states: nothing is checked here (the check did it), and
    spaces are never set (a checked state has none).
    """
    episode = _new_episode(SingleAgentEpisode)
    episode.id_ = state[ID]
    episode.agent_id = state[AGENT_ID]
    episode.module_id = state[MODULE_ID]
    episode.multi_agent_episode_id = state[MULTI_AGENT_EPISODE_ID]
    episode.observations = observations = _buffer(state[OBSERVATIONS])
    episode.actions = _buffer(state[ACTIONS])
    episode.rewards = _buffer(state[REWARDS])
    episode.infos = _buffer(state[INFOS])
    extras = state[EXTRA_MODEL_OUTPUTS]
    episode.extra_model_outputs = defaultdict(
        functools.partial(InfiniteLookbackBuffer, lookback=observations.lookback),
        {name: _buffer(buf) for name, buf in extras.items()} if extras else (),
    )
    episode.is_terminated = state[IS_TERMINATED]
    episode.is_truncated = state[IS_TRUNCATED]
    episode.t_started = state[T_STARTED]
    episode.t = state[T]
    episode._observation_space = None
    episode._action_space = None
    episode._start_time = state[START_TIME]
    episode._last_step_time = state[LAST_STEP_TIME]
    episode._custom_data = state.get(CUSTOM_DATA, {})
    episode._last_added_observation = None
    episode._last_added_infos = None
    return episode


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
        on_policy: the learner trains on-policy: steps taken over (the
            ``takeover`` marker) are cut out of the chunks (see takeover.py).

    After each call, :attr:`last_takeovers` says what the message's chunks
    held when any step of them was taken over (``None`` otherwise): the
    caller hands it on with the episodes, to the metrics.

    With the setting ``takeover_terminates`` (off-policy), every chunk goes
    through :class:`~rlinks_rllib.server.takeover.segments.TakeoverSegments` after its checks:
    the episodes returned are its segments, the part of a chunk it holds
    back comes with a later call, or from :meth:`release_held`; and
    :attr:`last_takeovers` is set for every message with chunks, so the
    metrics count the episodes as played, never their segments.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        settings: RLinkSettings,
        required_extra: tuple[str, ...] = (ACTION_LOGP, ACTION_DIST_INPUTS),
        *,
        on_policy: bool = False,
    ) -> None:
        self._rules = _space_rules(observation_space, action_space)
        #: A Dict/Tuple observation is held against its space leaf by leaf (the rules cover plain spaces).
        self._nested = describe_space(observation_space) if _is_nested(observation_space) else None
        self._max_steps = settings.max_steps_per_chunk
        self._required_extra = required_extra
        self._on_policy = on_policy
        self.last_takeovers: Optional[Takeovers] = None
        #: With ``takeover_terminates``: the tags of earlier messages whose held parts the last call handed on.
        self.last_settled: tuple = ()
        #: Cuts episodes where the teacher takes over (``takeover_terminates``); None: not cut.
        self.segments: Optional[TakeoverSegments] = None
        if settings.takeover_terminates:
            if on_policy:
                logger.warning("rlinks: the setting takeover_terminates does nothing for an on-policy learner: "
                               "taken-over steps are cut out of its updates anyway")
            else:
                self.segments = TakeoverSegments()

    def __call__(self, wire_episodes: list, tag: Any = None) -> tuple[list[SingleAgentEpisode], int]:
        """Return the message's non-empty chunks as episodes, and their env steps (those RLlib gets).

        ``tag``: with ``takeover_terminates``, what :meth:`release_held` hands
        back with the parts of this message it holds (the caller's
        ``(client, weights version)``); otherwise unused.

        Raises:
            IngestError: a chunk is malformed, breaks a limit, doesn't fit the
                spaces, or fails RLlib's own validation.
        """
        episodes: list[SingleAgentEpisode] = []
        steps = 0
        markers: list = []
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
                marker = takeover_marker(clean)
            except EpisodeError as exc:
                raise IngestError(f"episodes[{i}]: {exc}") from exc
            if clean["t"] == clean["t_started"]:
                continue  # an empty chunk teaches nothing; RLlib's client sends them
            markers.append((clean, marker))
        self.last_takeovers = None
        self.last_settled = ()
        if self.segments is not None and markers:
            return self._segmented(markers, tag)
        if not any(marker is not None for _, marker in markers):
            for clean, _ in markers:
                episodes.append(episode_from_state(clean))
                steps += clean["t"] - clean["t_started"]
            return episodes, steps
        tallies, withheld = [], 0
        for clean, marker in markers:
            tally = tally_of(clean, marker)
            tallies.append(tally)
            parts = [clean] if marker is None else split_takeovers(clean, marker, on_policy=self._on_policy)
            for part in parts:
                episodes.append(episode_from_state(part))
                steps += part["t"] - part["t_started"]
            if self._on_policy:
                withheld += tally.takeover_steps
        self.last_takeovers = Takeovers(tuple(tallies), withheld)
        return episodes, steps

    def _segmented(self, markers: list, tag: Any) -> tuple[list[SingleAgentEpisode], int]:
        """The message's chunks cut at each onset (``takeover_terminates``), tallied as played."""
        assert self.segments is not None
        self.last_takeovers = Takeovers(tuple(tally_of(clean, marker) for clean, marker in markers), 0)
        parts = self.segments.segment(markers, time.monotonic(), tag)
        self.last_settled = tuple(dict.fromkeys(part_tag for _, part_tag in parts if part_tag != tag))
        return [episode_from_state(part) for part, _ in parts], sum(part[T] - part[T_STARTED] for part, _ in parts)

    def release_held(self, *, expired_only: bool = False,
                     owner: Optional[Hashable] = None) -> list[tuple[Any, list[SingleAgentEpisode], int, Takeovers]]:
        """Parts held back (``takeover_terminates``), as they are: all, those past the hold bound, or ``owner``'s.

        Returns one ``(tag, episodes, env steps, takeovers)`` per tag they
        came with, in the order they were held; ``takeovers`` holds no
        tallies (the chunks were tallied when they came).
        """
        if self.segments is None:
            return []
        if expired_only:
            parts = self.segments.expire(time.monotonic())
        else:
            parts = self.segments.release(owner)
        by_tag: dict[Any, list[dict]] = {}
        for part, tag in parts:
            by_tag.setdefault(tag, []).append(part)
        return [(tag, [episode_from_state(part) for part in group], sum(part[T] - part[T_STARTED] for part in group),
                 _NO_TALLIES) for tag, group in by_tag.items()]


#: ``check_episode_state`` keyword rules that hold data to a pair of spaces (the multi-agent ingest's, per module).
space_rules = _space_rules
