"""What a runner that serves actions records: one episode per client env, as a local client would.

With the ``served_actions`` extension (PROTOCOL.md 10.5) a client sends
observations (``ACT``) and the runner answers with actions, so the runner,
not the client, has to record the episodes: observation, the action it
computed with that action's extra model outputs (``action_logp``,
``action_dist_inputs``), then the reward and next observation that the
env's next row reports. RLlib gets the very episodes a local-inference
client's :class:`~rlinks_rllib.protocol.episode_builder.EpisodeBuilder`
would have sent (chunk for chunk, cut at ``max_chunk_steps`` as it cuts).

Per ``ACT``: :meth:`ServedRecorder.record` checks all rows first, then
applies them in order (a ``start`` row resets the env's episode, any other
row completes the step of the action pending for it); the rows that want an
action wait until :meth:`ServedRecorder.set_actions` gives them one. The
steps an ``ACT`` completes are kept as columns, one block per ``ACT`` (its
observations, rewards, and the actions and model outputs of the
``ACTIONS`` they report on, taken whole when every row of that answer
reports, as in a game that steps all its agents each tick), not step by
step per env: at 64 agents a tick, a builder step per agent was a third of
the runner. The blocks become episode chunks when the caller cuts them
(:meth:`ServedRecorder.take_chunks`) to send them to RLlib. The caller also
closes a disconnected client's episodes (:meth:`ServedRecorder.drop_client`)
and enforces the report deadline (:meth:`ServedRecorder.expire`).

Pure bookkeeping: numpy only; no sockets, threads, clocks or Ray. Clients
are any hashable key (the listener uses its sessions).
"""

from __future__ import annotations

import collections
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any, Generic, Hashable, Mapping, Optional, Sequence, TypeVar

import numpy as np

from ...protocol.episodes import REWARD_DTYPE, TAKEOVER, build_episode_state
from ...protocol.errors import ErrorCode
from ...protocol.served import ActRows
from ..errors import IngestError

__all__ = ["ServedRecorder", "Recorded", "Cut", "ObservationCheck"]

K = TypeVar("K", bound=Hashable)

_NUMERIC_KINDS = frozenset("biuf")


class ObservationCheck:
    """Turns an ``ACT``'s ``obs`` into one array of the runner's observation shape and dtype.

    Args:
        shape: the shape of one observation (the Box's).
        dtype: its dtype; the client's values must cast to it with
            ``same_kind`` casting (float64 to float32 is fine, complex is not).

    Raises (from a call):
        IngestError: (``bad_episode``) the observations don't stack into one
            array, are not numbers, have another shape or a dtype that
            doesn't cast, or hold a NaN or an infinity; the message names the
            first env at fault where there is one.
    """

    def __init__(self, shape: Sequence[int], dtype: Any) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)

    def __call__(self, rows: ActRows) -> np.ndarray:
        try:
            obs = np.asarray(rows.obs)
        except (ValueError, TypeError, OverflowError) as exc:
            raise IngestError(f"ACT: 'obs' does not stack into one array ({exc})"[:300]) from None
        if obs.dtype.kind not in _NUMERIC_KINDS:
            raise IngestError(f"ACT: 'obs' has dtype {obs.dtype}; observations must be numbers")
        if obs.shape != (len(rows), *self.shape):
            raise IngestError(
                f"ACT: 'obs' has shape {obs.shape}; {len(rows)} rows of this runner's "
                f"observations are {(len(rows), *self.shape)}"
            )
        if obs.dtype != self.dtype:
            if not np.can_cast(obs.dtype, self.dtype, casting="same_kind"):
                raise IngestError(f"ACT: 'obs' has dtype {obs.dtype}, which cannot become {self.dtype}")
            with np.errstate(over="ignore", invalid="ignore"):
                obs = obs.astype(self.dtype)
        if obs.dtype.kind == "f" and not np.isfinite(obs).all():
            finite = np.isfinite(obs.reshape(len(rows), -1)).all(axis=1)
            if not finite.all():
                row = int(np.argmin(finite))
                raise IngestError(f"ACT: 'obs' of row {row} (env {rows.env[row]}) holds a NaN or an infinity")
        return obs


@dataclass(frozen=True)
class Recorded:
    """What one ``ACT`` changed.

    Attributes:
        steps: weights version -> steps completed by its rows with actions of that version.
        want_env: the envs of the rows that want an action, in row order.
        want_obs: their observations, one row each.
        takeovers: weights version -> of those steps, the ones taken over (``takeover``).
    """

    steps: Mapping[int, int]
    want_env: list[int]
    want_obs: np.ndarray
    takeovers: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Cut:
    """Episode chunks taken from the recorder (:meth:`ServedRecorder.take_chunks`).

    Attributes:
        chunks: wire episode states, as a client would send them.
        steps: env steps in them.
        weights_seq_no: the oldest weights version any of those steps was
            acted with (their policy lag is at most the lag of this one).
    """

    chunks: list[dict]
    steps: int
    weights_seq_no: int


@dataclass(eq=False)
class _Episode:
    """A trained episode's place in the step log: its id and where its next chunk starts."""

    serial: int
    id: str
    #: ``(1, *obs_shape)``: the observation the next chunk starts at (the reset's, or the last chunk's last).
    first_obs: np.ndarray
    #: When the next chunk starts (the reset, or the last chunk's last step).
    start_time: float
    #: Steps of the episode in chunks already taken.
    t_started: int = 0
    #: ``(terminated, truncated)`` once the episode is over.
    ended: Optional[tuple[bool, bool]] = None
    #: It was ended by a row of the client (else closed as truncated: a reset, a drop, a deadline).
    ended_by_row: bool = False


@dataclass(eq=False)
class _Answer:
    """One ``ACTIONS``: the actions of an ``ACT``'s rows and what is recorded with them."""

    actions: np.ndarray
    extra: Mapping[str, np.ndarray]
    #: Of the rows, the take-overs (``takeover``; ``None``: none).
    takeover: Optional[np.ndarray]
    weights_seq_no: int


@dataclass(eq=False)
class _Env:
    #: ``None``: the episode is never trained on (``served_taken``'s ``train``): nothing is recorded or counted.
    episode: Optional[_Episode]
    #: The action pending for the env (computed, sent, not yet reported): an answer and its row in it.
    answer: Optional[_Answer] = None
    row: int = 0
    #: When the pending action was sent; ``None``: no action pending.
    sent_at: Optional[float] = None
    #: Earlier episodes of the env closed by a reset since the last take (their chunks come before its own).
    closed: list = field(default_factory=list)


@dataclass(eq=False)
class _Block:
    """The steps one ``ACT`` completed, as columns (rows in the order of the ``ACT``)."""

    serial: np.ndarray
    actions: np.ndarray
    extra: dict
    takeover: Optional[np.ndarray]
    reward: np.ndarray
    obs: np.ndarray
    time: float


@dataclass
class _Client:
    heard_at: float
    envs: dict[int, _Env] = field(default_factory=dict)
    #: Envs of trained episodes with an action pending.
    pending: int = 0
    #: Envs with an action pending, trained or not.
    unreported: int = 0
    #: The envs of the client's unanswered ACT that want an action; ``None``: nothing unanswered.
    waiting: Optional[list[int]] = None
    waiting_obs: Optional[np.ndarray] = None
    #: Of those, the rows whose action the simulator took itself, and the actions (``None``: none).
    waiting_taken: Optional[tuple[np.ndarray, np.ndarray]] = None
    #: Of the rows waiting for actions, the take-overs (``takeover``; ``None``: none).
    waiting_takeover: Optional[np.ndarray] = None
    #: Since when the client waits for us (its deadlines stand still meanwhile).
    waiting_since: float = 0.0


class ServedRecorder(Generic[K]):
    """The episodes of every env whose actions this runner serves.

    Args:
        max_envs: open episodes held at once over all clients; an ``ACT``
            that would open more is refused.
        report_timeout_s: how long an action may go unreported, and a client
            with open episodes may send no ``ACT`` (:meth:`expire`).
        max_chunk_steps: steps one chunk may hold (the runner's
            ``max_steps_per_chunk``); longer episodes are cut.
    """

    def __init__(self, *, max_envs: int, report_timeout_s: float, max_chunk_steps: Optional[int] = None) -> None:
        if max_envs < 1:
            raise ValueError(f"max_envs must be at least 1, got {max_envs}")
        self.max_envs = max_envs
        self.report_timeout_s = report_timeout_s
        self._max_chunk_steps = max_chunk_steps
        self._clients: dict[K, _Client] = {}
        #: The steps recorded since the last take, as one block per ACT; the episodes that ended since
        #: (in the order they ended); the steps in them and in the open episodes.
        self._log: list[_Block] = []
        self._ended: list[_Episode] = []
        self._serial = 0
        self._steps = 0
        self._oldest: Optional[int] = None
        self._open = 0
        # Kept as clients change, so that the batcher's and the scheduler's
        # questions cost O(1), not a walk over every client on every ACT:
        # pending actions of clients not waiting for an answer, and how many
        # clients with open episodes are out stepping (no ACT unanswered).
        self._outstanding = 0
        self._stepping = 0
        #: Envs closed because their action went unreported (a counter for metrics).
        self.expired_envs = 0

    # -- what the caller reads ----------------------------------------------

    @property
    def num_steps(self) -> int:
        """Complete steps held (in ended and open episodes) since the last :meth:`take_chunks`."""
        return self._steps

    @property
    def open_episodes(self) -> int:
        """Envs with an open episode, over all clients."""
        return self._open

    @property
    def outstanding(self) -> int:
        """Actions sent and not yet reported by clients that may report now: each will complete one step.

        The pending actions of a client that waits for an answer are left
        out: it can't report them until it is answered, which, for a parked
        ``ACT``, is after new weights.
        """
        return self._outstanding

    @property
    def all_waiting(self) -> bool:
        """Whether every client with an open episode has an ``ACT`` unanswered (none is out stepping)."""
        return self._stepping == 0

    def waiting(self, client: K) -> Optional[tuple[list[int], np.ndarray]]:
        """The envs of ``client``'s unanswered ``ACT`` that want actions, and their observations.

        ``None`` when it has none unanswered (or is unknown).
        """
        info = self._clients.get(client)
        return None if info is None or info.waiting is None else (info.waiting, info.waiting_obs)

    # -- an ACT --------------------------------------------------------------

    def record(self, client: K, rows: ActRows, obs: np.ndarray, now: float,
               taken: Optional[np.ndarray] = None) -> Recorded:
        """Apply the rows of one ``ACT`` (observations checked by :class:`ObservationCheck`).

        All rows are checked before any is applied: an ``ACT`` is recorded
        whole or not at all. ``taken``: the actions of the rows in
        ``rows.taken_mask``, checked, one per row (:meth:`waiting_taken`
        gives those of the rows that want an action). A start row whose
        ``rows.train`` is false opens an episode nothing of which is recorded.

        Raises:
            IngestError: ``bad_episode``: a row that is not a ``start`` row
                for an env without an open episode, or a row for an env whose
                earlier row in this ``ACT`` wants an action; ``limit_exceeded``:
                more rows than twice ``max_envs``, or more open episodes than
                ``max_envs`` afterwards.
            RuntimeError: ``client`` has an ``ACT`` unanswered (the
                connection forbids a second one: a bug of the caller).
        """
        info = self._clients.get(client)
        if info is not None and info.waiting is not None:
            raise RuntimeError("a second ACT before the first was answered")
        want = rows.wants_action
        # Python values for the loops: read_act and ObservationCheck checked them as columns.
        start, terminated, truncated, wanted = (rows.start.tolist(), rows.terminated.tolist(),
                                                rows.truncated.tolist(), want.tolist())
        self._check(info, rows, start, wanted)
        if info is None:
            info = self._clients[client] = _Client(heard_at=now)
        self._uncount(info)
        train = rows.train.tolist() if rows.train is not None else None
        envs = info.envs
        # The rows that complete a step of a trained episode: their episodes and the actions they reported on.
        done_rows: list[int] = []
        serials: list[int] = []
        answers: list[_Answer] = []
        answer_rows: list[int] = []
        for i, env_id in enumerate(rows.env):
            env = envs.get(env_id)
            if env is not None and env.sent_at is not None:
                env.sent_at = None
                info.unreported -= 1
                info.pending -= env.episode is not None
            if start[i]:
                if env is None:
                    env = envs[env_id] = _Env(None)
                    self._open += 1
                elif env.episode is not None:  # a reset closes the open episode as truncated
                    env.episode.ended = (False, True)
                    env.closed.append(env.episode)
                env.episode = self._new_episode(obs[i], now) if train is None or train[i] else None
                env.answer = None
                continue
            assert env is not None, "checked above"
            episode = env.episode
            if episode is not None:
                assert env.answer is not None, "a row that is not a start row reports on an action sent"
                done_rows.append(i)
                serials.append(episode.serial)
                answers.append(env.answer)
                answer_rows.append(env.row)
                if not wanted[i]:
                    episode.ended, episode.ended_by_row = (terminated[i], truncated[i]), True
            env.answer = None
            if not wanted[i]:
                self._close(info, env_id)
        steps, takeovers = self._log_steps(rows, obs, now, done_rows, serials, answers, answer_rows)
        want_env = [e for e, w in zip(rows.env, wanted) if w]
        want_obs = obs[want]
        info.waiting, info.waiting_obs = (want_env, want_obs) if want_env else (None, None)
        info.waiting_taken = info.waiting_takeover = None
        if want_env and rows.taken_mask is not None and taken is not None:
            mask = rows.taken_mask[want]
            if mask.any():
                info.waiting_taken = (mask, taken[want])
                if rows.takeover is not None and rows.takeover[want].any():
                    info.waiting_takeover = rows.takeover[want]
        info.heard_at = info.waiting_since = now
        self._count(info)
        return Recorded(steps, want_env, want_obs, takeovers)

    def waiting_taken(self, client: K) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """Of ``client``'s rows waiting for actions, those it took itself (a mask) and their actions; or ``None``."""
        info = self._clients.get(client)
        return None if info is None else info.waiting_taken

    def set_actions(self, client: K, actions: Any, extra: Mapping[str, Any], weights_seq_no: int,
                    now: float) -> Optional[list[int]]:
        """The actions for ``client``'s unanswered ``ACT``, one per env that wanted one, in order.

        ``extra`` maps model-output names to arrays of the same first
        dimension (``action_logp``, ``action_dist_inputs``); they are
        recorded with each action. Returns the envs the actions are for (the
        ``env`` of the ``ACTIONS``), or ``None`` when nothing waits for them
        any more (the client left).
        """
        info = self._clients.get(client)
        if info is None or info.waiting is None:
            return None
        self._uncount(info)
        takeover = info.waiting_takeover
        envs, info.waiting, info.waiting_obs, info.waiting_taken = info.waiting, None, None, None
        info.waiting_takeover = None
        waited = now - info.waiting_since
        if info.unreported:
            for env in info.envs.values():
                if env.sent_at is not None:
                    env.sent_at += waited  # the client could not report these while it waited for us
        answer = _Answer(actions, extra, takeover, weights_seq_no)
        for j, env_id in enumerate(envs):
            env = info.envs[env_id]
            env.answer, env.row, env.sent_at = answer, j, now
            info.pending += env.episode is not None
        info.unreported += len(envs)
        info.heard_at = now
        self._count(info)
        return envs

    # -- taking, closing, deadlines -------------------------------------------

    def take_chunks(self) -> Cut:
        """Every chunk recorded since the last call; open episodes are cut and go on as new chunks.

        Episodes that ended come first, in the order they ended, then the
        open ones, client by client and env by env; an episode that took no
        step since the last call gives no chunk.
        """
        log, self._log = self._log, []
        ended, self._ended = self._ended, []
        envs = [env for info in self._clients.values() for env in info.envs.values()]
        chunks: list[dict] = []
        if log:
            columns, spans = _sorted_by_episode(log)
            running = (episode for env in envs for episode in (*env.closed, env.episode))
            for episode in itertools.chain(ended, running):
                span = spans.get(episode.serial) if episode is not None else None
                if span is not None:
                    chunks.extend(self._chunks(episode, columns, *span))
        for env in envs:
            env.closed.clear()
        cut = Cut(chunks, self._steps, self._oldest if self._oldest is not None else 0)
        self._steps, self._oldest = 0, None
        return cut

    def drop_client(self, client: K) -> int:
        """``client`` is gone: close its open episodes as truncated at their last step; return how many."""
        info = self._clients.pop(client, None)
        if info is None:
            return 0
        self._uncount(info)
        closed = len(info.envs)
        for env_id in list(info.envs):
            self._close(info, env_id, truncate=True)
        return closed

    def expire(self, now: float) -> list[K]:
        """Enforce ``report_timeout_s`` at ``now``; return the clients to cut off.

        An env whose action has gone unreported that long has its episode
        closed as truncated at its last complete step. A client that has
        open episodes, no ``ACT`` unanswered, and sent none for that long is
        returned (its episodes are closed when it is dropped). Time a client
        spends waiting for an answer does not count.
        """
        limit = self.report_timeout_s
        silent = [client for client, info in self._clients.items()
                  if info.envs and info.waiting is None and now - info.heard_at > limit]
        for info in self._clients.values():
            if info.waiting is not None:
                continue
            late = [env_id for env_id, env in info.envs.items()
                    if env.sent_at is not None and now - env.sent_at > limit]
            if not late:
                continue
            self._uncount(info)
            for env_id in late:
                self._close(info, env_id, truncate=True)
                self.expired_envs += 1
            self._count(info)
        return silent

    def restart_clocks(self, now: float) -> None:
        """Start every deadline over at ``now`` (the runner did not read its clients for a while)."""
        for info in self._clients.values():
            info.heard_at = info.waiting_since = now
            for env in info.envs.values():
                if env.sent_at is not None:
                    env.sent_at = now

    # -- internals ---------------------------------------------------------------

    def _check(self, info: Optional[_Client], rows: ActRows, start: list[bool], want: list[bool]) -> None:
        """Refuse an ``ACT`` that can't be applied whole (see :meth:`record`); ``start``, ``want``: its columns."""
        if len(rows) > 2 * self.max_envs:
            raise IngestError(f"ACT: {len(rows)} rows; this runner serves at most {self.max_envs} envs "
                              "(served_max_envs)", code=ErrorCode.LIMIT_EXCEEDED)
        known = info.envs if info is not None else {}
        # Whether each env touched has an open episode as the rows are applied,
        # and the row of an env that already wants an action.
        is_open: dict[int, bool] = {}
        wanting: dict[int, int] = {}
        opened = 0
        for i, env_id in enumerate(rows.env):
            if env_id in wanting:
                raise IngestError(f"ACT: row {i} is for env {env_id}, whose row {wanting[env_id]} "
                                  "already waits for an action")
            now_open = is_open.get(env_id, env_id in known)
            if start[i]:
                opened += 0 if now_open else 1
                is_open[env_id] = True
                wanting[env_id] = i
                continue
            if not now_open:
                raise IngestError(f"ACT: row {i} (env {env_id}) continues an episode, but env {env_id} has "
                                  "none open; its first row must be a start row")
            if want[i]:
                wanting[env_id] = i
            else:
                opened -= 1
                is_open[env_id] = False
        if opened > 0 and self._open + opened > self.max_envs:
            raise IngestError(f"ACT: opens {opened} more envs; this runner serves at most {self.max_envs} "
                              "(served_max_envs)", code=ErrorCode.LIMIT_EXCEEDED)

    def _uncount(self, info: _Client) -> None:
        """Take ``info`` out of the running totals before it changes (:meth:`_count` puts it back)."""
        if info.waiting is None:
            self._outstanding -= info.pending
            self._stepping -= 1 if info.envs else 0

    def _count(self, info: _Client) -> None:
        if info.waiting is None:
            self._outstanding += info.pending
            self._stepping += 1 if info.envs else 0

    def _note_steps(self, weights_seq_no: int, steps: int) -> None:
        self._steps += steps
        if self._oldest is None or weights_seq_no < self._oldest:
            self._oldest = weights_seq_no

    def _close(self, info: _Client, env_id: int, *, truncate: bool = False) -> None:
        """Forget an env, keeping its episode's steps (ended, or closed now as truncated at its last step)."""
        env = info.envs.pop(env_id)
        if env.sent_at is not None:
            info.unreported -= 1
            info.pending -= env.episode is not None
        self._ended.extend(env.closed)
        if env.episode is not None:
            if truncate:
                env.episode.ended = (False, True)
            self._ended.append(env.episode)
        self._open -= 1

    def _new_episode(self, obs: np.ndarray, now: float) -> _Episode:
        self._serial += 1
        return _Episode(self._serial, uuid.uuid4().hex, obs[None], now)

    def _log_steps(self, rows: ActRows, obs: np.ndarray, now: float, done_rows: list[int], serials: list[int],
                   answers: list[_Answer], answer_rows: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        """Append the steps an ``ACT`` completed to the log as one block; count them by weights version.

        Returns the steps and the take-overs among them, by weights version.
        """
        if not done_rows:
            return {}, {}
        first = answers[0]
        if all(answer is first for answer in answers):
            # The usual tick: every step reports on one ACTIONS (usually all of its rows, in order).
            whole = answer_rows == list(range(len(first.actions)))
            pick = slice(None) if whole else answer_rows
            actions = first.actions[pick]
            extra = {name: values[pick] for name, values in first.extra.items()}
            takeover = None if first.takeover is None else first.takeover[pick]
            steps = {first.weights_seq_no: len(done_rows)}
        else:
            actions = np.stack([a.actions[j] for a, j in zip(answers, answer_rows)])
            extra = {name: np.stack([a.extra[name][j] for a, j in zip(answers, answer_rows)]) for name in first.extra}
            takeover = None
            if any(a.takeover is not None for a in answers):
                takeover = np.array([a.takeover is not None and bool(a.takeover[j])
                                     for a, j in zip(answers, answer_rows)])
            steps = dict(collections.Counter(a.weights_seq_no for a in answers))
        takeovers: dict[int, int] = {}
        if takeover is not None and takeover.any():
            for a, j in zip(answers, answer_rows):
                if a.takeover is not None and a.takeover[j]:
                    takeovers[a.weights_seq_no] = takeovers.get(a.weights_seq_no, 0) + 1
        whole_act = len(done_rows) == len(rows)
        pick = slice(None) if whole_act else done_rows
        self._log.append(_Block(np.asarray(serials, np.int64), actions, extra, takeover,
                                rows.reward[pick], obs[pick], now))
        for seq_no, n in steps.items():
            self._note_steps(seq_no, n)
        return steps, takeovers

    def _chunks(self, episode: _Episode, columns: "_Columns", begin: int, end: int) -> list[dict]:
        """The chunks of ``episode``'s steps ``begin:end`` of the sorted log, at most ``max_chunk_steps`` each."""
        size = self._max_chunk_steps or end - begin
        chunks = []
        for first in range(begin, end, size):
            last = min(first + size, end)
            # A closed episode's last chunk says so; but one closed after it filled a whole chunk
            # leaves that chunk as cut (a local client's builder cuts it the moment it is full).
            over = last == end and episode.ended is not None and (
                episode.ended_by_row or self._max_chunk_steps is None or last - first < size)
            terminated, truncated = episode.ended if over else (False, False)
            extra = {name: values[first:last] for name, values in columns.extra.items()}
            if columns.takeover is not None and columns.takeover[first:last].any():
                extra[TAKEOVER] = columns.takeover[first:last]
            step_time = float(columns.time[last - 1])
            chunks.append(build_episode_state(
                episode.id,
                np.concatenate([episode.first_obs, columns.obs[first:last]]),
                columns.actions[first:last],
                columns.reward[first:last],
                extra_model_outputs=extra or None,
                terminated=terminated,
                truncated=truncated,
                t_started=episode.t_started,
                start_time=episode.start_time,
                last_step_time=step_time,
            ))
            episode.t_started += last - first
            episode.start_time = step_time
            episode.first_obs = columns.obs[last - 1:last]
        return chunks


@dataclass(frozen=True)
class _Columns:
    """The log's steps, sorted by episode (and in order within one)."""

    actions: np.ndarray
    extra: dict
    takeover: Optional[np.ndarray]
    reward: np.ndarray
    obs: np.ndarray
    time: np.ndarray


def _sorted_by_episode(log: list[_Block]) -> tuple[_Columns, dict[int, tuple[int, int]]]:
    """The log's columns sorted by episode, and each episode's span in them (serial -> (begin, end))."""
    serial = np.concatenate([block.serial for block in log])
    order = np.argsort(serial, kind="stable")
    takeover = None
    if any(block.takeover is not None for block in log):
        takeover = np.concatenate([block.takeover if block.takeover is not None
                                   else np.zeros(len(block.serial), np.bool_) for block in log])[order]
    columns = _Columns(
        actions=np.concatenate([block.actions for block in log])[order],
        extra={name: np.concatenate([block.extra[name] for block in log])[order] for name in log[0].extra},
        takeover=takeover,
        reward=np.concatenate([block.reward for block in log]).astype(REWARD_DTYPE, copy=False)[order],
        obs=np.concatenate([block.obs for block in log])[order],
        time=np.repeat([block.time for block in log], [len(block.serial) for block in log])[order],
    )
    serial = serial[order]
    bounds = np.flatnonzero(serial[1:] != serial[:-1]) + 1
    begins = np.concatenate([[0], bounds]).tolist()
    ends = np.concatenate([bounds, [len(serial)]]).tolist()
    return columns, dict(zip(serial[begins].tolist(), zip(begins, ends)))
