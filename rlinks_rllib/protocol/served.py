"""The wire form of the ``served_actions`` extension: ``ACT`` rows and ``ACTIONS`` (PROTOCOL.md 10.5).

An ``ACT`` carries one row per env the client steps now, as columns of one
length: the env ids, the observations, the reward of each env's last action,
and whether the row starts an episode or ends one; with ``served_taken``,
the actions the simulator took itself and which episodes are not trained on.
:func:`read_act` checks the columns and returns them as arrays; what the
observations and taken actions must look like is the runner's business (it
knows the spaces).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from .errors import InvalidMessage, UnsupportedMessage
from .messages import MessageType

__all__ = ["ActRows", "MAX_ENV_ID", "MAX_ACT_ROWS", "TAKEN_FIELDS", "TAKEOVER_FIELD", "read_act",
           "act_message", "actions_message", "read_actions"]

#: Env ids are the client's names for its envs: 0 <= id <= MAX_ENV_ID.
MAX_ENV_ID = 2**31 - 1
#: Rows in one ``ACT``; a client with more envs sends several.
MAX_ACT_ROWS = 65536


@dataclass(frozen=True)
class ActRows:
    """The rows of one ``ACT``, as columns of one length ``k``.

    Attributes:
        env: the env ids (ints).
        obs: the observations, one per row (an array of ``k`` rows, or a list).
        reward: float64 ``(k,)``: each env's reward for its last action.
        start: bool ``(k,)``: the row starts a new episode.
        terminated, truncated: bool ``(k,)``: the last action ended the episode.
        taken_mask: ``served_taken``: bool ``(k,)``, the rows whose action the
            simulator took itself (``None``: no row's).
        taken: those actions, one per row as the env applied them (rows
            outside ``taken_mask`` hold anything); ``None`` with ``taken_mask``.
        train: ``served_taken``: bool ``(k,)``: read on ``start`` rows only;
            ``False`` starts an episode that is never trained on (``None``: all are).
        takeover: ``takeover``: bool ``(k,)``, of the rows in ``taken_mask``,
            those where a person or a scripted controller acted instead of
            the policy (``None``: none).
    """

    env: list[int]
    obs: Any
    reward: np.ndarray
    start: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    taken_mask: Optional[np.ndarray] = None
    taken: Any = None
    train: Optional[np.ndarray] = None
    takeover: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.env)

    @property
    def wants_action(self) -> np.ndarray:
        """bool ``(k,)``: rows that neither terminate nor truncate their episode."""
        return ~(self.terminated | self.truncated)


def _column(message: Mapping[str, Any], name: str, rows: int, dtype: Any) -> np.ndarray:
    value = message[name]
    try:
        column = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"ACT: {name!r} is not a column of numbers: {exc}") from None
    if column.shape != (rows,):
        raise InvalidMessage(f"ACT: {name!r} must have one entry per row ({rows}), got shape {column.shape}")
    if dtype is bool:
        if column.dtype != np.bool_:
            raise InvalidMessage(f"ACT: {name!r} must hold booleans, got {column.dtype}")
        return column
    if column.dtype.kind not in "iuf":
        raise InvalidMessage(f"ACT: {name!r} must hold numbers, got {column.dtype}")
    column = column.astype(np.float64)
    if not np.all(np.isfinite(column)):
        raise InvalidMessage(f"ACT: {name!r} holds a NaN or an infinity")
    return column


#: The ``ACT`` fields of the ``served_taken`` extension.
TAKEN_FIELDS = ("taken_mask", "taken", "train")
#: The ``ACT`` field of the ``takeover`` extension (beside ``taken_mask``).
TAKEOVER_FIELD = "takeover"


def read_act(message: Mapping[str, Any], *, taken_agreed: bool = True, takeover_agreed: bool = True) -> ActRows:
    """Check an ``ACT``'s columns (its fields' types are checked by ``validate_message``).

    Raises:
        InvalidMessage: no rows, too many, columns of different lengths, an
            env id out of range, a non-boolean flag, a reward that is not a
            finite number, a row that both starts and ends an episode, or
            (``served_taken``) ``taken_mask`` without ``taken`` or on a row
            that wants no action; (``takeover``) ``takeover`` on a row
            outside ``taken_mask``.
        UnsupportedMessage: a ``served_taken`` field and ``taken_agreed`` is
            false, or ``takeover`` and ``takeover_agreed`` is false.
    """
    env = message["env"]
    rows = len(env)
    if not 0 < rows <= MAX_ACT_ROWS:
        raise InvalidMessage(f"ACT: 'env' must list 1 to {MAX_ACT_ROWS} envs, got {rows}")
    for i, env_id in enumerate(env):
        if type(env_id) is not int or not 0 <= env_id <= MAX_ENV_ID:
            raise InvalidMessage(f"ACT: env[{i}] must be an int in 0..{MAX_ENV_ID}, got {env_id!r}"[:200])
    obs = message["obs"]
    if len(obs) != rows:
        raise InvalidMessage(f"ACT: 'obs' must have one entry per row ({rows}), got {len(obs)}")
    start = _column(message, "start", rows, bool)
    terminated = _column(message, "terminated", rows, bool)
    truncated = _column(message, "truncated", rows, bool)
    if np.any(start & (terminated | truncated)):
        row = int(np.argmax(start & (terminated | truncated)))
        raise InvalidMessage(f"ACT: row {row} (env {env[row]}) both starts and ends an episode")
    reward = _column(message, "reward", rows, float)
    if TAKEOVER_FIELD in message and not takeover_agreed:
        raise UnsupportedMessage("ACT: 'takeover' needs the takeover extension, which was not agreed")
    if not any(name in message for name in TAKEN_FIELDS):
        if TAKEOVER_FIELD in message:
            raise InvalidMessage("ACT: 'takeover' without 'taken_mask'")
        return ActRows(list(env), obs, reward, start, terminated, truncated)
    if not taken_agreed:
        raise UnsupportedMessage("ACT: 'taken', 'taken_mask' and 'train' need the served_taken extension, "
                                 "which was not agreed")
    taken_mask = taken = train = None
    if "taken_mask" in message:
        taken_mask = _column(message, "taken_mask", rows, bool)
        if "taken" not in message:
            raise InvalidMessage("ACT: 'taken_mask' without 'taken'")
        taken = message["taken"]
        if not isinstance(taken, (np.ndarray, list)) or len(taken) != rows:
            raise InvalidMessage(f"ACT: 'taken' must have one entry per row ({rows})")
        ends = taken_mask & (terminated | truncated)
        if ends.any():
            row = int(np.argmax(ends))
            raise InvalidMessage(f"ACT: row {row} (env {env[row]}) carries a taken action but ends its episode")
        if not taken_mask.any():
            taken_mask = taken = None
    elif "taken" in message:
        raise InvalidMessage("ACT: 'taken' without 'taken_mask'")
    if "train" in message:
        train = _column(message, "train", rows, bool)
    takeover = None
    if TAKEOVER_FIELD in message:
        takeover = _column(message, TAKEOVER_FIELD, rows, bool)
        if "taken_mask" not in message:
            raise InvalidMessage("ACT: 'takeover' without 'taken_mask'")
        outside = takeover & ~_column(message, "taken_mask", rows, bool)
        if outside.any():
            row = int(np.argmax(outside))
            raise InvalidMessage(f"ACT: row {row} (env {env[row]}) is a take-over without a taken action")
        if not takeover.any():
            takeover = None
    return ActRows(list(env), obs, reward, start, terminated, truncated, taken_mask, taken, train, takeover)


def act_message(
    env: Sequence[int],
    obs: Any,
    reward: Any,
    start: Any,
    terminated: Any,
    truncated: Any,
    *,
    taken_mask: Any = None,
    taken: Any = None,
    train: Any = None,
    takeover: Any = None,
) -> dict[str, Any]:
    """An ``ACT`` from columns (bool flags and rewards as arrays, so they pack compactly).

    ``taken_mask``/``taken`` and ``train`` (``served_taken``) and ``takeover``
    (``takeover``) are sent only when given.
    """
    message = {
        "type": MessageType.ACT.value,
        "env": [int(e) for e in env],
        "obs": obs,
        "reward": np.asarray(reward, np.float32),
        "start": np.asarray(start, np.bool_),
        "terminated": np.asarray(terminated, np.bool_),
        "truncated": np.asarray(truncated, np.bool_),
    }
    if taken_mask is not None:
        message["taken_mask"] = np.asarray(taken_mask, np.bool_)
        message["taken"] = taken
    if train is not None:
        message["train"] = np.asarray(train, np.bool_)
    if takeover is not None:
        message[TAKEOVER_FIELD] = np.asarray(takeover, np.bool_)
    return message


def actions_message(env: Sequence[int], actions: Any, weights_seq_no: int) -> dict[str, Any]:
    """An ``ACTIONS``: ``actions[i]`` is for ``env[i]``."""
    return {"type": MessageType.ACTIONS.value, "env": [int(e) for e in env], "actions": actions,
            "weights_seq_no": int(weights_seq_no)}


def read_actions(message: Mapping[str, Any], expected_env: Sequence[int]) -> tuple[list[int], Any]:
    """Check an ``ACTIONS`` against the rows of the ``ACT`` it answers.

    Raises:
        InvalidMessage: its envs are not those of the rows that wanted an
            action, in order, or the number of actions differs.
    """
    env, actions = message["env"], message["actions"]
    if list(env) != list(expected_env):
        raise InvalidMessage(f"ACTIONS: for envs {list(env)[:8]}, but actions were asked for {list(expected_env)[:8]}")
    if len(actions) != len(env):
        raise InvalidMessage(f"ACTIONS: {len(actions)} actions for {len(env)} envs")
    return list(env), actions
