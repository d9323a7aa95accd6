"""Where the sample server (and the seed's ``LearnerNode``) was first imported from; it lives in
:mod:`rlinks_rllib.dataset.server` now.

Kept so that code written against this path runs on.
"""

from ..dataset.server import SAMPLE_EXTENSIONS, LearnerNode, Received, SampleServer, SampleStats

__all__ = ["SampleServer", "SampleStats", "Received", "LearnerNode", "SAMPLE_EXTENSIONS"]
