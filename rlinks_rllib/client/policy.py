"""Local action inference for a simulator, without Ray and without torch.

RLlib's default RLModules for PPO, APPO and IMPALA are, for a 1-D observation
and a ``Discrete`` or 1-D ``Box`` action space, two small MLPs::

    encoder: Linear -> [LayerNorm] -> fcnet_activation   (every layer, the last too)
    pi head: Linear -> [LayerNorm] -> head_fcnet_activation   (hidden layers)
             Linear                                           (output, no activation)

and for a ``Box`` the head clamps the log-std half of its output to
``[-log_std_clip_param, log_std_clip_param]`` (or appends a free, clamped
``pi.log_std`` parameter when ``free_log_std`` is set). :class:`NumpyPolicy`
reads that layout from the parameter names and shapes of
``module.get_state(inference_only=True)`` -- the dict RLlib sends in
``SET_STATE`` -- and repeats the forward pass and the action sampling in numpy.

Activations leave no trace in a state dict, so they come in as hints named as
in RLlib's ``DefaultModelConfig`` (``fcnet_activation="tanh"``,
``head_fcnet_activation="relu"``: RLlib's defaults). Where the parameters
aren't such an MLP (an LSTM or CNN encoder, a custom module), the policy raises
:class:`UnsupportedModelError`; :class:`TorchModulePolicy` runs any RLModule
with RLlib and torch installed.

Sampling follows RLlib's ``GetActions`` connector: a categorical over
``softmax(logits)`` for ``Discrete``, a diagonal Gaussian over ``[mean,
log_std]`` for ``Box``; greedy mode takes the argmax or the mean, and reports a
log-probability of 0 as RLlib's ``TorchDeterministic`` does. The action RLlib
learns from is :attr:`PolicyOutput.action`; what the simulator should apply is
:attr:`PolicyOutput.action_for_env`, unsquashed from ``[-1, 1]`` to the Box
bounds (RLlib's ``normalize_actions=True``) or clipped (``clip_actions=True``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ..protocol import spaces

__all__ = [
    "UnsupportedModelError",
    "DiscreteSpace",
    "BoxSpace",
    "ActionSpace",
    "as_action_space",
    "PolicyOutput",
    "NumpyPolicy",
    "TorchModulePolicy",
]


class UnsupportedModelError(ValueError):
    """The parameters are not those of one of RLlib's default MLP RLModules.

    The message says what was found. Such a module can still run on the client
    with :class:`TorchModulePolicy`, which builds RLlib's RLModule with torch.
    """


# ---------------------------------------------------------------------------
# Action spaces


@dataclass(frozen=True)
class DiscreteSpace:
    """Actions ``0 .. n-1`` (gymnasium's ``Discrete(n)``)."""

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise ValueError(f"Discrete action space needs an integer n >= 1, got {self.n!r}")
        object.__setattr__(self, "n", int(self.n))


@dataclass(frozen=True, eq=False)
class BoxSpace:
    """Float actions of ``shape`` between ``low`` and ``high`` (gymnasium's ``Box``).

    ``low`` and ``high`` broadcast to ``shape`` and default to unbounded.
    """

    shape: tuple[int, ...]
    low: Any = -np.inf
    high: Any = np.inf

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in np.atleast_1d(self.shape))
        if not shape or any(d < 1 for d in shape):
            raise ValueError(
                f"Box action space needs a shape of positive sizes, got {self.shape!r}"
            )
        low = np.broadcast_to(np.asarray(self.low, dtype=np.float32), shape).copy()
        high = np.broadcast_to(np.asarray(self.high, dtype=np.float32), shape).copy()
        if np.any(low > high):
            raise ValueError("Box action space has low > high")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @property
    def size(self) -> int:
        """Number of action dimensions the Gaussian is over (``prod(shape)``)."""
        return math.prod(self.shape)


ActionSpace = Union[DiscreteSpace, BoxSpace]


def as_action_space(space: Any) -> ActionSpace:
    """Return *space* as a :class:`DiscreteSpace` or :class:`BoxSpace`.

    Accepts either of those, the wire description of a space that
    ``SET_CONFIG`` carries (:mod:`rlinks_rllib.protocol.spaces`, e.g.
    ``{"kind": "discrete", "n": 2, "start": 0}``), or a gymnasium
    ``Discrete``/``Box`` (read by its attributes, so gymnasium need not be
    importable here).

    Raises:
        ValueError: *space* is none of these, its values are out of range, or
            a ``Discrete`` starts elsewhere than 0.
    """
    if isinstance(space, (DiscreteSpace, BoxSpace)):
        return space
    if isinstance(space, Mapping):
        kind = space.get("kind")
        if kind == spaces.DISCRETE and "n" in space:
            return _discrete(space["n"], space.get("start", 0))
        if kind == spaces.BOX and "shape" in space:
            return BoxSpace(space["shape"], space.get("low", -np.inf), space.get("high", np.inf))
        raise ValueError(
            f"only {spaces.DISCRETE!r} and {spaces.BOX!r} action spaces are supported, "
            f"got a description of kind {kind!r}; TorchModulePolicy runs RLlib's module for others"
        )
    if all(hasattr(space, name) for name in ("shape", "low", "high")):
        return BoxSpace(space.shape, space.low, space.high)
    if hasattr(space, "n") and hasattr(space, "start"):
        return _discrete(space.n, space.start)
    raise ValueError(
        f"only Discrete and Box action spaces are supported, got {type(space).__name__}; "
        "TorchModulePolicy runs RLlib's module for other spaces"
    )


def _discrete(n: Any, start: Any) -> DiscreteSpace:
    if start != 0:
        raise ValueError(
            f"Discrete action space starts at {start}; RLlib's categorical draws "
            "0 .. n-1, so the simulator must shift the action itself"
        )
    return DiscreteSpace(n)


# ---------------------------------------------------------------------------
# Output


@dataclass(frozen=True, eq=False)
class PolicyOutput:
    """Actions for a batch of observations, and what RLlib wants recorded with them.

    From :meth:`NumpyPolicy.compute_actions` every field has a leading batch
    dimension; from ``compute_action`` it is one row of that.

    Attributes:
        action: what the episode records and RLlib trains on; int64 for
            ``Discrete``, float32 of the Gaussian's size for ``Box``.
        action_logp: float32 log-probability of ``action`` (0 in greedy mode).
        action_dist_inputs: float32 logits, the module's ``action_dist_inputs``.
        action_for_env: ``action`` unsquashed or clipped to the Box bounds and
            shaped as the Box; for ``Discrete`` the same as ``action``.
    """

    action: np.ndarray
    action_logp: np.ndarray
    action_dist_inputs: np.ndarray
    action_for_env: np.ndarray

    def row(self, i: int) -> PolicyOutput:
        """The output for the *i*-th observation of the batch."""
        return PolicyOutput(
            self.action[i], self.action_logp[i], self.action_dist_inputs[i], self.action_for_env[i]
        )


# ---------------------------------------------------------------------------
# Numpy forward pass

_LAYER_NORM_EPS = 1e-3  # RLlib's TorchMLP builds nn.LayerNorm(eps=0.001).


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # tanh form: no overflow warning for large negative x.
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray] | None] = {
    "linear": None,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "elu": _elu,
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "swish": lambda x: x * _sigmoid(x),
}


def _activation(name: str | None) -> Callable[[np.ndarray], np.ndarray] | None:
    key = "linear" if name is None else str(name).lower()
    if key not in _ACTIVATIONS:
        raise UnsupportedModelError(
            f"activation {name!r} is not one NumpyPolicy knows ({', '.join(_ACTIVATIONS)}); "
            "use TorchModulePolicy to run RLlib's module with torch instead"
        )
    return _ACTIVATIONS[key]


@dataclass(frozen=True, eq=False)
class _Dense:
    weight_t: np.ndarray  # (in, out): torch stores (out, in)
    bias: np.ndarray | None
    norm: tuple[np.ndarray, np.ndarray] | None
    activation: Callable[[np.ndarray], np.ndarray] | None

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


# Where RLlib's default modules keep their parameters.
_ENCODER_PREFIXES = ("encoder.encoder.net.mlp.", "encoder.actor_encoder.net.mlp.")
_PI_PREFIX = "pi.net.mlp."
_PI_LOG_STD = "pi.log_std"
_PI_CLIP = "pi.log_std_clip_param_const"
# Critic and target networks: in a full (not inference-only) state, unused here.
_IGNORED_PREFIXES = ("vf.", "encoder.critic_encoder.", "_old_encoder.", "_old_pi.")


def _unsupported(what: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"not one of RLlib's default MLP RLModules: {what}. NumpyPolicy runs the "
        "default PPO/APPO/IMPALA modules for 1-D observations; for any other "
        "module build RLlib's RLModule with torch (TorchModulePolicy)"
    )


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(repr(n[:80]) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _float32(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise _unsupported(f"parameter {name!r} has dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _read_mlp(
    params: Mapping[str, Any],
    prefix: str,
    between: Callable[[np.ndarray], np.ndarray] | None,
    between_name: str,
    last: Callable[[np.ndarray], np.ndarray] | None,
) -> list[_Dense]:
    """Read the ``nn.Sequential`` of one RLlib ``TorchMLP`` from its parameters.

    The Sequential's indices show the layout: a Linear (2-D weight), maybe a
    LayerNorm (1-D weight) right after it, then one parameterless slot for the
    activation unless it is linear. *between* follows every layer but the last,
    which gets *last*.
    """
    entries: dict[int, dict[str, np.ndarray]] = {}
    for name, value in params.items():
        if not name.startswith(prefix):
            continue
        index, _, leaf = name[len(prefix):].partition(".")
        if not (index.isascii() and index.isdigit()) or leaf not in ("weight", "bias"):
            raise _unsupported(f"unexpected parameter {name!r}")
        entries.setdefault(int(index), {})[leaf] = _float32(name, value)
    if not entries:
        raise _unsupported(f"no layers under {prefix!r}")

    def expected(what: str, pos: int) -> UnsupportedModelError:
        return _unsupported(
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
            raise _unsupported(
                f"{prefix}{pos}.weight has shape {weight.shape}, which does not take "
                f"the previous layer's {layers[-1].weight_t.shape[1]} outputs"
            )
        out = weight.shape[0]
        bias = linear.get("bias")
        if bias is not None and bias.shape != (out,):
            raise _unsupported(f"{prefix}{pos}.bias has shape {bias.shape}, expected ({out},)")
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


@dataclass(frozen=True, eq=False)
class _Network:
    encoder: list[_Dense]
    pi: list[_Dense]
    free_log_std: np.ndarray | None  # (size,), free_log_std=True only
    log_std_clip: float | None  # Box only

    @property
    def observation_size(self) -> int:
        return self.encoder[0].weight_t.shape[0]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = obs
        for layer in self.encoder:
            x = layer(x)
        for layer in self.pi:
            x = layer(x)
        if self.log_std_clip is None:
            return x
        clip = self.log_std_clip
        if self.free_log_std is not None:
            log_std = np.broadcast_to(np.clip(self.free_log_std, -clip, clip), x.shape)
            return np.concatenate([x, log_std], axis=-1)
        mean, log_std = np.split(x, 2, axis=-1)
        return np.concatenate([mean, np.clip(log_std, -clip, clip)], axis=-1)


def _read_network(
    params: Mapping[str, Any], space: ActionSpace, fcnet_activation: str, head_fcnet_activation: str
) -> _Network:
    if not isinstance(params, Mapping):
        raise TypeError(f"params must map parameter names to arrays, got {type(params).__name__}")
    names = [str(n) for n in params]
    unknown = [
        n for n in names
        if not n.startswith((*_ENCODER_PREFIXES, _PI_PREFIX, *_IGNORED_PREFIXES))
        and n not in (_PI_LOG_STD, _PI_CLIP)
    ]
    if unknown:
        raise _unsupported(f"unexpected parameters {_listing(unknown)}")
    prefixes = [p for p in _ENCODER_PREFIXES if any(n.startswith(p) for n in names)]
    if len(prefixes) != 1:
        raise _unsupported(
            f"expected MLP encoder parameters under one of {_ENCODER_PREFIXES}, "
            f"found {prefixes or 'none'}"
        )

    act = _activation(fcnet_activation)
    head_act = _activation(head_fcnet_activation)
    encoder = _read_mlp(params, prefixes[0], act, str(fcnet_activation), act)
    pi = _read_mlp(params, _PI_PREFIX, head_act, str(head_fcnet_activation), None)
    latent, pi_in = encoder[-1].weight_t.shape[1], pi[0].weight_t.shape[0]
    if latent != pi_in:
        raise _unsupported(f"the encoder puts out {latent} values but the pi head takes {pi_in}")

    out = pi[-1].weight_t.shape[1]
    free_log_std = None
    if _PI_LOG_STD in params:
        free_log_std = _float32(_PI_LOG_STD, params[_PI_LOG_STD])
    if isinstance(space, DiscreteSpace):
        if free_log_std is not None or out != space.n:
            head = f"a pi head with {out} outputs"
            head += " and a free log-std" if free_log_std is not None else ""
            raise _unsupported(
                f"{head} does not fit Discrete({space.n}), which needs {space.n} logits"
            )
        return _Network(encoder, pi, None, None)

    size = space.size
    if free_log_std is not None and (out != size or free_log_std.shape != (size,)):
        raise _unsupported(
            f"a pi head with {out} outputs and a free log-std of shape {free_log_std.shape} "
            f"does not fit a Box of size {size}"
        )
    if free_log_std is None and out != 2 * size:
        raise _unsupported(
            f"a pi head with {out} outputs does not fit a Box of size {size}, "
            f"which needs {2 * size} (mean and log-std)"
        )
    if _PI_CLIP not in params:
        raise _unsupported(f"a Box action space but no {_PI_CLIP!r}")
    clip = _float32(_PI_CLIP, params[_PI_CLIP])
    if clip.size != 1:
        raise _unsupported(f"{_PI_CLIP!r} has shape {clip.shape}, expected (1,)")
    return _Network(encoder, pi, free_log_std, float(clip.reshape(())))


# ---------------------------------------------------------------------------
# Sampling, as RLlib's TorchCategorical / TorchDiagGaussian / TorchDeterministic

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _sample(
    space: ActionSpace, logits: np.ndarray, explore: bool, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    batch = logits.shape[0]
    if isinstance(space, DiscreteSpace):
        if not explore:
            return np.argmax(logits, axis=-1).astype(np.int64), np.zeros(batch, np.float32)
        z = logits.astype(np.float64)
        z = z - z.max(axis=-1, keepdims=True)
        log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        cdf = np.cumsum(np.exp(log_probs), axis=-1)
        # Inverse CDF, one uniform per row; scaled by the total so rounding in
        # the cumulative sum can't leave u past the last class.
        u = rng.random(batch) * cdf[:, -1]
        action = np.argmax(cdf > u[:, None], axis=-1).astype(np.int64)
        logp = np.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
        return action, logp.astype(np.float32)

    mean, log_std = np.split(logits, 2, axis=-1)
    if not explore:
        return mean.copy(), np.zeros(batch, np.float32)
    noise = rng.standard_normal(mean.shape, dtype=np.float32)
    action = mean + np.exp(log_std) * noise
    logp = _gaussian_logp(mean, log_std, action)
    return action, logp


def _gaussian_logp(mean: np.ndarray, log_std: np.ndarray, action: np.ndarray) -> np.ndarray:
    mean, log_std, action = (a.astype(np.float64) for a in (mean, log_std, action))
    z = (action - mean) / np.exp(log_std)
    return (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(axis=-1).astype(np.float32)


def _for_env(
    space: ActionSpace | None, action: np.ndarray, normalize: bool, clip: bool
) -> np.ndarray:
    """RLlib's ``NormalizeAndClipActions``: unsquash (bounded Box only) or clip."""
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


def _obs_batch(obs: Any, shape: tuple[int, ...] | None) -> np.ndarray:
    batch = np.asarray(obs, dtype=np.float32)
    if shape is None:
        if batch.ndim < 2:
            raise ValueError(f"observations need a batch dimension, got shape {batch.shape}")
    elif batch.shape[1:] != shape or batch.ndim < 2:
        want = ", ".join(["batch", *map(str, shape)])
        raise ValueError(f"observations must have shape ({want}), got {batch.shape}")
    return batch


class _Policy:
    """What both policies share: the batch/single entry points and the rng."""

    _rng: np.random.Generator

    def _observation_shape(self) -> tuple[int, ...] | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def compute_actions(
        self, obs: Any, *, explore: bool = True, rng: np.random.Generator | None = None
    ) -> PolicyOutput:  # pragma: no cover - overridden
        raise NotImplementedError

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


class NumpyPolicy(_Policy):
    """RLlib's default PPO/APPO/IMPALA MLP module, run in numpy.

    Args:
        params: the module's state as RLlib sends it
            (``module.get_state(inference_only=True)``, e.g. from
            :func:`rlinks_rllib.protocol.weights.read_state`). A full state also
            works; critic and target networks in it are ignored.
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
        self.action_space = as_action_space(action_space)
        self._activations = (fcnet_activation, head_fcnet_activation)
        self._normalize = normalize_actions
        self._clip = clip_actions
        self._rng = rng if rng is not None else np.random.default_rng()
        self._net = _read_network(params, self.action_space, *self._activations)

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Replace the weights, e.g. with a newer set from ``SET_STATE``.

        The arrays are copied, so the caller may reuse its buffers.

        Raises:
            UnsupportedModelError, TypeError: as the constructor; the old
                weights stay.
        """
        self._net = _read_network(params, self.action_space, *self._activations)

    @property
    def observation_size(self) -> int:
        """Length of one observation, from the first layer's weights."""
        return self._net.observation_size

    def _observation_shape(self) -> tuple[int, ...]:
        return (self._net.observation_size,)

    def action_dist_inputs(self, obs: Any) -> np.ndarray:
        """The module's ``action_dist_inputs`` (float32 logits) for a batch.

        Raises:
            ValueError: *obs* is not ``(batch, observation_size)``.
        """
        net = self._net  # one weight set per call, even if set_params runs meanwhile
        return net(_obs_batch(obs, (net.observation_size,)))

    def compute_actions(
        self, obs: Any, *, explore: bool = True, rng: np.random.Generator | None = None
    ) -> PolicyOutput:
        """Sample (``explore``) or pick greedily an action for each observation.

        Raises:
            ValueError: *obs* is not ``(batch, observation_size)``, or the
                logits are not finite (NaN or inf in the observations or
                weights), which would make every action meaningless.
        """
        logits = self.action_dist_inputs(obs)
        if not np.isfinite(logits).all():
            bad = np.flatnonzero(~np.isfinite(logits).all(axis=-1))
            raise ValueError(f"logits are not finite for observations at rows {bad[:8].tolist()}")
        rng = rng if rng is not None else self._rng
        action, logp = _sample(self.action_space, logits, explore, rng)
        for_env = _for_env(self.action_space, action, self._normalize, self._clip)
        return PolicyOutput(action, logp, logits, for_env)


class TorchModulePolicy(_Policy):
    """Any stateless RLlib RLModule, run with torch, behind :class:`NumpyPolicy`'s interface.

    Stateless: a recurrent module needs its state carried from step to step,
    which this class does not do. Needs ``ray[rllib]`` and ``torch``, imported
    only when one is built. Actions come from the module's own distribution
    classes, exactly as RLlib's ``GetActions`` connector draws them; a numpy
    ``rng`` seeds torch's generator for the draw without touching torch's
    global random state.

    Args:
        source: an ``AlgorithmConfig``, an ``RLModuleSpec``, or a built
            ``RLModule``.
        observation_space, action_space: gymnasium spaces, for a config that
            does not name them itself.
        normalize_actions, clip_actions, rng: as for :class:`NumpyPolicy`.

    Raises:
        ImportError: ray or torch is not installed.
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
        try:
            import torch
            from ray.rllib.core import DEFAULT_MODULE_ID
            from ray.rllib.core.columns import Columns
        except ImportError as exc:
            raise ImportError(
                "TorchModulePolicy needs ray[rllib] and torch (pip install 'ray[rllib]' torch); "
                "without them use NumpyPolicy, which runs RLlib's default MLP modules"
            ) from exc
        self._torch, self._columns = torch, Columns
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

    def _forward(self, obs: Any, explore: bool) -> tuple[dict, Any]:
        batch = {self._columns.OBS: self._torch.from_numpy(_obs_batch(obs, self._obs_shape))}
        with self._torch.no_grad():
            forward = self.module.forward_exploration if explore else self.module.forward_inference
            out = forward(batch)
        return out, out[self._columns.ACTION_DIST_INPUTS]

    def compute_actions(
        self, obs: Any, *, explore: bool = True, rng: np.random.Generator | None = None
    ) -> PolicyOutput:
        """Sample (``explore``) or pick greedily an action for each observation.

        Raises:
            ValueError: *obs* is not a batch of the module's observation shape.
        """
        torch, columns = self._torch, self._columns
        out, logits = self._forward(obs, explore)
        if explore:
            dist = self.module.get_exploration_action_dist_cls().from_logits(logits)
        else:
            dist_cls = self.module.get_inference_action_dist_cls()
            dist = dist_cls.from_logits(logits).to_deterministic()
        seed = int((rng if rng is not None else self._rng).integers(2**63))
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            action = out[columns.ACTIONS] if columns.ACTIONS in out else dist.sample()
            logp = dist.logp(action) if explore else torch.zeros(len(logits))
        action = action.numpy()
        for_env = _for_env(self.action_space, action, self._normalize, self._clip)
        return PolicyOutput(action, logp.numpy().astype(np.float32), logits.numpy(), for_env)
