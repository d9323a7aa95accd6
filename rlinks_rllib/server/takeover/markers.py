"""Steps a person or a scripted controller took over (the ``takeover`` extension, PROTOCOL.md 10.8).

A chunk whose steps were partly taken over carries the per-step marker
:data:`~rlinks_rllib.protocol.episodes.TAKEOVER` among its extra model
outputs. The runner's ingest hands each checked chunk to
:func:`split_takeovers`, which removes the marker before RLlib sees the
episode and says what the chunk held (:class:`ChunkTally`):

* off-policy (SAC, DQN, APPO, IMPALA) the chunk goes on whole: a taken-over
  step is a step like any other to a replay buffer or a V-trace learner
  (with the setting ``takeover_terminates``, cut where the teacher takes
  over, the policy's part terminated there: takeover_segments.py);
* on-policy (PPO) the taken-over steps are cut out: the steps before and
  after each run of them go on as continuing chunks of the same episode
  (same ``id_``, each with its own first observation and ``t_started``, as
  a cut at a fragment boundary makes them), only the last keeping the
  chunk's ``is_terminated``/``is_truncated``; a part of zero steps is
  dropped. PPO bootstraps a part that stops before a take-over from its
  last observation, as it does any cut chunk.

The tallies travel with the batch to ``sample()``, where they stand in for
the episodes in the episode metrics (so an episode's length and return
include the steps PPO never saw) and give the take-over rate per episode.

Pure bookkeeping on checked wire states: numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...protocol.episodes import (
    ACTIONS,
    BUFFER_DATA,
    BUFFER_LOOKBACK,
    EXTRA_MODEL_OUTPUTS,
    ID,
    INFOS,
    IS_TERMINATED,
    IS_TRUNCATED,
    LAST_STEP_TIME,
    OBSERVATIONS,
    REWARDS,
    START_TIME,
    T,
    T_STARTED,
    TAKEOVER,
    EpisodeError,
)

__all__ = ["ChunkTally", "Takeovers", "part_of", "split_takeovers", "tally_of"]


@dataclass(frozen=True)
class ChunkTally:
    """One chunk as the simulator played it, take-overs included.

    Attributes:
        episode_id: the chunk's ``id_``.
        steps: its env steps.
        takeover_steps: of them, taken over.
        episode_return: the sum of all its rewards.
        duration_s: its ``_last_step_time - _start_time`` (0 when unknown).
        done: it ends its episode (terminated or truncated).
    """

    episode_id: str
    steps: int
    takeover_steps: int
    episode_return: float
    duration_s: float
    done: bool


@dataclass(frozen=True)
class Takeovers:
    """What the chunks of one message held, for a message where any step was taken over.

    Attributes:
        tallies: one per chunk with steps, in message order.
        withheld: taken-over steps not handed to RLlib (on-policy; 0 off-policy).
    """

    tallies: tuple[ChunkTally, ...]
    withheld: int

    @property
    def steps(self) -> int:
        """Taken-over steps in the message."""
        return sum(tally.takeover_steps for tally in self.tallies)


def takeover_marker(state: dict) -> Optional[np.ndarray]:
    """The chunk's marker as bool ``(T,)`` (``None`` when it has none), removed from ``state``.

    Raises:
        EpisodeError: the marker is not one bool or 0/1 integer per step.
    """
    extras = state[EXTRA_MODEL_OUTPUTS]
    if not extras or TAKEOVER not in extras:
        return None
    buffer = extras.pop(TAKEOVER)
    if not extras:
        state[EXTRA_MODEL_OUTPUTS] = None
    data = buffer[BUFFER_DATA]
    if not isinstance(data, np.ndarray) or data.dtype.kind not in "biu":
        raise EpisodeError(f"{EXTRA_MODEL_OUTPUTS}.{TAKEOVER}: expected one bool per step")
    marker = data[buffer[BUFFER_LOOKBACK]:]
    binary = marker.dtype.kind == "b" or np.isin(marker, (0, 1)).all()
    if marker.shape != (state[T] - state[T_STARTED],) or not binary:
        raise EpisodeError(f"{EXTRA_MODEL_OUTPUTS}.{TAKEOVER}: expected one bool per step")
    return marker.astype(np.bool_, copy=False)


def tally_of(state: dict, marker: Optional[np.ndarray] = None) -> ChunkTally:
    """A checked chunk's :class:`ChunkTally`; ``marker``: its take-over marker (``None``: no step taken over)."""
    rewards = state[REWARDS]
    start, last = state[START_TIME], state[LAST_STEP_TIME]
    return ChunkTally(
        episode_id=state[ID],
        steps=state[T] - state[T_STARTED],
        takeover_steps=int(marker.sum()) if marker is not None else 0,
        episode_return=float(np.sum(rewards[BUFFER_DATA][rewards[BUFFER_LOOKBACK]:])),
        duration_s=float(last - start) if start is not None and last is not None else 0.0,
        done=bool(state[IS_TERMINATED] or state[IS_TRUNCATED]),
    )


def split_takeovers(state: dict, marker: np.ndarray, *, on_policy: bool) -> list[dict]:
    """The parts of a checked chunk (marker removed) that RLlib trains on.

    Off-policy, the chunk itself. On-policy, the runs of steps not taken
    over, each a continuing chunk of the episode (see the module docs).
    """
    if not on_policy or not marker.any():
        return [state]
    parts = []
    steps = len(marker)
    # Boundaries of the runs of steps not taken over: [a, b) with marker[a:b] all false.
    edges = np.flatnonzero(np.diff(np.concatenate(([True], marker, [True])).astype(np.int8)))
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):
        parts.append(part_of(state, a, b, last=b == steps))
    return parts


def part_of(state: dict, a: int, b: int, *, last: bool) -> dict:
    """Steps ``[a, b)`` of a checked chunk as a chunk of their own (the same lookback per buffer)."""
    part = dict(state)
    part[OBSERVATIONS] = _window(state[OBSERVATIONS], a, b + 1)
    part[INFOS] = _window(state[INFOS], a, b + 1, per_step=True)
    part[ACTIONS] = _window(state[ACTIONS], a, b)
    part[REWARDS] = _window(state[REWARDS], a, b)
    extras = state[EXTRA_MODEL_OUTPUTS]
    part[EXTRA_MODEL_OUTPUTS] = {name: _window(buf, a, b) for name, buf in extras.items()} if extras else None
    part[T_STARTED] = state[T_STARTED] + a
    part[T] = state[T_STARTED] + b
    part[IS_TERMINATED] = state[IS_TERMINATED] and last
    part[IS_TRUNCATED] = state[IS_TRUNCATED] and last
    part["custom_data"] = dict(state.get("custom_data") or {})
    return part


def _window(buffer: dict, start: int, stop: int, *, per_step: bool = False) -> dict:
    """Entries ``[start, stop)`` after a buffer's lookback, with as many lookback entries before them.

    ``per_step``: the data is a list with one item per entry (infos); else
    stacked, an array or a nest (dict, list, tuple) of arrays.
    """
    lookback = buffer[BUFFER_LOOKBACK]
    data = buffer[BUFFER_DATA]
    stop += lookback
    return {**buffer, BUFFER_DATA: data[start:stop] if per_step else _slice(data, start, stop)}


def _slice(data: Any, start: int, stop: int) -> Any:
    """``data[start:stop]`` along the step axis of a stacked array or of each array of a nest."""
    if isinstance(data, dict):
        return {key: _slice(value, start, stop) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_slice(value, start, stop) for value in data)
    return data[start:stop]
