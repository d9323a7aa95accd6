"""The wire form of the ``served_actions`` extension: ``ACT`` rows and ``ACTIONS`` (PROTOCOL.md 10.5).

An ``ACT`` carries one row per env the client steps now, as columns of one
length: the env ids, the observations, the reward of each env's last action,
and whether the row starts an episode or ends one. :func:`read_act` checks
the columns and returns them as arrays; what the observations must look
like is the runner's business (it knows the space).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import InvalidMessage
from .messages import MessageType

__all__ = ["ActRows", "MAX_ENV_ID", "MAX_ACT_ROWS", "read_act", "act_message", "actions_message", "read_actions"]

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
    """

    env: list[int]
    obs: Any
    reward: np.ndarray
    start: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray

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


def read_act(message: Mapping[str, Any]) -> ActRows:
    """Check an ``ACT``'s columns (its fields' types are checked by ``validate_message``).

    Raises:
        InvalidMessage: no rows, too many, columns of different lengths, an
            env id out of range, a non-boolean flag, a reward that is not a
            finite number, or a row that both starts and ends an episode.
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
    return ActRows(list(env), obs, _column(message, "reward", rows, float), start, terminated, truncated)


def act_message(
    env: Sequence[int],
    obs: Any,
    reward: Any,
    start: Any,
    terminated: Any,
    truncated: Any,
) -> dict[str, Any]:
    """An ``ACT`` from columns (bool flags and rewards as arrays, so they pack compactly)."""
    return {
        "type": MessageType.ACT.value,
        "env": [int(e) for e in env],
        "obs": obs,
        "reward": np.asarray(reward, np.float32),
        "start": np.asarray(start, np.bool_),
        "terminated": np.asarray(terminated, np.bool_),
        "truncated": np.asarray(truncated, np.bool_),
    }


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
