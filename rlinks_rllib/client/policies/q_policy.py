"""Local action inference for RLlib's DQN, without Ray and without torch.

:class:`QPolicy` runs RLlib's default DQN module (:mod:`.q_network`) in numpy
and acts as its ``forward_exploration`` does: epsilon-greedy over the
Q-values. With probability ``epsilon`` an action is drawn uniformly from all
``n`` (so it may be the greedy one too), else the argmax (the first, on a
tie) is taken; greedy mode (``explore=False``, RLlib's ``forward_inference``)
always takes the argmax.

RLlib moves ``epsilon`` along a schedule (``DQNConfig.training(epsilon=[(0,
1.0), (10000, 0.05)])``, its default) by the timestep its ``EnvRunner`` gives
``forward_exploration``: about the env steps sampled by all runners so far.
A client does not know that count, so the policy takes the epsilon it is
given (:meth:`QPolicy.set_epsilon`) or the timestep to follow the schedule to
(:meth:`QPolicy.set_timestep`); :func:`epsilon_at` computes a schedule's value
as RLlib's ``Scheduler`` does.

What RLlib's DQN records per step is the action alone: its module puts out no
``action_dist_inputs`` and ``GetActions`` adds no ``action_logp``. A
:class:`~.sampling.PolicyOutput` from here still carries both, as every client policy's
does: the Q-values as ``action_dist_inputs`` and the log-probability of the
action under the epsilon-greedy choice as ``action_logp``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np

from .action_spaces import DiscreteSpace
from .mlp import UnsupportedModelError
from .numpy_policy import NetworkPolicy
from .q_network import read_q_network

__all__ = ["QPolicy", "epsilon_at", "EpsilonSchedule"]

#: A fixed epsilon, or RLlib's piecewise-linear schedule ``[(timestep, value), ...]`` starting at timestep 0.
EpsilonSchedule = Union[float, Sequence[Sequence[float]]]

#: The log-probability recorded for an action the epsilon-greedy choice never takes (epsilon 0, not
#: the argmax; a person's take-over): log of float32's smallest normal, as episodes carry finite values only.
MIN_LOGP = float(np.log(np.finfo(np.float32).tiny))


def epsilon_at(schedule: EpsilonSchedule, timestep: int) -> float:
    """The value of an epsilon *schedule* at *timestep*, as RLlib's ``Scheduler`` computes it.

    A number is a fixed epsilon. A schedule ``[(t0=0, v0), (t1, v1), ...]``
    interpolates linearly between its points and holds its last value past
    the last point (RLlib's ``PiecewiseSchedule`` with that as the outside value).

    Raises:
        ValueError: *schedule* is neither a number nor a list of at least two
            ``(timestep, value)`` pairs with increasing timesteps from 0.
    """
    if isinstance(schedule, (int, float)) and not isinstance(schedule, bool):
        return float(schedule)
    try:
        points = [(int(t), float(v)) for t, v in schedule]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"an epsilon schedule is a number or [(timestep, value), ...], got {schedule!r}") from exc
    steps = [t for t, _ in points]
    if len(points) < 2 or steps[0] != 0 or steps != sorted(steps):
        raise ValueError(f"an epsilon schedule needs two or more points with increasing timesteps from 0, "
                         f"got {schedule!r}")
    for (left_t, left), (right_t, right) in zip(points, points[1:]):
        if left_t <= timestep < right_t:
            return left + (timestep - left_t) / (right_t - left_t) * (right - left)
    return points[-1][1]


def _checked(epsilon: float) -> float:
    if not 0.0 <= epsilon <= 1.0 or math.isnan(epsilon):
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    return epsilon


class QPolicy(NetworkPolicy):
    """RLlib's default DQN module, run in numpy, acting epsilon-greedily.

    As :class:`~.numpy_policy.NumpyPolicy`, the policy may keep the caller's
    parameter arrays rather than copies: don't write into them afterwards.

    Args:
        params: the module's state as RLlib sends it
            (``module.get_state(inference_only=True)``); a learner's full state
            works too, its target networks ignored.
        action_space: ``Discrete``, in any form :func:`~.action_spaces.as_action_space` takes.
        fcnet_activation, head_fcnet_activation: as in RLlib's
            ``DefaultModelConfig`` (defaults ``"tanh"`` and ``"relu"``).
        epsilon: a fixed epsilon or RLlib's schedule (``model_config["epsilon"]``),
            followed from timestep 0 (see :meth:`set_timestep`). 0 means greedy
            even when exploring.
        v_min, v_max: the support of distributional Q (``num_atoms > 1``).
        normalize_actions, clip_actions: taken for the same interface as the
            other policies; a Discrete action is applied as it is.
        rng: the generator exploration uses unless a call passes its own.

    Raises:
        UnsupportedModelError: *params* are not DQN's default module or don't
            fit *action_space* (a Box never does), or an activation is unknown.
        ValueError: *action_space* is neither Discrete nor Box, or *epsilon*
            is not in ``[0, 1]`` or not a schedule.
        TypeError: *params* is not a mapping.
    """

    def __init__(
        self,
        params: Mapping[str, Any],
        action_space: Any,
        *,
        fcnet_activation: str = "tanh",
        head_fcnet_activation: str = "relu",
        epsilon: EpsilonSchedule = 0.0,
        v_min: float = -10.0,
        v_max: float = 10.0,
        normalize_actions: bool = True,
        clip_actions: bool = False,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(action_space, normalize_actions=normalize_actions, clip_actions=clip_actions, rng=rng)
        if not isinstance(self.action_space, DiscreteSpace):
            raise UnsupportedModelError(f"DQN's module acts in a Discrete space, not {self.action_space}")
        self._options = dict(fcnet_activation=fcnet_activation, head_fcnet_activation=head_fcnet_activation,
                             v_min=v_min, v_max=v_max)
        self._timestep = 0
        self.set_epsilon(epsilon)
        self._net = self._read(params)

    # -- exploration ------------------------------------------------------------------------

    @property
    def epsilon(self) -> float:
        """The chance that an exploring step takes a uniformly random action."""
        return self._epsilon

    def set_epsilon(self, epsilon: EpsilonSchedule) -> None:
        """Explore with a fixed *epsilon*, or follow RLlib's schedule from the last timestep given.

        Raises:
            ValueError: as :func:`epsilon_at`, or the value is not in ``[0, 1]``.
        """
        value = _checked(epsilon_at(epsilon, self._timestep))
        self._schedule, self._epsilon = epsilon, value

    def set_timestep(self, timestep: int) -> None:
        """Follow the schedule to *timestep*, RLlib's count of env steps sampled by all runners.

        A fixed epsilon stays as it is.

        Raises:
            ValueError: the schedule's value there is not in ``[0, 1]``.
        """
        self._epsilon = _checked(epsilon_at(self._schedule, timestep))
        self._timestep = int(timestep)

    def _sample(self, logits: np.ndarray, explore: bool, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        greedy = np.argmax(logits, axis=-1).astype(np.int64)
        if not explore:
            return greedy, np.zeros(len(greedy), np.float32)
        epsilon = self._epsilon
        batch = len(greedy)
        uniform = rng.integers(0, self.action_space.n, size=batch, dtype=np.int64)
        action = np.where(rng.random(batch) < epsilon, uniform, greedy)
        return action, self._epsilon_greedy_logp(greedy, action, epsilon)

    def _log_prob(self, logits: np.ndarray, action: np.ndarray) -> np.ndarray:
        greedy = np.argmax(logits, axis=-1)
        return self._epsilon_greedy_logp(greedy, np.asarray(action, np.int64).reshape(-1), self._epsilon)

    def _epsilon_greedy_logp(self, greedy: np.ndarray, action: np.ndarray, epsilon: float) -> np.ndarray:
        """log P(action): ``1 - epsilon + epsilon / n`` for the argmax, ``epsilon / n`` for any other."""
        n = self.action_space.n
        prob = np.where(action == greedy, 1.0 - epsilon + epsilon / n, epsilon / n)
        with np.errstate(divide="ignore"):
            return np.maximum(np.log(prob), MIN_LOGP).astype(np.float32)

    # -- the network ------------------------------------------------------------------------

    def _read(self, params: Mapping[str, Any]) -> Any:
        return read_q_network(params, self.action_space, **self._options)
