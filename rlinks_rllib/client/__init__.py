"""The simulator side of rlinks-rllib: connect to a learner, send episodes, get weights.

What a simulator needs comes from here, in one import:

* :class:`EnvClient`: the object a simulator's loop calls (``act``,
  ``report``), local or served, one env, many, or many agents;
* :class:`PolicyClient`: RLlib's old ``PolicyClient`` calls, on the new stack;
* :class:`RLinkActor`: ``put`` dicts of arrays to a training loop's dataset,
  ``get_remote_model`` (seed 001's :class:`ActorNode` too);
* below them, for protocol-level work: :class:`RLinkClient`, the episode
  builders, the client policies, the error classes and :class:`ErrorCode`.

Imports :mod:`rlinks_rllib.protocol` only; works without Ray.
"""

from ..protocol.episode_builder import EpisodeBuilder, VectorEpisodeBuilder
from ..protocol.errors import ErrorCode
from ..protocol.multi_agent_builder import MultiAgentEpisodeBuilder
from .actor import ActorNode, RemoteModel, RLinkActor
from .network.address import Address, parse_address
from .network.connection import DEFAULT_EXTENSIONS, ActionsReply, ClientStats, RLinkClient, WeightsUpdate
from .network.directory import ask_directory
from .policies.action_spaces import BoxSpace, DiscreteSpace
from .errors import (
    AuthenticationFailed,
    ClientClosed,
    ClientError,
    ConnectFailed,
    ConnectionLost,
    NotAgreed,
    PickledConfigRefused,
    ProtocolViolation,
    ServerError,
    ServerTimeout,
    TLSFailed,
    TLSNotAvailable,
    TrainingEnded,
)
from .env_client import EnvClient, EnvClientStats
from .policies.choice import policy_for
from .policies.mlp import UnsupportedModelError
from .policies.numpy_policy import NumpyPolicy
from .policies.onnx_policy import OnnxPolicy
from .policy_client import PolicyClient

__all__ = [
    "ActionsReply",
    "ActorNode",
    "RLinkActor",
    "RemoteModel",
    "Address",
    "AuthenticationFailed",
    "BoxSpace",
    "DEFAULT_EXTENSIONS",
    "DiscreteSpace",
    "EnvClient",
    "EnvClientStats",
    "EpisodeBuilder",
    "ErrorCode",
    "MultiAgentEpisodeBuilder",
    "NumpyPolicy",
    "OnnxPolicy",
    "PolicyClient",
    "TrainingEnded",
    "UnsupportedModelError",
    "VectorEpisodeBuilder",
    "policy_for",
    "ClientClosed",
    "ClientError",
    "ClientStats",
    "ConnectFailed",
    "ConnectionLost",
    "NotAgreed",
    "PickledConfigRefused",
    "ProtocolViolation",
    "RLinkClient",
    "ServerError",
    "ServerTimeout",
    "TLSFailed",
    "TLSNotAvailable",
    "WeightsUpdate",
    "ask_directory",
    "parse_address",
]
