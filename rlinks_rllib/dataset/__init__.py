"""The dataset for a training loop of one's own (DATASET.md): actors and simulators in, batches out.

- :mod:`.torch_dataset`: :class:`RLinkDataset`, what the loop iterates, and
  :class:`RLinkSyncModel`, how it sends its model back;
- :mod:`.server`: :class:`SampleServer`, the port actors (``put``) and
  ``EnvClient`` simulators connect to, and the seed's ``LearnerNode``;
- :mod:`.episodes`: simulators' episode chunks in the form the loop reads them;
- :mod:`.simulator_model`: the config simulators read and the model form the first sync fixes;
- :mod:`.model_sync`: what a sync sends (weights, or a policy graph and weights).
"""

from .server import LearnerNode, Received, SampleServer
from .torch_dataset import EPISODE, KIND, TRANSITIONS, RLinkDataset, RLinkSyncModel, train_rank

__all__ = ["RLinkDataset", "RLinkSyncModel", "SampleServer", "Received", "LearnerNode", "train_rank", "EPISODE",
           "TRANSITIONS", "KIND"]
