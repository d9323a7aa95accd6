"""RLlib's ``OfflinePreLearner`` for rlinks recordings: raw image columns become arrays again.

The recorder stores an image observation as fixed-size binary (see
:mod:`rlinks_rllib.server.recorder`); Ray Data reads that as bytes, and
RLlib's prelearner would hand the bytes to the module. ``rlinks learner``
gives every offline config :func:`recording_prelearner`; in your own script::

    config.offline_data(input_=DIR, prelearner_class=recording_prelearner())
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["arrays_from_raw", "recording_prelearner"]


def arrays_from_raw(batch: dict, observation_space: Any) -> dict:
    """``batch`` with its raw observation columns (images, as the recorder stores them) turned back into arrays.

    Ray Data reads a fixed-size binary column as bytes; the observation
    space says their dtype and shape. Other columns, and recordings that
    hold arrays already, pass unchanged.
    """
    from ..server.recorder import NEW_OBS, OBS, raw_to_array

    shape = getattr(observation_space, "shape", None)
    for key in (OBS, NEW_OBS):
        values = batch.get(key)
        if shape and values is not None and len(values) and isinstance(values[0], (bytes, np.bytes_)):
            batch[key] = raw_to_array(values, observation_space.dtype, shape)
    return batch


@functools.cache
def recording_prelearner() -> type:
    """RLlib's ``OfflinePreLearner``, reading the raw image columns of a recording as arrays first."""
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    class RecordingPreLearner(OfflinePreLearner):
        """An ``OfflinePreLearner`` for rlinks recordings (``config.offline_data(prelearner_class=...)``)."""

        def __call__(self, batch: dict) -> dict:
            return super().__call__(arrays_from_raw(batch, self.observation_space))

    return RecordingPreLearner
