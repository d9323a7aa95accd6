"""Served actions for :class:`~rlinks_rllib.client.EnvClient`: the runner runs the policy and records the episodes.

Each :meth:`ServedInference.act` is one ``ACT``/``ACTIONS`` round trip
(PROTOCOL.md 10.5). Its rows are built from the calls the loop made since
the last one: an env whose outcome was reported sends its reward with its
new observation; an env whose episode ended sends an ending row (its final
observation, ``terminated``/``truncated``) and, when it acts again, a start
row in the same ``ACT``; an env with no episode sends a start row. Closing
sends one last ``ACT`` that ends every episode where it stands (truncated),
so the runner need not wait ``served_report_timeout_s`` to drop their last
steps. Reconnects are handled by :meth:`RLinkClient.act` (an interrupted
episode continues as a new one). Actions the simulator takes itself
(``log_action``) and episodes that are not trained on go as ``served_taken``
columns (PROTOCOL.md 10.5.1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...protocol.served import ActRows
from ..network.shared_client import SharedClient
from .local import stack_rows

__all__ = ["ServedInference"]


@dataclass
class _Rows:
    """Columns of the next ``ACT``."""

    env: list[int] = field(default_factory=list)
    obs: list[Any] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    start: list[bool] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)

    def add(self, env: int, obs: Any, reward: float = 0.0, *, start: bool = False,
            terminated: bool = False, truncated: bool = False) -> None:
        self.env.append(env)
        self.obs.append(obs)
        self.reward.append(float(reward))
        self.start.append(start)
        self.terminated.append(bool(terminated))
        self.truncated.append(bool(truncated))

    def columns(self) -> tuple:
        return (self.env, _stacked(self.obs), np.asarray(self.reward, np.float64), np.asarray(self.start, bool),
                np.asarray(self.terminated, bool), np.asarray(self.truncated, bool))


def _stacked(obs: list[Any]) -> Any:
    """The rows' observations as the ``ACT``'s column: one array, or the rows as they are for Dict/Tuple spaces."""
    return obs if isinstance(obs[0], (Mapping, tuple)) else stack_rows(obs)


class ServedInference:
    """The rows and round trips of served actions over one connection.

    Args:
        client: the shared connection (its runner agreed to ``served_actions``).
    """

    on_policy = False  # pacing is the runner's: an ACT waits when exactness demands it
    stateful = False

    def __init__(self, client: SharedClient) -> None:
        self._client = client
        self._open: set[int] = set()
        #: Envs that acted and have not reported the outcome yet.
        self._acting: set[int] = set()
        #: Reported outcomes not sent yet: env -> (reward, obs).
        self._outcome: dict[int, tuple[float, Any]] = {}
        #: Ending rows not sent yet.
        self._endings = _Rows()
        #: Envs whose episode is not trained on.
        self._untrained: set[int] = set()
        self.weights_seq_no = 0

    def is_open(self, env: int) -> bool:
        return env in self._open

    def awaiting_report(self, env: int) -> bool:
        return env in self._acting

    def start(self, env: int, obs: Any, train: bool = True) -> None:
        """Begin an episode at ``obs``: the next :meth:`act` sends its start row (a running one is cut).

        ``train=False``: the runner serves its actions and records nothing of it.
        """
        self.end(env)
        self._open.add(env)
        self._outcome.pop(env, None)
        if train:
            self._untrained.discard(env)
        else:
            self._untrained.add(env)

    def act(self, envs: list[int], rows: list[Any], taken: Any = None, takeover: bool = False) -> np.ndarray:
        """One ``ACT`` with the rows of ``envs`` (plus the endings reported since the last one).

        ``taken``: the actions the simulator takes itself for ``envs`` (as the
        env applies them); the runner records them and answers with them.
        ``takeover``: those rows are take-overs (the ``takeover`` column).

        Raises:
            TrainingEnded, NotAgreed, ServerTimeout, ConnectionLost, ...: from :meth:`RLinkClient.act`
                (NotAgreed for ``taken`` or an untrained episode when the runner does not speak ``served_taken``).
        """
        # Nothing changes here until the runner answered: a refused call leaves the rows for the next one.
        # The endings first, then a row per env: a start row, or its reported reward with the observation.
        # The columns go as ActRows, read_act's form: built here from checked values, not checked again.
        ending = self._endings
        endings = len(ending.env)
        outcome = self._outcome
        if endings:
            outcomes = [outcome.get(env) for env in envs]
            env_column = ending.env + envs
            obs = _stacked(ending.obs + rows)
            reward = np.array(ending.reward + [0.0 if o is None else o[0] for o in outcomes], np.float64)
            start = np.array(ending.start + [o is None for o in outcomes], bool)
            terminated = np.array(ending.terminated + [False] * len(envs), bool)
            truncated = np.array(ending.truncated + [False] * len(envs), bool)
        else:
            env_column, obs = list(envs), _stacked(rows)
            reward, start = np.zeros(len(envs), np.float64), np.zeros(len(envs), bool)
            for i, env in enumerate(envs):
                o = outcome.get(env)
                if o is None:
                    start[i] = True
                else:
                    reward[i] = o[0]
            terminated = truncated = np.zeros(len(envs), bool)
        taken_mask = taken_column = takeover_column = train = None
        if taken is not None:
            actions = [np.asarray(a) for a in taken]
            taken_mask = np.arange(len(env_column)) >= endings
            taken_column = np.stack([np.zeros_like(actions[0])] * endings + actions)
            if takeover:
                takeover_column = taken_mask
        if self._untrained:
            train = np.array([env not in self._untrained for env in env_column])
        act_rows = ActRows(env_column, obs, reward, start, terminated, truncated, taken_mask, taken_column, train,
                           takeover_column)
        reply = self._client.call(self._client.raw.act_rows, act_rows)
        if endings:
            self._endings = _Rows()
        for env in envs:
            self._outcome.pop(env, None)
        self.weights_seq_no = reply.weights_seq_no
        self._acting.update(envs)
        if reply.env == envs:
            return reply.actions
        by_env = dict(zip(reply.env, reply.actions))
        return np.stack([by_env[env] for env in envs])

    def report(self, env: int, reward: Any, obs: Any, terminated: Any, truncated: Any) -> bool:
        """Keep the outcome of ``env``'s last action for the next ``ACT``; return whether its episode ended.

        Raises:
            ValueError: ``reward`` is not a finite number (nothing is kept).
        """
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"env {env}: the reward must be a finite number, got {reward}")
        self._acting.discard(env)
        if terminated or truncated:
            self._endings.add(env, obs, reward, terminated=bool(terminated), truncated=bool(truncated))
            self._open.discard(env)
            return True
        self._outcome[env] = (reward, obs)
        return False

    def after_report(self) -> None:
        """Nothing: outcomes go with the next ``ACT``."""

    def end(self, env: int) -> None:
        """Cut ``env``'s episode where it stands (truncated, at its last reported observation)."""
        outcome = self._outcome.pop(env, None)
        if outcome is not None:
            self._endings.add(env, outcome[1], outcome[0], truncated=True)
        # An env that acted and never reported: the runner drops that step after served_report_timeout_s.
        self._acting.discard(env)
        self._open.discard(env)

    def close(self) -> None:
        """Send one last ``ACT`` that ends every episode with a reported outcome."""
        for env in list(self._outcome):
            self.end(env)
        if self._endings.env:
            call, self._endings = self._endings, _Rows()
            self._client.call(self._client.raw.act, *call.columns())
