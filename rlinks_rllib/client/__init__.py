"""The simulator side of rlinks-rllib: connect to a learner, send episodes, get weights.

Imports :mod:`rlinks_rllib.protocol` only; works without Ray.
"""

from .address import Address, parse_address
from .connection import ActionsReply, ClientStats, RLinkClient, WeightsUpdate
from .directory import ask_directory
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
)

__all__ = [
    "ActionsReply",
    "Address",
    "AuthenticationFailed",
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
