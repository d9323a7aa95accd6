"""The network side of one EnvRunner: a listening socket and all its sessions.

:class:`RLinkServer` runs an asyncio loop in a thread of its own. RLlib's
actor thread talks to it through three doors only: it takes batches from the
:class:`~.inbox.Inbox`, hands it new weights with :meth:`publish_weights`, and
reads counters from :attr:`stats`. Everything else (accepting, reading,
deadlines, the on-policy scheduling) happens on the loop thread, so the
sessions need no locks.

The server is each :class:`~.session.Session`'s :class:`~.session.SessionHost`:
sessions report what their clients send; who is answered when, and asked
for how many steps, is the :class:`~rlinks_rllib.server.delivery.scheduler.Scheduler`'s decision, which
the server carries out by asking sessions to send weights.

Nothing here imports Ray: the RLlib-specific parts (turning wire episodes into
``SingleAgentEpisode`` objects, the ``SET_CONFIG`` description) come in as
callables from :class:`~rlinks_rllib.server.env_runner.RLinkEnvRunner`.

Connections are accepted by a loop of our own rather than by
``create_server``, so that every connection counts against ``max_clients``
from the moment it is accepted, including while its TLS handshake runs (an
asyncio server creates the protocol only once that handshake is done, and
so can't bound how many are in progress), and so that failed TLS
handshakes are counted.

Confirmations (the ``ack`` extension) are sent when ``sample()`` hands a
batch to RLlib (:meth:`RLinkServer.confirm`), not when it reaches the
inbox: a confirmed batch has left this process, so a runner that dies
loses nothing its clients believe delivered; they resend the rest.

Served actions (the ``served_actions`` extension, given a
:class:`~rlinks_rllib.server.served.batcher.ServedPolicy`): an ``ACT``'s rows are recorded by the
:class:`~rlinks_rllib.server.served.episodes.ServedRecorder`, its complete steps count for the update
like those of ``EPISODES``, and the rows that want actions go to the
:class:`~rlinks_rllib.server.served.batcher.InferenceBatcher` now, or once the scheduler releases
the parked ``ACT`` (with new weights). The recorded episodes are cut into the
inbox when the scheduler says (:meth:`~rlinks_rllib.server.delivery.scheduler.Scheduler.served_cut_due`),
when new weights arrive, and when ``sample()`` came up short
(:meth:`RLinkServer.cut_served`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import errno
import logging
import operator
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from ..._version import SERVER_AGENT
from ...client.network.transport import detect_dead_links
from ...protocol.auth import secret_file_is_private
from ...protocol.connection import ActReceived, EpisodesReceived
from ...protocol.episodes import ACTION_DIST_INPUTS, ACTION_LOGP
from ...protocol.errors import ErrorCode, InvalidMessage
from ...protocol.extensions import Extension
from ...protocol.framing import encode_body_once, encode_message
from ..delivery.scheduler import Release, Scheduler
from ..errors import IngestError
from ..served.batcher import InferenceBatcher, InferenceResult, ServedPolicy
from ..served.episodes import ServedRecorder
from ..settings import RLinkSettings
from ..takeover.held import HeldConfirmations
from ..takeover.markers import Takeovers
from .deadlines import DeadlineQueue
from .inbox import Batch, Inbox
from .session import READ_BUFFER_BYTES, Session
from .stats import LogLimiter, ServerStats
from .tls import server_ssl_context  # moved to tls.py (shared with the sample server); re-exported

__all__ = ["RLinkServer", "ServerStats", "Ingest", "SeqBatch", "server_ssl_context", "exposure_warning"]

logger = logging.getLogger("rlinks_rllib.server")

#: Turns the ``episodes`` list of a message into (episodes, env steps).
#: Raises IngestError for episodes the runner can't accept.
Ingest = Callable[[list], "tuple[list[Any], int]"]

_TICK_S = 0.25
_HELD_SEQ_MAX = 65536
#: accept() failures that mean "out of descriptors or memory": wait, then accept again.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_RETRY_S = 0.5
_ACCEPT_WARN_EVERY_S = 10.0
#: How long ``sample()`` waits for the loop to cut the served episodes into the inbox.
_CUT_WAIT_S = 1.0
#: The ``client`` of the inbox batches of served episodes (they carry no ``seq``: nothing to confirm).
_SERVED_CLIENT = "served"
#: Resumption order after a full inbox drains: the client that waited longest first.
_LAST_TURN = operator.attrgetter("last_turn")


@dataclass
class SeqBatch(Batch):
    """A batch with the ``seq`` its client numbered it with (``ack`` extension), if any.

    ``takeovers``: what its chunks held when a step of them was taken over
    (``takeover`` extension): the episode metrics count from it, since
    on-policy the taken-over steps are not among the episodes.
    """

    seq: Optional[int] = None
    takeovers: Optional[Takeovers] = None
    #: ``(client, seq)`` of earlier messages whose held-back parts this batch carries (``takeover_terminates``):
    #: those messages are confirmed once their last part is handed to RLlib (takeover_held.py).
    settles: tuple = ()


def exposure_warning(settings: RLinkSettings, *, authenticated: bool, address: tuple) -> Optional[str]:
    """What to warn about a runner that listens beyond loopback; ``None`` if nothing.

    Without authentication: a banner, since anyone who reaches the port can
    feed the training run. With authentication but without TLS: one line.
    """
    if settings.loopback_only or (authenticated and settings.tls):
        return None
    where = f"{address[0]}:{address[1]}"
    if authenticated:
        return (f"rlinks: listening on {where} beyond loopback without TLS: anyone on the network path "
                "can read the weights and episodes, and alter them after the handshake (docs/SECURITY.md)")
    bar = "!" * 78
    return (
        f"\n{bar}\nrlinks: LISTENING ON {where}, BEYOND LOOPBACK, WITHOUT AUTHENTICATION"
        f"{'' if settings.tls else ' OR TLS'}.\n"
        "Anyone who can reach this port can feed episodes into your training run.\n"
        "Set RLINKS_SECRET (or the setting auth_secret_file) on the runners, and tls_cert_file/tls_key_file;\n"
        f"see docs/SECURITY.md.\n{bar}"
    )


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
        fragment_steps: env steps ``sample()`` asks for at a time (off-policy,
            served episodes are cut into the inbox every that many steps).
        served: how to compute actions; ``None`` (or the setting
            ``served_actions`` off): ``served_actions`` is never agreed.
        policy_graph: the runner exported its module: agree to
            ``policy_graph``, and ``config_message(True)`` puts the graph in.
        multi_agent: the runner serves a multi-agent config: agree to
            ``multi_agent`` (the ingest takes multi-agent chunks).
        modules_for: agent id -> module id, for ``GET_MODULES`` (raises
            ``InvalidMessage`` for an agent the mapping does not know).

    Raises:
        OSError: the port can't be bound, or a TLS or secret file can't be read.
        ssl.SSLError: a TLS file is not valid.
        ValueError: ``auth="on"`` without a secret, or a malformed secret.
    """

    agent = SERVER_AGENT

    def __init__(
        self,
        settings: RLinkSettings,
        *,
        port: int,
        ingest: Ingest,
        config_message: Callable[[bool], dict],
        update_steps: int,
        on_policy: bool,
        fragment_steps: Optional[int] = None,
        served: Optional[ServedPolicy] = None,
        policy_graph: bool = False,
        multi_agent: bool = False,
        modules_for: Optional[Callable[[str], str]] = None,
    ) -> None:
        self.settings = settings
        self.stats = ServerStats()
        self.inbox = Inbox(settings.inbox_max_steps, settings.inbox_max_bytes, on_drained=self._drained_from_thread)
        self.on_policy = on_policy
        self._ingest = ingest
        #: The ingest cuts episodes where the teacher takes over and holds parts back (``takeover_terminates``).
        self._segmenting = getattr(ingest, "segments", None) is not None
        self._config_message = config_message
        #: SET_CONFIG frames by whether they carry the policy graph, each encoded once.
        self._config_frames: dict[bool, bytes] = {}
        #: Who gets weights when (loop thread only, but for replace_weights before start).
        self.scheduler: Scheduler[Session] = Scheduler(update_steps, on_policy=on_policy,
                                                       fragment_steps=fragment_steps)
        self._sessions: set[Session] = set()
        #: When to look at each session's deadlines (loop thread only): a tick costs what is due.
        self.deadlines: DeadlineQueue[Session] = DeadlineQueue()
        #: Every session reads into this (loop thread only; see SessionHost.read_buffer).
        self.read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))
        # client_id -> (highest seq taken into the inbox, highest seq handed to RLlib).
        self._seqs: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        #: Messages whose ACK waits for a part held back from them (loop thread only; takeover_held.py).
        self._held_acks = HeldConfirmations()
        self._by_client: dict[str, Session] = {}
        self._state_body: bytes | None = None
        self._session_numbers = 0
        #: The shared secret clients must prove they know; None: no authentication.
        self.auth_secret: Optional[bytes] = settings.auth_secret()
        #: What a session agrees to at most (``auth`` comes with the secret).
        self.extensions = frozenset({Extension.WANT_STEPS.value, Extension.ACK.value})
        if policy_graph:
            self.extensions |= {Extension.POLICY_GRAPH.value}
        if multi_agent:
            self.extensions |= {Extension.MULTI_AGENT.value}
        else:
            # Single-agent ingests read the take-over marker (EpisodeIngest, takeover.py).
            self.extensions |= {Extension.TAKEOVER.value}
        if not on_policy:
            # Exploration schedules (DQN's epsilon) follow RLlib's step count in clients that run the policy;
            # ACKs name the weights version, so those clients fetch new weights as soon as they exist.
            self.extensions |= {Extension.TIMESTEP.value, Extension.WEIGHTS_NOTICE.value}
        #: RLlib's env steps sampled when the weights served now came (the ``timestep`` extension).
        self._timestep = 0
        self._modules_for = modules_for
        #: The inbox is full and every session's reading paused (served deadlines stop counting).
        self._inbox_full = False
        #: Messages acted on so far (see ``Session.last_turn``).
        self._turns = 0
        self._ssl = server_ssl_context(settings)
        self._tls_handshakes: set[asyncio.Task] = set()
        self._sock = self._bind(settings.host, port)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._loop = asyncio.new_event_loop()
        self._accepting: asyncio.Task | None = None
        self._closing = False
        self._last_accept_warning = 0.0
        self.log_limiter = LogLimiter()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rlinks-server-{self.address[1]}", daemon=True)
        self._thread_error: BaseException | None = None
        #: Served actions: the policy, the episodes recorded, the forward passes (loop thread only).
        self._policy = served if settings.served_actions else None
        self._recorder: Optional[ServedRecorder[Session]] = None
        self._batcher: Optional[InferenceBatcher[Session]] = None
        self._served_bytes = 0
        if self._policy is not None:
            self.extensions |= {Extension.SERVED_ACTIONS.value}
            if self._policy.check_taken is not None:
                self.extensions |= {Extension.SERVED_TAKEN.value}
            self._recorder = ServedRecorder(max_envs=settings.served_max_envs,
                                            report_timeout_s=settings.served_report_timeout_s,
                                            max_chunk_steps=settings.max_steps_per_chunk)
            self._batcher = InferenceBatcher(
                self._loop, self._policy.forward, max_rows=settings.served_batch_size,
                max_wait_s=settings.served_max_wait_us / 1e6, on_result=self._actions_ready,
                on_error=self._inference_failed, on_batch=self._inference_done,
                all_waiting=lambda: self._recorder.all_waiting, inline=self._policy.inline,
            )

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
        settings = self.settings
        logger.info(
            "rlinks: listening on %s:%d (%s, %s)", *self.address,
            "TLS" + (" with client certificates" if settings.tls_client_ca_file else "") if settings.tls else "plain TCP",
            "shared-secret authentication" if self.auth_secret is not None else "no authentication",
        )
        if settings.auth_secret_file and self.auth_secret is not None and not secret_file_is_private(settings.auth_secret_file):
            logger.warning("rlinks: the secret file %s is readable by other users; chmod 600 it",
                           settings.auth_secret_file)
        warning = exposure_warning(settings, authenticated=self.auth_secret is not None, address=self.address)
        if warning is not None:
            logger.warning("%s", warning)

    @property
    def weights_seq_no(self) -> int:
        """(Loop thread) The version of the weights served now: what a ``GET_STATE`` would get."""
        return self.scheduler.weights_seq_no

    @property
    def healthy(self) -> bool:
        """Whether the loop thread runs and the socket accepts connections."""
        return self._thread.is_alive() and self._accepting is not None and not self._accepting.done()

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
            self._accepting = self._loop.create_task(self._accept_forever())
            self._loop.call_later(_TICK_S, self._tick)
            self._ready.set()
            self._loop.run_forever()
        except BaseException as exc:  # noqa: BLE001 - reported through start()/healthy
            self._thread_error = exc
            logger.exception("rlinks server loop on %s died", self.address)
            self._ready.set()
        finally:
            self._sock.close()
            if self._batcher is not None:
                self._batcher.close()  # joins the inference thread (after the batch in flight)
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _shutdown(self) -> None:
        self._closing = True
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._tls_handshakes):
            task.cancel()
        for session in list(self._sessions):
            session.fail(ErrorCode.SHUTTING_DOWN, "the runner is stopping")
        if self._segmenting:
            self._put_held(self._ingest.release_held())  # the served clients' parts too: none stays held
        self._loop.call_later(0.05, self._loop.stop)

    # -- loop thread ---------------------------------------------------------

    async def _accept_forever(self) -> None:
        """Accept connections until cancelled; no failure of one accept stops it."""
        loop = self._loop
        while True:
            try:
                conn, addr = await loop.sock_accept(self._sock)
            except OSError as exc:
                if self._closing:
                    return
                self.stats.accept_errors += 1
                now = time.monotonic()
                if now - self._last_accept_warning > _ACCEPT_WARN_EVERY_S:
                    self._last_accept_warning = now
                    logger.warning("rlinks: accept() on %s:%d failed: %s", *self.address, exc)
                if exc.errno in _OUT_OF_RESOURCES:
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            self.stats.connections_total += 1
            # A simulator cut off by a partition leaves no FIN: without probes its connection stayed a client
            # that owed steps, and every on-policy sample() waited for it (7.5 s twice per iteration, minutes on).
            try:
                detect_dead_links(conn, user_timeout=False)
            except OSError as exc:
                logger.info("rlinks: connection from %s lost while being set up: %s", addr, exc)
                conn.close()
                continue
            if self._ssl is None:
                try:
                    await loop.connect_accepted_socket(self._new_session, conn)
                except OSError as exc:
                    logger.info("rlinks: connection from %s lost while being set up: %s", addr, exc)
                    conn.close()
                continue
            if len(self._sessions) + len(self._tls_handshakes) >= self.settings.max_clients:
                # No ERROR can be sent before the TLS handshake: just close.
                self.stats.connections_refused += 1
                self.stats.count_error(ErrorCode.LIMIT_EXCEEDED)
                if self.log_limiter.allow():
                    logger.warning("rlinks: refused a connection from %s: %d clients connected or connecting",
                                   addr, self.settings.max_clients)
                conn.close()
                continue
            task = loop.create_task(self._tls_handshake(conn, addr))
            self._tls_handshakes.add(task)
            task.add_done_callback(self._tls_handshakes.discard)

    async def _tls_handshake(self, conn: socket.socket, addr: Any) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._new_session, conn, ssl=self._ssl, ssl_handshake_timeout=self.settings.handshake_timeout_s
            )
        except OSError as exc:  # ssl.SSLError, a timeout (ConnectionAbortedError), a reset
            self.stats.tls_handshakes_failed += 1
            if self.log_limiter.allow():
                logger.warning("rlinks: TLS handshake with %s failed: %s", addr, exc)
            conn.close()

    def _new_session(self) -> Session:
        self._session_numbers += 1
        return Session(self, self._session_numbers)

    # -- SessionHost (loop thread) ---------------------------------------------

    def session_opened(self, session: Session) -> bool:
        if len(self._sessions) >= self.settings.max_clients:
            self.stats.connections_refused += 1
            return False
        self._sessions.add(session)
        self.stats.clients_connected = len(self._sessions)
        return True

    def session_ready(self, session: Session) -> None:
        """``session`` finished its handshake: confirmations for its client_id go to it now.

        A full inbox pauses a session only from here on: handshakes are
        small and always run, so their deadline holds even while the
        learner is slow to take batches.
        """
        self._by_client[session.client_id] = session
        self.scheduler.client_ready(session, session.client_id, tells_steps=session.speaks(Extension.WANT_STEPS))
        if self.inbox.full():
            session.pause_reading()

    def session_closed(self, session: Session) -> None:
        self._sessions.discard(session)
        if self._by_client.get(session.client_id) is session:
            del self._by_client[session.client_id]
        self.stats.clients_connected = len(self._sessions)
        if self._recorder is not None and self._batcher is not None:
            # Its open served episodes end here, as truncated; they still train.
            self._batcher.cancel(session)
            self._recorder.drop_client(session)
        if self._segmenting:
            self._put_held(self._ingest.release_held(owner=session.client_id))
        self._release(self.scheduler.client_left(session))
        self._cut_served_if_due()

    def config_frame(self, with_graph: bool = False) -> bytes:
        if with_graph not in self._config_frames:
            self._config_frames[with_graph] = encode_message(self._config_message(with_graph))
        return self._config_frames[with_graph]

    def modules_for(self, agents: list[str]) -> dict[str, str]:
        """Which module acts for each agent (``GET_MODULES``).

        Raises:
            IngestError: this runner has no mapping to ask (single-agent), or an agent it does not know.
        """
        if self._modules_for is None:
            raise IngestError("this runner serves a single-agent config: it maps no agents",
                              code=ErrorCode.UNSUPPORTED_MESSAGE)
        try:
            return {agent_id: self._modules_for(agent_id) for agent_id in agents}
        except InvalidMessage as exc:
            raise IngestError(str(exc)) from exc

    def state_requested(self, session: Session) -> None:
        self._send_weights(session, self.scheduler.state_requested(session))

    def episodes_received(self, session: Session, event: EpisodesReceived) -> None:
        """Take a batch in (once: a resent one is confirmed again, not queued again); answer an on-policy one.

        Raises:
            IngestError: the message breaks a limit or an episode is not acceptable;
                nothing of the message is queued.
        """
        seq = event.seq
        self._turns += 1
        session.last_turn = self._turns
        if seq is not None and self.already_held(session.client_id, seq):
            # Resent after a reconnect. Already handed to RLlib: confirm it
            # again; still in the inbox: its ACK comes when sample() takes it.
            self.stats.duplicates += 1
            if self.already_confirmed(session.client_id, seq):
                session.send_ack(seq)
        else:
            self._take(session, event)
        if event.on_policy:
            self._release(self.scheduler.on_policy_batch(session))

    def act_received(self, session: Session, event: ActReceived) -> None:
        """Record an ``ACT``; answer it at once if no row wants an action, else compute them now or once released.

        Raises:
            IngestError: the observations don't fit the space, a row breaks
                the episode rules, or ``served_max_envs`` is exceeded; nothing
                of the ``ACT`` is recorded.
        """
        if self._policy is None or self._recorder is None:
            raise IngestError("this runner does not serve actions", code=ErrorCode.SERVER_ERROR)  # never agreed
        self._turns += 1
        session.last_turn = self._turns
        rows = event.rows
        obs = self._policy.check_obs(rows)
        taken = None
        if rows.taken_mask is not None and self._policy.check_taken is not None:
            taken = self._policy.check_taken(rows)
        recorded = self._recorder.record(session, rows, obs, time.monotonic(), taken)
        stats = self.stats
        stats.served_acts += 1
        stats.served_rows += len(rows)
        self._served_bytes += event.frame_bytes
        for seq_no, steps in recorded.steps.items():
            stats.served_steps += steps
            # On-policy, taken-over steps are cut out at ingest: they fill none of the update.
            withheld = recorded.takeovers.get(seq_no, 0) if self.on_policy else 0
            self.scheduler.delivered(session, steps - withheld, seq_no, withheld=withheld)
        if not recorded.want_env:
            session.send_actions([], self._policy.no_actions, self.scheduler.weights_seq_no)
        else:
            releases = self.scheduler.act_received(session)
            if not releases:
                stats.served_parked += 1
            self._release(releases)
        self._cut_served_if_due()

    # -- loop thread: deadlines, batches, confirmations, weights -----------------

    def _tick(self) -> None:
        now = time.monotonic()
        for session in self.deadlines.pop_due(now):
            session.check_deadlines(now)
        if self._recorder is not None and not self._inbox_full:
            # While reading is paused a client's ACT may wait unread: no served deadline runs then.
            timeout = self.settings.served_report_timeout_s
            for session in self._recorder.expire(now):
                session.fail(ErrorCode.LIMIT_EXCEEDED,
                             f"no ACT within {timeout:g} s while episodes were open (served_report_timeout_s)")
            self.stats.served_expired_envs = self._recorder.expired_envs
            self._cut_served_if_due()
        if self._segmenting:
            self._put_held(self._ingest.release_held(expired_only=True))
        self._loop.call_later(_TICK_S, self._tick)

    def already_held(self, client_id: str, seq: int) -> bool:
        """Whether batch ``seq`` of ``client_id`` was taken in before (it is a resend)."""
        return seq <= self._seqs.get(client_id, (0, 0))[0]

    def already_confirmed(self, client_id: str, seq: int) -> bool:
        """Whether batch ``seq`` of ``client_id`` was handed to RLlib (and so confirmed)."""
        return seq <= self._seqs.get(client_id, (0, 0))[1] and not self._held_acks.owes(client_id, seq)

    def _mark_held(self, client_id: str, seq: int) -> None:
        _, confirmed = self._seqs.get(client_id, (0, 0))
        self._seqs[client_id] = (seq, confirmed)
        self._seqs.move_to_end(client_id)
        while len(self._seqs) > _HELD_SEQ_MAX:
            self._seqs.popitem(last=False)

    def _confirm(self, taken: Iterable[tuple[str, int, int]]) -> None:
        for client_id, seq, steps in taken:
            if not self._held_acks.handed(client_id, seq):
                continue  # a part held back from it is not handed to RLlib yet: confirmed with that part
            held, confirmed = self._seqs.get(client_id, (seq, 0))
            self._seqs[client_id] = (max(held, seq), max(confirmed, seq))
            self.stats.batches_acked += 1
            self.stats.steps_acked += steps
            session = self._by_client.get(client_id)
            if session is not None:
                # If the client is between connections it resends the batch
                # after reconnecting and is confirmed then (see episodes_received).
                session.send_ack(seq)

    def _take(self, session: Session, event: EpisodesReceived) -> None:
        """Check and convert a message's episodes, then queue them."""
        wire_episodes, seq = event.episodes, event.seq
        if len(wire_episodes) > self.settings.max_episodes_per_message:
            raise IngestError(
                f"{len(wire_episodes)} episode chunks in one message; the limit is "
                f"{self.settings.max_episodes_per_message}",
                code=ErrorCode.LIMIT_EXCEEDED,
            )
        episodes, steps = self._ingest_from(wire_episodes, session.client_id, session.weights_seq_no, seq)
        takeovers = self._takeovers()
        settles = self._settled_by_last_ingest()
        if seq is not None and self._segmenting:
            held = self._ingest.segments.held_with((session.client_id, session.weights_seq_no, seq))
            self._held_acks.owe(session.client_id, seq, 1 + held)  # confirmed with its last held part
        if seq is not None:
            self._mark_held(session.client_id, seq)
        withheld = takeovers.withheld if takeovers is not None else 0
        if steps == 0 and takeovers is None:
            # Nothing to train on (a client asking for work with want_steps 0):
            # nothing to queue, and nothing that could be lost, so confirm now.
            if seq is not None:
                self._confirm([(session.client_id, seq, 0)])
            return
        # A batch of taken-over steps alone still goes through the inbox: its tallies reach the metrics in order.
        self._put(SeqBatch(episodes, steps, event.frame_bytes, session.weights_seq_no, session.client_id, seq=seq,
                           settles=settles,
                           takeovers=takeovers))
        self.scheduler.delivered(session, steps, session.weights_seq_no, withheld=withheld)

    def _put(self, batch: Batch) -> None:
        """Queue a batch for ``sample()``; a full inbox pauses reading from every client."""
        if self.inbox.put(batch):
            self._pause_all()
        self.stats.batches_in += 1
        self.stats.steps_in += batch.steps

    def _pause_all(self) -> None:
        """The inbox is full: stop reading from every client until ``sample()`` takes from it."""
        self._inbox_full = True
        for other in self._sessions:
            if other.ready:
                other.pause_reading()

    def _send_weights(self, session: Session, want_steps: Optional[int]) -> None:
        if self._state_body is None:
            raise IngestError("this runner has no weights yet", code=ErrorCode.SERVER_ERROR)
        session.send_weights(self._state_body, self.scheduler.weights_seq_no, want_steps, self._timestep)

    def _release(self, releases: list[Release[Session]]) -> None:
        """Carry out the scheduler's word: answer these clients with the current weights (or their actions)."""
        for release in releases:
            if release.actions:
                self._compute_actions(release.client)
            else:
                self._send_weights(release.client, release.want_steps)

    def _on_new_weights(self, state_body: bytes, seq_no: int, update_steps: Optional[int]) -> None:
        self._state_body = state_body
        # Steps of the old weights are cut off before the new update counts any.
        self._cut_served()
        self._release(self.scheduler.new_weights(seq_no, update_steps))

    # -- loop thread: served actions ---------------------------------------------

    def _compute_actions(self, session: Session) -> None:
        """Send the waiting rows of ``session``'s ``ACT`` to the forward pass, with the weights served now."""
        assert self._recorder is not None and self._batcher is not None
        waiting = self._recorder.waiting(session)
        if waiting is not None and not session.closed:
            self._batcher.submit(session, waiting[1], min_seq_no=self.scheduler.weights_seq_no)

    def _actions_ready(self, session: Session, result: InferenceResult) -> None:
        """The forward pass answered ``session``'s rows: record the actions, send them."""
        assert self._recorder is not None
        if session.closed:
            return
        taken = self._recorder.waiting_taken(session)
        if taken is not None and self._policy is not None and self._policy.with_taken is not None:
            result = self._policy.with_taken(result, *taken)
        extra = {ACTION_LOGP: result.action_logp, ACTION_DIST_INPUTS: result.action_dist_inputs}
        envs = self._recorder.set_actions(session, result.actions, extra, result.weights_seq_no, time.monotonic())
        if envs is None:
            return
        session.send_actions(envs, result.actions_for_env, result.weights_seq_no)
        self.stats.served_actions += len(envs)

    def _inference_failed(self, sessions: list[Session], error: BaseException) -> None:
        logger.error("rlinks: the forward pass for served actions failed; %d client(s) are cut off",
                     len(sessions), exc_info=error)
        for session in sessions:
            session.fail(ErrorCode.SERVER_ERROR, "the runner failed to compute actions")

    def _inference_done(self, rows: int, requests: int, seconds: float) -> None:
        stats = self.stats
        stats.inference_batches += 1
        stats.inference_rows += rows
        stats.inference_requests += requests
        stats.inference_s += seconds

    def _cut_served_if_due(self) -> None:
        recorder, batcher = self._recorder, self._batcher
        if recorder is None or batcher is None:
            return
        if self.scheduler.served_cut_due(recorder.num_steps, recorder.outstanding + batcher.rows_waiting):
            self._cut_served()

    def _cut_served(self) -> None:
        """Hand every served step recorded so far to the inbox, as one batch of episode chunks."""
        if self._recorder is None:
            return
        cut = self._recorder.take_chunks()
        nbytes, self._served_bytes = self._served_bytes, 0
        if not cut.chunks:
            return
        try:
            episodes, steps = self._ingest_from(cut.chunks, _SERVED_CLIENT, cut.weights_seq_no)
            takeovers = self._takeovers()
        except IngestError:
            # Our own recording broke the episode rules: a bug, not a client's fault.
            logger.exception("rlinks: %d served steps fail the runner's own episode check; dropped", cut.steps)
            self.stats.count_error(ErrorCode.SERVER_ERROR)
            return
        if steps or takeovers is not None:
            self._put(SeqBatch(episodes, steps, max(nbytes, 1), cut.weights_seq_no, _SERVED_CLIENT,
                               takeovers=takeovers))

    def _ingest_from(self, chunks: list, client: str, weights_seq_no: int,
                     seq: Optional[int] = None) -> tuple[list, int]:
        """``self._ingest(chunks)``; a segmenting ingest is told whose chunks they are, for what it holds back."""
        if self._segmenting:
            return self._ingest(chunks, (client, weights_seq_no, seq))
        return self._ingest(chunks)

    def _settled_by_last_ingest(self) -> tuple:
        """``(client, seq)`` of the earlier messages whose held parts the last ingest handed on with its own."""
        tags = getattr(self._ingest, "last_settled", ()) if self._segmenting else ()
        return tuple((client, seq) for client, _, seq in tags if seq is not None)

    def _put_held(self, releases: list) -> None:
        """Queue parts the ingest held back (``takeover_terminates``) as batches of their own, not confirmed.

        Their messages were queued (and are confirmed) without them: a part
        held back is handed on once, here or with the next chunk of its episode.
        """
        for (client, weights_seq_no, seq), episodes, steps, takeovers in releases:
            self._put(SeqBatch(episodes, steps, 1, weights_seq_no, client, takeovers=takeovers,
                               settles=() if seq is None else ((client, seq),)))

    def _takeovers(self) -> Optional[Takeovers]:
        """What the message just ingested held of take-overs (an ingest without the marker: nothing)."""
        return getattr(self._ingest, "last_takeovers", None)

    def _extend_update(self, steps: int) -> None:
        """The learner asks for more steps with unchanged weights: release the parked.

        Happens when RLlib calls ``sample()`` again before sending new
        weights (another runner came up short, or the batch is larger than
        this runner's share). Data sampled now still has a lag of 0.
        """
        self._release(self.scheduler.extend(steps))

    def _resume_all(self) -> None:
        """The inbox has room again: resume every client, the one that waited longest first.

        Clients that had read messages before the pause act on them in that
        order, until the inbox is full again; the clients not reached stay
        paused and come first next time. But a client with nothing read must
        be read from its socket first: those after it act on theirs only
        after one round of reads (two turns of the loop), or a fast client's
        waiting messages would fill the inbox before a slower one is read,
        every time.
        """
        self._inbox_full = False
        if self._recorder is not None:
            self._recorder.restart_clocks(time.monotonic())
        order = sorted(self._sessions, key=_LAST_TURN)
        first_to_read = len(order)
        for i, session in enumerate(order):
            session.resume_reading()
            if first_to_read == len(order) and not session.messages_waiting:
                first_to_read = i
        self._act_on_waiting(order[:first_to_read])
        later = [session for session in order[first_to_read:] if session.messages_waiting]
        if later:
            self._loop.call_soon(self._loop.call_soon, self._act_on_waiting, later)

    def _act_on_waiting(self, sessions: list[Session]) -> None:
        for session in sessions:
            if self._inbox_full:
                return
            session.act_on_waiting()

    # -- from RLlib's thread -----------------------------------------------------

    def publish_weights(self, params: Any, seq_no: int, update_steps: Optional[int] = None,
                        timestep: Optional[int] = None) -> None:
        """New weights from the learner: pack them once, send them to whoever waits.

        ``update_steps``: what the update they start (and the next) takes from this runner, if no longer the same.
        ``timestep``: RLlib's env steps sampled so far, for clients that speak ``timestep``.
        """
        if timestep is not None:
            self._timestep = timestep  # an int, read by the loop thread as a whole
        state_body = encode_body_once({"rl_module": params, "weights_seq_no": seq_no})
        self._loop.call_soon_threadsafe(self._on_new_weights, state_body, seq_no, update_steps)

    def confirm(self, batches: list[Batch]) -> None:
        """RLlib has these batches now (``sample()`` returns them): confirm them to their clients.

        Thread-safe. Batches without a ``seq`` (clients without ``ack``) are skipped.
        """
        taken = [(b.client, b.seq, b.steps) for b in batches if getattr(b, "seq", None) is not None]
        taken += [(client, seq, 0) for b in batches for client, seq in getattr(b, "settles", ())]
        if not taken:
            return
        self._batches_to_loop(self._confirm, taken, "handed to RLlib are not confirmed; reliable clients resend "
                              "them to the next runner")

    def hand_over_again(self, batches: list[Batch]) -> None:
        """(Any thread) RLlib dropped these batches after ``sample()`` returned them: queue them again.

        They were confirmed when first returned, so their clients won't send
        them again: this runner's copy is the one left. They go back to the
        front of the inbox as the runner's own (no ``seq``: not confirmed twice).
        """
        if batches:
            self._batches_to_loop(self._hand_over_again, batches, "RLlib dropped (already confirmed) are lost")

    def _batches_to_loop(self, handler: Callable[[list], None], batches: list, lost: str) -> None:
        """Run ``handler(batches)`` on the loop thread; say what happens to them if the loop is closed."""
        try:
            self._loop.call_soon_threadsafe(handler, batches)
        except RuntimeError:
            logger.warning("rlinks: the server loop is closed: %d batch(es) %s", len(batches), lost)

    def _hand_over_again(self, batches: list[Batch]) -> None:
        again = [dataclasses.replace(batch, seq=None, settles=()) if isinstance(batch, SeqBatch) else batch
                 for batch in batches]
        self.stats.batches_handed_again += len(again)
        self.stats.steps_handed_again += sum(batch.steps for batch in again)
        if self.inbox.put_back(again):
            self._pause_all()

    def cut_served(self, timeout: float = _CUT_WAIT_S) -> None:
        """(RLlib's thread) Cut the served episodes into the inbox now; return once done (or after ``timeout``).

        For a ``sample()`` that came up short: steps the clients completed
        reach RLlib now rather than with the next update.
        """
        if self._recorder is None or not self._thread.is_alive():
            return
        done: concurrent.futures.Future = concurrent.futures.Future()

        def cut() -> None:
            try:
                self._cut_served()
            finally:
                done.set_result(None)

        try:
            self._loop.call_soon_threadsafe(cut)
            done.result(timeout)
        except RuntimeError:
            logger.debug("served episodes not cut: the server loop is closed")
        except concurrent.futures.TimeoutError:
            logger.warning("rlinks: the server loop did not cut the served episodes within %.1f s", timeout)

    @property
    def serves_actions(self) -> bool:
        """Whether this runner agrees to ``served_actions``."""
        return self._recorder is not None

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
        self.scheduler.replace_weights(seq_no)

    @property
    def weights_seq_no(self) -> int:
        return self.scheduler.weights_seq_no

    def _drained_from_thread(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._resume_all)
        except RuntimeError:
            logger.debug("inbox drained after the server loop closed")
