"""The runner's exploration forward pass, for served actions.

:class:`ModuleForward` computes actions for a batch of observations the way
RLlib's own ``SingleAgentEnvRunner`` does for its envs: the module's
``forward_exploration``, then its exploration action distribution
(``get_exploration_action_dist_cls().from_logits``), ``sample()`` and
``logp()`` (RLlib's ``GetActions`` connector), then Box actions unsquashed
or clipped to the space for the env (``NormalizeAndClipActions``). The
episode records the sampled action; the client gets the one for the env.

Env-to-module connectors are not run (no observation filters or frame
stacking): the module sees the observations as sent, as float32, exactly as
a client that runs the policy itself feeds it (``client.policy.NumpyPolicy``).

The forward pass runs on the inference thread while RLlib's thread may swap
the weights (``set_state``): both hold :attr:`ModuleForward.lock`, so a
batch is computed with one version of the weights, and knows which.

:class:`NumpyForward` does the same for RLlib's default MLP without torch:
the runner runs the very numpy policy its local-inference clients run
(``client.policy.NumpyPolicy``, checked against the module's own forward pass
when it is built), in tens of microseconds, so the batcher runs it inline on
the server's loop thread. A module it can't run exactly gets ModuleForward.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.utils.spaces.space_utils import clip_action, unsquash_action

from ...client.policies.choice import policy_for
from ...client.policies.mlp import UnsupportedModelError
from ...client.policies.numpy_policy import Policy
from ...client.policies.q_policy import QPolicy
from .batcher import InferenceResult

__all__ = ["ModuleForward", "NumpyForward", "served_actions_unsupported"]

logger = logging.getLogger("rlinks_rllib.server")

#: How closely NumpyPolicy's ``action_dist_inputs`` must match the module's to stand in for it.
_MATCH_ATOL = 1e-4
#: Sample observations the check runs.
_MATCH_ROWS = 16


def served_actions_unsupported(observation_space: gym.Space, action_space: gym.Space, module: Any, *,
                               probe: bool = True) -> Optional[str]:
    """Why this runner can't serve actions; ``None`` if it can.

    Besides the spaces and the module's kind, with ``probe`` (the torch path:
    :class:`ModuleForward`) one exploration forward pass of a sample
    observation must give the ``action_dist_inputs`` the episodes need (a
    module that outputs actions alone, such as DQN's, does not; DQN's default
    module is served by :class:`NumpyForward` instead).
    """
    if not isinstance(observation_space, gym.spaces.Box):
        return f"the observation space is {type(observation_space).__name__}, not a Box"
    if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.Box)):
        return f"the action space is {type(action_space).__name__}, not Discrete or Box"
    if not isinstance(module, torch.nn.Module):
        return f"the module is {type(module).__name__}, not a torch module"
    if module.is_stateful():
        return "the module is stateful (recurrent); served actions carry no state"
    if not probe:
        return None
    try:
        with torch.no_grad():
            out = module.forward_exploration({Columns.OBS: _model_input(observation_space.sample()[None])}, t=0)
    except (RuntimeError, ValueError, TypeError) as exc:
        # A module this runner can't drive alone (it needs connectors we don't run): serve no actions,
        # but keep the runner, whose clients may run the policy themselves.
        return f"a sample observation does not pass the module's exploration forward pass ({exc})"
    if Columns.ACTION_DIST_INPUTS not in out:
        return "the module's exploration forward pass gives no action_dist_inputs for the episodes"
    return None


def _numpy(module_state: Any) -> dict:
    """A module state's tensors as numpy arrays (NumpyPolicy's params)."""
    return {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            for k, v in module_state.items()}


def _model_input(obs: Any) -> torch.Tensor:
    """Observations as the module takes them: float32, as a local-inference client feeds them."""
    return torch.from_numpy(np.asarray(obs, dtype=np.float32))


class ModuleForward:
    """Actions for a batch of observations from an RLlib module (the :data:`~.batcher.Forward` of the runner).

    Args:
        module: the runner's inference-only RLModule (torch).
        action_space: a Discrete or Box space.
        normalize_actions, clip_actions: RLlib's settings of the same names.
        timestep: the global env step count, passed as ``t`` for exploration
            schedules (as ``SingleAgentEnvRunner`` does); read on the inference thread.

    Raises (from a call):
        RuntimeError, ValueError: the module failed (a bug or a broken
            model; the clients waiting for the batch get ``server_error``).
    """

    def __init__(self, module: Any, action_space: gym.Space, *, normalize_actions: bool, clip_actions: bool,
                 timestep: Callable[[], int] = lambda: 0) -> None:
        self.module = module
        self.action_space = action_space
        self._timestep = timestep
        self._normalize = normalize_actions
        self._clip = clip_actions
        #: Held while the weights are used or swapped.
        self.lock = threading.Lock()
        #: The version of the weights the module holds.
        self.weights_seq_no = 0

    def load(self, module_state: Any, weights_seq_no: Optional[int] = None) -> None:
        """Swap the module's weights (RLlib's thread); ``weights_seq_no``: their version, if a new one."""
        with self.lock:
            self.module.set_state(module_state)
            if weights_seq_no is not None:
                self.weights_seq_no = weights_seq_no

    def __call__(self, obs: np.ndarray) -> InferenceResult:
        started = time.perf_counter()
        with self.lock, torch.no_grad():
            seq_no = self.weights_seq_no
            out = self.module.forward_exploration({Columns.OBS: _model_input(obs)}, t=self._timestep())
            dist_inputs = out[Columns.ACTION_DIST_INPUTS]
            dist = self.module.get_exploration_action_dist_cls().from_logits(dist_inputs)
            actions = out[Columns.ACTIONS] if Columns.ACTIONS in out else dist.sample()
            logp = out[Columns.ACTION_LOGP] if Columns.ACTION_LOGP in out else dist.logp(actions)
        actions = actions.numpy()
        return InferenceResult(
            actions=actions,
            actions_for_env=self._for_env(actions),
            action_logp=logp.numpy().astype(np.float32, copy=False),
            action_dist_inputs=dist_inputs.numpy().astype(np.float32, copy=False),
            weights_seq_no=seq_no,
            seconds=time.perf_counter() - started,
        )

    def logp_of(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """float32 log-probabilities of ``actions`` (as recorded) under the module's exploration distribution."""
        with torch.no_grad():
            dist = self.module.get_exploration_action_dist_cls().from_logits(torch.from_numpy(dist_inputs))
            return dist.logp(torch.from_numpy(np.asarray(actions))).numpy().astype(np.float32, copy=False)

    def _for_env(self, actions: np.ndarray) -> np.ndarray:
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return actions.astype(np.int64, copy=False)
        if self._normalize:
            actions = unsquash_action(actions, space)
        elif self._clip:
            actions = clip_action(actions, space)
        return np.asarray(actions, dtype=space.dtype)


class NumpyForward:
    """Actions from RLlib's default MLP run in numpy: the :data:`~.batcher.Forward` of a runner that has one.

    Built by :meth:`for_module` with the policy the runner's own clients
    would pick (:func:`~rlinks_rllib.client.policies.choice.policy_for`:
    NumpyPolicy for PPO, APPO, IMPALA and SAC, QPolicy for DQN, which then
    explores along the config's epsilon schedule at the runner's timestep),
    and only when it computes what the module computes on sample
    observations. The weights and their version are swapped together, as one
    reference, so a batch never mixes versions (no lock: the loop thread
    computes, RLlib's thread swaps).

    Raises (from a call):
        ValueError: the network's outputs are not finite (a broken model; the
            clients waiting for the batch get ``server_error``).
    """

    inline = True

    def __init__(self, module: Any, description: Mapping[str, Any], policy: Policy, options: dict,
                 timestep: Callable[[], int]) -> None:
        self.module = module
        self._description = description
        self._options = options
        self._timestep = timestep
        self._current = (policy, 0)

    @classmethod
    def for_module(cls, module: Any, description: Mapping[str, Any], *, normalize_actions: bool,
                   clip_actions: bool, timestep: Callable[[], int] = lambda: 0) -> Optional["NumpyForward"]:
        """A NumpyForward that computes what ``module`` computes, or ``None`` (the reason logged at debug).

        Args:
            description: the runner's config as ``SET_CONFIG`` describes it
                to clients (spaces, ``model_config``), without a policy graph.
            timestep: the global env step count, for DQN's epsilon schedule.
        """
        options = dict(normalize_actions=normalize_actions, clip_actions=clip_actions)
        try:
            policy = policy_for(description, _numpy(module.get_state(inference_only=True)), **options)
        except (UnsupportedModelError, ValueError) as exc:
            logger.debug("served actions run the module in torch: %s", exc)
            return None
        if not _computes_what_the_module_computes(module, policy, description):
            logger.debug("served actions run the module in torch: the numpy policy's outputs differ from the module's")
            return None
        return cls(module, description, policy, options, timestep)

    @property
    def weights_seq_no(self) -> int:
        """The version of the weights the policy holds."""
        return self._current[1]

    def load(self, module_state: Any, weights_seq_no: Optional[int] = None) -> None:
        """Take new weights (RLlib's thread): the module's, for checkpoints, and the policy's, for actions.

        Raises:
            UnsupportedModelError: the new weights are not the same network.
        """
        self.module.set_state(module_state)
        policy = policy_for(self._description, _numpy(module_state), **self._options)
        seq_no = self._current[1] if weights_seq_no is None else weights_seq_no
        self._current = (policy, seq_no)

    def logp_of(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """float32 log-probabilities of ``actions`` (as recorded) under the policy's distribution."""
        return self._current[0].log_prob_of(dist_inputs, actions)

    def __call__(self, obs: np.ndarray) -> InferenceResult:
        started = time.perf_counter()
        policy, seq_no = self._current
        if isinstance(policy, QPolicy):
            policy.set_timestep(self._timestep())
        out = policy.compute_actions(obs)
        return InferenceResult(
            actions=out.action,
            actions_for_env=out.action_for_env,
            action_logp=out.action_logp,
            action_dist_inputs=out.action_dist_inputs,
            weights_seq_no=seq_no,
            seconds=time.perf_counter() - started,
        )


def _computes_what_the_module_computes(module: Any, policy: Policy, description: Mapping[str, Any]) -> bool:
    """Whether ``policy`` gives ``module``'s distribution inputs (or, for DQN's, its greedy actions)."""
    space = description["observation_space"]
    rng = np.random.default_rng(0)
    obs = rng.uniform(-2.0, 2.0, (_MATCH_ROWS, *space["shape"])).astype(np.float32)
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: _model_input(obs)})
    if Columns.ACTION_DIST_INPUTS in out:
        expected = out[Columns.ACTION_DIST_INPUTS].numpy()
        got = policy.action_dist_inputs(obs)
        return got.shape == expected.shape and bool(np.allclose(got, expected, atol=_MATCH_ATOL, rtol=1e-4))
    if Columns.ACTIONS in out:
        greedy = policy.compute_actions(obs, explore=False).action
        return bool(np.array_equal(greedy, out[Columns.ACTIONS].numpy()))
    return False
