"""Collect a simulator's steps into episode chunks ready to send.

A simulator feeds :class:`EpisodeBuilder` what a gymnasium loop sees::

    builder = EpisodeBuilder(max_chunk_steps=1000)
    obs, info = env.reset()
    builder.reset(obs, info)
    while True:
        action, extra = policy(obs)            # extra: {"action_logp": ..., ...}
        obs, reward, terminated, truncated, info = env.step(action)
        builder.step(action, reward, obs, terminated, truncated, extra, info)
        if terminated or truncated:
            obs, info = env.reset()
            builder.reset(obs, info)
        if builder.num_steps >= 200:
            send(builder.take_chunks())        # list of episode states

Each column (observations, actions, rewards, each extra model output) is a
preallocated numpy array that doubles when full, so a chunk leaves as one
array per column rather than one tiny array per step. The shape and dtype of
a column are fixed by its first entry in an episode; later entries must
match the shape and cast to the dtype with ``same_kind`` casting. Dict and
tuple observations and actions (``Dict`` and ``Tuple`` spaces; a ``list`` is
an array) get one column per leaf, sent as a dict or list of stacked arrays.

An episode that is still running when :meth:`EpisodeBuilder.take_chunks` is
called is cut the way RLlib's ``SingleAgentEpisode.cut()`` does it: the
chunk sent ends at the latest observation, and the next chunk keeps the same
``id_``, starts at ``t_started`` = steps so far, and begins with that same
observation (and its info).

A simulator's client uses it (``rlinks_rllib.client`` exports it), and so
does a runner that serves actions and records its clients' episodes itself
(``served_actions``): one builder, so both send RLlib the same episodes. It
needs numpy only; never Ray.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, List, Optional

import numpy as np

from .episodes import REWARD_DTYPE, STATE_OUT, TAKEOVER, build_episode_state

__all__ = ["EpisodeBuilder", "VectorEpisodeBuilder"]

_INITIAL_CAPACITY = 64
_NUMERIC_KINDS = frozenset("biuf")


class _Column:
    """A growable array of same-shaped entries."""

    __slots__ = ("_what", "_array", "_size")

    def __init__(self, first: np.ndarray, what: str, dtype: Any = None) -> None:
        dtype = first.dtype if dtype is None else np.dtype(dtype)
        if dtype.kind not in _NUMERIC_KINDS:
            raise ValueError(f"{what}: dtype {dtype} is not numeric (bool, int, uint or float)")
        self._what = what
        self._array = np.empty((_INITIAL_CAPACITY, *first.shape), dtype)
        self._size = 0

    def check(self, value: np.ndarray) -> None:
        """Raise ValueError unless ``value`` fits this column."""
        shape, dtype = self._array.shape[1:], self._array.dtype
        if value.shape != shape:
            raise ValueError(
                f"{self._what}: shape {value.shape} differs from this episode's {shape}"
            )
        if value.dtype != dtype and not np.can_cast(value.dtype, dtype, casting="same_kind"):
            raise ValueError(f"{self._what}: dtype {value.dtype} cannot become {dtype}")

    def append(self, value: np.ndarray) -> None:
        """Append a ``value`` that passed :meth:`check`."""
        array = self._array
        if self._size == array.shape[0]:
            grown = np.empty((2 * array.shape[0], *array.shape[1:]), array.dtype)
            grown[: self._size] = array
            self._array = array = grown
        array[self._size] = value
        self._size += 1

    def take(self) -> np.ndarray:
        return self._array[: self._size].copy()

    def take_last(self) -> np.ndarray:
        """The last entry, with a step axis of 1."""
        return self._array[self._size - 1 : self._size].copy()

    def keep_last(self) -> None:
        self._array[0] = self._array[self._size - 1]
        self._size = 1

    def clear(self) -> None:
        self._size = 0


class _Nest:
    """Columns for a value that may be nested: a dict (a ``Dict`` space) or a tuple (a ``Tuple`` space).

    A Python ``tuple`` is a ``Tuple`` space's value and gets one column per
    entry; a ``list`` is an array, as numpy reads it.
    """

    __slots__ = ("_what", "_column", "_children", "_keys")

    def __init__(self, first: Any, what: str) -> None:
        self._what = what
        self._column = None
        self._children = None
        self._keys = None
        if isinstance(first, Mapping):
            if not first or not all(isinstance(k, str) for k in first):
                raise ValueError(f"{what}: a dict needs string keys, and at least one")
            self._keys = list(first)
            self._children = [_Nest(first[k], f"{what}[{k!r}]") for k in self._keys]
        elif isinstance(first, tuple):
            if not first:
                raise ValueError(f"{what}: a tuple needs at least one entry")
            self._children = [_Nest(v, f"{what}[{i}]") for i, v in enumerate(first)]
        else:
            self._column = _Column(_as_array(first, what), what)

    def prepare(self, value: Any) -> list:
        """Check ``value``; return its (column, array) pairs for :func:`_commit`."""
        if self._column is not None:
            array = _as_array(value, self._what)
            self._column.check(array)
            return [(self._column, array)]
        if self._keys is not None:
            if not isinstance(value, Mapping) or value.keys() != set(self._keys):
                raise ValueError(f"{self._what}: expected a dict with keys {sorted(self._keys)}")
            values = [value[k] for k in self._keys]
        else:
            if not isinstance(value, tuple) or len(value) != len(self._children):
                raise ValueError(f"{self._what}: expected a tuple of {len(self._children)} entries")
            values = value
        pairs = []
        for child, item in zip(self._children, values):
            pairs.extend(child.prepare(item))
        return pairs

    def take(self) -> Any:
        """The stacked form: an array, or a dict / list of stacked forms."""
        if self._column is not None:
            return self._column.take()
        taken = [child.take() for child in self._children]
        return dict(zip(self._keys, taken)) if self._keys is not None else taken

    def last(self) -> Any:
        """The last entry alone, stacked (a step axis of 1)."""
        if self._column is not None:
            return self._column.take_last()
        taken = [child.last() for child in self._children]
        return dict(zip(self._keys, taken)) if self._keys is not None else taken

    def keep_last(self) -> None:
        for column in self._columns():
            column.keep_last()

    def clear(self) -> None:
        for column in self._columns():
            column.clear()

    def _columns(self):
        if self._column is not None:
            yield self._column
        else:
            for child in self._children:
                yield from child._columns()


def _commit(pairs: list) -> None:
    for column, array in pairs:
        column.append(array)


def _as_array(value: Any, what: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f"{what}: {_type_name(value)} of dtype {array.dtype} is not numeric")
    return array


class EpisodeBuilder:
    """Turns one environment's reset/step calls into episode chunk states.

    Args:
        max_chunk_steps: If set, an episode is cut automatically whenever
            its current chunk reaches this many steps, so no chunk breaks a
            server's per-chunk limit.
        clock: Seconds on a monotonic clock, for RLlib's duration metric.

    Raises (from the methods):
        RuntimeError: A call out of order: :meth:`step` before
            :meth:`reset` or after the episode ended.
        ValueError: A value that does not fit this episode: another shape,
            a dtype that does not cast, other extra-output names, a
            non-finite reward, an info that is not a dict.
    """

    def __init__(
        self,
        *,
        max_chunk_steps: Optional[int] = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if max_chunk_steps is not None and max_chunk_steps < 1:
            raise ValueError(f"max_chunk_steps must be at least 1, got {max_chunk_steps}")
        self._max_chunk_steps = max_chunk_steps
        self._clock = clock
        self._finished: List[dict] = []
        self._finished_steps = 0
        self._running = False
        self._id: Optional[str] = None
        self._steps = 0
        self._t_started = 0
        self._start_time: Optional[float] = None
        self._last_step_time: Optional[float] = None
        self._obs: Optional[_Nest] = None
        self._actions: Optional[_Nest] = None
        self._rewards: Optional[_Column] = None
        self._extra: Optional[dict] = None
        #: A continuing chunk's recurrent state from the step before it (``state_out``'s lookback).
        self._extra_lookback: dict = {}
        self._infos: list = []
        #: Steps of the running chunk taken over (``takeover``), by index; usually none.
        self._takeovers: list = []
        #: The running episode's columns for :meth:`step_checked` (``None``: not known yet, or nested).
        self._flat_columns: Optional[tuple] = None

    @property
    def num_steps(self) -> int:
        """Env steps collected and not yet taken (finished and running chunks)."""
        return self._finished_steps + self._steps

    @property
    def episode_id(self) -> Optional[str]:
        """Id of the running episode, or ``None`` between episodes."""
        return self._id if self._running else None

    def reset(
        self, obs: Any, info: Optional[Mapping] = None, *, episode_id: Optional[str] = None
    ) -> str:
        """Start a new episode at observation ``obs``; return its id.

        A running episode that took steps is ended as truncated (its data
        still trains, bootstrapping from its last observation); one that took
        none is dropped.
        """
        first = _Nest(obs, "obs")
        pairs = first.prepare(obs)
        info = _check_info(info)
        if self._running and self._steps:
            self._finish(terminated=False, truncated=True)
        _commit(pairs)
        self._obs = first
        self._flat_columns = None
        self._actions = None
        self._rewards = None
        self._extra = None
        self._extra_lookback = {}
        self._infos = [info]
        self._takeovers = []
        self._id = uuid.uuid4().hex if episode_id is None else episode_id
        self._steps = 0
        self._t_started = 0
        self._start_time = self._clock()
        self._last_step_time = None
        self._running = True
        return self._id

    def step(
        self,
        action: Any,
        reward: Any,
        obs: Any,
        terminated: bool = False,
        truncated: bool = False,
        extra: Optional[Mapping[str, Any]] = None,
        info: Optional[Mapping] = None,
        *,
        takeover: bool = False,
    ) -> None:
        """Record one env step: ``action`` taken, then ``reward`` and ``obs`` seen.

        ``extra`` holds the model outputs computed with ``action`` (such as
        ``action_logp`` and ``action_dist_inputs``); the same names every
        step of an episode. ``takeover``: a person or a scripted controller
        chose ``action`` instead of the policy; the chunk then carries the
        :data:`~.episodes.TAKEOVER` marker (the ``takeover`` extension).
        """
        if not self._running:
            raise RuntimeError("step() needs a running episode: call reset() first")
        reward = np.asarray(reward)
        numeric = reward.shape == () and reward.dtype.kind in _NUMERIC_KINDS
        if not (numeric and np.isfinite(reward)):
            raise ValueError(f"reward must be one finite number, got {reward!r}")
        extra = {} if extra is None else extra
        if not isinstance(extra, Mapping):
            raise ValueError(f"extra must be a dict or None, got {_type_name(extra)}")
        info = _check_info(info)
        actions, rewards, extras = self._actions, self._rewards, self._extra
        if actions is None:
            # The first step of an episode fixes the columns' shapes and dtypes.
            actions = _Nest(action, "action")
            rewards = _Column(reward, "reward", REWARD_DTYPE)
            extras = {k: _Nest(v, f"extra.{k}") for k, v in extra.items()}
        if extra.keys() != extras.keys():
            raise ValueError(
                f"extra: names {sorted(extra)} differ from this episode's {sorted(extras)}"
            )
        rewards.check(reward)
        pairs = actions.prepare(action) + [(rewards, reward)] + self._obs.prepare(obs)
        for key, nest in extras.items():
            pairs.extend(nest.prepare(extra[key]))
        _commit(pairs)
        self._actions, self._rewards, self._extra = actions, rewards, extras
        self._infos.append(info)
        if takeover:
            self._takeovers.append(self._steps)
        self._stepped(terminated, truncated)

    def step_checked(
        self,
        action: np.ndarray,
        reward: float,
        obs: np.ndarray,
        terminated: bool,
        truncated: bool,
        extra: Mapping[str, np.ndarray],
        takeover: bool = False,
    ) -> None:
        """:meth:`step` for a caller that checked every value already: the runner's served recorder.

        The observation comes from a batch checked against the runner's space
        and the action and ``extra`` from its own forward pass, so their
        shapes and dtypes are the episode's; ``reward`` is a finite float.
        Only the first step of an episode (which fixes the columns) and
        nested values take :meth:`step`'s checks; the rest go straight into
        the columns.
        """
        columns = self._flat_columns
        if columns is None or not self._running or self._actions is None:
            self.step(action, reward, obs, terminated, truncated, extra, takeover=takeover)
            self._flat_columns = self._flat()
            return
        action_column, reward_column, obs_column, extra_columns = columns
        action_column.append(action)
        reward_column.append(reward)
        obs_column.append(obs)
        for name, column in extra_columns:
            column.append(extra[name])
        self._infos.append({})
        if takeover:
            self._takeovers.append(self._steps)
        self._stepped(terminated, truncated)

    def _stepped(self, terminated: bool, truncated: bool) -> None:
        """Count a step just recorded; end the episode, or cut it at ``max_chunk_steps``."""
        self._steps += 1
        self._last_step_time = self._clock()
        if terminated or truncated:
            self._finish(terminated=bool(terminated), truncated=bool(truncated))
        elif self._max_chunk_steps is not None and self._steps >= self._max_chunk_steps:
            self._cut()

    def _flat(self) -> Optional[tuple]:
        """The running episode's columns when none is nested (what :meth:`step_checked` appends to)."""
        if not self._running or self._actions is None:
            return None
        nests = [self._actions, self._obs, *self._extra.values()]
        if any(nest._column is None for nest in nests):
            return None
        return (self._actions._column, self._rewards, self._obs._column,
                [(name, nest._column) for name, nest in self._extra.items()])

    def truncate(self) -> None:
        """End the running episode at its last step, as truncated (its env went away).

        Its data still trains, bootstrapping from its last observation; an
        episode that took no steps since it started (or since its last cut)
        is dropped. No-op between episodes.
        """
        if self._running and self._steps:
            self._finish(terminated=False, truncated=True)
        self._running = False

    def take_chunks(self) -> List[dict]:
        """Return the states of all chunks collected since the last call.

        Finished episodes come first, in the order they ended; the running
        episode, if it took steps since its last cut, is cut and comes last.
        """
        if self._running and self._steps:
            self._cut()
        chunks, self._finished = self._finished, []
        self._finished_steps = 0
        return chunks

    def _emit(self, terminated: bool, truncated: bool) -> None:
        extras = {k: n.take() for k, n in self._extra.items()}
        if self._takeovers:
            marker = np.zeros(self._steps, np.bool_)
            marker[self._takeovers] = True
            extras[TAKEOVER] = marker
            self._takeovers = []
        state = build_episode_state(
            self._id,
            self._obs.take(),
            self._actions.take(),
            self._rewards.take(),
            infos=self._infos,
            extra_model_outputs=extras or None,
            extra_lookback=self._extra_lookback or None,
            terminated=terminated,
            truncated=truncated,
            t_started=self._t_started,
            start_time=self._start_time,
            last_step_time=self._last_step_time,
        )
        self._finished.append(state)
        self._finished_steps += self._steps

    def _finish(self, terminated: bool, truncated: bool) -> None:
        self._emit(terminated, truncated)
        self._flat_columns = None
        self._extra_lookback = {}
        self._running = False
        self._steps = 0
        self._infos = []

    def _cut(self) -> None:
        self._emit(terminated=False, truncated=False)
        self._obs.keep_last()
        self._actions.clear()
        self._rewards.clear()
        # RLlib's learner starts a continuing chunk's recurrent state from the
        # state_out of the step before it, which the chunk carries as lookback.
        self._extra_lookback = {STATE_OUT: self._extra[STATE_OUT].last()} if STATE_OUT in self._extra else {}
        for nest in self._extra.values():
            nest.clear()
        self._infos = [self._infos[-1]]
        self._t_started += self._steps
        self._steps = 0
        # The next chunk's clock starts where this one stopped, so chunk
        # durations add up to the episode's.
        self._start_time = self._last_step_time


class VectorEpisodeBuilder:
    """``num_envs`` :class:`EpisodeBuilder` s for environments stepped together.

    Arguments of :meth:`reset` and :meth:`step` are batches whose first axis
    is the env index (``extra`` maps names to such batches; ``infos`` is a
    sequence of dicts or ``None``). An env that ends in :meth:`step` must be
    reset (``reset(obs, mask=done)``) before it steps again; with
    gymnasium's same-step autoreset, pass ``info["final_obs"]`` rows to
    :meth:`step` and the returned reset observations to :meth:`reset`.
    """

    def __init__(self, num_envs: int, **builder_kwargs: Any) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.builders = tuple(EpisodeBuilder(**builder_kwargs) for _ in range(num_envs))

    @property
    def num_steps(self) -> int:
        """Env steps collected and not yet taken, over all envs."""
        return sum(b.num_steps for b in self.builders)

    def reset(
        self,
        obs: Any,
        infos: Optional[Sequence[Optional[Mapping]]] = None,
        *,
        mask: Optional[Sequence[bool]] = None,
    ) -> None:
        """Reset every env, or only those where ``mask`` is true."""
        for i, builder in enumerate(self.builders):
            if mask is None or mask[i]:
                builder.reset(_row(obs, i), None if infos is None else infos[i])

    def step(
        self,
        actions: Any,
        rewards: Any,
        obs: Any,
        terminated: Sequence[bool],
        truncated: Sequence[bool],
        extra: Optional[Mapping[str, Any]] = None,
        infos: Optional[Sequence[Optional[Mapping]]] = None,
    ) -> None:
        """Record one step of every env."""
        for i, builder in enumerate(self.builders):
            builder.step(
                _row(actions, i),
                rewards[i],
                _row(obs, i),
                terminated[i],
                truncated[i],
                None if extra is None else {k: _row(v, i) for k, v in extra.items()},
                None if infos is None else infos[i],
            )

    def take_chunks(self) -> List[dict]:
        """Chunks of every env, env by env (see :meth:`EpisodeBuilder.take_chunks`)."""
        return [chunk for builder in self.builders for chunk in builder.take_chunks()]


def _row(batch: Any, i: int) -> Any:
    if isinstance(batch, Mapping):
        return {k: _row(v, i) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_row(v, i) for v in batch)
    return batch[i]


def _check_info(info: Optional[Mapping]) -> Mapping:
    if info is None:
        return {}
    if not isinstance(info, Mapping):
        raise ValueError(f"info must be a dict or None, got {_type_name(info)}")
    return info


def _type_name(value: Any) -> str:
    return type(value).__name__
