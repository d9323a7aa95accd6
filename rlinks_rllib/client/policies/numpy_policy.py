"""Local action inference for a simulator, without Ray and without torch.

:class:`NumpyPolicy` runs RLlib's default PPO/APPO/IMPALA/SAC MLP module in
numpy from the weights RLlib sends in ``SET_STATE``
(:class:`~.q_policy.QPolicy` runs DQN's). Its parts live beside it:

* :mod:`.action_spaces`: :class:`DiscreteSpace`, :class:`BoxSpace` and
  :func:`as_action_space`, the spaces a policy acts in;
* :mod:`.mlp`: reading the module's parameters into a numpy network, and
  :class:`UnsupportedModelError` for parameters that aren't such a module;
* :mod:`.sampling`: :class:`PolicyOutput`, drawing actions from logits as
  RLlib does, and the action a simulator applies.

Their public names are importable from here too. For any other RLModule,
:class:`rlinks_rllib.training.torch_policy.TorchModulePolicy` offers the same
interface with Ray and torch.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import numpy as np

from .action_spaces import ActionSpace, BoxSpace, DiscreteSpace, as_action_space
from .mlp import UnsupportedModelError, read_network
from .sampling import PolicyOutput, action_for_env, action_from_env, log_prob, sample_actions

__all__ = [
    "UnsupportedModelError",
    "DiscreteSpace",
    "BoxSpace",
    "ActionSpace",
    "as_action_space",
    "PolicyOutput",
    "Policy",
    "NetworkPolicy",
    "observation_batch",
    "NumpyPolicy",
]


def observation_batch(obs: Any, shape: tuple[int, ...] | None) -> np.ndarray:
    """*obs* as a float32 batch of observations of *shape* (any shape if ``None``).

    Raises:
        ValueError: *obs* has no batch dimension, or its rows are not of *shape*.
    """
    batch = np.asarray(obs, dtype=np.float32)
    if shape is None:
        if batch.ndim < 2:
            raise ValueError(f"observations need a batch dimension, got shape {batch.shape}")
    elif batch.shape[1:] != shape or batch.ndim < 2:
        want = ", ".join(["batch", *map(str, shape)])
        raise ValueError(f"observations must have shape ({want}), got {batch.shape}")
    return batch


class Policy(abc.ABC):
    """What every client policy offers: new weights in, actions out, one or a batch at a time.

    Subclasses implement the batch methods; :meth:`compute_action` is built
    on :meth:`compute_actions`.
    """

    _rng: np.random.Generator  # the generator sampling uses unless a call passes its own
    action_space: ActionSpace
    _normalize: bool
    _clip: bool

    def _act_on(
        self, logits: np.ndarray, explore: bool, rng: np.random.Generator | None, state_out: Any = None
    ) -> PolicyOutput:
        """Actions drawn from *logits* as RLlib draws them, and what the simulator applies.

        Raises:
            ValueError: the logits are not finite (NaN or inf in the
                observations or weights), which would make every action
                meaningless.
        """
        if not np.isfinite(logits).all():
            bad = np.flatnonzero(~np.isfinite(logits).all(axis=-1))
            raise ValueError(f"logits are not finite for observations at rows {bad[:8].tolist()}")
        rng = rng if rng is not None else self._rng
        action, logp = self._sample(logits, explore, rng)
        for_env = action_for_env(self.action_space, action, normalize=self._normalize, clip=self._clip)
        return PolicyOutput(action, logp, logits, for_env, state_out)

    def outputs_for(self, obs: Any, taken: Any, state: Any = None) -> PolicyOutput:
        """The output for actions the simulator chose itself (a person, a script), as RLlib records them.

        *taken* is a batch of actions as the env takes them; they come back
        in the form RLlib trains on, with the policy's log-probability of
        them and its ``action_dist_inputs`` for *obs* (a recurrent policy's
        ``state_out`` too).

        Raises:
            ValueError: as :meth:`compute_actions`, or an action out of the space.
        """
        if state is None:
            logits, state_out = self.action_dist_inputs(obs), None
        else:
            logits, state_out = self._run(obs, state)
        action = action_from_env(self.action_space, taken, normalize=self._normalize)
        for_env = action_for_env(self.action_space, action, normalize=self._normalize, clip=self._clip)
        return PolicyOutput(action, self._log_prob(logits, action), logits, for_env, state_out)

    def _sample(self, logits: np.ndarray, explore: bool, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(action, action_logp)`` for each row of finite *logits*, drawn as the module's distribution draws.

        RLlib's categorical or diagonal Gaussian here; a squashed Gaussian where
        :attr:`squashed`; subclasses with another exploration override it
        together with :meth:`_log_prob`.
        """
        return sample_actions(self.action_space, logits, explore=explore, rng=rng, squashed=self.squashed)

    def _log_prob(self, logits: np.ndarray, action: np.ndarray) -> np.ndarray:
        """float32 log-probabilities of *action* rows (the form RLlib trains on) as :meth:`_sample` draws them."""
        return log_prob(self.action_space, logits, action, squashed=self.squashed)

    def log_prob_of(self, logits: np.ndarray, action: np.ndarray) -> np.ndarray:
        """float32 log-probabilities of *action* rows (the form RLlib trains on) under *logits*, as this policy acts.

        For a runner that computed the logits already and records an action
        a simulator took itself.
        """
        return self._log_prob(logits, action)

    @property
    def squashed(self) -> bool:
        """Whether Box actions come from RLlib's squashed Gaussian (SAC's), in ``[-1, 1]``."""
        return False

    @abc.abstractmethod
    def _observation_shape(self) -> tuple[int, ...] | None:
        """Shape of one observation, or ``None`` where the policy does not know it."""

    @abc.abstractmethod
    def set_params(self, params: Mapping[str, Any]) -> None:
        """Replace the weights with a state dict as RLlib sends it in ``SET_STATE``."""

    @abc.abstractmethod
    def action_dist_inputs(self, obs: Any) -> np.ndarray:
        """The module's ``action_dist_inputs`` (float32 logits) for a batch."""

    @abc.abstractmethod
    def compute_actions(
        self, obs: Any, *, explore: bool = True, rng: np.random.Generator | None = None
    ) -> PolicyOutput:
        """Sample (``explore``) or pick greedily an action for each observation of a batch."""

    def compute_action(
        self, obs: Any, *, explore: bool = True, rng: np.random.Generator | None = None
    ) -> PolicyOutput:
        """:meth:`compute_actions` for one observation (no batch dimension).

        Raises:
            ValueError: *obs* does not have the policy's observation shape, or
                as :meth:`compute_actions`.
        """
        single = np.asarray(obs, dtype=np.float32)
        shape = self._observation_shape()
        if shape is not None and single.shape != shape:
            raise ValueError(f"one observation must have shape {shape}, got {single.shape}")
        return self.compute_actions(single[None], explore=explore, rng=rng).row(0)


class NetworkPolicy(Policy):
    """A policy running a numpy network read from RLlib's weights: what :class:`NumpyPolicy` and
    :class:`~.q_policy.QPolicy` share.

    Subclasses read the weights into a network (:meth:`_read`: called on a
    float32 batch, it returns the module's ``action_dist_inputs``, and knows
    its ``observation_size``); new weights, observation checks and acting are
    the same for all.
    """

    _net: Any

    def __init__(self, action_space: Any, *, normalize_actions: bool, clip_actions: bool,
                 rng: np.random.Generator | None) -> None:
        """The parts every such policy keeps; a subclass reads its network after this.

        Raises:
            ValueError: *action_space* is not Discrete or Box.
        """
        self.action_space = as_action_space(action_space)
        self._normalize = normalize_actions
        self._clip = clip_actions
        self._rng = rng if rng is not None else np.random.default_rng()

    @abc.abstractmethod
    def _read(self, params: Mapping[str, Any]) -> Any:
        """The network of *params*.

        Raises:
            UnsupportedModelError: *params* are not the module this policy runs.
            TypeError: *params* is not a mapping.
        """

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Replace the weights, e.g. with a newer set from ``SET_STATE``.

        As in the constructor, the policy may keep *params*' arrays rather
        than copies: don't write into them afterwards.

        Raises:
            UnsupportedModelError, TypeError: as the constructor; the old
                weights stay.
        """
        self._net = self._read(params)

    @property
    def observation_size(self) -> int:
        """Length of one observation, from the first layer's weights."""
        return self._net.observation_size

    def _observation_shape(self) -> tuple[int, ...]:
        return (self._net.observation_size,)

    def action_dist_inputs(self, obs: Any) -> np.ndarray:
        """The module's ``action_dist_inputs`` (float32: logits, or DQN's Q-values) for a batch.

        Raises:
            ValueError: *obs* is not ``(batch, observation_size)``.
        """
        net = self._net  # one weight set per call, even if set_params runs meanwhile
        return net(observation_batch(obs, (net.observation_size,)))

    def compute_actions(
        self, obs: Any, *, explore: bool = True, rng: np.random.Generator | None = None
    ) -> PolicyOutput:
        """Sample (``explore``) or pick greedily an action for each observation.

        Raises:
            ValueError: *obs* is not ``(batch, observation_size)``, or the
                logits are not finite (NaN or inf in the observations or
                weights), which would make every action meaningless.
        """
        return self._act_on(self.action_dist_inputs(obs), explore, rng)


class NumpyPolicy(NetworkPolicy):
    """RLlib's default PPO/APPO/IMPALA/SAC MLP module, run in numpy.

    SAC's module (its actor under ``pi_encoder.``) samples Box actions as
    RLlib's SAC does, from a squashed Gaussian: the action recorded is in
    ``[-1, 1]``, with the log-probability RLlib records for it, and the
    simulator applies it unsquashed to the Box bounds
    (:attr:`PolicyOutput.action_for_env`). With ``Discrete`` actions SAC's
    module is a categorical over its pi head's logits, as PPO's is: sampled
    when exploring, the argmax when greedy, the action index recorded with its
    logp and logits as RLlib's runner records them (SAC's discrete loss reads
    the index alone).

    The policy may keep the caller's parameter arrays rather than copies (see
    :func:`~rlinks_rllib.client.policies.mlp.read_network`): read-only arrays, such as
    those :func:`rlinks_rllib.protocol.weights.read_state` returns, are fine,
    but the caller must not write into them while the policy uses them.

    Args:
        params: the module's state as RLlib sends it
            (``module.get_state(inference_only=True)``, e.g. from
            :func:`rlinks_rllib.protocol.weights.read_state`). A full state also
            works; critic and target networks in it are ignored (SAC's Q
            networks too).
        action_space: ``Discrete``/``Box``, in any form :func:`as_action_space`
            takes.
        fcnet_activation: the encoder's activation (RLlib's default ``"tanh"``).
        head_fcnet_activation: the pi head's hidden activation (RLlib's default
            ``"relu"``; unused without ``head_fcnet_hiddens``).
        normalize_actions, clip_actions: as in RLlib's ``AlgorithmConfig.
            env_runners()``; shape :attr:`PolicyOutput.action_for_env`.
        rng: the generator sampling uses unless a call passes its own.

    Raises:
        UnsupportedModelError: *params* are not such a module, or don't fit
            *action_space*, or an activation is unknown.
        ValueError: *action_space* is not Discrete or Box.
        TypeError: *params* is not a mapping.
    """

    def __init__(
        self,
        params: Mapping[str, Any],
        action_space: Any,
        *,
        fcnet_activation: str = "tanh",
        head_fcnet_activation: str = "relu",
        normalize_actions: bool = True,
        clip_actions: bool = False,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(action_space, normalize_actions=normalize_actions, clip_actions=clip_actions, rng=rng)
        self._activations = (fcnet_activation, head_fcnet_activation)
        self._net = self._read(params)

    def _read(self, params: Mapping[str, Any]) -> Any:
        return read_network(params, self.action_space, *self._activations)

    @property
    def squashed(self) -> bool:
        """Whether Box actions come from RLlib's squashed Gaussian (SAC's module), in ``[-1, 1]``."""
        return self._net.squashed and isinstance(self.action_space, BoxSpace)
