"""EnvClient: what a simulator's loop calls to train with an RLlib learner.

One object per connection. It owns the mode (the policy run here, or actions
served by the runner), the episode recording, the weights, sending, pacing,
reconnects and shutdown, so a simulator's loop is this::

    from rlinks_rllib.client import EnvClient

    with EnvClient("127.0.0.1:5556") as client:
        obs, _ = env.reset()
        while True:
            action = client.act(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            client.report(reward, obs, terminated, truncated)
            if terminated or truncated:
                obs, _ = env.reset()

The ``with`` block ends quietly when the learner ends the run
(:class:`~.errors.TrainingEnded`) or when :meth:`EnvClient.stop` was called
(from a signal handler, say); anything else propagates.

The same loop serves three shapes of simulator:

* one env (the default): ``act(obs)`` gives one action;
* ``num_envs=N`` envs stepped together or one by one: ``act(obs_batch)``
  gives N actions; ``env=[...]`` names the envs of a call when only some
  step (each env's episodes are its own);
* a multi-agent runner (its config says so): ``act({agent: obs})`` gives
  ``{agent: action}``, ``report`` takes dicts by agent id with
  ``"__all__"`` ending the episode; agents may join and leave.

An env starts an episode on its first :meth:`~EnvClient.act` (or
:meth:`~EnvClient.start_episode`); a report with ``terminated`` or
``truncated`` ends it, and the env's next ``act`` starts the next one. Between
the two, ``act`` takes the observation last reported for that env.

Envs of one client take turns: each env goes act, report, act, ... and the
calls of different envs may come in any order (``act(env=[0])``,
``act(env=[1])``, ``report(env=[1])``, ``report(env=[0])``), from one thread
at a time: an on-policy ``report`` may wait for the weights that every env's
next action must be sampled with. Envs stepped by threads of their own take
an EnvClient each (:meth:`EnvClient.stop` and :attr:`EnvClient.stats` are
for any thread).

Modes (``inference=``): ``"local"`` runs RLlib's default MLP in numpy and any
other module as the exported graph (onnxruntime), asking the runner for the
graph itself; ``"served"`` asks the runner for every action (one round trip
per ``act``; nothing to install, nothing recorded here); ``"auto"`` (the
default) runs locally when a client policy can run the runner's module and
is served otherwise.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..protocol.extensions import Extension
from ..protocol.multi_agent import read_multi_agent_config
from ..protocol.multi_agent_builder import ALL
from .errors import ClientClosed, ConnectFailed, ConnectionLost, NotAgreed, PickledConfigRefused, TrainingEnded
from .inference.local import LocalInference
from .inference.served import ServedInference
from .network.address import Address, AddressLike
from .network.connection import DEFAULT_EXTENSIONS, ClientStats, RLinkClient
from .network.shared_client import SharedClient
from .policies.mlp import UnsupportedModelError

__all__ = ["EnvClient", "EnvClientStats", "INFERENCE_MODES"]

#: What ``inference=`` takes.
INFERENCE_MODES = ("auto", "local", "served")

#: Everything EnvClient may need: served actions, the policy graph (sent only when the
#: runner's module needs it), multi-agent (agreed only by a multi-agent runner).
_EXTENSIONS = (*DEFAULT_EXTENSIONS, Extension.POLICY_GRAPH.value, Extension.MULTI_AGENT.value)

#: Episodes the mean return is taken over.
_RETURNS_KEPT = 100


@dataclass(frozen=True)
class EnvClientStats:
    """What the loop did and what the connection delivered (a snapshot; see :attr:`EnvClient.stats`).

    Attributes:
        steps: outcomes reported (env steps; ticks for a multi-agent env).
        episodes: episodes ended (by a report or :meth:`EnvClient.end_episode`).
        mean_return: mean return of the last 100 episodes (summed over agents), NaN before the first.
        weights_seq_no: the weights the last actions were computed with.
        delivery: the connection's counters (batches sent and confirmed, reconnects).
        takeover_steps: steps reported after :meth:`EnvClient.take_over` (a person or a script acted).
        takeover_rate: of the steps of the last 100 episodes, the part taken over; NaN before the first.
    """

    steps: int
    episodes: int
    mean_return: float
    weights_seq_no: int
    delivery: ClientStats
    takeover_steps: int = 0
    takeover_rate: float = float("nan")


class EnvClient:
    """A simulator's connection to an RLlib learner: act, report, and the rest is done for you.

    Args:
        address: the learner's directory or one runner: ``"HOST:PORT"``,
            ``"tls://HOST:PORT"``, ...
        num_envs: ``None`` for one env (``act(obs)`` gives one action), or the
            number of envs this client steps (env ids ``0..num_envs-1``).
        inference: ``"auto"``, ``"local"`` or ``"served"`` (see the module docs).
        on_policy: send on-policy batches and wait for the weights trained on
            them; ``None``: as the runner's algorithm says (PPO yes, APPO no).
        explore: sample actions (``False``: the greedy action; local only).
        seed: seeds the local policy's sampling.
        reliable: reconnect and resend what was not confirmed when a
            connection drops (on by default).
        timeout: seconds any one wait may take (on-policy, that includes the
            learner's training step).
        weights_every_s: off-policy, the least seconds between two weight
            fetches. ``None`` (the default): as soon as the runner's ``ACK``
            names newer weights (``weights_notice``), and every second from a
            runner that names none (RLlib's own).
        action_space, rollout_fragment_length, fcnet_activation: only for
            RLlib's own server, which does not describe itself to a client
            that refuses its pickle: the action space (a gymnasium space or
            ``DiscreteSpace``/``BoxSpace``), the steps per batch and the MLP's
            activation.
        logger: where the client logs.
        **client_options: passed to :class:`~.network.connection.RLinkClient`
            (``secret_file``, ``ca_file``, ``retry_attempts``, ...).

    Raises:
        ValueError: an argument is out of range (or as RLinkClient).
    """

    def __init__(
        self,
        address: AddressLike,
        *,
        num_envs: Optional[int] = None,
        inference: str = "auto",
        on_policy: Optional[bool] = None,
        explore: bool = True,
        seed: Optional[int] = None,
        reliable: bool = True,
        timeout: float = 120.0,
        weights_every_s: Optional[float] = None,
        action_space: Any = None,
        rollout_fragment_length: int = 500,
        fcnet_activation: str = "tanh",
        logger: Optional[logging.Logger] = None,
        **client_options: Any,
    ) -> None:
        if inference not in INFERENCE_MODES:
            raise ValueError(f"inference must be one of {INFERENCE_MODES}, got {inference!r}")
        if num_envs is not None and (type(num_envs) is not int or num_envs < 1):
            raise ValueError(f"num_envs must be None (one env) or a positive int, got {num_envs!r}")
        self._log = logger or logging.getLogger(__name__)
        self._client = SharedClient(RLinkClient(
            address, reliable=reliable, timeout=timeout, extensions=client_options.pop("extensions", _EXTENSIONS),
            logger=self._log, **client_options))
        self._num_envs = num_envs
        self._all_envs = list(range(num_envs or 1))
        self._inference = inference
        self._on_policy = on_policy
        self._explore = explore
        self._rng = np.random.default_rng(seed)
        self._timeout = timeout
        self._weights_every_s = weights_every_s
        self._plain = {"action_space": action_space, "rollout_fragment_length": rollout_fragment_length,
                       "fcnet_activation": fcnet_activation}
        self._engine: LocalInference | ServedInference | None = None
        self._multi_agent = False
        #: The config the runner sent (or the stand-in for RLlib's own server).
        self.config: Optional[Mapping[str, Any]] = None
        self._stopping = threading.Event()
        self._ended = False
        self._closed = False
        self._last_obs: dict[int, Any] = {}
        self._returns: collections.deque[float] = collections.deque(maxlen=_RETURNS_KEPT)
        self._episode_return: collections.Counter = collections.Counter()
        self._steps = 0
        self._episodes = 0
        #: Take-overs: envs whose pending action is one, and (taken over, steps) per running and recent episode.
        self._taking_over: set[int] = set()
        self._episode_takeovers: dict[int, list[int]] = {}
        self._takeovers_kept: collections.deque[tuple[int, int]] = collections.deque(maxlen=_RETURNS_KEPT)
        self._takeover_steps = 0

    # -- what the loop reads --------------------------------------------------------------

    @property
    def mode(self) -> str:
        """``"local"`` or ``"served"`` (connects first if needed)."""
        return "served" if isinstance(self._ready(), ServedInference) else "local"

    @property
    def on_policy(self) -> bool:
        """Whether batches are on-policy (connects first if needed)."""
        return self._ready().on_policy

    @property
    def multi_agent(self) -> bool:
        """Whether the runner is multi-agent: act and report take dicts by agent id (connects first if needed)."""
        self._ready()
        return self._multi_agent

    @property
    def policy(self) -> Any:
        """The policy run here (``NumpyPolicy``, ``OnnxPolicy``, or a ``PolicySet`` for many agents);
        ``None`` when the runner serves the actions or before connecting (this does not connect)."""
        return self._engine.policy if isinstance(self._engine, LocalInference) else None

    @property
    def running(self) -> bool:
        """False once the learner ended the run, :meth:`stop` was called, or the client was closed."""
        return not (self._ended or self._closed or self._stopping.is_set())

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping.is_set()

    @property
    def address(self) -> Address:
        """The runner connected to (a directory sends each connection to a live runner)."""
        return self._client.raw.address

    @property
    def stats(self) -> EnvClientStats:
        """A snapshot of the counters; any thread may read it."""
        mean = float(np.mean(self._returns)) if self._returns else float("nan")
        seq_no = self._engine.weights_seq_no if self._engine is not None else 0
        kept = list(self._takeovers_kept)
        steps = sum(n for _, n in kept)
        rate = sum(k for k, _ in kept) / steps if steps else float("nan")
        return EnvClientStats(self._steps, self._episodes, mean, seq_no, self._client.raw.stats,
                              self._takeover_steps, rate)

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> "EnvClient":
        """The client, not connected yet: the first call connects, inside the block (so a stop while
        connecting ends it quietly too)."""
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Close; swallow the exceptions that are a normal end (the learner ended, :meth:`stop`)."""
        quiet = isinstance(exc, TrainingEnded) or (isinstance(exc, ClientClosed) and self._stopping.is_set())
        if quiet:
            self._log.info("%s", "the learner ended the run" if isinstance(exc, TrainingEnded) else "stopped")
        self.close(flush=exc_type is None)
        return quiet

    def connect(self) -> "EnvClient":
        """Connect, read the runner's config and weights, and pick the mode; other calls do it when needed.

        Raises:
            ConnectFailed, ServerError, ...: see :class:`~.network.connection.RLinkClient`.
            UnsupportedModelError: ``inference="local"`` and no client policy
                can run the module (the message says what to install or change).
            NotAgreed: ``inference="served"`` and the runner does not serve actions.
        """
        self._ready()
        return self

    def stop(self) -> None:
        """End the loop from any thread or a signal handler: the next (or a waiting) call raises ClientClosed.

        Leaving the ``with`` block on it is quiet.
        """
        self._stopping.set()
        threading.Thread(target=self._client.close, name="rlinks-stop", daemon=True).start()

    def close(self, *, flush: bool = True) -> None:
        """Close the connection; with ``flush``, first deliver what was recorded and wait for its ACKs (bounded).

        On-policy, steps of a share that was not complete are not sent. In
        served mode, one last ``ACT`` ends the open episodes where they stand.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if flush and self._engine is not None and not (self._ended or self._stopping.is_set()):
                self._engine.close()
        except TrainingEnded:
            self._ended = True
        finally:
            self._client.close()

    # -- the loop's calls -----------------------------------------------------------------

    def act(self, obs: Any, env: Any = None) -> Any:
        """The action(s) for ``obs``.

        Args:
            obs: one env: its observation. ``num_envs``: a batch (an array or
                a list, one row per env of the call). Multi-agent: ``{agent: obs}``
                as the env gives it (agents that left at the last report get no action).
            env: ``num_envs`` only: the envs of the rows (default: all, in order);
                multi-agent: the env id when ``num_envs`` is set.

        Returns:
            One env: the action as the env takes it (an int for ``Discrete``,
            an array in the Box's bounds for ``Box``). ``num_envs``: an array
            of them, one per row. Multi-agent: ``{agent: action}``.

        Raises:
            ValueError: an env that acted has not reported its outcome yet; an
                observation that differs from the one last reported for its
                env; shapes that don't fit.
            TrainingEnded: the learner ended the run.
            ClientClosed: :meth:`stop` or :meth:`close` was called.
            ConnectionLost, ServerTimeout, ServerError: see :class:`RLinkClient`.
        """
        return self._act(obs, env, None)

    def log_action(self, obs: Any, action: Any, env: Any = None) -> None:
        """Like :meth:`act`, but the simulator chose ``action`` itself (a person, a script, a safety stop).

        The step is recorded with the action as taken (back in the form RLlib
        trains on) and the policy's log-probability of it, as RLlib's old
        ``PolicyClient.log_action`` recorded it. Report its outcome as usual.
        Served, the runner records it so (``served_taken``).

        Raises:
            ValueError: a multi-agent runner, or an action out of the space; as :meth:`act`.
            NotAgreed: served, by a runner that records only its own actions.
        """
        taken = [action] if self._num_envs is None else list(action)
        self._act(obs, env, taken)

    def take_over(self, obs: Any, action: Any, env: Any = None) -> None:
        """Like :meth:`log_action`, but a person or a scripted controller acted instead of the policy.

        The step is recorded with ``action`` as taken and marked a take-over
        (the ``takeover`` extension, PROTOCOL.md 10.8): off-policy learners
        (SAC, DQN, APPO) train on it like any other step, on-policy ones (PPO)
        never do (the runner asks for as many more steps of the policy's own),
        and it is counted: :attr:`stats` (``takeover_steps``, ``takeover_rate``)
        here, the take-over rate per episode in the learner's live line,
        ``progress.csv`` and RLlib's metrics. Report its outcome as usual.

        Raises:
            NotAgreed: the runner does not speak ``takeover`` (RLlib's own
                server, an older runner, a multi-agent one).
            ValueError: an action out of the space; as :meth:`act`.
        """
        self._ready()
        raw = self._client.raw
        if Extension.TAKEOVER.value not in raw.server_extensions:
            raise raw._not_agreed(Extension.TAKEOVER)  # noqa: SLF001 - the one wording of this refusal
        taken = [action] if self._num_envs is None else list(action)
        envs, _ = self._rows(obs, env)
        self._act(obs, env, taken, takeover=True)
        self._taking_over.update(envs)

    def _act(self, obs: Any, env: Any, taken: Optional[list], *, takeover: bool = False) -> Any:
        engine = self._ready()
        envs, rows = self._rows(obs, env)
        if taken is not None and len(taken) != len(envs):
            raise ValueError(f"{len(taken)} actions for {len(envs)} envs")
        # Each continuing env's observation must be the one last reported: compared all at once.
        continuing: list[tuple[int, Any, Any]] = []
        for e, row in zip(envs, rows):
            if engine.awaiting_report(e):
                raise ValueError(f"env {e} acted and its outcome was not reported: call report() before act() again")
            if not engine.is_open(e):
                engine.start(e, row)
                self._episode_return[e] = 0.0
            elif not self._multi_agent:
                continuing.append((e, row, self._last_obs.get(e)))
        if continuing and not _all_same(continuing):
            e = next(e for e, row, last in continuing if not _same(row, last))
            raise ValueError(f"env {e}: act() must take the observation last given to report() "
                             "(to start a new episode elsewhere, call start_episode() first)")
        actions = self._call(engine.act, envs, rows, taken, takeover)
        if not takeover:
            self._taking_over.difference_update(envs)
        return actions[0] if self._num_envs is None or self._multi_agent else actions

    def report(self, reward: Any, obs: Any, terminated: Any = False, truncated: Any = False, env: Any = None) -> None:
        """Report the outcome of the last action: its reward, the next observation, whether the episode ended.

        Args:
            reward, obs, terminated, truncated: one env: values as gymnasium's
                ``step`` returns them. ``num_envs``: one per env of the call
                (arrays or lists). Multi-agent: dicts by agent id (agents
                missing from ``obs`` don't report; ``"__all__"`` ends the episode).
            env: as for :meth:`act`.

        Raises:
            ValueError: an env that has no action to report on; a non-finite
                reward; values that don't fit the episode.
            TrainingEnded, ClientClosed, ...: off-policy, a failure of the background sender.
        """
        engine = self._ready()
        envs, obs_rows = self._rows(obs, env)
        rewards, terms, truncs = (self._column(value, len(envs)) for value in (reward, terminated, truncated))
        for e, r, o, term, trunc in zip(envs, rewards, obs_rows, terms, truncs):
            if not engine.awaiting_report(e):
                raise ValueError(f"env {e} has no action to report on: call act() first")
            ended = engine.report(e, r, o, term, trunc)
            self._steps += 1
            counts = self._episode_takeovers.setdefault(e, [0, 0])
            counts[1] += 1
            if e in self._taking_over:
                self._taking_over.discard(e)
                counts[0] += 1
                self._takeover_steps += 1
            self._episode_return[e] += float(sum(r.values())) if self._multi_agent else float(r)
            if ended:
                self._finish_episode(e)
            else:
                self._last_obs[e] = o
        self._call(engine.after_report)

    def start_episode(self, obs: Any, env: Any = None, *, train: bool = True) -> None:
        """Start a new episode at ``obs`` (a running one ends as truncated); optional before :meth:`act`.

        ``train=False``: the episode is played with the policy and never
        trained on (an evaluation, a demo); served, the runner records none of it.
        """
        engine = self._ready()
        envs, rows = self._rows(obs, env)
        for e, row in zip(envs, rows):
            if engine.is_open(e):
                self._finish_episode(e)
            engine.start(e, row, train)
            self._episode_return[e] = 0.0
            self._last_obs[e] = row

    def refresh_weights(self) -> None:
        """Fetch the learner's newest weights now (local inference; served, the runner always has them)."""
        engine = self._ready()
        if isinstance(engine, LocalInference):
            self._call(engine.refresh_weights)

    def end_episode(self, env: Any = None) -> None:
        """End the running episode where it stands (truncated), e.g. when the game is abandoned."""
        engine = self._ready()
        envs = [0] if env is None and self._num_envs is None else self._env_ids(env)
        for e in envs:
            if engine.is_open(e):
                engine.end(e)
                self._finish_episode(e)

    # -- inside -------------------------------------------------------------------------

    def _ready(self) -> LocalInference | ServedInference:
        if self._engine is None:
            if self._closed:
                raise ClientClosed("the EnvClient was closed")
            self._engine = self._call(self._setup)
        return self._engine

    def _setup(self) -> LocalInference | ServedInference:
        raw = self._client.raw
        self._client.call(raw.connect)
        try:
            config = self._client.call(raw.get_config)
        except PickledConfigRefused:
            config = self._plain_rllib_config()
        self.config = config
        multi_agent = read_multi_agent_config(config) if "multi_agent" in config else None
        self._multi_agent = multi_agent is not None
        served = Extension.SERVED_ACTIONS.value in raw.server_extensions
        if self._inference != "served":
            update = self._client.call(raw.get_state)
            on_policy = bool(config.get("on_policy", True)) if self._on_policy is None else self._on_policy
            try:
                engine = LocalInference(self._client, config, update, multi_agent=multi_agent, on_policy=on_policy,
                                        explore=self._explore, rng=self._rng, timeout=self._timeout,
                                        weights_every_s=self._weights_every_s, logger=self._log)
            except (UnsupportedModelError, ImportError) as exc:
                if self._inference == "local" or not served or multi_agent is not None:
                    raise
                self._log.info("the policy can't run here (%s); the runner computes the actions", exc)
            else:
                self._log.info("connected to %s: running %s here, %s", raw.address, type(engine.policy).__name__,
                               "on-policy" if on_policy else "off-policy")
                return engine
        if not served:
            who = "RLlib's own server" if raw.is_plain_rllib else f"agent {raw.server_agent!r}"
            raise NotAgreed(f"{raw.address} ({who}) does not serve actions: use inference='local'",
                            Extension.SERVED_ACTIONS.value)
        if multi_agent is not None:
            raise UnsupportedModelError("served actions are single-agent: use inference='local' with a "
                                        "multi-agent runner")
        self._log.info("connected to %s: the runner computes the actions", raw.address)
        return ServedInference(self._client)

    def _plain_rllib_config(self) -> dict:
        """A stand-in config for RLlib's own server, from the constructor's arguments."""
        if self._plain["action_space"] is None:
            raise PickledConfigRefused(
                f"{self._client.raw.address} is RLlib's own server, which describes itself only as a pickle: "
                "pass action_space= (and rollout_fragment_length=, fcnet_activation= if not 500 and 'tanh')")
        return {"rollout_fragment_length": self._plain["rollout_fragment_length"], "on_policy": True,
                "model_config": {"fcnet_activation": self._plain["fcnet_activation"]},
                "observation_space": {"kind": "box", "shape": [0]}, "action_space": self._plain["action_space"]}

    def _call(self, method: Any, *args: Any) -> Any:
        """Run an engine call; note the learner's end, and make a stop read as ClientClosed."""
        try:
            return method(*args)
        except TrainingEnded:
            self._ended = True
            raise
        except (ConnectionLost, ConnectFailed):
            if self._stopping.is_set():
                raise ClientClosed("stopped") from None
            raise

    def _rows(self, obs: Any, env: Any) -> tuple[list[int], list[Any]]:
        if self._num_envs is None:
            if env is not None:
                raise ValueError("env= is for a client with num_envs set")
            return [0], [obs]
        if self._multi_agent:
            return [self._env_ids(env if env is not None else 0)[0]], [obs]
        envs = self._all_envs if env is None else self._env_ids(env)
        if type(obs) is list:
            rows = obs
        elif isinstance(obs, Mapping):  # a Dict observation space: a dict of batches
            rows = [{k: _leaf_row(v, i) for k, v in obs.items()} for i in range(len(envs))]
        else:
            rows = list(obs)
        if len(rows) != len(envs):
            raise ValueError(f"{len(rows)} observation rows for {len(envs)} envs")
        return envs, rows

    def _env_ids(self, env: Any) -> list[int]:
        if env is None:
            return self._all_envs
        ids = [int(env)] if np.isscalar(env) else [int(e) for e in env]
        bad = [e for e in ids if not 0 <= e < self._num_envs]
        if bad:
            raise ValueError(f"env ids must be in 0..{self._num_envs - 1}, got {bad[:4]}")
        return ids

    def _column(self, value: Any, k: int) -> list[Any]:
        if self._num_envs is None or self._multi_agent:
            return [value]
        if type(value) is list:
            column = value
        elif type(value) is np.ndarray and value.ndim == 1:
            column = value.tolist()  # Python numbers: cheaper to read one by one than numpy scalars
        elif np.isscalar(value) or isinstance(value, (bool, np.bool_)):
            return [value] * k
        else:
            column = list(value)
        if len(column) != k:
            raise ValueError(f"{len(column)} values for {k} envs")
        return column

    def _finish_episode(self, env: int) -> None:
        self._episodes += 1
        self._returns.append(self._episode_return.pop(env, 0.0))
        self._takeovers_kept.append(tuple(self._episode_takeovers.pop(env, (0, 0))))
        self._taking_over.discard(env)
        self._last_obs.pop(env, None)


def _leaf_row(value: Any, i: int) -> Any:
    if isinstance(value, Mapping):
        return {k: _leaf_row(v, i) for k, v in value.items()}
    return value[i]


def _all_same(pairs: list[tuple[int, Any, Any]]) -> bool:
    """Whether each ``(env, obs, last)`` has ``obs`` the same as ``last`` (:func:`_same`); arrays in one comparison.

    Many envs' rows are stacked and compared once (a comparison per env cost more than
    the rest of a served ``act``); anything that does not stack is compared row by row.
    """
    if len(pairs) > 1 and all(type(row) is np.ndarray and type(last) is np.ndarray for _, row, last in pairs):
        try:
            return np.array_equal(np.array([row for _, row, _ in pairs]), np.array([last for _, _, last in pairs]))
        except ValueError:  # rows of different shapes: each compared on its own below
            pass
    return all(_same(row, last) for _, row, last in pairs)


def _same(a: Any, b: Any) -> bool:
    """Whether two observations are the same (the same object, or equal values)."""
    if a is b:
        return True
    if type(a) is np.ndarray and type(b) is np.ndarray:  # np.array_equal's rule, without its conversions
        return a.shape == b.shape and bool(np.asarray(a == b).all())
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if b is None:
        return False
    return np.array_equal(np.asarray(a), np.asarray(b))
