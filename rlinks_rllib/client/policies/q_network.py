"""RLlib's default DQN RLModule, read from its parameters into a numpy Q-network.

RLlib's ``DefaultDQNTorchRLModule`` for a 1-D observation and a ``Discrete(n)``
action space is an MLP encoder and one or two MLP heads::

    encoder:  Linear -> [LayerNorm] -> fcnet_activation        (every layer, the last too)
    af head:  Linear -> [LayerNorm] -> head_fcnet_activation   (hidden layers)
              Linear                                           (n * num_atoms outputs)
    vf head:  the same with 1 output                           (dueling only)

Q-values are the ``af`` head's outputs, or with ``dueling`` ``af - mean(af) +
vf``. With ``num_atoms > 1`` (distributional Q) the ``af`` outputs are, per
action, logits over ``num_atoms`` support points spread evenly over ``[v_min,
v_max]``, and a Q-value is the expectation over them (RLlib's dueling variant
centres those logits over the atoms and adds ``vf`` before the softmax, as
repeated here). ``double_q`` changes only the learner's targets.

:func:`read_q_network` reads that layout from ``module.get_state(
inference_only=True)``; target networks in a learner's full state are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .action_spaces import ActionSpace, DiscreteSpace
from .mlp import activation, one_prefix, read_mlp, reject_unknown, run, unsupported

__all__ = ["QNetwork", "read_q_network", "is_q_module"]

_ENCODER = "encoder.net.mlp."
_AF = "af.net.mlp."
_VF = "vf.net.mlp."
# RLlib's MLP heads register this buffer whether or not they clamp anything; DQN's don't.
_HEAD_BUFFERS = ("af.log_std_clip_param_const", "vf.log_std_clip_param_const")
_TARGETS = ("_target_encoder.", "_target_af.", "_target_vf.")


def is_q_module(params: Mapping[str, Any]) -> bool:
    """Whether *params* look like DQN's module (an ``af`` head) rather than an actor's."""
    return any(str(name).startswith(_AF) for name in params)


@dataclass(frozen=True, eq=False)
class QNetwork:
    """DQN's encoder and heads; called on a float32 batch, returns ``(batch, n)`` Q-values.

    Built by :func:`read_q_network`.
    """

    encoder: list
    af: list
    vf: list | None  # dueling only
    atoms: np.ndarray | None  # the support, num_atoms > 1 only

    @property
    def observation_size(self) -> int:
        """Length of one observation, from the first layer's weights."""
        return self.encoder[0].weight_t.shape[0]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = run(self.encoder, obs)
        af = run(self.af, x)
        vf = None if self.vf is None else run(self.vf, x)
        if self.atoms is None:
            return af if vf is None else af - af.mean(axis=-1, keepdims=True) + vf
        logits = af.reshape(af.shape[0], -1, self.atoms.size)
        if vf is not None:
            logits = logits - logits.mean(axis=-1, keepdims=True) + vf.reshape(-1, 1, 1)
        z = logits - logits.max(axis=-1, keepdims=True)
        probs = np.exp(z)
        probs /= probs.sum(axis=-1, keepdims=True)
        return (probs * self.atoms).sum(axis=-1).astype(np.float32)


def read_q_network(
    params: Mapping[str, Any],
    space: ActionSpace,
    fcnet_activation: str,
    head_fcnet_activation: str,
    *,
    v_min: float = -10.0,
    v_max: float = 10.0,
) -> QNetwork:
    """Read DQN's default module's *params* into a :class:`QNetwork` for a ``Discrete`` *space*.

    Dueling shows as a ``vf`` head, ``num_atoms`` as the ``af`` head's size
    over ``n``; *v_min* and *v_max* (RLlib's defaults -10 and 10) matter only
    with ``num_atoms > 1``. As with :func:`~.mlp.read_network`, the network
    may keep *params*' arrays rather than copies.

    Raises:
        TypeError: *params* is not a mapping.
        UnsupportedModelError: *params* are not such a module, *space* is
            not ``Discrete`` or does not fit the heads, an activation name is
            unknown, or ``v_min >= v_max`` with ``num_atoms > 1``.
    """
    names = reject_unknown(params, (_ENCODER, _AF, _VF, *_TARGETS), _HEAD_BUFFERS)
    one_prefix(names, (_ENCODER,), "DQN encoder")
    if not isinstance(space, DiscreteSpace):
        raise unsupported(f"DQN's module acts in a Discrete space, not {space}")
    act = activation(fcnet_activation)
    head_act = activation(head_fcnet_activation)
    encoder = read_mlp(params, _ENCODER, act, str(fcnet_activation), act)
    af = read_mlp(params, _AF, head_act, str(head_fcnet_activation), None)
    dueling = any(name.startswith(_VF) for name in names)
    vf = read_mlp(params, _VF, head_act, str(head_fcnet_activation), None) if dueling else None
    latent = encoder[-1].weight_t.shape[1]
    for name, head in (("af", af), ("vf", vf or af)):
        if head[0].weight_t.shape[0] != latent:
            raise unsupported(f"the encoder puts out {latent} values but the {name} head takes "
                              f"{head[0].weight_t.shape[0]}")
    if vf is not None and vf[-1].weight_t.shape[1] != 1:
        raise unsupported(f"a vf head with {vf[-1].weight_t.shape[1]} outputs; DQN's has 1")
    out = af[-1].weight_t.shape[1]
    if out % space.n:
        raise unsupported(f"an af head with {out} outputs does not fit Discrete({space.n}) "
                          "(n Q-values, or n * num_atoms logits)")
    num_atoms = out // space.n
    if num_atoms == 1:
        return QNetwork(encoder, af, vf, None)
    if not v_min < v_max:
        raise unsupported(f"distributional Q needs v_min < v_max, got {v_min} and {v_max}")
    # In float32 and in this order, as RLlib builds the support.
    steps = np.arange(num_atoms, dtype=np.float32) * np.float32(v_max - v_min) / np.float32(num_atoms - 1)
    atoms = np.float32(v_min) + steps
    return QNetwork(encoder, af, vf, atoms)
