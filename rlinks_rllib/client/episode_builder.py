"""Collect a simulator's steps into episode chunks ready to send.

The builders live in :mod:`rlinks_rllib.protocol.episode_builder` (a runner
that serves actions records episodes with them too); this is where a
simulator's code imports them from.
"""

from ..protocol.episode_builder import EpisodeBuilder, VectorEpisodeBuilder

__all__ = ["EpisodeBuilder", "VectorEpisodeBuilder"]
