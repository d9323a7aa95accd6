"""RLlib's default MLP RLModule, read from its parameters into a numpy network.

RLlib's default RLModules for PPO, APPO, IMPALA and SAC are, for a 1-D
observation and a ``Discrete`` or 1-D ``Box`` action space, two small MLPs::

    encoder: Linear -> [LayerNorm] -> fcnet_activation   (every layer, the last too)
    pi head: Linear -> [LayerNorm] -> head_fcnet_activation   (hidden layers)
             Linear                                           (output, no activation)

PPO's family keeps the encoder under ``encoder.encoder.`` or
``encoder.actor_encoder.`` and, for a ``Box``, its head clamps the log-std
half of its output to ``[-log_std_clip_param, log_std_clip_param]`` (or
appends a free, clamped ``pi.log_std`` parameter when ``free_log_std`` is
set). SAC keeps it under ``pi_encoder.`` and its head leaves the log-std as it
is: SAC's squashed Gaussian clamps it when sampling (see :mod:`.sampling`).
:func:`read_network` reads that layout from the parameter names and shapes of
``module.get_state(inference_only=True)`` -- the dict RLlib sends in
``SET_STATE`` -- into a :class:`Network` that repeats the forward pass.
DQN's module (an encoder and Q heads) is read by :mod:`.q_network` from the
same building blocks (:func:`read_mlp`).

Activations leave no trace in a state dict, so they come in as names, as in
RLlib's ``DefaultModelConfig`` (``fcnet_activation="tanh"``,
``head_fcnet_activation="relu"``: RLlib's defaults). Parameters that aren't
such an MLP (an LSTM or CNN encoder, a custom module) raise
:class:`UnsupportedModelError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...protocol.errors import RLinksError
from .action_spaces import ActionSpace, DiscreteSpace

__all__ = [
    "UnsupportedModelError", "Network", "read_network",
    # the building blocks .q_network reads DQN's module with
    "read_mlp", "run", "activation", "unsupported", "reject_unknown", "one_prefix",
]


class UnsupportedModelError(RLinksError, ValueError):
    """The parameters are not those of one of RLlib's default MLP RLModules.

    The message says what was found. Such a module can still run on the client
    with :class:`~rlinks_rllib.training.torch_policy.TorchModulePolicy`, which
    builds RLlib's RLModule with torch. A ``ValueError`` too, since the
    parameters are the caller's input.
    """


_LAYER_NORM_EPS = 1e-3  # RLlib's TorchMLP builds nn.LayerNorm(eps=0.001).

Activation = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # tanh form: no overflow warning for large negative x.
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


_ACTIVATIONS: dict[str, Activation | None] = {
    "linear": None,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "elu": _elu,
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "swish": lambda x: x * _sigmoid(x),
}


def activation(name: str | None) -> Activation | None:
    """The numpy function for RLlib's activation *name*; ``None`` for linear.

    Raises:
        UnsupportedModelError: *name* is not one of :data:`_ACTIVATIONS`.
    """
    key = "linear" if name is None else str(name).lower()
    if key not in _ACTIVATIONS:
        raise UnsupportedModelError(
            f"activation {name!r} is not one the numpy policies know ({', '.join(_ACTIVATIONS)}); "
            "use TorchModulePolicy to run RLlib's module with torch instead"
        )
    return _ACTIVATIONS[key]


@dataclass(frozen=True, eq=False)
class _Dense:
    """One Linear layer, with the LayerNorm and activation that follow it."""

    weight_t: np.ndarray  # (in, out): torch stores (out, in)
    bias: np.ndarray | None
    norm: tuple[np.ndarray, np.ndarray] | None  # LayerNorm (weight, bias)
    activation: Activation | None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = x @ self.weight_t
        if self.bias is not None:
            x = x + self.bias
        if self.norm is not None:
            mean = x.mean(axis=-1, keepdims=True)
            var = np.square(x - mean).mean(axis=-1, keepdims=True)
            x = (x - mean) / np.sqrt(var + _LAYER_NORM_EPS) * self.norm[0] + self.norm[1]
        if self.activation is not None:
            x = self.activation(x)
        return x


@dataclass(frozen=True)
class _Layout:
    """Where one family of RLlib's default modules keeps its actor's parameters."""

    encoders: tuple[str, ...]  # the actor's encoder is under exactly one of these
    ignored: tuple[str, ...]  # critic and target networks of a full (not inference-only) state
    squashed: bool  # Box: a squashed Gaussian (SAC), whose head does not clamp the log-std


_PPO = _Layout(
    encoders=("encoder.encoder.net.mlp.", "encoder.actor_encoder.net.mlp."),
    ignored=("vf.", "encoder.critic_encoder.", "_old_encoder.", "_old_pi."),
    squashed=False,
)
_SAC = _Layout(encoders=("pi_encoder.net.mlp.",), ignored=("qf.", "qf_", "target_qf"), squashed=True)
_PI_PREFIX = "pi.net.mlp."
_PI_LOG_STD = "pi.log_std"
_PI_CLIP = "pi.log_std_clip_param_const"


def unsupported(what: str) -> UnsupportedModelError:
    """The error for parameters that are not one of the default modules the numpy policies run: *what* is wrong."""
    return UnsupportedModelError(
        f"not one of RLlib's default MLP RLModules: {what}. NumpyPolicy runs the "
        "default PPO/APPO/IMPALA/SAC modules and QPolicy DQN's, for 1-D observations; "
        "for any other module build RLlib's RLModule with torch (TorchModulePolicy)"
    )


def _listing(names: list[str], limit: int = 5) -> str:
    """The first *limit* of *names*, quoted, for an error message."""
    shown = ", ".join(repr(n[:80]) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _float32(name: str, value: Any) -> np.ndarray:
    """*value* as a C-contiguous float32 array: the caller's own array when it already is one.

    Raises:
        UnsupportedModelError: *value* is not numeric.
    """
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise unsupported(f"parameter {name!r} has dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float32)


def read_mlp(
    params: Mapping[str, Any],
    prefix: str,
    between: Activation | None,
    between_name: str,
    last: Activation | None,
) -> list[_Dense]:
    """Read the ``nn.Sequential`` of one RLlib ``TorchMLP`` from its parameters.

    The Sequential's indices show the layout: a Linear (2-D weight), maybe a
    LayerNorm (1-D weight) right after it, then one parameterless slot for the
    activation unless it is linear. *between* follows every layer but the last,
    which gets *last*.

    Raises:
        UnsupportedModelError: the parameters under *prefix* are missing, or
            not laid out so, or their shapes don't chain.
    """
    entries: dict[int, dict[str, np.ndarray]] = {}
    for name, value in params.items():
        if not name.startswith(prefix):
            continue
        index, _, leaf = name[len(prefix):].partition(".")
        if not (index.isascii() and index.isdigit()) or leaf not in ("weight", "bias"):
            raise unsupported(f"unexpected parameter {name!r}")
        entries.setdefault(int(index), {})[leaf] = _float32(name, value)
    if not entries:
        raise unsupported(f"no layers under {prefix!r}")

    def expected(what: str, pos: int) -> UnsupportedModelError:
        return unsupported(
            f"expected {what} at {prefix}{pos} with {between_name!r} activations "
            f"between layers, found indices {sorted(entries)}"
        )

    layers: list[_Dense] = []
    used: set[int] = set()
    pos, end = 0, max(entries)
    while True:
        linear = entries.get(pos, {})
        weight = linear.get("weight")
        if weight is None or weight.ndim != 2:
            raise expected("a Linear layer", pos)
        if layers and weight.shape[1] != layers[-1].weight_t.shape[1]:
            raise unsupported(
                f"{prefix}{pos}.weight has shape {weight.shape}, which does not take "
                f"the previous layer's {layers[-1].weight_t.shape[1]} outputs"
            )
        out = weight.shape[0]
        bias = linear.get("bias")
        if bias is not None and bias.shape != (out,):
            raise unsupported(f"{prefix}{pos}.bias has shape {bias.shape}, expected ({out},)")
        used.add(pos)
        pos += 1
        norm = None
        maybe_norm = entries.get(pos, {})
        if maybe_norm.get("weight") is not None and maybe_norm["weight"].ndim == 1:
            norm = (maybe_norm["weight"], maybe_norm.get("bias"))
            if norm[0].shape != (out,) or norm[1] is None or norm[1].shape != (out,):
                raise expected(f"a LayerNorm of size {out}", pos)
            used.add(pos)
            pos += 1
        is_last = pos > end
        activation = last if is_last else between
        layers.append(_Dense(np.ascontiguousarray(weight.T), bias, norm, activation))
        if is_last:
            break
        if between is not None:
            pos += 1  # the activation's slot
    stray = sorted(set(entries) - used)
    if stray:
        raise expected("no parameters", stray[0])
    return layers


def run(layers: list[_Dense], x: np.ndarray) -> np.ndarray:
    """*x* through *layers* (as :func:`read_mlp` reads them), one after the other."""
    for layer in layers:
        x = layer(x)
    return x


@dataclass(frozen=True, eq=False)
class Network:
    """The encoder and pi head of one default module; called on a float32 batch, returns its logits.

    Built by :func:`read_network`. The logits are the module's
    ``action_dist_inputs``: ``n`` logits for ``Discrete``, ``[mean, log_std]``
    for ``Box``, the log-std clamped by PPO's family and left as it is by SAC
    (``squashed``), whose distribution clamps it.
    """

    encoder: list[_Dense]
    pi: list[_Dense]
    free_log_std: np.ndarray | None  # (size,), free_log_std=True only
    log_std_clip: float | None  # PPO's family's Box only
    squashed: bool = False  # Box actions from RLlib's squashed Gaussian (SAC), not its diagonal one

    @property
    def observation_size(self) -> int:
        """Length of one observation, from the first layer's weights."""
        return self.encoder[0].weight_t.shape[0]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = run(self.pi, run(self.encoder, obs))
        if self.log_std_clip is None:
            return x
        clip = self.log_std_clip
        if self.free_log_std is not None:
            log_std = np.broadcast_to(np.clip(self.free_log_std, -clip, clip), x.shape)
            return np.concatenate([x, log_std], axis=-1)
        mean, log_std = np.split(x, 2, axis=-1)
        return np.concatenate([mean, np.clip(log_std, -clip, clip)], axis=-1)


def reject_unknown(params: Any, prefixes: tuple[str, ...], names: tuple[str, ...] = ()) -> list[str]:
    """The parameter names of *params*, when each starts with one of *prefixes* or is one of *names*.

    Raises:
        TypeError: *params* is not a mapping.
        UnsupportedModelError: a parameter is neither (the first few are named).
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"params must map parameter names to arrays, got {type(params).__name__}")
    found = [str(n) for n in params]
    unknown = [n for n in found if not n.startswith(prefixes) and n not in names]
    if unknown:
        raise unsupported(f"unexpected parameters {_listing(unknown)}")
    return found


def one_prefix(names: list[str], prefixes: tuple[str, ...], what: str) -> str:
    """The one of *prefixes* that *names* use.

    Raises:
        UnsupportedModelError: they use none or several of them.
    """
    used = [p for p in prefixes if any(n.startswith(p) for n in names)]
    if len(used) != 1:
        raise unsupported(f"expected {what} parameters under one of {prefixes}, found {used or 'none'}")
    return used[0]


def read_network(
    params: Mapping[str, Any], space: ActionSpace, fcnet_activation: str, head_fcnet_activation: str
) -> Network:
    """Read a default module's *params* into a :class:`Network` acting in *space*.

    The module's family comes from the names: SAC's actor encoder is under
    ``pi_encoder.``, PPO's family's under ``encoder.``.

    Arrays are not copied where numpy need not: a parameter that already is
    C-contiguous float32 (every bias and LayerNorm parameter, a one-row
    weight) is kept as it is, so the network may share memory with *params*.
    It only reads them: read-only arrays, such as the views into a received
    frame that :func:`rlinks_rllib.protocol.weights.read_state` returns, are
    fine, but the caller must not write into them afterwards.

    Raises:
        TypeError: *params* is not a mapping.
        UnsupportedModelError: *params* are not such a module, don't fit
            *space*, or an activation name is unknown.
    """
    sac = isinstance(params, Mapping) and any(str(n).startswith(_SAC.encoders) for n in params)
    layout = _SAC if sac else _PPO
    own = (_PI_CLIP,) if sac else (_PI_LOG_STD, _PI_CLIP)  # RLlib refuses free_log_std for SAC
    names = reject_unknown(params, (*layout.encoders, _PI_PREFIX, *layout.ignored), own)
    encoder_prefix = one_prefix(names, layout.encoders, "MLP encoder")

    act = activation(fcnet_activation)
    head_act = activation(head_fcnet_activation)
    encoder = read_mlp(params, encoder_prefix, act, str(fcnet_activation), act)
    pi = read_mlp(params, _PI_PREFIX, head_act, str(head_fcnet_activation), None)
    latent, pi_in = encoder[-1].weight_t.shape[1], pi[0].weight_t.shape[0]
    if latent != pi_in:
        raise unsupported(f"the encoder puts out {latent} values but the pi head takes {pi_in}")

    out = pi[-1].weight_t.shape[1]
    free_log_std = None
    if _PI_LOG_STD in params:
        free_log_std = _float32(_PI_LOG_STD, params[_PI_LOG_STD])
    if isinstance(space, DiscreteSpace):
        if free_log_std is not None or out != space.n:
            head = f"a pi head with {out} outputs"
            head += " and a free log-std" if free_log_std is not None else ""
            raise unsupported(
                f"{head} does not fit Discrete({space.n}), which needs {space.n} logits"
            )
        return Network(encoder, pi, None, None)

    size = space.size
    if free_log_std is not None and (out != size or free_log_std.shape != (size,)):
        raise unsupported(
            f"a pi head with {out} outputs and a free log-std of shape {free_log_std.shape} "
            f"does not fit a Box of size {size}"
        )
    if free_log_std is None and out != 2 * size:
        raise unsupported(
            f"a pi head with {out} outputs does not fit a Box of size {size}, "
            f"which needs {2 * size} (mean and log-std)"
        )
    if layout.squashed:
        return Network(encoder, pi, None, None, squashed=True)
    if _PI_CLIP not in params:
        raise unsupported(f"a Box action space but no {_PI_CLIP!r}")
    clip = _float32(_PI_CLIP, params[_PI_CLIP])
    if clip.size != 1:
        raise unsupported(f"{_PI_CLIP!r} has shape {clip.shape}, expected (1,)")
    return Network(encoder, pi, free_log_std, float(clip.reshape(())))
