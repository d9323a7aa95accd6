"""Where :class:`RLinkDataset` was first imported from; it lives in :mod:`rlinks_rllib.dataset` now.

Kept so that code written against this path runs on.
"""

from ..dataset.torch_dataset import (DEFAULT_PARTIAL_BATCH_AFTER_S, EPISODE, KIND, TRANSITIONS, RLinkDataset,
                                     RLinkSyncModel, train_rank)

__all__ = ["RLinkDataset", "RLinkSyncModel", "train_rank", "EPISODE", "TRANSITIONS", "KIND",
           "DEFAULT_PARTIAL_BATCH_AFTER_S"]
