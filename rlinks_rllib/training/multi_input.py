"""An encoder for observations that are a ``Dict`` or ``Tuple`` of images and vectors.

RLlib's catalog builds an MLP for a 1-D ``Box`` and a CNN for a 3-D one, and
refuses anything nested. A simulator's observation is usually both: a camera
image beside joint angles. :class:`MultiInputPPOCatalog` takes such a space
and builds, out of RLlib's own parts:

- one CNN (:class:`CNNEncoderConfig`, filters from ``conv_filters``) per
  image leaf, a ``Box`` of rank 3 read as height × width × channels; a
  ``uint8`` image is scaled to ``[0, 1]`` first, so a client sends the raw
  bytes it rendered;
- one MLP (``fcnet_hiddens``) over every other leaf, flattened and joined:
  ``Box`` values as floats, ``Discrete`` and ``MultiDiscrete`` one-hot,
  ``MultiBinary`` as 0./1.;
- RLlib's multi-stream fusion (``fusionnet_hiddens``) over all of them, whose
  output (``fcnet_hiddens[-1]`` wide) feeds the usual policy and value heads.

The leaves are taken in the order of :func:`rlinks_rllib.protocol.spaces.leaves`,
the order the wire description gives, so a client or an exported graph can
feed them by position. With ``use_lstm`` the same encoder becomes the
tokenizer in front of RLlib's LSTM. PPO, APPO and IMPALA all build their
modules with :class:`~ray.rllib.algorithms.ppo.ppo_catalog.PPOCatalog`, so
one catalog serves the three.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT, Encoder, Model
from ray.rllib.core.models.configs import (
    CNNEncoderConfig,
    MLPEncoderConfig,
    ModelConfig,
    MultiStreamEncoderConfig,
)
from ray.rllib.core.models.torch.base import TorchModel
from ray.rllib.models.utils import get_filter_config
from torch import nn

from ..protocol.spaces import describe_space, leaves

__all__ = ["MultiInputEncoderConfig", "MultiInputPPOCatalog", "needs_multi_input"]

#: Stream names inside the fusion encoder; leaf keys from users never become
#: module names (torch refuses dots in them).
VECTOR_STREAM = "vector"
IMAGE_STREAM = "image{}"


def needs_multi_input(space: gym.Space) -> bool:
    """Whether RLlib's own catalog can't encode *space* and ours must.

    True for a ``Dict`` or ``Tuple``, and for a ``uint8`` image ``Box``
    (RLlib's CNN takes floats only; ours scales the bytes).
    """
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return True
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


@dataclasses.dataclass
class _Leaf:
    """How one leaf of the observation enters the network."""

    path: tuple
    kind: str  # "image", "float", "one_hot", "binary"
    shape: tuple
    scale: float = 1.0
    sizes: tuple = ()  # one-hot widths (Discrete: one; MultiDiscrete: one per entry)
    offsets: tuple = ()

    @property
    def width(self) -> int:
        """Features this leaf adds to the vector stream (0 for an image)."""
        if self.kind == "image":
            return 0
        if self.kind == "one_hot":
            return int(sum(self.sizes))
        return int(np.prod(self.shape, dtype=np.int64))


def _plan(space: gym.Space) -> list[_Leaf]:
    plan = []
    for path, desc in leaves(describe_space(space)):
        kind = desc["kind"]
        if kind == "box" and len(desc["shape"]) == 3:
            scale = 1.0 / 255.0 if np.dtype(desc["dtype"]) == np.uint8 else 1.0
            plan.append(_Leaf(path, "image", tuple(desc["shape"]), scale))
        elif kind == "box":
            plan.append(_Leaf(path, "float", tuple(desc["shape"])))
        elif kind == "discrete":
            plan.append(_Leaf(path, "one_hot", (), sizes=(desc["n"],), offsets=(desc.get("start", 0),)))
        elif kind == "multi_discrete":
            nvec = desc["nvec"].reshape(-1)
            plan.append(_Leaf(path, "one_hot", tuple(desc["nvec"].shape), sizes=tuple(int(n) for n in nvec),
                              offsets=(0,) * len(nvec)))
        else:
            plan.append(_Leaf(path, "binary", tuple(desc["shape"])))
    return plan


@dataclasses.dataclass
class MultiInputEncoderConfig(ModelConfig):
    """Config of :class:`TorchMultiInputEncoder`: the observation space and RLlib's model settings.

    Raises (on build):
        ValueError: an image leaf has no ``conv_filters`` and RLlib has no
            default filters for its size.
    """

    observation_space: gym.Space = None
    model_config_dict: dict = None

    @property
    def output_dims(self) -> tuple:
        return (int(self.model_config_dict["fcnet_hiddens"][-1]),)

    def build(self, framework: str = "torch") -> "TorchMultiInputEncoder":
        if framework != "torch":
            raise ValueError(f"the multi-input encoder is built for torch only, not {framework!r}")
        return TorchMultiInputEncoder(self)

    def streams_config(self) -> tuple[list[_Leaf], MultiStreamEncoderConfig]:
        """The leaves in order and the RLlib multi-stream encoder over them."""
        model = self.model_config_dict
        plan = _plan(self.observation_space)
        streams: dict[str, ModelConfig] = {}
        for index, leaf in enumerate(leaf for leaf in plan if leaf.kind == "image"):
            filters = model.get("conv_filters") or get_filter_config(leaf.shape)
            streams[IMAGE_STREAM.format(index)] = CNNEncoderConfig(
                input_dims=leaf.shape,
                cnn_filter_specifiers=filters,
                cnn_activation=model["conv_activation"],
            )
        width = sum(leaf.width for leaf in plan)
        if width:
            hiddens = list(model["fcnet_hiddens"])
            streams[VECTOR_STREAM] = MLPEncoderConfig(
                input_dims=(width,),
                hidden_layer_dims=hiddens[:-1],
                hidden_layer_activation=model["fcnet_activation"],
                output_layer_dim=hiddens[-1],
                output_layer_activation=model["fcnet_activation"],
            )
        fusion = MultiStreamEncoderConfig(
            base_encoder_configs=streams,
            hidden_layer_dims=list(model["fusionnet_hiddens"]),
            hidden_layer_activation=model["fusionnet_activation"],
            output_layer_dim=self.output_dims[0],
            output_layer_activation=model["fusionnet_activation"],
        )
        return plan, fusion


class TorchMultiInputEncoder(TorchModel, Encoder):
    """Turns a nested observation batch into the streams of RLlib's multi-stream encoder."""

    def __init__(self, config: MultiInputEncoderConfig) -> None:
        TorchModel.__init__(self, config)
        Encoder.__init__(self, config)
        self.plan, fusion = config.streams_config()
        self.fusion = fusion.build(framework="torch")

    def _forward(self, inputs: dict, **kwargs: Any) -> dict:
        observations = inputs[Columns.OBS]
        streams: dict[str, torch.Tensor] = {}
        vectors = []
        images = 0
        for leaf in self.plan:
            value = observations
            for part in leaf.path:
                value = value[part]
            if leaf.kind == "image":
                streams[IMAGE_STREAM.format(images)] = value.float() * leaf.scale
                images += 1
            else:
                vectors.append(self._flatten(leaf, value))
        if vectors:
            streams[VECTOR_STREAM] = torch.cat(vectors, dim=-1)
        return {ENCODER_OUT: self.fusion(streams)[ENCODER_OUT]}

    @staticmethod
    def _flatten(leaf: _Leaf, value: torch.Tensor) -> torch.Tensor:
        batch = value.shape[: value.dim() - len(leaf.shape)]
        if leaf.kind != "one_hot":
            return value.reshape(*batch, -1).float()
        flat = value.reshape(*batch, -1).long()
        parts = [
            nn.functional.one_hot(flat[..., i] - offset, size).float()
            for i, (size, offset) in enumerate(zip(leaf.sizes, leaf.offsets))
        ]
        return torch.cat(parts, dim=-1)


class MultiInputPPOCatalog(PPOCatalog):
    """PPO's catalog (also APPO's and IMPALA's) with :class:`MultiInputEncoderConfig` where :func:`needs_multi_input`."""

    @classmethod
    def _get_encoder_config(
        cls,
        observation_space: gym.Space,
        model_config_dict: dict,
        action_space: gym.Space = None,
    ) -> ModelConfig:
        if needs_multi_input(observation_space) and not model_config_dict.get("use_lstm"):
            return MultiInputEncoderConfig(observation_space=observation_space, model_config_dict=model_config_dict)
        return super()._get_encoder_config(observation_space, model_config_dict, action_space)
