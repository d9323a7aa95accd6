"""The wire form of an episode chunk, built by clients and checked by servers.

An ``EPISODES`` or ``EPISODES_AND_GET_STATE`` message carries
``"episodes": [state, ...]``, and each ``state`` is the dict that RLlib's
``SingleAgentEpisode.get_state()`` returns, so that RLlib's own server can
read what our client sends and our server can read what RLlib's own client
sends. This module is the one place that knows that dict: its key names,
:func:`build_episode_state` to make one from stacked arrays, and
:func:`check_episode_state` to vet one that came off the network.

The form
--------

``SingleAgentEpisode.from_state`` indexes every key of :data:`REQUIRED_KEYS`
directly (only ``custom_data`` is read with a default), and
``InfiniteLookbackBuffer.from_state`` indexes every key of
:data:`BUFFER_KEYS`. The smallest state RLlib accepts is therefore::

    {
        "id_": "a1b2...",                 # str, the same for every chunk
        "agent_id": None, "module_id": None, "multi_agent_episode_id": None,
        "observations": BUF,              # T + 1 entries (first obs included)
        "infos": BUF,                     # T + 1 dicts, never finalized
        "actions": BUF, "rewards": BUF,   # T entries each
        "extra_model_outputs": None,      # or {name: BUF} with T entries each
        "is_terminated": False, "is_truncated": False,
        "t_started": 0, "t": T,           # t == t_started + T
        "_observation_space": None, "_action_space": None,
        "_start_time": None, "_last_step_time": None,
    }
    BUF = {"data": ..., "lookback": 0, "finalized": ..., "space": None}

A buffer's ``data`` comes in one of two shapes, told apart by ``finalized``:

* ``finalized=False``: a list with one item per step (what RLlib's dummy
  client sends: numpy arrays, python numbers, or dicts of those);
* ``finalized=True``: the steps already stacked, a numpy array whose first
  axis is the step (or a dict / list of such arrays for nested spaces).
  This is what :func:`build_episode_state`, and so our client, sends: one
  array per column per chunk instead of one tiny array per step.

Lengths exclude the first ``lookback`` entries of each buffer, as in RLlib.

What the check does
-------------------

:func:`check_episode_state` is written for states from an untrusted peer.
It returns a new, normalized state or raises :class:`EpisodeError` naming
the field at fault. It refuses everything RLlib's ``from_state`` /
``validate`` / ``to_numpy`` would trip over (so what it accepts builds a
valid ``SingleAgentEpisode``), and a few things RLlib lets through but that
would poison training or metrics:

* ``t`` must equal ``t_started`` plus the number of steps, since RLlib
  counts env steps as ``t - t_started`` and a peer must not be able to
  claim steps it did not send;
* rewards, ``action_logp`` and ``action_dist_inputs`` must be finite: one
  NaN there turns the loss of the whole batch into NaN, for every client;
* data must be numeric (bool, int, uint, float): no object, string or
  complex arrays;
* per-step items must stack into one array per column (same shape);
* ``_last_step_time`` needs ``_start_time`` and may not precede it.

Both ``is_terminated`` and ``is_truncated`` may be true at once: gymnasium
allows it (a time limit hit on a terminal step) and RLlib treats either as
done.

Normalization: per-step lists are stacked (``finalized=True``), arrays
are put in native byte order (torch refuses others), rewards become
``float32`` (the dtype of RLlib's own rewards space), infos stay a
list of dicts (``None`` becomes ``{}``), empty ``extra_model_outputs``
becomes ``None``, scalars become python ``bool``/``int``/``float``, and keys
this module does not know are dropped.

Spaces are never read from the network: RLlib serializes gym spaces as
dicts with base64/zlib payloads, and decoding those is attack surface for
no gain. Every buffer ``space`` and both ``_observation_space`` and
``_action_space`` must be ``None`` or a dict (so the state also works with
RLlib's own server) and are set to ``None`` in the result. A server checks
the data against its *own* spaces instead, through the ``obs_shape``,
``obs_dtype``, ``action_shape``, ``action_dtype`` and ``num_actions``
arguments, and may assign its spaces to the episode after ``from_state``.
A buffer without a space behaves the same in RLlib except that ``fill``
values are built with ``np.array`` instead of from the space.

Cost is linear in the size of the state, and stacked arrays are checked
with whole-array numpy operations, never a Python loop over steps. Values of
the exact types the wire gives (``dict``, ``int``, ``str``, ndarrays) take
short paths; anything else goes through the general checks, and the name of
a field at fault is only spelled out once it is known to be at fault.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

import numpy as np

from .errors import InvalidMessage

__all__ = [
    "ACTION_DIST_INPUTS",
    "ACTION_LOGP",
    "STATE_OUT",
    "TAKEOVER",
    "ACTIONS",
    "ACTION_SPACE",
    "AGENT_ID",
    "BUFFER_DATA",
    "BUFFER_FINALIZED",
    "BUFFER_KEYS",
    "BUFFER_LOOKBACK",
    "BUFFER_SPACE",
    "CUSTOM_DATA",
    "DEFAULT_MAX_LOOKBACK",
    "DEFAULT_MAX_STEPS",
    "EXTRA_MODEL_OUTPUTS",
    "EpisodeError",
    "ID",
    "INFOS",
    "IS_TERMINATED",
    "IS_TRUNCATED",
    "LAST_STEP_TIME",
    "MAX_EXTRA_OUTPUTS",
    "MAX_ID_LENGTH",
    "MAX_NESTING",
    "MODULE_ID",
    "MULTI_AGENT_EPISODE_ID",
    "OBSERVATIONS",
    "OBSERVATION_SPACE",
    "REQUIRED_KEYS",
    "REWARDS",
    "REWARD_DTYPE",
    "START_TIME",
    "T",
    "T_STARTED",
    "build_episode_state",
    "check_episode_state",
    "episode_len",
]

# Keys of a state, as SingleAgentEpisode.get_state() names them.
ID = "id_"
AGENT_ID = "agent_id"
MODULE_ID = "module_id"
MULTI_AGENT_EPISODE_ID = "multi_agent_episode_id"
OBSERVATIONS = "observations"
ACTIONS = "actions"
REWARDS = "rewards"
INFOS = "infos"
EXTRA_MODEL_OUTPUTS = "extra_model_outputs"
IS_TERMINATED = "is_terminated"
IS_TRUNCATED = "is_truncated"
T_STARTED = "t_started"
T = "t"
OBSERVATION_SPACE = "_observation_space"
ACTION_SPACE = "_action_space"
START_TIME = "_start_time"
LAST_STEP_TIME = "_last_step_time"
CUSTOM_DATA = "custom_data"

#: Keys ``SingleAgentEpisode.from_state`` indexes directly.
REQUIRED_KEYS = frozenset(
    {
        ID,
        AGENT_ID,
        MODULE_ID,
        MULTI_AGENT_EPISODE_ID,
        OBSERVATIONS,
        ACTIONS,
        REWARDS,
        INFOS,
        EXTRA_MODEL_OUTPUTS,
        IS_TERMINATED,
        IS_TRUNCATED,
        T_STARTED,
        T,
        OBSERVATION_SPACE,
        ACTION_SPACE,
        START_TIME,
        LAST_STEP_TIME,
    }
)

# Keys of a buffer, as InfiniteLookbackBuffer.get_state() names them.
BUFFER_DATA = "data"
BUFFER_LOOKBACK = "lookback"
BUFFER_FINALIZED = "finalized"
BUFFER_SPACE = "space"

#: Keys ``InfiniteLookbackBuffer.from_state`` indexes directly.
BUFFER_KEYS = frozenset({BUFFER_DATA, BUFFER_LOOKBACK, BUFFER_FINALIZED, BUFFER_SPACE})

# Extra model outputs RLlib's learners read (ray.rllib.core.columns.Columns).
ACTION_LOGP = "action_logp"
ACTION_DIST_INPUTS = "action_dist_inputs"
#: A recurrent module's state after each step (RLlib's ``Columns.STATE_OUT``):
#: a map of arrays per step. A chunk that continues an episode carries the
#: previous step's in its lookback, which RLlib's learner starts from.
STATE_OUT = "state_out"
#: The ``takeover`` extension's per-step marker (PROTOCOL.md 10.8): bool ``(T,)``,
#: true where a person or a scripted controller acted instead of the policy. A
#: chunk carries it only when one of its steps was taken over; a runner counts
#: and removes it before RLlib sees the episode.
TAKEOVER = "rlinks_takeover"

#: dtype of rewards after checking; RLlib's own rewards space is float32.
REWARD_DTYPE = np.dtype(np.float32)

#: Default bound on env steps in one chunk.
DEFAULT_MAX_STEPS = 1 << 16
#: Default bound on a buffer's lookback entries.
DEFAULT_MAX_LOOKBACK = 64
#: Longest episode, agent or module id accepted.
MAX_ID_LENGTH = 256
#: Most extra model outputs per episode.
MAX_EXTRA_OUTPUTS = 64
#: Deepest nesting of dicts/lists accepted in data, infos and custom_data.
MAX_NESTING = 16

# t and t_started must stay exact in float64 and in int64 arithmetic.
_MAX_T = 1 << 53
_NUMERIC_KINDS = frozenset("biuf")
_FINITE_EXTRA = (ACTION_LOGP, ACTION_DIST_INPUTS)
#: Types of per-step items that need no (slower) check against ``Mapping``.
_NEVER_MAPS = frozenset({np.ndarray, int, float, bool})
_UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}


class EpisodeError(InvalidMessage, ValueError):
    """An episode state is malformed; the message names the field at fault.

    An :class:`~rlinks_rllib.protocol.errors.InvalidMessage` (code
    ``invalid_message``) like every protocol error, and a ``ValueError``
    for callers that build states.
    """


# --------------------------------------------------------------------------
# Building


def build_episode_state(
    id_: str,
    observations: Any,
    actions: Any,
    rewards: Any,
    *,
    infos: Optional[Sequence[Optional[Mapping]]] = None,
    extra_model_outputs: Optional[Mapping[str, Any]] = None,
    extra_lookback: Optional[Mapping[str, Any]] = None,
    terminated: bool = False,
    truncated: bool = False,
    t_started: int = 0,
    start_time: Optional[float] = None,
    last_step_time: Optional[float] = None,
    custom_data: Optional[Mapping] = None,
    agent_id: Optional[str] = None,
    module_id: Optional[str] = None,
) -> dict:
    """Make the state of one episode chunk of ``T`` steps from stacked data.

    Args:
        id_: The episode id, the same for every chunk of one episode.
        observations: ``T + 1`` observations stacked on the first axis, the
            first being the reset observation (or the last observation of
            the previous chunk). A dict (or list) of such arrays for a
            nested observation space.
        actions: ``T`` actions, stacked the same way.
        rewards: ``T`` rewards; stored as :data:`REWARD_DTYPE`.
        infos: ``T + 1`` info dicts (``None`` entries mean ``{}``); all
            empty when omitted.
        extra_model_outputs: name -> ``T`` stacked outputs, such as
            :data:`ACTION_LOGP` and :data:`ACTION_DIST_INPUTS`.
        extra_lookback: name -> entries from before this chunk, stacked the
            same way, that the buffer holds as its lookback (a continuing
            chunk's last :data:`STATE_OUT` of the previous chunk).
        terminated, truncated: Whether the chunk ends its episode.
        t_started: Env steps of this episode before this chunk.
        start_time, last_step_time: Seconds on the client's monotonic clock,
            for RLlib's episode-duration metric.
        custom_data: Passed through to RLlib's ``episode.custom_data``.
        agent_id, module_id: Passed through; ``None`` for single-agent.

    The arrays are put in the state as they are, not copied.

    Returns:
        A state that ``SingleAgentEpisode.from_state`` accepts, with every
        data buffer ``finalized`` and no spaces.

    Raises:
        EpisodeError: The lengths do not fit together, or an argument has
            the wrong type.
    """
    _check_id(id_, ID)
    try:
        rewards = np.asarray(rewards, dtype=REWARD_DTYPE)
    except (ValueError, TypeError) as exc:
        raise EpisodeError(f"{REWARDS}: not numbers ({exc})") from None
    if rewards.ndim != 1:
        raise EpisodeError(f"{REWARDS}: expected shape (T,), got {rewards.shape}")
    steps = rewards.shape[0]
    _expect_len(_stacked_len(observations, OBSERVATIONS), steps + 1, OBSERVATIONS)
    _expect_len(_stacked_len(actions, ACTIONS), steps, ACTIONS)
    extras = None
    if extra_model_outputs:
        extras = {}
        lookbacks = extra_lookback or {}
        unknown = sorted(set(lookbacks) - set(extra_model_outputs))
        if unknown:
            raise EpisodeError(f"{EXTRA_MODEL_OUTPUTS}: lookback for {unknown[0]!r}, which is not an output")
        for name, value in extra_model_outputs.items():
            path = f"{EXTRA_MODEL_OUTPUTS}.{name}"
            _expect_len(_stacked_len(value, path), steps, path)
            if name in lookbacks:
                before = lookbacks[name]
                lookback = _stacked_len(before, f"{path} lookback")
                extras[name] = _buffer(_concat_stacked(before, value), finalized=True, lookback=lookback)
            else:
                extras[name] = _buffer(value, finalized=True)
    if infos is None:
        info_list = [{} for _ in range(steps + 1)]
    else:
        info_list = [{} if info is None else info for info in infos]
        _expect_len(len(info_list), steps + 1, INFOS)
    t_started = _check_int(t_started, T_STARTED, 0, _MAX_T)
    return {
        ID: id_,
        AGENT_ID: agent_id,
        MODULE_ID: module_id,
        MULTI_AGENT_EPISODE_ID: None,
        OBSERVATIONS: _buffer(observations, finalized=True),
        ACTIONS: _buffer(actions, finalized=True),
        REWARDS: _buffer(rewards, finalized=True),
        INFOS: _buffer(info_list, finalized=False),
        EXTRA_MODEL_OUTPUTS: extras,
        IS_TERMINATED: bool(terminated),
        IS_TRUNCATED: bool(truncated),
        T_STARTED: t_started,
        T: t_started + steps,
        OBSERVATION_SPACE: None,
        ACTION_SPACE: None,
        START_TIME: start_time,
        LAST_STEP_TIME: last_step_time,
        CUSTOM_DATA: {} if custom_data is None else dict(custom_data),
    }


def episode_len(state: Mapping) -> int:
    """Return the number of env steps in ``state`` (lookback excluded).

    Counts the rewards actually present rather than trusting ``t``, so it
    is right for a state that has not been checked yet.

    Raises:
        EpisodeError: ``state`` has no readable rewards buffer.
    """
    try:
        buf = state[REWARDS]
        data, lookback = buf[BUFFER_DATA], buf[BUFFER_LOOKBACK]
        finalized = buf[BUFFER_FINALIZED]
    except (KeyError, TypeError, IndexError) as exc:
        raise EpisodeError(f"{REWARDS}: no readable buffer ({exc!r})") from None
    if not finalized and isinstance(data, list):
        size = len(data)
    else:
        size = _stacked_len(data, f"{REWARDS}.{BUFFER_DATA}")
    return max(size - _check_int(lookback, f"{REWARDS}.{BUFFER_LOOKBACK}", 0, _MAX_T), 0)


# --------------------------------------------------------------------------
# Checking


def check_episode_state(
    state: Any,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_lookback: int = DEFAULT_MAX_LOOKBACK,
    allow_empty: bool = False,
    obs_shape: Optional[Sequence[int]] = None,
    obs_dtype: Any = None,
    action_shape: Optional[Sequence[int]] = None,
    action_dtype: Any = None,
    num_actions: Optional[int] = None,
    required_extra: Iterable[str] = (),
    keep_infos: bool = True,
) -> dict:
    """Vet an episode state from a peer and return it normalized.

    See the module docstring for the rules and the normalization.

    Args:
        state: The decoded state, as it came off the wire.
        max_steps: Most env steps the chunk may hold.
        max_lookback: Most lookback entries any buffer may hold.
        allow_empty: Accept a chunk of zero steps (RLlib does; it carries
            nothing to learn from, so a server usually refuses it).
        obs_shape, obs_dtype: The shape of one observation and the dtype
            observations are cast to (``same_kind`` casting only, so floats
            never become ints). Only for non-nested observations.
        action_shape, action_dtype: The same for actions.
        num_actions: For a discrete action space: actions must be integers
            in ``[0, num_actions)``.
        required_extra: Names that must be in ``extra_model_outputs``, such
            as :data:`ACTION_LOGP` for an on-policy learner.
        keep_infos: Keep the peer's info dicts (checked for nesting depth
            only); when False each becomes ``{}``.

    Returns:
        A new state dict; the input is not modified. Arrays in it may be the
        input's own arrays.

    Raises:
        EpisodeError: The state is malformed or breaks a limit.
    """
    if type(state) is not dict and not isinstance(state, Mapping):
        raise EpisodeError(f"episode state: expected a map, got {_type_name(state)}")
    if not state.keys() >= REQUIRED_KEYS:
        raise EpisodeError(f"episode state: missing keys {sorted(REQUIRED_KEYS.difference(state.keys()))}")

    id_ = state[ID]
    if type(id_) is not str or not 0 < len(id_) <= MAX_ID_LENGTH:
        id_ = _check_id(id_, ID)
    agent_id = _check_optional_id(state[AGENT_ID], AGENT_ID)
    module_id = _check_optional_id(state[MODULE_ID], MODULE_ID)
    ma_id = _check_optional_id(state[MULTI_AGENT_EPISODE_ID], MULTI_AGENT_EPISODE_ID)
    terminated = state[IS_TERMINATED]
    if terminated is not True and terminated is not False:
        terminated = _check_bool(terminated, IS_TERMINATED)
    truncated = state[IS_TRUNCATED]
    if truncated is not True and truncated is not False:
        truncated = _check_bool(truncated, IS_TRUNCATED)
    t_started = state[T_STARTED]
    if type(t_started) is not int or not 0 <= t_started <= _MAX_T:
        t_started = _check_int(t_started, T_STARTED, 0, _MAX_T)
    t = state[T]
    if type(t) is not int or not 0 <= t <= _MAX_T:
        t = _check_int(t, T, 0, _MAX_T)
    for key in (OBSERVATION_SPACE, ACTION_SPACE):
        if state[key] is not None:
            _check_space(state[key], key)
    start_time, last_step_time = _check_times(state[START_TIME], state[LAST_STEP_TIME])
    custom_data = state.get(CUSTOM_DATA, {})
    if type(custom_data) is not dict and not isinstance(custom_data, Mapping):
        raise EpisodeError(f"{CUSTOM_DATA}: expected a map, got {_type_name(custom_data)}")
    if custom_data:  # an empty map has no depth to check
        _check_depth(custom_data, CUSTOM_DATA)

    # Lengths first, from cheap headers, so no limit is broken by the work
    # of stacking.
    obs = _Buffer(state[OBSERVATIONS], OBSERVATIONS, max_lookback)
    actions = _Buffer(state[ACTIONS], ACTIONS, max_lookback)
    rewards = _Buffer(state[REWARDS], REWARDS, max_lookback)
    infos = _Buffer(state[INFOS], INFOS, max_lookback)
    extras = _extra_buffers(state[EXTRA_MODEL_OUTPUTS], max_lookback)

    steps = rewards.count
    if steps > max_steps:
        raise EpisodeError(f"{REWARDS}: {steps} steps, more than the limit of {max_steps}")
    if obs.count == 0:
        raise EpisodeError(f"{OBSERVATIONS}: empty; the first observation is required")
    if steps == 0 and not allow_empty:
        raise EpisodeError(f"{REWARDS}: empty; a chunk must hold at least one step")
    _expect_len(actions.count, steps, ACTIONS, REWARDS, steps)
    _expect_len(obs.count, steps + 1, OBSERVATIONS, REWARDS, steps)
    _expect_len(infos.count, steps + 1, INFOS, REWARDS, steps)
    for buf in extras.values():
        _expect_len(buf.count, steps, buf.path, REWARDS, steps)
    if t != t_started + steps:
        raise EpisodeError(
            f"{T}: {t} != {T_STARTED} ({t_started}) + steps in {REWARDS} ({steps})"
        )
    for name in required_extra:
        if name not in extras:
            missing_extra = set(required_extra).difference(extras)
            raise EpisodeError(f"{EXTRA_MODEL_OUTPUTS}: missing {sorted(missing_extra)}")

    obs_data = _cast_leaf(obs.stacked(), OBSERVATIONS, obs_shape, obs_dtype)
    action_data = _cast_leaf(actions.stacked(), ACTIONS, action_shape, action_dtype)
    if num_actions is not None:
        _check_discrete(action_data, num_actions)
    reward_data = _check_rewards(rewards.stacked())
    extra_states = None
    if extras:
        extra_states = {}
        for name, buf in extras.items():
            data = buf.stacked()
            if name in _FINITE_EXTRA:
                _check_finite_float(data, buf.path)
            if name == ACTION_LOGP and not _is_column(data):
                raise EpisodeError(f"{buf.path}: expected one number per step")
            extra_states[name] = buf.state(data)
    info_data = infos.infos(keep_infos)

    return {
        ID: id_,
        AGENT_ID: agent_id,
        MODULE_ID: module_id,
        MULTI_AGENT_EPISODE_ID: ma_id,
        OBSERVATIONS: obs.state(obs_data),
        ACTIONS: actions.state(action_data),
        REWARDS: rewards.state(reward_data),
        INFOS: infos.state(info_data),
        EXTRA_MODEL_OUTPUTS: extra_states,
        IS_TERMINATED: terminated,
        IS_TRUNCATED: truncated,
        T_STARTED: t_started,
        T: t,
        OBSERVATION_SPACE: None,
        ACTION_SPACE: None,
        START_TIME: start_time,
        LAST_STEP_TIME: last_step_time,
        CUSTOM_DATA: dict(custom_data),
    }


class _Buffer:
    """One buffer state from the wire: header checked, data not yet stacked."""

    __slots__ = ("path", "data", "lookback", "finalized", "size", "count")

    def __init__(self, buf: Any, path: str, max_lookback: int) -> None:
        self.path = path
        if type(buf) is not dict and not isinstance(buf, Mapping):
            raise EpisodeError(f"{path}: expected a buffer map, got {_type_name(buf)}")
        if not buf.keys() >= BUFFER_KEYS:
            raise EpisodeError(f"{path}: missing keys {sorted(BUFFER_KEYS.difference(buf.keys()))}")
        lookback = buf[BUFFER_LOOKBACK]
        if type(lookback) is not int or not 0 <= lookback <= max_lookback:
            lookback = _check_int(lookback, f"{path}.{BUFFER_LOOKBACK}", 0, max_lookback)
        self.lookback = lookback
        finalized = buf[BUFFER_FINALIZED]
        if finalized is not True and finalized is not False:
            finalized = _check_bool(finalized, f"{path}.{BUFFER_FINALIZED}")
        self.finalized = finalized
        if buf[BUFFER_SPACE] is not None:
            _check_space(buf[BUFFER_SPACE], f"{path}.{BUFFER_SPACE}")
        data = self.data = buf[BUFFER_DATA]
        if finalized:
            if path == INFOS:
                raise EpisodeError(f"{path}.{BUFFER_FINALIZED}: infos are never finalized")
            if type(data) is np.ndarray and data.ndim:
                self.size = data.shape[0]
            else:
                self.size = _stacked_len(data, f"{path}.{BUFFER_DATA}")
        elif isinstance(data, list):
            self.size = len(data)
        else:
            raise EpisodeError(
                f"{path}.{BUFFER_DATA}: expected a list of steps when not finalized, "
                f"got {_type_name(data)}"
            )
        if lookback > self.size:
            raise EpisodeError(
                f"{path}.{BUFFER_LOOKBACK}: {lookback} exceeds the "
                f"{self.size} entries of data"
            )
        #: Entries after the lookback.
        self.count = self.size - lookback

    def __len__(self) -> int:
        return self.count

    def stacked(self) -> Any:
        """The data as a stacked nest of numeric arrays; None for an empty list."""
        data = self.data
        if self.finalized:
            if type(data) is np.ndarray:
                dtype = data.dtype
                if dtype.kind in _NUMERIC_KINDS and dtype.isnative:
                    return data
            return _check_stacked(data, f"{self.path}.{BUFFER_DATA}")
        if not data:
            return None
        return _stack_steps(data, f"{self.path}.{BUFFER_DATA}", 0)

    def infos(self, keep: bool) -> list:
        if not keep:
            return [{} for _ in self.data]
        if set(map(type, self.data)) <= {dict} and self.data.count({}) == len(self.data):
            return list(self.data)  # all empty dicts (the usual case), checked in C
        out = []
        for i, info in enumerate(self.data):
            if info is None:
                info = {}
            elif type(info) is not dict and not isinstance(info, Mapping):
                raise EpisodeError(
                    f"{self.path}.{BUFFER_DATA}[{i}]: expected a map or nil, got {_type_name(info)}"
                )
            elif info:
                _check_depth(info, f"{self.path}.{BUFFER_DATA}[{i}]")
            out.append(info)
        return out

    def state(self, data: Any) -> dict:
        """The normalized buffer state holding ``data`` (from :meth:`stacked`)."""
        if data is None:
            # An empty list stays one: RLlib's to_numpy skips empty buffers.
            data, finalized = [], False
        else:
            finalized = self.path != INFOS  # RLlib never finalizes infos
        return {
            BUFFER_DATA: data,
            BUFFER_LOOKBACK: self.lookback,
            BUFFER_FINALIZED: finalized,
            BUFFER_SPACE: None,
        }


def _extra_buffers(extras: Any, max_lookback: int) -> dict:
    if extras is None:
        return {}
    if type(extras) is not dict and not isinstance(extras, Mapping):
        raise EpisodeError(
            f"{EXTRA_MODEL_OUTPUTS}: expected a map or nil, got {_type_name(extras)}"
        )
    if len(extras) > MAX_EXTRA_OUTPUTS:
        raise EpisodeError(
            f"{EXTRA_MODEL_OUTPUTS}: {len(extras)} entries, more than the limit "
            f"of {MAX_EXTRA_OUTPUTS}"
        )
    out = {}
    for name, buf in extras.items():
        if type(name) is not str or not 0 < len(name) <= MAX_ID_LENGTH:
            _check_id(name, f"{EXTRA_MODEL_OUTPUTS} key")
        out[name] = _Buffer(buf, f"{EXTRA_MODEL_OUTPUTS}.{name}", max_lookback)
    return out


def _buffer(data: Any, *, finalized: bool, lookback: int = 0) -> dict:
    return {
        BUFFER_DATA: data,
        BUFFER_LOOKBACK: lookback,
        BUFFER_FINALIZED: finalized,
        BUFFER_SPACE: None,
    }


# --------------------------------------------------------------------------
# Data: stacked nests and per-step lists


def _concat_stacked(before: Any, after: Any) -> Any:
    """Two stacked nests of the same shape joined along the step axis."""
    if isinstance(after, Mapping):
        return {key: _concat_stacked(before[key], value) for key, value in after.items()}
    if isinstance(after, (list, tuple)):
        return [_concat_stacked(b, a) for b, a in zip(before, after)]
    return np.concatenate([before, after])


def _stacked_len(data: Any, path: str, depth: int = 0) -> int:
    """Length of the first axis shared by every leaf array of a stacked nest."""
    if depth > MAX_NESTING:
        raise EpisodeError(f"{path}: nested deeper than {MAX_NESTING}")
    if isinstance(data, np.ndarray):
        if data.ndim == 0:
            raise EpisodeError(f"{path}: expected an array with a step axis, got a 0-d array")
        return data.shape[0]
    if isinstance(data, Mapping):
        items = []
        for key, value in data.items():
            if not isinstance(key, str):
                raise EpisodeError(f"{path}: map keys must be strings, got {_type_name(key)}")
            items.append((f"{path}.{key}", value))
    elif isinstance(data, (list, tuple)):
        items = [(f"{path}[{i}]", value) for i, value in enumerate(data)]
    else:
        raise EpisodeError(
            f"{path}: expected an array or a nest of arrays, got {_type_name(data)}"
        )
    if not items:
        raise EpisodeError(f"{path}: an empty nest holds no steps")
    size = None
    for sub, value in items:
        n = _stacked_len(value, sub, depth + 1)
        if size is None:
            size = n
        elif n != size:
            raise EpisodeError(f"{sub}: {n} steps, but its siblings have {size}")
    return size


def _check_stacked(data: Any, path: str) -> Any:
    """Check every leaf of a stacked nest whose lengths already agree."""
    if isinstance(data, np.ndarray):
        return _numeric(data, path)
    if isinstance(data, Mapping):
        return {k: _check_stacked(v, f"{path}.{k}") for k, v in data.items()}
    return [_check_stacked(v, f"{path}[{i}]") for i, v in enumerate(data)]


def _stack_steps(items: list, path: str, depth: int) -> Any:
    """Stack per-step items (arrays, numbers, or dicts of those) leaf by leaf.

    Lists inside an item are array data, as RLlib's ``batch`` reads them.
    """
    if depth > MAX_NESTING:
        raise EpisodeError(f"{path}: nested deeper than {MAX_NESTING}")
    first = items[0]
    if type(first) is dict or (type(first) not in _NEVER_MAPS and isinstance(first, Mapping)):
        keys = first.keys()
        if not keys:
            raise EpisodeError(f"{path}[0]: an empty map holds no data")
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or item.keys() != keys:
                raise EpisodeError(
                    f"{path}[{i}]: every step must be a map with the keys of step 0"
                )
        for key in keys:
            if not isinstance(key, str):
                raise EpisodeError(f"{path}: map keys must be strings, got {_type_name(key)}")
        return {
            key: _stack_steps([item[key] for item in items], f"{path}.{key}", depth + 1)
            for key in keys
        }
    try:
        stacked = np.asarray(items)
    except (ValueError, TypeError, OverflowError) as exc:
        raise EpisodeError(f"{path}: steps do not stack into one array ({exc})") from None
    return _numeric(stacked, path)


def _numeric(array: np.ndarray, path: str) -> np.ndarray:
    """Refuse a non-numeric array; return it in native byte order (torch needs that)."""
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise EpisodeError(
            f"{path}: dtype {array.dtype} is not numeric (bool, int, uint or float)"
        )
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def _is_column(data: Any) -> bool:
    return data is None or (isinstance(data, np.ndarray) and data.ndim == 1)


def _cast_leaf(data: Any, path: str, shape: Optional[Sequence[int]], dtype: Any) -> Any:
    if (shape is None and dtype is None) or data is None:
        return data
    if not isinstance(data, np.ndarray):
        raise EpisodeError(f"{path}: expected one array, got a nest")
    if shape is not None and data.shape[1:] != tuple(shape):
        raise EpisodeError(
            f"{path}: each step has shape {data.shape[1:]}, expected {tuple(shape)}"
        )
    if dtype is not None and data.dtype != dtype:
        if not np.can_cast(data.dtype, dtype, casting="same_kind"):
            raise EpisodeError(f"{path}: dtype {data.dtype} cannot become {np.dtype(dtype)}")
        data = data.astype(dtype)
    return data


def _check_discrete(actions: Any, num_actions: int) -> None:
    if actions is None:
        return
    if not isinstance(actions, np.ndarray) or actions.ndim != 1:
        raise EpisodeError(f"{ACTIONS}: expected one integer per step")
    if actions.dtype.kind not in "iu":
        raise EpisodeError(f"{ACTIONS}: dtype {actions.dtype} is not an integer type")
    if actions.size == 0:
        return
    bits = 8 * actions.dtype.itemsize
    if actions.dtype.kind == "u":
        bad = actions.max() >= num_actions
    elif num_actions <= 1 << (bits - 1):
        # Seen as unsigned, a negative action is at least 2**(bits-1): one
        # reduction finds both kinds of out-of-range action.
        bad = actions.view(_UNSIGNED[actions.dtype.itemsize]).max() >= num_actions
    else:
        bad = actions.min() < 0 or actions.max() >= num_actions
    if bad:
        raise EpisodeError(f"{ACTIONS}: values must lie in [0, {num_actions})")


def _check_rewards(data: Any) -> Any:
    if data is None:
        return data
    if not isinstance(data, np.ndarray) or data.ndim != 1:
        raise EpisodeError(f"{REWARDS}: expected one number per step")
    if data.dtype != REWARD_DTYPE:
        with np.errstate(over="ignore", invalid="ignore"):
            data = data.astype(REWARD_DTYPE)
    if not np.isfinite(data).all():
        raise EpisodeError(f"{REWARDS}: NaN or infinite reward (after cast to float32)")
    return data


def _check_finite_float(data: Any, path: str) -> None:
    if data is None:
        return
    if not isinstance(data, np.ndarray):
        raise EpisodeError(f"{path}: expected one array, got a nest")
    if data.dtype.kind != "f":
        raise EpisodeError(f"{path}: dtype {data.dtype} is not a float type")
    if not np.isfinite(data).all():
        raise EpisodeError(f"{path}: NaN or infinite value")


# --------------------------------------------------------------------------
# Scalars


def _check_id(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise EpisodeError(f"{path}: expected a string, got {_type_name(value)}")
    if not 0 < len(value) <= MAX_ID_LENGTH:
        raise EpisodeError(f"{path}: length {len(value)} not in [1, {MAX_ID_LENGTH}]")
    return value


def _check_optional_id(value: Any, path: str) -> Optional[str]:
    return None if value is None else _check_id(value, path)


def _check_bool(value: Any, path: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise EpisodeError(f"{path}: expected a bool, got {_type_name(value)}")


def _check_int(value: Any, path: str, lo: int, hi: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise EpisodeError(f"{path}: expected an integer, got {_type_name(value)}")
    value = int(value)
    if not lo <= value <= hi:
        raise EpisodeError(f"{path}: {value} not in [{lo}, {hi}]")
    return value


def _check_time(value: Any, path: str) -> Optional[float]:
    if value is None:
        return None
    if type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise EpisodeError(f"{path}: expected a number or nil, got {_type_name(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise EpisodeError(f"{path}: not finite")
    return value


def _check_times(start: Any, last: Any) -> tuple:
    start = _check_time(start, START_TIME)
    last = _check_time(last, LAST_STEP_TIME)
    if last is not None:
        if start is None:
            raise EpisodeError(f"{LAST_STEP_TIME}: set while {START_TIME} is nil")
        if last < start:
            raise EpisodeError(f"{LAST_STEP_TIME}: {last} precedes {START_TIME} {start}")
    return start, last


def _check_space(value: Any, path: str) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise EpisodeError(f"{path}: expected a space map or nil, got {_type_name(value)}")


def _check_depth(value: Any, path: str) -> None:
    """Bound the nesting of free-form data without recursing."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if depth >= MAX_NESTING:
            raise EpisodeError(f"{path}: nested deeper than {MAX_NESTING}")
        stack.extend((child, depth + 1) for child in children)


def _expect_len(
    got: int, want: int, path: str, ref: Optional[str] = None, ref_len: int = 0
) -> None:
    if got != want:
        because = f" ({ref} has {ref_len} steps)" if ref else ""
        raise EpisodeError(f"{path}: {got} entries, expected {want}{because}")


def _type_name(value: Any) -> str:
    return type(value).__name__
