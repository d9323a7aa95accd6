"""The actor side of the seeds' data path: ``put`` dicts of arrays, fetch the model trained on them.

For data that is not RL episodes (a robot's camera image and action chunk,
one dict per step) going to a training loop of the user's own, which reads
them through :class:`~rlinks_rllib.training.dataset.RLinkDataset` and
pushes its model back with ``RLinkSyncModel.sync``::

    actor = RLinkActor("learner-host:8443")
    actor.put({"image_0": image, "action": chunk, "index": i})
    model = actor.get_remote_model()      # None until the learner synced one
    if model is not None:
        params, version = model.params, model.version

Each ``put`` is a ``SAMPLES`` message (PROTOCOL.md 10.10) with the
reliability of episodes: confirmed when the consumer has taken it, resent
after a reconnect, recognised when resent. While ``max_unacked`` samples
await confirmation ``put`` waits (at most ``timeout``, then
:class:`~.errors.ServerTimeout`): a slow consumer slows the actors and
nothing is lost.

Seed 001's names are here too: ``ActorNode(learner_address=...).send_trajectory(dict)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from ..protocol.extensions import Extension
from .connection import DEFAULT_EXTENSIONS, RLinkClient

__all__ = ["RLinkActor", "RemoteModel", "ActorNode", "ACTOR_EXTENSIONS"]

#: What an actor offers: the client's defaults and ``samples``.
ACTOR_EXTENSIONS = (*DEFAULT_EXTENSIONS, Extension.SAMPLES.value)


@dataclass(frozen=True)
class RemoteModel:
    """The newest model a learner synced: parameter name -> numpy array, and its version (1, 2, ...)."""

    params: dict[str, np.ndarray]
    version: int


class RLinkActor:
    """Sends samples to a learner's dataset and fetches the model it syncs.

    Args:
        address: the learner's ``HOST:PORT`` (``http://`` and ``tcp://`` prefixes are accepted).
        timeout: seconds a ``put`` may wait for room (confirmations) and a fetch for its reply.
        reliable: reconnect and resend what is unconfirmed when the connection drops.
        max_unacked: samples that may await confirmation at once (the back-pressure window).
        client_options: further :class:`~.connection.RLinkClient` arguments (``retry_attempts``,
            ``secret``, TLS files, ...).

    Raises:
        ValueError: as :class:`~.connection.RLinkClient`.
    """

    def __init__(self, address: str, *, timeout: float = 30.0, reliable: bool = True, max_unacked: int = 8,
                 **client_options: Any) -> None:
        if isinstance(address, str) and address.startswith("http://"):
            address = address[len("http://"):]
        self.client = RLinkClient(address, timeout=timeout, reliable=reliable, max_unacked=max_unacked,
                                  extensions=ACTOR_EXTENSIONS, **client_options)

    def put(self, sample: Mapping[str, Any]) -> Optional[int]:
        """Send one sample (a dict of arrays, numbers, bools or short strings); returns its ``seq``.

        The arrays are encoded now: the caller may change them once ``put`` returns.

        Raises:
            ValueError: the sample is malformed (``protocol.samples.SampleError``).
            NotAgreed: the server takes no samples (an RLlib runner, not a dataset).
            ServerTimeout: no room within ``timeout`` (the consumer is not taking).
            ConnectFailed, ConnectionLost, ServerError, ClientClosed.
        """
        return self.client.send_samples([sample])

    def put_many(self, samples: list[Mapping[str, Any]]) -> Optional[int]:
        """Send several samples as one message (one confirmation); as :meth:`put` otherwise."""
        return self.client.send_samples(samples)

    def get_remote_model(self) -> Optional[RemoteModel]:
        """The newest model the learner synced, or ``None`` if it has synced none yet.

        Raises:
            ConnectFailed, ConnectionLost, ServerTimeout, ServerError, ClientClosed.
        """
        update = self.client.get_state()
        if update.seq_no == 0 and not update.params:
            return None
        return RemoteModel({name: np.asarray(value) for name, value in update.params.items()}, update.seq_no)

    def flush(self) -> None:
        """Wait until every sample sent is confirmed (taken by the consumer).

        Raises:
            ServerTimeout: no confirmation within ``timeout``.
            ConnectFailed, ConnectionLost, ServerError, ClientClosed.
        """
        self.client.flush()

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "RLinkActor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ActorNode(RLinkActor):
    """Seed 001's actor: ``ActorNode(learner_address="host:port").send_trajectory({...})``."""

    def __init__(self, learner_address: str, **options: Any) -> None:
        super().__init__(learner_address, **options)

    def send_trajectory(self, trajectory: Mapping[str, Any]) -> Optional[int]:
        """Send one trajectory dict (lists become arrays) as one sample; as :meth:`RLinkActor.put`."""
        return self.put({key: np.asarray(value) if isinstance(value, (list, tuple)) else value
                         for key, value in trajectory.items()})
