"""The simulator side of rlinks-rllib: connect to a learner, send episodes, get weights.

Imports :mod:`rlinks_rllib.protocol` only; works without Ray.
"""

from .address import Address, parse_address
from .connection import ClientStats, RLinkClient, WeightsUpdate
from .errors import (
    ClientClosed,
    ClientError,
    ConnectFailed,
    ConnectionLost,
    PickledConfigRefused,
    ProtocolViolation,
    ServerError,
    ServerTimeout,
    TLSNotAvailable,
)

__all__ = [
    "Address",
    "ClientClosed",
    "ClientError",
    "ClientStats",
    "ConnectFailed",
    "ConnectionLost",
    "PickledConfigRefused",
    "ProtocolViolation",
    "RLinkClient",
    "ServerError",
    "ServerTimeout",
    "TLSNotAvailable",
    "WeightsUpdate",
    "parse_address",
]
