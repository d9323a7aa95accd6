"""The actor side of the seeds' data path: ``put`` dicts of arrays, fetch the model trained on them.

For data that is not RL episodes (a robot's camera image and action chunk,
one dict per step) going to a training loop of the user's own, which reads
them through :class:`~rlinks_rllib.dataset.torch_dataset.RLinkDataset` and
pushes its model back with ``RLinkSyncModel.sync``::

    actor = RLinkActor("learner-host:8443")
    actor.put({"image_0": image, "action": chunk, "index": i})
    model = actor.get_remote_model()      # None until the learner synced one
    if model is not None:
        params, version = model.params, model.version

Samples travel in ``SAMPLES`` messages (PROTOCOL.md 10.10) with the
reliability of episodes: confirmed when the consumer's loop has them,
resent after a reconnect, recognised when resent. ``put`` returns at once
(it packs the sample, a copy); a thread sends what was put, a lone sample
at once and many per message when they come fast
(:class:`~.sample_sender.SampleSender`). While the window is full ``put``
waits (at most ``timeout``, then :class:`~.errors.ServerTimeout`): a slow
consumer slows the actors and nothing is lost. The window is what the
dataset asks for in its handshake (enough to fill its batches), unless
``max_unacked`` says otherwise.

Seed 001's names are here too: ``ActorNode(learner_address=...).send_trajectory(dict)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from ..protocol.buffers import BufferPool
from ..protocol.extensions import Extension
from ..protocol.samples import encode_sample
from .errors import ClientError, NotAgreed
from .network.connection import DEFAULT_EXTENSIONS, RLinkClient
from .network.shared_client import SharedClient
from .sample_sender import SampleSender

__all__ = ["RLinkActor", "RemoteModel", "ActorNode", "ACTOR_EXTENSIONS", "DEFAULT_MAX_UNACKED",
           "DEFAULT_MAX_UNACKED_BYTES"]

#: What an actor offers: the client's defaults and ``samples``.
ACTOR_EXTENSIONS = (*DEFAULT_EXTENSIONS, Extension.SAMPLES.value)
#: Samples in flight when the server names no window (an older dataset, which confirms on arrival).
DEFAULT_MAX_UNACKED = 64
#: Bytes of samples in flight and waiting to be sent, at most (the actor's memory for them, twice).
DEFAULT_MAX_UNACKED_BYTES = 1024 * 1024 * 1024

#: The most bytes of array copies an actor keeps for reuse (protocol/buffers.py).
MAX_POOLED_BYTES = 256 * 1024 * 1024
#: How an actor reconnects by default: for about a minute (a training loop restarted after a crash,
#: or by Ray Train), where a simulator's client gives up after a few seconds.
_RECONNECT_DEFAULTS = {"retry_attempts": 30, "backoff_cap": 2.0}

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemoteModel:
    """The newest model a learner synced: parameter name -> numpy array, and its version (1, 2, ...)."""

    params: dict[str, np.ndarray]
    version: int


class RLinkActor:
    """Sends samples to a learner's dataset and fetches the model it syncs.

    Args:
        address: the dataset's ``HOST:PORT`` (``http://``, ``tcp://``, ``tls://`` and ``ws://``
            prefixes as :class:`~.network.connection.RLinkClient` takes them).
        timeout: seconds a ``put`` may wait for room, a ``flush`` for its confirmations and a
            fetch for its reply.
        reliable: reconnect and resend what is unconfirmed when the connection drops.
        max_unacked: samples that may await confirmation at once (the back-pressure window).
            ``None``: what the dataset names in its handshake (twice its batch plus its buffer),
            else :data:`DEFAULT_MAX_UNACKED`. Fewer than a batch still works, a batch at a time
            after the dataset's ``partial_batch_after``.
        max_unacked_bytes: bytes of samples that may await confirmation at once (and, as many
            again, wait to be sent): the actor's memory for them.
        client_options: further :class:`~.network.connection.RLinkClient` arguments (``retry_attempts``,
            ``connect_wait``, ``secret``, TLS files, ...). An actor reconnects for about a minute
            by default (``retry_attempts=30``, ``backoff_cap=2.0``): long enough for a training
            loop restarted after a crash to listen again.

    Raises:
        ValueError: as :class:`~.network.connection.RLinkClient`, or a bound that is not an int >= 1.
    """

    def __init__(self, address: str, *, timeout: float = 30.0, reliable: bool = True,
                 max_unacked: Optional[int] = None, max_unacked_bytes: int = DEFAULT_MAX_UNACKED_BYTES,
                 **client_options: Any) -> None:
        if isinstance(address, str) and address.startswith("http://"):
            address = address[len("http://"):]
        for name, value in (("max_unacked", max_unacked), ("max_unacked_bytes", max_unacked_bytes)):
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        steps = DEFAULT_MAX_UNACKED if max_unacked is None else max_unacked
        for name, value in _RECONNECT_DEFAULTS.items():
            client_options.setdefault(name, value)
        self.client = RLinkClient(address, timeout=timeout, reliable=reliable, max_unacked=steps,
                                  extensions=ACTOR_EXTENSIONS, **client_options)
        window = self.client.window
        window.max_steps, window.max_bytes, window.steps_from_peer = steps, max_unacked_bytes, max_unacked is None
        self._shared = SharedClient(self.client)
        self._sender = SampleSender(self._shared, timeout=timeout, logger=logger)
        self._pool = BufferPool(min(max_unacked_bytes, MAX_POOLED_BYTES))
        self._closed = False
        #: The first connection was made and takes samples.
        self._ready = False

    def _connect(self) -> None:
        """Connect on the caller's thread, so the first ``put`` raises what connecting meets.

        Raises:
            NotAgreed: the server takes no samples (an RLlib runner, not a dataset).
            ConnectFailed, AuthenticationFailed, TLSFailed, ServerError, ClientClosed.
        """
        self._shared.call(self.client.connect)
        if Extension.SAMPLES.value not in self.client.server_extensions:
            raise NotAgreed(f"{self.address} takes no samples (it did not agree to the samples extension): "
                            "is it an RLlib runner rather than an RLinkDataset?", Extension.SAMPLES.value)
        self._ready = True

    @property
    def address(self) -> str:
        """The dataset's address as given (``HOST:PORT``, or with its scheme: ``tls://HOST:PORT``)."""
        return str(self.client.given_address)

    def put(self, sample: Mapping[str, Any]) -> None:
        """Send one sample (a dict of arrays, numbers, bools or short strings), without waiting for it.

        The sample is checked and packed now (a copy): the caller may change
        its arrays once ``put`` returns. A thread sends it, with others put
        meanwhile; :meth:`flush` waits until the dataset's loop has them all.

        Raises:
            ValueError: the sample is malformed (``protocol.samples.SampleError``).
            ServerTimeout: no room within ``timeout`` (the consumer is not taking).
            What sending earlier samples met: NotAgreed (the server takes no
            samples: an RLlib runner, not a dataset), ConnectFailed,
            ConnectionLost, ServerError, ClientClosed.
        """
        encoded = encode_sample(sample, self._pool.take)
        if not self._ready:
            self._connect()
        self._sender.put(encoded)

    def put_many(self, samples: list[Mapping[str, Any]]) -> None:
        """Send several samples, in order; as :meth:`put` otherwise (each is checked before any is sent)."""
        encoded = [encode_sample(sample, self._pool.take) for sample in samples]
        if not self._ready:
            self._connect()
        for sample in encoded:
            self._sender.put(sample)

    def get_remote_model(self) -> Optional[RemoteModel]:
        """The newest model the learner synced, or ``None`` if it has synced none yet.

        Raises:
            ConnectFailed, ConnectionLost, ServerTimeout, ServerError, ClientClosed.
        """
        self._sender.check()
        update = self._shared.call(self.client.get_state)
        if update.seq_no == 0 and not update.params:
            return None
        return RemoteModel({name: np.asarray(value) for name, value in update.params.items()}, update.seq_no)

    @property
    def client_id(self) -> str:
        """This actor's id, the same across reconnects: what a dataset's ``sender_key`` names it by."""
        return self.client.client_id

    @property
    def confirmed(self) -> int:
        """Samples confirmed so far: the dataset's loop has them (reads the ``ACK``\\ s that came; waits for none).

        Samples are confirmed in the order put, so these are the first
        ``confirmed`` ones. A reliable actor whose connection dropped
        reconnects here.

        Raises:
            ConnectFailed, ConnectionLost, ServerError, ClientClosed.
        """
        self._sender.check()
        if self._ready:
            self._shared.call(self.client.poll)
        return self.client.stats.steps_acked

    def flush(self) -> None:
        """Send what was put and wait until the dataset's loop has all of it (every sample confirmed).

        The dataset is told nothing more comes until then, so it hands its
        partial batch to the loop now instead of waiting to fill it.

        Raises:
            ServerTimeout: no confirmation within ``timeout``.
            ConnectFailed, ConnectionLost, ServerError, ClientClosed.
        """
        self._sender.flush()

    def close(self, flush: bool = True) -> None:
        """Deliver what was put (``flush``, bounded by ``timeout``), then close the connection.

        With ``flush=False`` (and when the ``with`` block ends by a
        connection error or Ctrl-C; any other exception still flushes: what
        was put is good data) what is unconfirmed is given up, with a
        warning naming it.

        Raises:
            What :meth:`flush` raises (the connection is closed all the same).
        """
        if self._closed:
            return
        self._closed = True
        try:
            if flush:
                self._sender.flush()
        finally:
            self._sender.close()
            if self._sender.gathered:
                logger.warning("closing the actor for %s with %d sample(s) put and never sent", self.address,
                               self._sender.gathered)
            self.client.close()

    def __enter__(self) -> "RLinkActor":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(flush=exc_type is None or not issubclass(exc_type, (ClientError, KeyboardInterrupt)))


class ActorNode(RLinkActor):
    """Seed 001's actor: ``ActorNode(learner_address="host:port").send_trajectory({...})``."""

    def __init__(self, learner_address: str, **options: Any) -> None:
        super().__init__(learner_address, **options)

    def send_trajectory(self, trajectory: Mapping[str, Any]) -> Optional[int]:
        """Send one trajectory dict (lists become arrays) as one sample; as :meth:`RLinkActor.put`."""
        return self.put({key: np.asarray(value) if isinstance(value, (list, tuple)) else value
                         for key, value in trajectory.items()})
