"""``RLinkEnvRunner``: an RLlib EnvRunner whose environments are remote simulators.

Register it like any EnvRunner::

    config = (
        PPOConfig()
        .environment(observation_space=obs_space, action_space=act_space,
                     env_config={"port": 5555})
        .env_runners(env_runner_cls=RLinkEnvRunner, num_env_runners=2)
    )

Each remote runner listens on ``port + worker_index`` (the driver's local
runner listens only when there are no remote ones). Any number of
simulators connect to a runner, run the policy themselves, and send episodes;
``sample()`` hands RLlib what has arrived, and ``set_state()`` sends the new
weights back. A simulator that can't run the policy sends observations
instead and gets actions back (``served_actions``): the runner computes them
with its own module (:mod:`.served.forward`) and records those episodes itself.
A multi-agent config (``config.multi_agent(policies=..., policy_mapping_fn=...)``)
is served as well: its clients send multi-agent chunks and get every module's
weights (:mod:`.ingest.multi_agent`). See :mod:`.settings` for every ``env_config`` key.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from typing import Any, Collection, Optional, Union

import gymnasium as gym
import numpy as np
import ray
from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.env import INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.numpy import convert_to_numpy

from .._version import SERVER_AGENT
from ..protocol import messages as msgs
from ..protocol.config import PACED_IN_FLIGHT_KEY, POLICY_GRAPH_KEY, build_config
from ..protocol.spaces import describe_space
from .graph_export import ExportError, export_policy_graph, needs_policy_graph
from .ingest.episodes import EpisodeIngest
from .network.listener import RLinkServer
from .served.batcher import ServedPolicy
from .served.forward import ModuleForward, NumpyForward, served_actions_unsupported
from .served.taken_actions import TakenActionCheck, with_taken
from .metrics import (RUNNER_METRICS_KEY, EpisodeTotals, TransportMetrics, log_episodes, log_sampled, log_takeovers,
                      runner_key)
from .delivery.offpolicy import PACED_IN_FLIGHT, EpisodeAliases, StepCredit, backlog_steps
from .delivery.receipts import RECEIPTS_KEY, ReturnedBatches, receipts_wanted
from .delivery.scheduler import SamplePacer, WeightsChange
from .delivery.shares import CLIENTS_KEY, update_share
from .ingest.multi_agent import MultiAgentIngest, MultiAgentMetrics, MultiAgentSetup
from .recorder import runner_recorder
from .served.episodes import ObservationCheck
from .settings import RLinkSettings
from .stop_signal import wait_for

__all__ = ["RLinkEnvRunner", "runner_addresses"]

logger = logging.getLogger("rlinks_rllib.server")

#: Set on a batch once recorded, so one that is handed to RLlib again (see receipts.py) is not recorded twice.
_RECORDED = "_rlinks_recorded"

#: Used when RLlib's ``sample_timeout_s`` is None: sample() still never waits forever.
_DEFAULT_SAMPLE_TIMEOUT_S = 60.0

#: The longest a sample() of IMPALA or APPO waits for a first step, clients connected or not: well within
#: the learner's question to its runners after every iteration (learner.py) and RLlib's ``stop()`` at the
#: end, which queue behind it on the actor. Simulators that stay silent longer are the learner's to wait for.
_COUNTED_IDLE_WAIT_S = 5.0

#: The longest a sample() waits for IMPALA's or APPO's state server to answer whether it has newer weights.
_STATE_PULL_TIMEOUT_S = 10.0

#: Least seconds between two log lines about an off-policy backlog being dropped.
_DROP_LOG_EVERY_S = 60.0


def _is_on_policy(config: Any) -> bool:
    from ray.rllib.algorithms.ppo import PPOConfig

    return isinstance(config, PPOConfig)


def counts_results_as_fragments(config: Any) -> bool:
    """Whether the algorithm counts every ``sample()`` result as one rollout fragment: IMPALA and APPO.

    Their driver packs ``train_batch_size / rollout_fragment_length`` results
    into one update without looking into them, so a pack of empty results
    reaches the learner as no episodes at all, and RLlib's learner connector
    fails on it (``IndexError`` in ``AddOneTsToEpisodesAndTruncate``).
    """
    from ray.rllib.algorithms.impala import IMPALAConfig

    return isinstance(config, IMPALAConfig)


class RLinkEnvRunner(EnvRunner, Checkpointable):
    """An EnvRunner that serves RLlink clients instead of stepping an env.

    Raises (from the constructor):
        ValueError: the config lacks observation/action spaces or has bad rlinks settings.
        OSError: the port can't be bound (the runner fails loudly instead of idling).
    """

    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        self.worker_index: int = kwargs.get("worker_index", 0) or 0
        self.settings = RLinkSettings.from_env_config(self.config.env_config)
        #: The modules, mapping and step count of a multi-agent config; None for a single-agent one.
        self._multi_agent = MultiAgentSetup(self.config) if self.config.is_multi_agent else None
        self._ma_metrics: Optional[MultiAgentMetrics] = None
        if self._multi_agent is not None:
            self._ma_metrics = MultiAgentMetrics(self.config.num_env_runners or 0,
                                                 self.config.metrics_num_episodes_for_smoothing)
            self.module = self.config.get_multi_rl_module_spec(spaces=self._multi_agent.spaces,
                                                               inference_only=True).build()
        elif self.config.observation_space is None or self.config.action_space is None:
            raise ValueError(
                "RLinkEnvRunner needs the spaces up front: "
                "config.environment(observation_space=..., action_space=...)"
            )
        else:
            self.module = self.config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=True).build()
        self._episode_totals = EpisodeTotals()
        self._transport_metrics = TransportMetrics()
        self._lags: list[int] = []
        self._dropped_stale_steps = 0
        #: Steps taken over (``takeover``) that sample() handed on since get_metrics() last logged them.
        self._takeover_steps = 0
        self._target_steps = int(self.config.get_rollout_fragment_length(self.worker_index)) * int(
            self.config.num_envs_per_env_runner
        )
        self.on_policy = _is_on_policy(self.config)
        #: IMPALA and APPO: a sample() hands over at least one step whenever it can (see sample()).
        self._counted = counts_results_as_fragments(self.config)
        #: When the wait of the first sample() in a row that got nothing began, and the steps that had come by
        #: then (:meth:`_steps_came`); None: the last sample() got steps.
        self._quiet_since: Optional[tuple[float, int]] = None
        self._setup_off_policy_flow()
        #: Set by :meth:`stop_handing`: sample() hands nothing over any more (the learner is stopping).
        self._stopped_handing = False
        #: Set by :meth:`stop`: the thread watching the learner's stop signal ends (:meth:`watch_stop_signal`).
        self._stopped = threading.Event()
        self._watching: Optional[threading.Thread] = None
        #: Set by IMPALA and APPO (``use_env_runner_state_server``, their default): the actor that holds
        #: their newest weights, which every sample() pulls first (:meth:`_pull_newer_state`).
        self._env_runner_state_server = None
        # Steps one on-policy update takes from this runner: its share of the
        # train batch, at least one rollout fragment.
        runners = max(1, int(self.config.num_env_runners or 0))
        self._update_steps = max(self._target_steps, -(-int(self.config.total_train_batch_size) // runners))
        #: The weights version, and when a repeated sample() asks the clients for more.
        self._pacer = SamplePacer(update_steps=self._update_steps, extend_steps=self._target_steps,
                                  extend_after_s=self.settings.extend_after_s, on_policy=self.on_policy)
        #: The share the driver's client counts call for, taken with the next new weights (see shares.py).
        self._next_update_steps: Optional[int] = None

        self.server: Optional[RLinkServer] = None
        #: What a remote runner returned and the driver has not yet said it got (see receipts.py);
        #: None: no receipts come, and a result RLlib drops is lost.
        self._returned: Optional[ReturnedBatches] = None
        #: The forward pass for served actions, when this runner serves them.
        self._forward: Optional[ModuleForward | NumpyForward] = None
        #: The module as ONNX for clients that ask (``policy_graph``); None: not exported.
        self._policy_graph: Optional[bytes] = None
        #: Writes what sample() hands RLlib to ``record_dir`` (see recorder.py); None: not recording.
        self._recorder = None
        serves = self.worker_index > 0 or (self.config.num_env_runners or 0) == 0
        if serves and not self.config.in_evaluation:
            self._policy_graph = self._export_policy_graph()
            self._recorder = runner_recorder(self.settings, self.worker_index, multi_agent=self._multi_agent is not None,
                                             observation_space=self.config.observation_space)
            self.server = RLinkServer(
                self.settings,
                port=self.settings.port_for(self.worker_index),
                ingest=(EpisodeIngest(self.config.observation_space, self.config.action_space, self.settings,
                                      on_policy=self.on_policy)
                        if self._multi_agent is None else MultiAgentIngest(self._multi_agent, self.settings)),
                config_message=self._config_message,
                update_steps=self._update_steps,
                on_policy=self.on_policy,
                fragment_steps=self._target_steps,
                served=self._served_policy(),
                policy_graph=self._policy_graph is not None,
                multi_agent=self._multi_agent is not None,
                modules_for=None if self._multi_agent is None else self._multi_agent.module_of,
            )
            self.server.replace_weights(self._module_params(), self._weights_seq_no)
            if self.worker_index > 0 and receipts_wanted(self.config):
                self._returned = ReturnedBatches()
            self.server.start()
            logger.info("RLinkEnvRunner %d: simulators connect to %s:%d", self.worker_index, *self.address)

    def _setup_off_policy_flow(self) -> None:
        """Off-policy, one fragment per sample() on average and a bounded backlog (see offpolicy.py)."""
        #: The steps each sample() hands over (off-policy only; None on-policy).
        self._credit: Optional[StepCredit] = None
        self._backlog = backlog_steps(self.settings.off_policy_backlog_steps, self._target_steps)
        #: Whether the oldest steps beyond the backlog are dropped (else the inbox holds no more: pacing).
        self._drop_backlog = False
        self._aliases = EpisodeAliases()
        self._dropped_backlog_steps = 0
        self._drop_log = (0.0, 0)  # when the last line about dropping was logged, and the count then
        #: Paced single-agent clients keep one batch in flight (``paced_in_flight``, see offpolicy.py).
        self._in_flight: Optional[int] = None
        if self.on_policy:
            return
        # Multi-agent chunks are not renamed after a gap (MultiAgentEpisode ids nest), so they are paced.
        self._drop_backlog = self.settings.off_policy_backlog == "drop" and self._multi_agent is None
        holds = self.settings.takeover_terminates  # confirms a message with the next one (takeover_held.py)
        if not self._drop_backlog and self._multi_agent is None and not holds:
            self._in_flight = PACED_IN_FLIGHT
        # With clients that hold one batch in flight, a sample() that waited for more than a fragment (the
        # debt of calls that came up short) would wait out its whole timeout for steps that can't come yet.
        self._credit = StepCredit(self._target_steps, max_debt=0 if self._in_flight else self._backlog)
        if not self._drop_backlog:
            self.settings = dataclasses.replace(self.settings,
                                                inbox_max_steps=min(self.settings.inbox_max_steps, self._backlog))

    @property
    def _weights_seq_no(self) -> int:
        return self._pacer.weights_seq_no

    # -- where to connect ------------------------------------------------------

    @property
    def address(self) -> Optional[tuple[str, int]]:
        """The (host, port) this runner listens on; ``None`` if it doesn't listen."""
        if self.server is None:
            return None
        host, port = self.server.address
        if host in ("0.0.0.0", "::"):
            host = ray.util.get_node_ip_address()
        return host, port

    def get_address(self) -> Optional[tuple[str, int]]:
        """Same as :attr:`address`, callable remotely through ``foreach_env_runner``."""
        return self.address

    def get_transport_stats(self) -> dict:
        """The network side's counters now (for live views and tests)."""
        if self.server is None:
            return {}
        stats = self.server.stats.snapshot()
        stats.update(inbox_steps=self.server.inbox.steps, quiet_s=self._quiet_s(),
                     weights_seq_no=self._weights_seq_no, dropped_stale_steps=self._dropped_stale_steps,
                     dropped_backlog_steps=self._dropped_backlog_steps)
        if self._recorder is not None:
            stats.update(self._recorder.stats())
        return stats

    # -- EnvRunner API -----------------------------------------------------------

    def assert_healthy(self):
        """Raises if this runner should listen but its listener is gone."""
        if self.server is not None and not self.server.healthy:
            raise RuntimeError(f"RLinkEnvRunner {self.worker_index}: the listener on {self.server.address} is down")

    def sample(self, **kwargs) -> list:
        """Return the episodes clients sent, once there are enough or time is nearly up.

        Waits until this runner's share of a train batch has arrived, or until
        ``sample_wait_fraction`` of RLlib's ``sample_timeout_s`` has passed,
        then returns what it holds: Ray never abandons the call, so no batch is
        thrown away. Steps beyond the share wait for the next call.

        Off-policy, a call hands over one rollout fragment on average, so
        that RLlib's replay ratio holds, and the oldest steps beyond the
        backlog are dropped or never read (see ``delivery/offpolicy.py``).

        The batches returned are confirmed (``ACK``) to clients that speak
        the ``ack`` extension; see ``docs/SECURITY.md`` for what that guarantees.
        """
        if self.server is None or self._stopped_handing:
            self._log_sampled([], [], 0, [])
            return []
        self._pull_newer_state()
        began, came = time.monotonic(), self._steps_came()
        timeout_s = self.config.sample_timeout_s or _DEFAULT_SAMPLE_TIMEOUT_S
        # Called again before new weights, after this runner handed over its
        # whole share, the pacer answers quickly for a grace period, then
        # extends the update (see SamplePacer); so does a runner nobody is connected to.
        plan = self._pacer.plan(time.monotonic(), timeout_s * self.settings.sample_wait_fraction,
                                clients=self.server.stats.clients_connected)
        if plan.extend_steps:
            self.server.extend_update(plan.extend_steps)
        wanted = self._pacer.steps_to_take() if self._credit is None else self._credit.wanted()
        first_wait_s = plan.wait_s
        if self._counted:
            # IMPALA and APPO hold no replay ratio on sample() calls but count each result as a fragment:
            # never hand over nothing for a surplus, and wait a while for a first step rather than answer
            # empty every idle poll (ten empty answers in a row make a pack that fails the learner), but
            # no longer than _COUNTED_IDLE_WAIT_S: silent simulators are the learner's to wait for (quiet_s).
            wanted = self._target_steps
            first_wait_s = min(timeout_s * self.settings.sample_wait_fraction, _COUNTED_IDLE_WAIT_S)
            plan = dataclasses.replace(plan, wait_s=max(plan.wait_s, first_wait_s))
        finished = []
        if self._drop_backlog:
            self._drop(self.server.inbox.drop_oldest(self._backlog), finished)
        batches = self.server.inbox.take(wanted, first_wait_s if wanted else 0.0)
        got = sum(batch.steps for batch in batches)
        if batches and got < wanted and plan.wait_s > first_wait_s:
            # Steps come: wait for the rest as long as the plan says.
            batches += self.server.inbox.take(wanted - got, max(0.0, began + plan.wait_s - time.monotonic()))
        if self._stopped_handing and self._counted and batches:
            # IMPALA and APPO end their last iteration without waiting for this result: left unconfirmed,
            # its steps go to the learner that resumes (reliable clients send them again).
            self.server.inbox.put_back(batches)
            batches = []
        short = wanted - sum(batch.steps for batch in batches)
        if short > 0 and self.server.serves_actions and not self._stopped_handing:
            # Steps of served clients wait in the runner until an update has
            # them all; a sample() that came up short takes them now.
            self.server.cut_served()
            batches += self.server.inbox.take(short, 0.0)
        episodes = []
        steps = 0
        lags = []  # per episode, for the multi-agent metrics
        kept, stale = [], []  # what goes to RLlib, and what is dropped (for the recorder)
        for batch in batches:
            lag = max(0, self._weights_seq_no - batch.weights_seq_no)
            if lag and self.settings.drop_stale_steps:
                self._dropped_stale_steps += batch.steps
                stale.append(batch)
                continue
            kept.append(batch)
            self._lags.append(lag)
            lags += [lag] * len(batch.episodes)
            self._count_returns(batch, finished)
            episodes.extend(batch.episodes)
            steps += batch.steps
        if self._credit is not None:
            self._credit.handed(sum(batch.steps for batch in batches))
            self._aliases.rename(episodes)
        self._record(kept, trained=True)
        if self.settings.record_untrained:
            self._record(stale, trained=False)
        self._pacer.sampled(steps, time.monotonic())
        if batches:
            self._quiet_since = None
        elif self._quiet_since is None:
            self._quiet_since = (began, came)
        self._confirm_and_keep(batches)
        self._log_sampled(episodes, lags, steps, finished)
        return episodes

    def _steps_came(self) -> int:
        """Env steps that came from clients so far: sent in batches, or recorded from served actions."""
        stats = self.server.stats
        return stats.steps_in + stats.served_steps

    def _quiet_s(self) -> float:
        """Seconds since the wait of the first ``sample()`` in a row that got nothing began, if no step came
        since; 0.0 when the last one got steps or steps came after it. The learner holds IMPALA and APPO
        while every runner with clients is quiet (``training/learner.py``)."""
        if self._quiet_since is None or self.server is None:
            return 0.0
        began, came = self._quiet_since
        return 0.0 if self._steps_came() != came else time.monotonic() - began

    def _log_sampled(self, episodes: list, lags: list[int], steps: int, finished: list) -> None:
        """Every ``sample()`` logs its counts, nothing included: a sum logged nothing since the last
        ``get_metrics()`` reads NaN, which PPO's driver fails to count (``ValueError``)."""
        if self._ma_metrics is not None:
            self.num_env_steps_sampled_lifetime += self._ma_metrics.sampled(self.metrics, episodes, lags)
        else:
            log_episodes(self.metrics, finished, self.config.metrics_num_episodes_for_smoothing)
            log_sampled(self.metrics, steps, len(finished))
            self.num_env_steps_sampled_lifetime += steps

    def _pull_newer_state(self) -> None:
        """Take the weights IMPALA or APPO pushed to their state server, if newer than ours.

        With ``use_env_runner_state_server`` (their default) the algorithm
        never sends weights to its runners: each pulls them at the top of
        ``sample()``, as RLlib's own runners do. Without this the runner
        served its first weights for ever and training stalled at a random
        policy. A server that can't be reached leaves the weights as they are
        (logged); the next call asks again.
        """
        if self._env_runner_state_server is None:
            return
        try:
            state = ray.get(self._env_runner_state_server.pull_if_newer.remote(self._weights_seq_no),
                            timeout=_STATE_PULL_TIMEOUT_S)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
            logger.warning("RLinkEnvRunner %d: no weights from the state server (%s); serving v%d still",
                           self.worker_index, exc, self._weights_seq_no)
            return
        if state is not None:
            self.set_state(state)

    def _count_returns(self, batch: Any, finished: list) -> None:
        """Add ``batch``'s steps to the episode totals; the totals of episodes it ends go to ``finished``."""
        takeovers = getattr(batch, "takeovers", None)
        if takeovers is not None:
            # The chunks as played: on-policy, the taken-over steps are not among the episodes.
            self._takeover_steps += takeovers.steps
            for tally in takeovers.tallies:
                totals = self._episode_totals.add_tally(tally)
                if totals is not None:
                    finished.append(totals)
        for episode in batch.episodes if self._ma_metrics is None and takeovers is None else ():
            totals = self._episode_totals.add(episode)
            if totals is not None:
                finished.append(totals)

    def _drop(self, batches: list, finished: list) -> None:
        """Off-policy ``batches`` past the backlog: confirmed, counted, their returns kept, not trained on."""
        if not batches:
            return
        steps = 0
        for batch in batches:
            steps += batch.steps
            self._count_returns(batch, finished)
            self._aliases.dropped(batch.episodes)
        self._dropped_backlog_steps += steps
        if self.settings.record_untrained:
            self._record(batches, trained=False)
        self.server.confirm(batches)
        now = time.monotonic()
        logged_at, logged_count = self._drop_log
        if not logged_at or now - logged_at >= _DROP_LOG_EVERY_S:
            logger.info("RLinkEnvRunner %d: the learner takes fewer steps than the simulators send; dropped %d steps "
                        "(the oldest, %d in all), keeping the freshest %d (off_policy_backlog: 'pace' makes the "
                        "simulators wait instead)", self.worker_index, self._dropped_backlog_steps - logged_count,
                        self._dropped_backlog_steps, self._backlog)
            self._drop_log = (now, self._dropped_backlog_steps)

    def _record(self, batches: list, *, trained: bool) -> None:
        """Hand ``batches`` to the recorder (copied now, written on its thread), each batch once."""
        if self._recorder is None:
            return
        fresh = [batch for batch in batches if not getattr(batch, _RECORDED, False)]
        for batch in fresh:
            setattr(batch, _RECORDED, True)
        if fresh:
            self._recorder.add([episode for batch in fresh for episode in batch.episodes], trained=trained)

    def _confirm_and_keep(self, batches: list) -> None:
        """Confirm ``batches``, now that ``sample()`` hands them to RLlib (dropped stale ones too).

        What is still in the inbox is not confirmed, and a client resends it
        if this runner dies first. A remote runner whose driver sends
        receipts also keeps them until the receipt of this result comes
        (:meth:`take_receipts`), to hand them to RLlib again if the driver
        never got them.
        """
        self.server.confirm(batches)
        if self._returned is None or not batches:
            return  # nothing to keep (RLlib may poll an empty runner many times an iteration)
        token, overdue = self._returned.add(batches)
        self.metrics.log_value((*RECEIPTS_KEY, runner_key(self.worker_index)), token, reduce="item_series")
        if overdue:
            logger.warning("RLinkEnvRunner %d: no receipt from the driver for %d batch(es); they can no longer be "
                           "handed over again if RLlib dropped them (is RLinkReceipts in the config's callbacks?)",
                           self.worker_index, len(overdue))

    def stop_handing(self) -> None:
        """(The learner, on SIGTERM) Hand nothing more over, whatever the clients are doing.

        A ``sample()`` waiting for steps returns at once with what it holds
        (handed to RLlib and confirmed as always; under IMPALA and APPO,
        whose driver ends its iteration without that result, with nothing,
        leaving the steps unconfirmed); every later one returns nothing. Steps that arrive from now on stay unconfirmed, and reliable
        clients send them again to the learner that resumes. Safe from any
        thread.
        """
        self._stopped_handing = True
        if self.server is not None:
            self.server.inbox.close()

    def watch_stop_signal(self, signal: Any) -> None:
        """(The learner, once built) :meth:`stop_handing` as soon as ``signal`` is set (see stop_signal.py).

        A remote runner takes one call at a time, so a stop sent as a call
        would wait for the ``sample()`` under way; the signal is waited on
        from a thread of this runner's own. Again while watching: nothing
        changes.
        """
        if self._watching is not None and self._watching.is_alive():
            return
        self._watching = wait_for(signal, self._stopped, self.stop_handing,
                                  name=f"rlinks-stop-watch-{self.worker_index}")

    def take_receipts(self, receipts: dict) -> None:
        """(Called by the driver's :class:`~.delivery.receipts.RLinkReceipts`) which ``sample()`` results arrived.

        Args:
            receipts: ``runner_key(worker_index)`` -> the tokens the driver
                got from that runner in the last iteration.
        """
        if self._returned is None or self.server is None:
            return
        _, dropped = self._returned.received(receipts.get(runner_key(self.worker_index), ()))
        if dropped:
            logger.warning("RLinkEnvRunner %d: RLlib never got %d env steps this runner returned (a sample() "
                           "result that came after sample_timeout_s); they are handed over again",
                           self.worker_index, sum(batch.steps for batch in dropped))
            self.server.hand_over_again(dropped)

    def take_shares(self, clients: dict) -> None:
        """(Called by the driver's :class:`~.delivery.shares.RLinkShares`) how many clients each runner has.

        From the next new weights on, this runner's clients are asked for
        the part of an update their number is of all clients.

        Args:
            clients: ``runner_key(worker_index)`` -> clients connected to that runner.
        """
        if self.server is None or not self.on_policy:
            return
        share = update_share(int(self.config.total_train_batch_size), self._target_steps, clients,
                             runner_key(self.worker_index))
        # The latest counts decide, also against a change not yet taken.
        self._next_update_steps = None if share == self._pacer.update_steps else share

    def get_metrics(self) -> dict:
        if self.server is not None:
            if self.worker_index > 0:
                self.metrics.log_value((*CLIENTS_KEY, runner_key(self.worker_index)),
                                       self.server.stats.clients_connected, reduce="max", window=1)
            self._transport_metrics.log(
                self.metrics,
                self.server.stats.snapshot(),
                inbox_steps=self.server.inbox.steps,
                inbox_bytes=self.server.inbox.nbytes,
                weights_seq_no=self._weights_seq_no,
                lags=self._lags,
                dropped_stale_steps=self._dropped_stale_steps,
                dropped_backlog_steps=self._dropped_backlog_steps,
            )
            self._lags = []
            log_takeovers(self.metrics, self._episode_totals, self._takeover_steps)
            self._takeover_steps = 0
        if self._recorder is not None:
            for name, value in self._recorder.stats().items():
                self._transport_metrics.log_counter(self.metrics, (RUNNER_METRICS_KEY, name), name, value)
        if self._ma_metrics is not None:
            self._ma_metrics.log_lags(self.metrics)
        return self.metrics.reduce()

    def get_spaces(self):
        if self._multi_agent is not None:
            return {INPUT_ENV_SPACES: self._multi_agent.env_spaces(), **self._multi_agent.spaces}
        spaces = (self.config.observation_space, self.config.action_space)
        return {INPUT_ENV_SPACES: spaces, DEFAULT_MODULE_ID: spaces}

    def stop(self) -> None:
        """Close every client connection and the listener; returns within seconds."""
        self._stopped.set()
        if self.server is not None:
            self.server.stop()
        if self._recorder is not None:
            self._recorder.close()  # what sample() handed RLlib is written whole before the runner goes

    def __del__(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.stop(timeout=1.0)
        recorder = getattr(self, "_recorder", None)
        if recorder is not None:
            recorder.close(timeout=5.0)

    # -- Checkpointable ----------------------------------------------------------

    def get_ctor_args_and_kwargs(self):
        return (), {"config": self.config}

    def get_checkpointable_components(self):
        return [(COMPONENT_RL_MODULE, self.module)]

    def get_state(
        self,
        components: Optional[Union[str, Collection[str]]] = None,
        *,
        not_components: Optional[Union[str, Collection[str]]] = None,
        **kwargs,
    ) -> dict:
        state: dict = {WEIGHTS_SEQ_NO: self._weights_seq_no}
        if self._check_component(COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state()
        return state

    def set_state(self, state: dict) -> None:
        """Take new weights; release waiting clients only if they really are newer.

        A state without module weights, or whose ``weights_seq_no`` is not
        above the current one, releases nobody. RLlib's ``weights_seq_no=0``
        ("force", sent once at setup) replaces the weights served from now on
        but is not a new version: no client is released by it.
        """
        if COMPONENT_RL_MODULE not in state:
            return
        seq_no = state.get(WEIGHTS_SEQ_NO, 0) or 0
        change = self._pacer.weights_change(seq_no)
        if change is WeightsChange.STALE:
            return
        module_state = state[COMPONENT_RL_MODULE]
        if isinstance(module_state, ray.ObjectRef):
            module_state = ray.get(module_state)
        if isinstance(module_state, dict) and DEFAULT_MODULE_ID in module_state and self._multi_agent is None:
            module_state = module_state[DEFAULT_MODULE_ID]
        if self._forward is not None:
            # Never while a forward pass for served actions runs; it learns the version with the weights.
            self._forward.load(module_state, seq_no if change is WeightsChange.NEW else None)
        else:
            self.module.set_state(module_state)
        # What the learner sent is what clients get: no second trip through torch.
        params = convert_to_numpy(module_state)
        if change is WeightsChange.NEW:
            share, self._next_update_steps = self._next_update_steps, None
            if share is not None:
                logger.info("RLinkEnvRunner %d: %d env steps of each update from now on (was %d), by its share of "
                            "the clients", self.worker_index, share, self._pacer.update_steps)
            self._pacer.new_weights(seq_no, update_steps=share)
            if self.server is not None:
                self.server.publish_weights(params, seq_no, update_steps=share, timestep=self._timestep())
        elif self.server is not None:
            self.server.replace_weights(params, self._weights_seq_no)

    # -- helpers ------------------------------------------------------------------

    def _timestep(self) -> int:
        """RLlib's env steps sampled by all runners, as SingleAgentEnvRunner estimates it (exploration schedules)."""
        return self.num_env_steps_sampled_lifetime * max(1, int(self.config.num_env_runners or 0))

    def _served_policy(self) -> Optional[ServedPolicy]:
        """How this runner computes served actions; ``None`` when it can't (or the setting is off)."""
        if not self.settings.served_actions or self._multi_agent is not None:
            return None  # served actions are single-agent only
        obs_space, action_space = self.config.observation_space, self.config.action_space
        normalize, clip = bool(self.config.normalize_actions), bool(self.config.clip_actions)
        timestep = self._timestep
        # RLlib's default MLP (DQN's too) runs in numpy, on the loop thread, as the runner's own clients
        # would run it; any other module in torch, on a thread of its own.
        reason = served_actions_unsupported(obs_space, action_space, self.module, probe=False)
        if reason is None:
            message = self._config_message()  # its description, even beside RLlib's pickle (unsafe_pickle_config)
            self._forward = NumpyForward.for_module(self.module, message.get("rlinks_config", message["config"]),
                                                    normalize_actions=normalize, clip_actions=clip, timestep=timestep)
        if self._forward is None:
            reason = served_actions_unsupported(obs_space, action_space, self.module)
            if reason is not None:
                logger.info("RLinkEnvRunner %d does not serve actions: %s", self.worker_index, reason)
                return None
            self._forward = ModuleForward(self.module, action_space, normalize_actions=normalize, clip_actions=clip,
                                          timestep=timestep)
        else:
            logger.debug("RLinkEnvRunner %d serves actions from RLlib's default MLP in numpy", self.worker_index)
        discrete = isinstance(action_space, gym.spaces.Discrete)
        check_taken = TakenActionCheck(action_space)
        return ServedPolicy(
            forward=self._forward,
            check_obs=ObservationCheck(obs_space.shape, obs_space.dtype),
            no_actions=np.empty((0, *action_space.shape), np.int64 if discrete else action_space.dtype),
            inline=isinstance(self._forward, NumpyForward),
            check_taken=check_taken,
            with_taken=functools.partial(with_taken, space=check_taken.space, normalize=normalize,
                                         logp=self._forward.logp_of),
        )

    def _export_policy_graph(self) -> Optional[bytes]:
        """The module as an ONNX policy graph, when the ``policy_graph`` setting asks for one.

        Raises:
            ExportError: ``policy_graph="on"`` and the module can't be exported.
        """
        mode = self.settings.policy_graph
        if self._multi_agent is not None:
            if mode == "on":
                logger.warning("RLinkEnvRunner %d: no policy graph for a multi-agent runner (one module per graph "
                               "is not built yet)", self.worker_index)
            return None
        if mode == "off" or (mode == "auto" and not needs_policy_graph(self.module, self.config.model_config)):
            return None
        started = time.perf_counter()
        try:
            graph = export_policy_graph(self.module)
        except ExportError as exc:
            if mode == "on":
                raise
            logger.warning("RLinkEnvRunner %d: no policy graph for clients: %s", self.worker_index, exc)
            return None
        logger.info("RLinkEnvRunner %d: policy graph exported (%d bytes, %.1f s)",
                    self.worker_index, len(graph), time.perf_counter() - started)
        return graph

    def _module_params(self) -> dict:
        return convert_to_numpy(self.module.get_state(inference_only=True))

    def _config_message(self, with_graph: bool = False) -> dict:
        cfg = self.config
        extra = {POLICY_GRAPH_KEY: self._policy_graph} if with_graph and self._policy_graph is not None else {}
        if self._in_flight is not None:
            extra[PACED_IN_FLIGHT_KEY] = self._in_flight  # paced: no batch sampled long before its turn
        model_config = cfg.model_config if isinstance(cfg.model_config, dict) else dict(cfg.model_config)
        params = self._module_params()
        observation_space, action_space = cfg.observation_space, cfg.action_space
        if self._multi_agent is not None:
            layouts = {m: {k: list(v.shape) for k, v in p.items()} for m, p in params.items()}
            extra["multi_agent"] = self._multi_agent.describe(layouts)
            # A reader of version 1 finds spaces where it expects them: the first module's.
            observation_space, action_space = next(iter(self._multi_agent.spaces.values()))
            params = {}
        description = build_config(
            algorithm=type(cfg).__name__.removesuffix("Config"),
            observation_space=describe_space(observation_space),
            action_space=describe_space(action_space),
            rollout_fragment_length=self._target_steps,
            on_policy=self.on_policy,
            model_config={k: v for k, v in model_config.items() if isinstance(v, (int, float, str, bool, list, type(None)))},
            weights_layout={k: list(v.shape) for k, v in params.items()},
            server=SERVER_AGENT,
            **extra,
        )
        if self.settings.unsafe_pickle_config:
            import pickle

            # UNSAFE by design and by name: RLlib's own client unpickles this.
            return {"type": msgs.MessageType.SET_CONFIG.value, "config": pickle.dumps(cfg), "rlinks_config": description}
        return {"type": msgs.MessageType.SET_CONFIG.value, "config": description}


def runner_addresses(algo: Any) -> list[tuple[int, str, int]]:
    """``(worker_index, host, port)`` of every listening runner of an Algorithm."""
    group = algo.env_runner_group
    found: list[tuple[int, str, int]] = []
    if group.num_remote_env_runners() > 0:
        results = group.foreach_env_runner(
            lambda runner: (runner.worker_index, runner.get_address()), local_env_runner=False
        )
    else:
        local = group.local_env_runner
        results = [(local.worker_index, local.get_address())]
    for index, address in results:
        if address is not None:
            found.append((index, address[0], address[1]))
    return sorted(found)
