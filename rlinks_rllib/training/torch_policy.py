"""Any stateless RLlib RLModule as a client policy, run with Ray's RLlib and torch.

:class:`TorchModulePolicy` has :class:`~rlinks_rllib.client.policies.numpy_policy.NumpyPolicy`'s
interface for what NumpyPolicy refuses (CNN encoders, custom modules, other
action spaces). It lives on the learner side of the package because it needs
``ray[rllib]`` and ``torch``, which :mod:`rlinks_rllib.client` never imports;
importing this module without them raises :class:`ImportError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

try:
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.columns import Columns
except ImportError as exc:
    raise ImportError(
        "TorchModulePolicy needs ray[rllib] and torch (pip install 'ray[rllib]' torch); "
        "without them use NumpyPolicy, which runs RLlib's default MLP modules"
    ) from exc

from ..client.policies.action_spaces import ActionSpace, as_action_space
from ..client.policies.numpy_policy import Policy, observation_batch
from ..client.policies.sampling import PolicyOutput, action_for_env

__all__ = ["TorchModulePolicy"]


class TorchModulePolicy(Policy):
    """Any stateless RLlib RLModule, run with torch, behind NumpyPolicy's interface.

    Stateless: a recurrent module needs its state carried from step to step,
    which this class does not do. Actions come from the module's own
    distribution classes, exactly as RLlib's ``GetActions`` connector draws
    them; a numpy ``rng`` seeds torch's generator for the draw without
    touching torch's global random state.

    Args:
        source: an ``AlgorithmConfig``, an ``RLModuleSpec``, or a built
            ``RLModule``.
        observation_space, action_space: gymnasium spaces, for a config that
            does not name them itself.
        normalize_actions, clip_actions, rng: as for
            :class:`~rlinks_rllib.client.policies.numpy_policy.NumpyPolicy`.

    Raises:
        TypeError: *source* is none of the above.
    """

    def __init__(
        self,
        source: Any,
        *,
        observation_space: Any = None,
        action_space: Any = None,
        normalize_actions: bool = True,
        clip_actions: bool = False,
        rng: np.random.Generator | None = None,
    ) -> None:
        if hasattr(source, "get_rl_module_spec"):
            given = None
            if observation_space is not None and action_space is not None:
                given = {DEFAULT_MODULE_ID: (observation_space, action_space)}
            source = source.get_rl_module_spec(spaces=given, inference_only=True)
        if hasattr(source, "build") and not hasattr(source, "forward_inference"):
            source = source.build()
        if not hasattr(source, "forward_inference"):
            raise TypeError(
                "expected an AlgorithmConfig, RLModuleSpec or RLModule, "
                f"got {type(source).__name__}"
            )
        self.module = source
        self.module.eval()
        try:
            self.action_space: ActionSpace | None = as_action_space(self.module.action_space)
        except ValueError:
            self.action_space = None  # no unsquashing or clipping for other spaces
        obs_shape = getattr(self.module.observation_space, "shape", None)
        self._obs_shape = tuple(int(d) for d in obs_shape) if obs_shape is not None else None
        self._normalize = normalize_actions
        self._clip = clip_actions
        self._rng = rng if rng is not None else np.random.default_rng()

    def _observation_shape(self) -> tuple[int, ...] | None:
        return self._obs_shape

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Load a state dict as RLlib sends it into the module (``set_state``)."""
        self.module.set_state(dict(params))

    def action_dist_inputs(self, obs: Any) -> np.ndarray:
        """The module's ``forward_inference`` ``action_dist_inputs`` for a batch.

        Raises:
            ValueError: as :meth:`compute_actions`.
        """
        return self._forward(obs, explore=False)[1].numpy()

    def _forward(self, obs: Any, explore: bool) -> tuple[dict, torch.Tensor]:
        """The module's forward output for a batch, and its ``action_dist_inputs``."""
        batch = {Columns.OBS: torch.from_numpy(observation_batch(obs, self._obs_shape))}
        with torch.no_grad():
            forward = self.module.forward_exploration if explore else self.module.forward_inference
            out = forward(batch)
        return out, out[Columns.ACTION_DIST_INPUTS]

    def compute_actions(
        self, obs: Any, *, explore: bool = True, rng: np.random.Generator | None = None
    ) -> PolicyOutput:
        """Sample (``explore``) or pick greedily an action for each observation.

        Raises:
            ValueError: *obs* is not a batch of the module's observation shape.
        """
        out, logits = self._forward(obs, explore)
        if explore:
            dist = self.module.get_exploration_action_dist_cls().from_logits(logits)
        else:
            dist_cls = self.module.get_inference_action_dist_cls()
            dist = dist_cls.from_logits(logits).to_deterministic()
        seed = int((rng if rng is not None else self._rng).integers(2**63))
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            action = out[Columns.ACTIONS] if Columns.ACTIONS in out else dist.sample()
            logp = dist.logp(action) if explore else torch.zeros(len(logits))
        action = action.numpy()
        for_env = action_for_env(
            self.action_space, action, normalize=self._normalize, clip=self._clip
        )
        return PolicyOutput(action, logp.numpy().astype(np.float32), logits.numpy(), for_env)
