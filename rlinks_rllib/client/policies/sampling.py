"""Actions from logits, as RLlib draws them, and the action a simulator applies.

Sampling follows RLlib's ``GetActions`` connector: a categorical over
``softmax(logits)`` for ``Discrete``, a diagonal Gaussian over ``[mean,
log_std]`` for ``Box`` (PPO, APPO, IMPALA), or, with ``squashed`` (SAC),
RLlib's ``TorchSquashedGaussian``: ``tanh`` of a Gaussian draw, in ``[-1, 1]``,
its log-std clamped to ``[-5, 2]``. Greedy mode takes the argmax or the mean
(SAC's too: RLlib's deterministic SAC action is the Gaussian's mean, not its
``tanh``), and reports a log-probability of 0 as RLlib's ``TorchDeterministic``
does. The action RLlib learns from is :attr:`PolicyOutput.action`; what the
simulator should apply is :attr:`PolicyOutput.action_for_env`, unsquashed from
``[-1, 1]`` to the Box bounds (RLlib's ``normalize_actions=True``) or clipped
(``clip_actions=True``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .action_spaces import ActionSpace, BoxSpace, DiscreteSpace

__all__ = ["PolicyOutput", "sample_actions", "log_prob", "action_for_env", "action_from_env"]


@dataclass(frozen=True, eq=False)
class PolicyOutput:
    """Actions for a batch of observations, and what RLlib wants recorded with them.

    From a policy's ``compute_actions`` every field has a leading batch
    dimension; from ``compute_action`` it is one row of that.

    Attributes:
        action: what the episode records and RLlib trains on; int64 for
            ``Discrete``, float32 of the Gaussian's size for ``Box``.
        action_logp: float32 log-probability of ``action`` (0 in greedy mode).
        action_dist_inputs: float32 logits, the module's ``action_dist_inputs``.
        action_for_env: ``action`` unsquashed or clipped to the Box bounds and
            shaped as the Box; for ``Discrete`` the same as ``action``.
        state_out: a recurrent policy's state after this step, by name
            (``None`` for a stateless one): what the next step takes.
    """

    action: np.ndarray
    action_logp: np.ndarray
    action_dist_inputs: np.ndarray
    action_for_env: np.ndarray
    state_out: Optional[Mapping[str, np.ndarray]] = None

    def row(self, i: int) -> PolicyOutput:
        """The output for the *i*-th observation of the batch."""
        state = None if self.state_out is None else {k: v[i] for k, v in self.state_out.items()}
        return PolicyOutput(
            self.action[i], self.action_logp[i], self.action_dist_inputs[i], self.action_for_env[i], state
        )


# As RLlib's TorchCategorical / TorchDiagGaussian / TorchSquashedGaussian / TorchDeterministic.

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
#: RLlib's ``MIN_LOG_NN_OUTPUT``/``MAX_LOG_NN_OUTPUT`` (``ray.rllib.utils.numpy``): the squashed
#: Gaussian's log-std bounds.
SQUASHED_LOG_STD_RANGE = (-5.0, 2.0)
#: RLlib's ``SMALL_NUMBER``: how far inside ``[-1, 1]`` a squashed action is kept before ``atanh``.
SQUASH_MARGIN = 1e-6


def sample_actions(
    space: ActionSpace, logits: np.ndarray, *, explore: bool, rng: np.random.Generator, squashed: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Draw (``explore``) or pick greedily one action per row of *logits*.

    Returns ``(action, action_logp)``: int64 actions for ``Discrete``,
    float32 of the Gaussian's size for ``Box``; float32 log-probabilities,
    0 in greedy mode. With *squashed* a Box action is drawn from RLlib's
    squashed Gaussian (SAC), and its log-probability is computed back from
    the action, as RLlib's ``GetActions`` records it. *logits* must be
    finite; the caller checks.
    """
    batch = logits.shape[0]
    if isinstance(space, DiscreteSpace):
        if not explore:
            return np.argmax(logits, axis=-1).astype(np.int64), np.zeros(batch, np.float32)
        # Array methods and plain indexing rather than np.cumsum/np.argmax/np.take_along_axis: the same
        # arithmetic and draws at a third of the cost for the few rows a served ACT brings.
        log_probs = _log_softmax(logits)
        cdf = np.exp(log_probs).cumsum(axis=-1)
        # Inverse CDF, one uniform per row; scaled by the total so rounding in
        # the cumulative sum can't leave u past the last class.
        u = rng.random(batch) * cdf[:, -1]
        action = (cdf > u[:, None]).argmax(axis=-1).astype(np.int64, copy=False)
        return action, log_probs[np.arange(batch), action].astype(np.float32)

    mean, log_std = np.split(logits, 2, axis=-1)
    if not explore:
        return mean.copy(), np.zeros(batch, np.float32)
    if squashed:
        log_std = np.clip(log_std, *SQUASHED_LOG_STD_RANGE)
    noise = rng.standard_normal(mean.shape, dtype=np.float32)
    action = mean + np.exp(log_std) * noise
    if squashed:
        action = _squash(action)
        return action, _squashed_logp(mean, log_std, action)
    return action, _gaussian_logp(mean, log_std, action).astype(np.float32)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-probabilities of a categorical over each row of *logits* (RLlib's ``TorchCategorical``)."""
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def log_prob(space: ActionSpace, logits: np.ndarray, action: np.ndarray, *, squashed: bool = False) -> np.ndarray:
    """float32 log-probabilities of given actions (in the form RLlib trains on) under *logits*, one per row.

    With *squashed*, a Box action's under RLlib's squashed Gaussian (SAC),
    computed as its ``logp`` does: exact inside ``(-1, 1)``, the action
    moved ``1e-6`` inside the bounds first.
    """
    if isinstance(space, DiscreteSpace):
        log_probs = _log_softmax(logits)
        index = np.asarray(action, np.int64).reshape(-1)
        return log_probs[np.arange(len(log_probs)), index].astype(np.float32)
    mean, log_std = np.split(logits, 2, axis=-1)
    action = np.asarray(action, np.float32).reshape(mean.shape)
    if squashed:
        return _squashed_logp(mean, np.clip(log_std, *SQUASHED_LOG_STD_RANGE), action)
    return _gaussian_logp(mean, log_std, action).astype(np.float32)


def _gaussian_logp(mean: np.ndarray, log_std: np.ndarray, action: np.ndarray) -> np.ndarray:
    """float64 log-densities of *action* rows under a diagonal Gaussian."""
    mean, log_std, action = (a.astype(np.float64) for a in (mean, log_std, action))
    z = (action - mean) / np.exp(log_std)
    return (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(axis=-1)


def _squash(pre: np.ndarray) -> np.ndarray:
    """A Gaussian draw squashed into ``[-1, 1]`` in float32, as ``TorchSquashedGaussian._squash`` computes it."""
    one, two = np.float32(1.0), np.float32(2.0)
    squashed = (np.tanh(pre.astype(np.float32)) + one) / two * two - one
    return np.clip(squashed, -one, one)


def _squashed_logp(mean: np.ndarray, log_std: np.ndarray, action: np.ndarray) -> np.ndarray:
    """log-probabilities of squashed *action* (rows of ``[-1, 1]``) under ``tanh(N(mean, exp(log_std)))``.

    As RLlib's ``TorchSquashedGaussian.logp``: the action goes back through
    ``atanh`` after being moved :data:`SQUASH_MARGIN` inside the bounds (in
    float32, where that margin is what RLlib's is), then the Gaussian's
    log-density less ``log(1 - tanh(u)^2)``, in the stable form
    ``2 * (log 2 - u - softplus(-2u))``.
    """
    one, two = np.float32(1.0), np.float32(2.0)
    inside = (action.astype(np.float32) + one) / two * two - one
    inside = np.clip(inside, np.float32(-1.0 + SQUASH_MARGIN), np.float32(1.0 - SQUASH_MARGIN))
    pre = np.arctanh(inside.astype(np.float64))
    jacobian = 2.0 * (math.log(2.0) - pre - np.logaddexp(0.0, -2.0 * pre))
    return (_gaussian_logp(mean, log_std, pre) - jacobian.sum(axis=-1)).astype(np.float32)


def action_for_env(
    space: ActionSpace | None, action: np.ndarray, *, normalize: bool, clip: bool
) -> np.ndarray:
    """A batch of *action* as the simulator applies it (RLlib's ``NormalizeAndClipActions``).

    For a ``Box``, reshaped to the Box and then, with *normalize*, unsquashed
    from ``[-1, 1]`` to its bounds (a Box with an infinite bound is left
    alone), else with *clip* clipped to them. Any other *space*, ``None``
    included, gets *action* back unchanged.
    """
    if not isinstance(space, BoxSpace):
        return action
    action = action.reshape((action.shape[0], *space.shape))
    if normalize:
        if np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)):
            action = space.low + (action + 1.0) * (space.high - space.low) / 2.0
            return np.clip(action, space.low, space.high).astype(np.float32)
        return action
    if clip:
        return np.clip(action, space.low, space.high).astype(np.float32)
    return action


def action_from_env(space: ActionSpace | None, action: np.ndarray, *, normalize: bool) -> np.ndarray:
    """A batch of actions as the env took them, back in the form RLlib trains on (:func:`action_for_env` undone).

    A ``Discrete`` action becomes int64; a ``Box`` action is flattened and,
    with *normalize* and finite bounds, squashed back into ``[-1, 1]``.
    Clipping can't be undone: a clipped action is recorded as clipped.

    Raises:
        ValueError: a Discrete action outside ``0..n-1``, or a Box action of another size.
    """
    action = np.asarray(action)
    if isinstance(space, DiscreteSpace):
        action = action.astype(np.int64).reshape(-1)
        if np.any((action < 0) | (action >= space.n)):
            raise ValueError(f"actions must be in 0..{space.n - 1}, got {action[:8].tolist()}")
        return action
    if not isinstance(space, BoxSpace):
        return action
    action = action.astype(np.float32).reshape((-1, *space.shape))
    if normalize and np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)):
        action = 2.0 * (action - space.low) / (space.high - space.low) - 1.0
    return action.reshape(action.shape[0], -1).astype(np.float32)
