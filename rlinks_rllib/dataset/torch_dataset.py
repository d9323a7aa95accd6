"""Your own training loop over what actors send: a live PyTorch dataset, and model sync back to the actors.

:class:`RLinkDataset` is a ``torch.utils.data.IterableDataset`` that starts a
:class:`~rlinks_rllib.dataset.server.SampleServer` in a background thread of
the training process and yields what actors ``put``
(:class:`~rlinks_rllib.client.actor.RLinkActor`), sample by sample or in
batches, as tensors on the worker's device. Buffering is bounded: while the
consumer is behind, the server stops reading and the actors' ``put`` waits
(nothing is dropped).

A sample is confirmed to its actor once the loop asks for the batch after
the one that held it (or closes the dataset cleanly): a loop process killed
at any moment, inside a training step included, loses nothing an actor was
told was delivered; the actor sends the rest again to the next dataset on
the port. For that an actor must be allowed enough samples in flight to
fill two batches, which the dataset names in its handshake (``window``).
A partial batch goes to the loop when an actor flushes or leaves, or after
``partial_batch_after`` seconds with nothing arriving, so a loop never
waits for ever for its last samples.

Why a server per training worker rather than one learner process that fans
out: each Ray Train worker (one per GPU) then owns its share by construction
(the actors that connect to it), samples cross the network once, straight
into the process that trains on them, and no second queue or cluster manager
sits between. Under Ray Train, ``base_port`` gives worker ``rank`` the port
``base_port + rank``; actors spread over those ports.

:class:`RLinkSyncModel` pushes a torch module or state dict back as a new
weights version; actors see it with ``get_remote_model()``.

EnvClient simulators connect too when the dataset is told what they look
like (``spaces=(observation_space, action_space)`` or ``env="CartPole-v1"``):
their episodes arrive beside plain samples, one dict per chunk with a
``"kind"`` (``"episode"`` or ``"transitions"``, see
``dataset/episodes.py``), and they act with the model the loop syncs:
RLlib's default MLP as weights (run in numpy; :meth:`RLinkDataset.default_module`
builds one), any other module as a policy graph plus weights. Plain samples
carry no ``"kind"`` of their own making: they are as the actor put them.

Use ``DataLoader(dataset, batch_size=None, num_workers=0)`` (or iterate the
dataset directly): the server lives in this process and is not copied into
loader worker processes.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from typing import Any, Iterator, Mapping, Optional, Union

import numpy as np
import torch

from ..protocol.auth import load_secret
from .episodes import EPISODE, EPISODE_FORMS, KIND, TRANSITIONS, EpisodeReader
from .model_sync import ModelLike, default_module, policy_graph_of, weights_of
from .server import Received, SampleServer
from .simulator_model import DEFAULT_FRAGMENT_STEPS, SimulatorModel

__all__ = ["RLinkDataset", "RLinkSyncModel", "train_rank", "EPISODE", "TRANSITIONS", "KIND",
           "DEFAULT_PARTIAL_BATCH_AFTER_S"]

#: Seconds with nothing arriving after which a partial batch goes to the loop as it is.
DEFAULT_PARTIAL_BATCH_AFTER_S = 1.0
#: How long one wait for the server lasts before the loop's bounds are looked at again.
_WAIT_S = 0.5


def train_rank() -> int:
    """This process's Ray Train world rank, or 0 outside Ray Train."""
    try:
        import ray.train

        return int(ray.train.get_context().get_world_rank())
    except (ImportError, RuntimeError, AttributeError, ValueError):
        return 0


class RLinkDataset(torch.utils.data.IterableDataset):
    """The samples actors send, live, as tensors on ``gpu_id``'s device (the CPU when ``None``).

    Args:
        port: where actors connect; 0: a free port the OS picks (see :attr:`address`).
        base_port: instead of ``port``: listen on ``base_port + rank`` (Ray Train's world rank).
        host: the interface to listen on.
        gpu_id: CUDA device index for the tensors (the seed's ``torch.cuda.current_device()``).
        device: a torch device instead of ``gpu_id``.
        batch_size: yield dicts of stacked tensors of this many samples; ``None``: one sample at a time.
        max_buffer_samples, max_buffer_bytes: what is held before actors are pushed back.
        idle_timeout: end an iteration after this many seconds with nothing arriving; ``None``: never.
        partial_batch_after: yield a batch smaller than ``batch_size`` after this many seconds with
            nothing arriving (an actor's ``flush()`` or its leaving yields one at once). ``None``:
            only whole batches (workers in DDP's lock-step each take the same number of steps;
            an actor's ``flush()`` then waits for its batch to fill).
        max_samples: end an iteration after this many samples; ``None``: never.
        spaces: ``(observation_space, action_space)`` of EnvClient simulators (gymnasium spaces);
            with it (or ``env``) they connect, send episodes and act with the model synced.
        env: instead of ``spaces``: a gymnasium env id whose spaces they are (made once, then closed).
        model_config: RLlib's ``model_config`` of the module the loop trains (``fcnet_hiddens``,
            ``fcnet_activation``, ...): how simulators run RLlib's default MLP, and what
            :meth:`default_module` builds.
        episodes: how a chunk is yielded: ``"episode"`` (as played, observations ``T + 1``) or
            ``"transitions"`` (``obs``, ``actions``, ``rewards``, ``next_obs``, per-step done flags).
            A chunk is yielded alone, whatever ``batch_size``.
        fragment_steps: env steps a simulator records before it sends them.
        sender_key: a key under which each sample (and episode chunk) also carries the id of the
            actor that sent it (its ``client_id``, a str; a list in a batch); ``None``: not added.
        server_options: further :class:`~rlinks_rllib.dataset.server.SampleServer` arguments; its
            ``secret`` is ``$RLINKS_SECRET`` unless given (actors then prove they know it);
            ``tls_cert_file`` (with ``tls_key_file``, and ``tls_client_ca_file`` to require client
            certificates) switches TLS on: actors connect to ``tls://HOST:PORT`` (docs/DATASET.md).
            Actors may also connect over WebSocket (``ws://``, ``wss://`` with TLS) with no option;
            ``ws_allowed_origins`` lets browser pages of those origins in (the runner's setting).

    Raises:
        ValueError: both ``port`` and ``base_port``, both ``spaces`` and ``env``, a bad bound, or
            spaces a dataset can't read episodes of (Dict or Tuple observations).
        OSError: the port is taken, or a TLS file can't be read.
        ssl.SSLError: a TLS file is not a valid PEM certificate or key.
    """

    def __init__(
        self,
        port: Optional[int] = None,
        *,
        base_port: Optional[int] = None,
        host: str = "127.0.0.1",
        gpu_id: Optional[int] = None,
        device: Union[str, torch.device, None] = None,
        batch_size: Optional[int] = None,
        max_buffer_samples: int = 256,
        max_buffer_bytes: int = 512 * 1024 * 1024,
        idle_timeout: Optional[float] = None,
        partial_batch_after: Optional[float] = DEFAULT_PARTIAL_BATCH_AFTER_S,
        max_samples: Optional[int] = None,
        spaces: Optional[tuple[Any, Any]] = None,
        env: Optional[str] = None,
        model_config: Optional[Mapping[str, Any]] = None,
        episodes: str = EPISODE,
        fragment_steps: int = DEFAULT_FRAGMENT_STEPS,
        sender_key: Optional[str] = None,
        **server_options: Any,
    ) -> None:
        super().__init__()
        if port is not None and base_port is not None:
            raise ValueError("give port or base_port, not both")
        if spaces is not None and env is not None:
            raise ValueError("give spaces or env, not both")
        if env is not None:
            spaces = _spaces_of(env)
        self.spaces = spaces
        self.model_config = dict(model_config or {})
        if spaces is not None:
            observation_space, action_space = spaces
            server_options["episodes"] = EpisodeReader(observation_space, action_space, form=episodes)
            server_options["model"] = SimulatorModel(observation_space, action_space, model_config=model_config,
                                                     fragment_steps=fragment_steps)
        if batch_size is not None and (type(batch_size) is not int or batch_size < 1):
            raise ValueError(f"batch_size must be an int >= 1 or None, got {batch_size!r}")
        if base_port is not None:
            port = base_port + train_rank()
        if device is None:
            device = torch.device("cpu") if gpu_id is None else torch.device("cuda", gpu_id)
        self.device = torch.device(device)
        if partial_batch_after is not None and (
                isinstance(partial_batch_after, bool) or not isinstance(partial_batch_after, (int, float))
                or not partial_batch_after > 0):
            raise ValueError(f"partial_batch_after must be a number of seconds > 0 or None, got {partial_batch_after!r}")
        self.batch_size = batch_size
        self.idle_timeout = idle_timeout
        self.partial_batch_after = None if partial_batch_after is None else float(partial_batch_after)
        self.max_samples = max_samples
        self.sender_key = sender_key
        server_options.setdefault("secret", load_secret(None))
        # Two batches unconfirmed (the one the loop trains on, the next one filling) and the buffer behind them.
        server_options.setdefault("window", 2 * (batch_size or 1) + max_buffer_samples)
        self.server = SampleServer(host, port or 0, max_buffer_samples=max_buffer_samples,
                                   max_buffer_bytes=max_buffer_bytes, **server_options).start()
        #: Items taken from the server and not yet yielded; each message's receipt rides on its last item.
        self._ready: list[tuple[dict[str, Any], Optional[Received]]] = []
        #: Messages whose last item was yielded: confirmed when the loop asks for more, or at close().
        self._handed: list[Received] = []
        #: An actor flushed or left: what is ready goes to the loop without waiting to fill a batch.
        self._hand_on = False
        self._pid = os.getpid()

    @property
    def address(self) -> str:
        """``HOST:PORT`` for actors."""
        return self.server.address

    @property
    def port(self) -> int:
        return self.server.port

    def default_module(self, algorithm: str = "PPO") -> torch.nn.Module:
        """RLlib's default torch RLModule of ``algorithm`` for the simulators' spaces and ``model_config``.

        Train it in your loop and sync it: simulators run it in numpy (a 1-D
        ``Box`` observation). On this dataset's device.

        Raises:
            ValueError: the dataset has no ``spaces``, or RLlib has no such algorithm.
        """
        if self.spaces is None:
            raise ValueError("the dataset was made without spaces= or env=: it has no simulators to build for")
        return default_module(algorithm, *self.spaces, self.model_config).to(self.device)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._check_process()
        yielded = 0
        while True:
            self._confirm_handed()  # the loop asked for more: it is done with what it had
            if self.max_samples is not None and yielded >= self.max_samples:
                return
            want = 1 if self.batch_size is None else self.batch_size
            if self.max_samples is not None:
                want = min(want, self.max_samples - yielded)
            samples = self._next(want)
            if not samples:
                return
            yielded += len(samples)
            alone = self.batch_size is None or _is_chunk(samples[0])
            yield self._to_device(samples[0]) if alone else self._collate(samples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The seed's ``__getitem__``: the next sample (``index`` is ignored: the stream has no positions).

        Raises:
            TimeoutError: nothing arrived within ``idle_timeout`` (30 s when unset).
        """
        self._check_process()
        self._confirm_handed()
        samples = self._next(1, self.idle_timeout if self.idle_timeout is not None else 30.0)
        if not samples:
            raise TimeoutError(f"no sample arrived on {self.address}")
        return self._to_device(samples[0])

    def close(self, *, confirm: bool = True) -> None:
        """Confirm what the loop was handed last (``confirm``), then stop the server.

        Call it when the loop is done with its last batch. Actors get
        ``shutting_down``; a reliable one keeps what is unconfirmed and sends
        it to the next dataset on the port. ``confirm=False`` (what leaving a
        ``with`` block by an exception does) leaves the last batch
        unconfirmed too: a step that failed on it did not learn from it.
        """
        if confirm:
            self._confirm_handed()
        self._handed.clear()
        self.server.stop()

    def __enter__(self) -> "RLinkDataset":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(confirm=exc_type is None)

    def __getstate__(self) -> dict:
        raise TypeError("an RLinkDataset holds a live server and stays in its process: use num_workers=0")

    # ------------------------------------------------------------------

    def _next(self, count: int, idle: Optional[float] = None) -> list[dict[str, Any]]:
        """Up to ``count`` samples, waiting for the first one at most ``idle`` (``idle_timeout``) seconds.

        An episode chunk comes alone (chunks don't stack with each other or with samples), and
        samples before one come without it: no wait for more once a chunk is in. Fewer than
        ``count`` come once an actor flushed or left, or after ``partial_batch_after`` seconds
        with nothing arriving. The receipts of what is returned move to ``_handed``.
        """
        idle = self.idle_timeout if idle is None else idle
        now = time.monotonic()
        deadline = None if idle is None else now + idle
        partial_after = math.inf if self.partial_batch_after is None else self.partial_batch_after
        partial_at = now + partial_after
        self._hand_on = self._hand_on and bool(self._ready)  # news of a flush counts for what came before it
        # Looked at once here and then only as items arrive: a scan per message was O(batch) each.
        chunk_ready = any(_is_chunk(item) for item, _ in self._ready)
        while len(self._ready) < count and not self._hand_on and not chunk_ready:
            now = time.monotonic()
            if self._ready and now >= partial_at:
                break
            wait = _WAIT_S if deadline is None else min(_WAIT_S, deadline - now)
            if self._ready:
                wait = min(wait, partial_at - now)
            if wait <= 0 or self.server.stopped:
                break
            for message in self.server.receive(wait):
                if message.episodes:
                    items = message.episodes
                    if self.sender_key is not None:
                        items = [{**item, self.sender_key: message.client} for item in items]
                    self._ready.extend((item, None) for item in items[:-1])
                    self._ready.append((items[-1], message))
                    chunk_ready = chunk_ready or any(_is_chunk(item) for item in items)
                    partial_at = time.monotonic() + partial_after
                    if deadline is not None:
                        deadline = time.monotonic() + idle
                self._hand_on = self._hand_on or ((message.flush or message.ended) and bool(self._ready)
                                                  and self.partial_batch_after is not None)
        if self._ready and _is_chunk(self._ready[0][0]):
            count = 1
        else:
            count = next((i for i, (item, _) in enumerate(self._ready[:count]) if _is_chunk(item)), count)
        out, self._ready = self._ready[:count], self._ready[count:]
        if not self._ready:
            self._hand_on = False  # what came before the flush is on its way to the loop
        self._handed.extend(receipt for _, receipt in out if receipt is not None)
        return [item for item, _ in out]

    def _confirm_handed(self) -> None:
        handed, self._handed = self._handed, []
        for message in handed:
            self.server.confirm(message)

    def _to_device(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        return {key: self._tensor(value) if isinstance(value, np.ndarray) else value for key, value in sample.items()}

    def _collate(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        batch: dict[str, Any] = {}
        for key, first in samples[0].items():
            values = [sample.get(key) for sample in samples]
            if isinstance(first, (np.ndarray, int, float, bool)) and all(
                    isinstance(v, type(first)) for v in values):
                batch[key] = self._tensor(np.stack([np.asarray(v) for v in values]))
            else:
                batch[key] = values
        return batch

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` as a tensor on the device; received arrays are read-only views of their frame."""
        if self.device.type == "cpu":
            if not array.flags.writeable:
                owned = _frame_view(array)
                array = array.copy() if owned is None else owned
            return torch.from_numpy(array)
        with warnings.catch_warnings():
            # Read-only is fine here: .to() copies to the device and the view is dropped.
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(array).to(self.device)

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError("an RLinkDataset is read in the process that made it: use num_workers=0")


def _is_chunk(item: Mapping[str, Any]) -> bool:
    """Whether ``item`` is an episode chunk (a simulator's) rather than a plain sample (an actor's)."""
    return item.get(KIND) in EPISODE_FORMS


def _spaces_of(env_id: str) -> tuple[Any, Any]:
    """The observation and action spaces of gymnasium env ``env_id`` (made once and closed)."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _frame_view(array: np.ndarray) -> Optional[np.ndarray]:
    """A writable view of ``array`` if it is a view of a received frame's own body buffer, else ``None``.

    A large frame is read into a buffer of its own (an uninitialized uint8
    array) that the decoder hands over and never reuses, and its large arrays
    are read-only views of that buffer (``protocol.framing.FrameDecoder``).
    The sample server hands each sample out once, so the consumer owns that
    memory: a writable view of the same bytes saves copying an image before
    ``torch.from_numpy``. Arrays copied out of their frame (small bodies,
    msgpack's C path) are backed by ``bytes``, which must never be written:
    for those (and anything else) this returns ``None`` and the caller copies.
    """
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, memoryview) or not isinstance(base.obj, np.ndarray):
        return None
    owner = base.obj
    if not owner.flags.writeable or owner.dtype != np.uint8 or owner.ndim != 1 or not array.flags.c_contiguous:
        return None
    offset = array.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    if not 0 <= offset <= owner.nbytes - array.nbytes:
        return None
    return np.ndarray(array.shape, array.dtype, buffer=owner, offset=offset, strides=array.strides)


class RLinkSyncModel:
    """Pushes a model from your training loop to every actor and simulator of a dataset (or sample server).

    ``RLinkSyncModel(dataset).sync(module)`` publishes ``module``'s
    ``state_dict()`` (an RLModule's ``get_state(inference_only=True)``; or a
    state dict, or a ``torch.save`` file of one) as the next weights version;
    each actor's ``get_remote_model()`` returns it. Weights travel as arrays
    (PROTOCOL.md 7), packed once for every actor.

    EnvClient simulators of a dataset with ``spaces`` act with it: RLlib's
    default MLP (``dataset.default_module()``) as these weights, which they run
    in numpy; any other module also as its policy graph (ONNX, exported at the
    first sync; onnxruntime on the simulator). The first sync fixes the
    architecture; simulators wait for it before they act.
    """

    def __init__(self, target: Union[RLinkDataset, SampleServer]) -> None:
        self.server = target.server if isinstance(target, RLinkDataset) else target

    def sync(self, model: ModelLike) -> int:
        """Publish ``model`` as a new version; returns the version (1, 2, ...).

        Raises:
            WeightsError, TypeError: a value is not a numeric tensor or array.
            OSError: a path that can't be read.
            ValueError: the simulators can't run it: a first state dict that is not RLlib's
                default MLP (sync the module), or another architecture than the first sync's.
            ExportError: the module's policy graph can't be exported.
        """
        params = weights_of(model)
        graph = None
        simulators = self.server.model
        if (simulators is not None and not simulators.ready and isinstance(model, torch.nn.Module)
                and not simulators.runs_in_numpy(params)):
            graph = policy_graph_of(model, simulators.observation_space)
        return self.server.publish_weights(params, graph=graph)
