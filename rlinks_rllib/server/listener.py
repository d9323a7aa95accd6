"""The network side of one EnvRunner: a listening socket and all its sessions.

:class:`RLinkServer` runs an asyncio loop in a thread of its own. RLlib's
actor thread talks to it through three doors only: it takes batches from the
:class:`~.inbox.Inbox`, hands it new weights with :meth:`publish_weights`, and
reads counters from :attr:`stats`. Everything else (accepting, reading,
deadlines, the on-policy bookkeeping) happens on the loop thread, so the
sessions need no locks.

Nothing here imports Ray: the RLlib-specific parts (turning wire episodes into
``SingleAgentEpisode`` objects, the ``SET_CONFIG`` description) come in as
callables from :class:`~.env_runner.RLinkEnvRunner`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import __version__
from ..protocol import Extension, encode_message
from ..protocol import messages as msgs
from ..protocol.codec import Buffer
from ..protocol.framing import encode_body_once, encode_set_state_parts
from .budget import UpdateBudget
from .inbox import Batch, Inbox
from .session import IngestError, Session, SessionState
from .settings import RLinkSettings

__all__ = ["RLinkServer", "ServerStats", "Ingest"]

logger = logging.getLogger("rlinks_rllib.server")

#: Turns the ``episodes`` list of a message into (episodes, env steps).
#: Raises IngestError for episodes the runner can't accept.
Ingest = Callable[[list], "tuple[list[Any], int]"]

_TICK_S = 0.25
_HELD_SEQ_MAX = 65536


@dataclass
class ServerStats:
    """Counters of the network side; written by the loop thread only."""

    connections_total: int = 0
    connections_refused: int = 0
    clients_connected: int = 0
    frames_in: int = 0
    frames_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    batches_in: int = 0
    steps_in: int = 0
    duplicates: int = 0
    errors: collections.Counter = field(default_factory=collections.Counter)

    def count_error(self, code: str) -> None:
        self.errors[code] += 1

    def snapshot(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "errors"}
        data["errors"] = dict(self.errors)
        data["errors_total"] = sum(self.errors.values())
        return data


class RLinkServer:
    """Accepts RLlink clients and feeds their episodes into an inbox.

    Args:
        settings: limits and addresses.
        port: the port to bind (0: any free port).
        ingest: checks and converts a message's episodes (runs on the loop thread).
        config_message: builds the ``SET_CONFIG`` message (called once, lazily).
        update_steps: env steps one on-policy update takes from this runner.
        on_policy: whether the algorithm trains on-policy (clients are parked
            between updates); off-policy runners answer every request at once.
    """

    supported_extensions = frozenset({Extension.WANT_STEPS.value, Extension.ACK.value})
    agent = f"rlinks-rllib/{__version__}"

    def __init__(
        self,
        settings: RLinkSettings,
        *,
        port: int,
        ingest: Ingest,
        config_message: Callable[[], dict],
        update_steps: int,
        on_policy: bool,
    ) -> None:
        self.settings = settings
        self.stats = ServerStats()
        self.inbox = Inbox(settings.inbox_max_steps, settings.inbox_max_bytes, on_drained=self._drained_from_thread)
        self.on_policy = on_policy
        self.update_steps = update_steps
        self._ingest = ingest
        self._config_message = config_message
        self._config_frame: bytes | None = None
        self._budget = UpdateBudget(update_steps)
        self._sessions: set[Session] = set()
        self._parked: collections.OrderedDict[Session, None] = collections.OrderedDict()
        self._held_seq: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._weights_seq_no = 0
        self._state_body: bytes | None = None
        self._session_numbers = 0
        self._sock = self._bind(settings.host, port)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rlinks-server-{self.address[1]}", daemon=True)
        self._thread_error: BaseException | None = None

    # -- lifecycle (any thread) --------------------------------------------

    @staticmethod
    def _bind(host: str, port: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise OSError(exc.errno, f"rlinks: cannot listen on {host}:{port}: {exc.strerror}") from exc
        return sock

    def start(self, timeout: float = 10.0) -> None:
        """Start the loop thread and wait until it accepts connections.

        Raises:
            RuntimeError: the loop did not come up within ``timeout``.
        """
        self._thread.start()
        if not self._ready.wait(timeout) or self._thread_error is not None:
            raise RuntimeError(f"rlinks server on {self.address} failed to start: {self._thread_error}")
        logger.info("rlinks: listening on %s:%d", *self.address)

    @property
    def healthy(self) -> bool:
        """Whether the loop thread runs and the socket listens."""
        return self._thread.is_alive() and self._server is not None and self._server.is_serving()

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection and the listening socket; return within ``timeout``."""
        self.inbox.close()
        if self._thread.is_alive():
            try:
                self._loop.call_soon_threadsafe(self._shutdown)
            except RuntimeError:
                pass  # the loop is already closed: nothing left to shut down
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("rlinks server thread on %s did not stop within %.1f s", self.address, timeout)
        else:
            self._sock.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                self._loop.create_server(self._new_session, sock=self._sock)
            )
            self._loop.call_later(_TICK_S, self._tick)
            self._ready.set()
            self._loop.run_forever()
        except BaseException as exc:  # noqa: BLE001 - reported through start()/healthy
            self._thread_error = exc
            logger.exception("rlinks server loop on %s died", self.address)
            self._ready.set()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for session in list(self._sessions):
            session.fail("shutting_down", "the runner is stopping")
        self._loop.call_later(0.05, self._loop.stop)

    # -- loop thread ---------------------------------------------------------

    def _new_session(self) -> Session:
        self._session_numbers += 1
        return Session(self, self._session_numbers)

    def session_opened(self, session: Session) -> None:
        self.stats.connections_total += 1
        if len(self._sessions) >= self.settings.max_clients:
            self.stats.connections_refused += 1
            session.fail("limit_exceeded", f"this runner already serves {self.settings.max_clients} clients")
            return
        self._sessions.add(session)
        self.stats.clients_connected = len(self._sessions)
        if self.inbox.full():
            session.pause_reading()

    def session_closed(self, session: Session) -> None:
        self._sessions.discard(session)
        self._parked.pop(session, None)
        self._budget.forget(session.client_id)
        self.stats.clients_connected = len(self._sessions)
        self._release_if_needed()

    def _tick(self) -> None:
        now = time.monotonic()
        for session in list(self._sessions):
            session.check_deadlines(now)
        self._loop.call_later(_TICK_S, self._tick)

    def config_frame(self) -> bytes:
        if self._config_frame is None:
            self._config_frame = encode_message(self._config_message())
        return self._config_frame

    def already_held(self, client_id: str, seq: int) -> bool:
        return seq <= self._held_seq.get(client_id, 0)

    def mark_held(self, client_id: str, seq: int) -> None:
        self._held_seq[client_id] = seq
        self._held_seq.move_to_end(client_id)
        while len(self._held_seq) > _HELD_SEQ_MAX:
            self._held_seq.popitem(last=False)

    def ingest(self, session: Session, wire_episodes: list) -> int:
        """Check and convert a message's episodes, then queue them. Returns env steps.

        Raises:
            IngestError: the message breaks a limit or an episode is not acceptable;
                nothing of the message is queued.
        """
        if len(wire_episodes) > self.settings.max_episodes_per_message:
            raise IngestError(
                f"{len(wire_episodes)} episode chunks in one message; the limit is "
                f"{self.settings.max_episodes_per_message}",
                code="limit_exceeded",
            )
        episodes, steps = self._ingest(wire_episodes)
        nbytes = self._decoder_frame_bytes(session)
        batch = Batch(episodes, steps, nbytes, session.weights_seq_no, session.client_id)
        if self.inbox.put(batch):
            for other in self._sessions:
                other.pause_reading()
        self.stats.batches_in += 1
        self.stats.steps_in += steps
        session.batches_in += 1
        session.steps_in += steps
        if session.weights_seq_no == self._weights_seq_no:
            self._budget.record(session.client_id, steps)
        return steps

    @staticmethod
    def _decoder_frame_bytes(session: Session) -> int:
        # The exact frame size is gone once decoded; the running byte count
        # since the last batch is a close, cheap stand-in.
        return max(1, session._decoder.bytes_in - getattr(session, "_bytes_at_last_batch", 0))

    def send_weights(self, session: Session, *, on_policy_request: bool, want: int | None = None) -> None:
        """Send the current weights to ``session`` with its share of steps to sample."""
        fields: dict[str, Any] = {}
        if Extension.WANT_STEPS.value in session.extensions:
            if want is None:
                want = self._share_for(session) if self.on_policy else self.update_steps
            fields["want_steps"] = want
        if self._state_body is None:
            raise IngestError("this runner has no weights yet", code="server_error")
        session.send_parts(encode_set_state_parts(self._state_body, **fields))
        session.weights_seq_no = self._weights_seq_no
        session._bytes_at_last_batch = session._decoder.bytes_in

    def _share_for(self, session: Session) -> int:
        clients = max(1, sum(1 for s in self._sessions if s.state is not SessionState.HANDSHAKE))
        fair = -(-self._budget.target // clients)
        return self._budget.assign(session.client_id, fair)

    def after_on_policy_batch(self, session: Session, steps: int) -> None:
        """``session`` sent EPISODES_AND_GET_STATE: reply now, or park it until new weights."""
        if not self.on_policy or not self._budget.should_park():
            self.send_weights(session, on_policy_request=True)
            return
        session.state = SessionState.PARKED
        self._parked[session] = None

    def _release_if_needed(self) -> None:
        """A client left with a promise: let a parked one take it over."""
        while self._parked and not self._budget.should_park():
            session, _ = self._parked.popitem(last=False)
            session.state = SessionState.READY
            self.send_weights(session, on_policy_request=True)

    def _on_new_weights(self, state_body: bytes, seq_no: int) -> None:
        self._set_weights(state_body, seq_no)
        self._budget.next_update(self.update_steps)
        self._release_parked(self.update_steps)

    def _extend_update(self, steps: int) -> None:
        """The learner asks for more steps with unchanged weights: release the parked.

        Happens when RLlib calls ``sample()`` again before sending new
        weights (another runner came up short, or the batch is larger than
        this runner's share). Data sampled now still has a lag of 0.
        """
        if not self._budget.complete:
            return
        self._budget.extend(steps)
        self._release_parked(steps)

    def _release_parked(self, steps: int) -> None:
        """Answer every parked client, sharing ``steps`` among those that can be told."""
        parked = list(self._parked)
        self._parked.clear()
        for session, share in zip(parked, UpdateBudget.split(steps, len(parked))):
            session.state = SessionState.READY
            want = None
            if Extension.WANT_STEPS.value in session.extensions:
                want = self._budget.assign(session.client_id, share)
            self.send_weights(session, on_policy_request=True, want=want)

    def _resume_all(self) -> None:
        for session in self._sessions:
            session.resume_reading()

    # -- from RLlib's thread -----------------------------------------------------

    def publish_weights(self, params: Any, seq_no: int) -> None:
        """New weights from the learner: pack them once, send them to whoever waits."""
        state_body = encode_body_once({"rl_module": params, "weights_seq_no": seq_no})
        self._loop.call_soon_threadsafe(self._on_new_weights, state_body, seq_no)

    def extend_update(self, steps: int) -> None:
        """Thread-safe :meth:`_extend_update`: RLlib needs ``steps`` more with the same weights."""
        self._loop.call_soon_threadsafe(self._extend_update, steps)

    def replace_weights(self, params: Any, seq_no: int) -> None:
        """Serve these weights from now on without releasing anyone (setup, forced syncs)."""
        state_body = encode_body_once({"rl_module": params, "weights_seq_no": seq_no})
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._set_weights, state_body, seq_no)
        else:
            self._set_weights(state_body, seq_no)

    def _set_weights(self, state_body: bytes, seq_no: int) -> None:
        self._state_body = state_body
        self._weights_seq_no = seq_no

    @property
    def weights_seq_no(self) -> int:
        return self._weights_seq_no

    def _drained_from_thread(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._resume_all)
        except RuntimeError:
            logger.debug("inbox drained after the server loop closed")
