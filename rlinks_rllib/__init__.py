"""rlinks-rllib: train Ray RLlib on external simulators that connect over TCP.

The package root stays import-light (no Ray, no torch): a simulator machine
imports :mod:`rlinks_rllib.client` without Ray installed. The server side is
reached as ``from rlinks_rllib import RLinkEnvRunner``, imported on first use.
"""

from ._version import __version__

__all__ = ["RLinkEnvRunner", "RLinkReceipts", "RLinkShares", "RLinkReplaySafe", "rlinks_env_config", "__version__"]


def __getattr__(name: str):
    if name == "RLinkEnvRunner":
        from .server.env_runner import RLinkEnvRunner

        return RLinkEnvRunner
    if name == "RLinkReceipts":
        from .server.delivery.receipts import RLinkReceipts

        return RLinkReceipts
    if name == "RLinkShares":
        from .server.delivery.shares import RLinkShares

        return RLinkShares
    if name == "RLinkReplaySafe":
        from .training.replay import RLinkReplaySafe

        return RLinkReplaySafe
    if name == "rlinks_env_config":
        from .server.settings import rlinks_env_config

        return rlinks_env_config
    raise AttributeError(f"module 'rlinks_rllib' has no attribute {name!r}")
