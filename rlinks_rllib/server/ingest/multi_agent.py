"""What an RLinkEnvRunner needs to serve an RLlib multi-agent config.

:class:`MultiAgentSetup` reads the config once (``config.multi_agent(
policies=..., policy_mapping_fn=..., policies_to_train=...)``): the modules
and their spaces, the agent mapping (an
:class:`~rlinks_rllib.protocol.agent_mapping.AgentMapping` table that is also
the ``policy_mapping_fn``, or any Python function), which modules train, and
what a step is (``count_steps_by``). :class:`MultiAgentIngest` turns the
``episodes`` of a message into RLlib ``MultiAgentEpisode`` objects that pass
``validate()``. :class:`MultiAgentMetrics` reports what RLlib's own
``MultiAgentEnvRunner`` reports, per agent and per module, and the policy lag
per module.
"""

from __future__ import annotations

import collections
import logging
import math
from typing import Any, Optional

import gymnasium as gym
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from ray.rllib.policy.policy import PolicySpec
from ray.rllib.utils.metrics import (
    EPISODE_AGENT_RETURN_MEAN,
    EPISODE_MODULE_RETURN_MEAN,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from ...protocol.agent_mapping import AgentMapping
from ...protocol.episodes import ACTION_DIST_INPUTS, ACTION_LOGP, EpisodeError
from ...protocol.errors import InvalidMessage
from ...protocol.multi_agent import (
    COUNT_AGENT_STEPS,
    COUNT_ENV_STEPS,
    SKIP_TAG,
    ModuleConfig,
    MultiAgentChunk,
    MultiAgentConfig,
    check_multi_agent_state,
    is_multi_agent_state,
)
from ...protocol.spaces import describe_space
from ..errors import IngestError
from ..metrics import RUNNER_METRICS_KEY, log_episode
from ..settings import RLinkSettings
from .episodes import space_rules

__all__ = ["MultiAgentSetup", "MultiAgentIngest", "MultiAgentMetrics"]


class MultiAgentSetup:
    """The multi-agent side of a config, read once.

    Raises:
        ValueError: a module has no spaces (neither its ``PolicySpec`` nor
            ``config.environment()`` gives them), or a space the wire can't
            describe, or an agent mapping table that names a module the
            config doesn't have.
    """

    def __init__(self, config: Any) -> None:
        self.mapping_fn = config.policy_mapping_fn
        self.mapping: Optional[AgentMapping] = self.mapping_fn if isinstance(self.mapping_fn, AgentMapping) else None
        self.spaces: dict[str, tuple[gym.Space, gym.Space]] = {}
        for module_id, spec in config.policies.items():
            if isinstance(spec, (tuple, list)):
                spec = PolicySpec(*spec)  # how a config that crossed to an actor holds them
            obs_space = getattr(spec, "observation_space", None) or config.observation_space
            action_space = getattr(spec, "action_space", None) or config.action_space
            if obs_space is None or action_space is None:
                raise ValueError(f"RLinkEnvRunner needs the spaces of module {module_id!r} up front: give them in "
                                 "its PolicySpec(observation_space=..., action_space=...) or config.environment()")
            self.spaces[module_id] = (obs_space, action_space)
        if self.mapping is not None:
            unknown = sorted(self.mapping.module_ids - set(self.spaces))
            if unknown:
                raise ValueError(f"the agent mapping names modules the config lacks: {unknown}")
        trainable = config.policies_to_train
        if trainable is None:
            self.trained = frozenset(self.spaces)
        elif callable(trainable):
            self.trained = frozenset(m for m in self.spaces if trainable(m, None))
        else:
            self.trained = frozenset(trainable)
        self.count_steps_by = str(config.count_steps_by or COUNT_ENV_STEPS)
        if self.count_steps_by not in (COUNT_ENV_STEPS, COUNT_AGENT_STEPS):
            raise ValueError(f"count_steps_by must be {COUNT_ENV_STEPS!r} or {COUNT_AGENT_STEPS!r}")
        self._rules = {module_id: space_rules(*spaces) for module_id, spaces in self.spaces.items()}

    def module_for(self, agent_id: str, claimed: Optional[str]) -> tuple[str, dict]:
        """The module that serves ``agent_id`` and its data rules (``check_multi_agent_state``'s ``agent_rules``).

        Raises:
            InvalidMessage: the mapping doesn't know the agent, maps it to a
                module this runner doesn't serve, or the peer named another module.
        """
        if self.mapping is not None:
            module_id = self.mapping.module_for(agent_id)
        else:
            try:
                module_id = self.mapping_fn(agent_id, None)
            except Exception as exc:  # noqa: BLE001 - the user's function; any failure means "unknown agent"
                raise EpisodeError(f"agent {agent_id!r}: the policy_mapping_fn failed on it ({exc!r:.120})") from None
        if module_id not in self._rules:
            raise EpisodeError(f"agent {agent_id!r}: mapped to module {module_id!r:.80}, which this runner "
                               f"does not serve ({', '.join(sorted(self._rules))})")
        if claimed is not None and claimed != module_id:
            served = "not served by this runner" if claimed not in self._rules else f"the mapping says {module_id!r}"
            raise EpisodeError(f"agent {agent_id!r}: module_id {claimed!r:.80} is {served}")
        return module_id, self._rules[module_id]

    def module_of(self, agent_id: str) -> str:
        """The module that serves ``agent_id`` (``GET_MODULES``); raises InvalidMessage as :meth:`module_for`."""
        return self.module_for(agent_id, None)[0]

    def describe(self, weights_layout: dict) -> dict:
        """The ``multi_agent`` part of the ``SET_CONFIG`` description."""
        modules = {module_id: ModuleConfig(describe_space(obs), describe_space(act), module_id in self.trained)
                   for module_id, (obs, act) in self.spaces.items()}
        return MultiAgentConfig(modules, self.mapping, self.count_steps_by).to_wire(weights_layout)

    def env_spaces(self) -> tuple[gym.spaces.Dict, gym.spaces.Dict]:
        """RLlib's ``INPUT_ENV_SPACES``, already by module (its agent-to-module connector then keeps them)."""
        return (gym.spaces.Dict({m: s[0] for m, s in self.spaces.items()}),
                gym.spaces.Dict({m: s[1] for m, s in self.spaces.items()}))


class MultiAgentIngest:
    """Checks a message's multi-agent chunks and builds RLlib ``MultiAgentEpisode`` objects from them.

    Called like :class:`~.episodes.EpisodeIngest`: ``(wire_episodes) -> (episodes, steps)``,
    steps counted as the config's ``count_steps_by`` says. A message is
    accepted whole or not at all.
    """

    def __init__(self, setup: MultiAgentSetup, settings: RLinkSettings,
                 required_extra: tuple[str, ...] = (ACTION_LOGP, ACTION_DIST_INPUTS)) -> None:
        self._setup = setup
        self._max_steps = settings.max_steps_per_chunk
        self._required_extra = required_extra
        if settings.takeover_terminates:
            logging.getLogger("rlinks_rllib.server").warning(
                "rlinks: the setting takeover_terminates does nothing for a multi-agent config: its episodes are "
                "not cut where a teacher takes over (single-agent only)")

    def __call__(self, wire_episodes: list) -> tuple[list[MultiAgentEpisode], int]:
        """Raises IngestError naming the chunk, agent and field at fault."""
        episodes = []
        steps = 0
        count_agents = self._setup.count_steps_by == COUNT_AGENT_STEPS
        for i, state in enumerate(wire_episodes):
            if not is_multi_agent_state(state):
                raise IngestError(f"episodes[{i}]: this runner serves a multi-agent config and takes multi-agent "
                                  "chunks only (offer the 'multi_agent' extension; PROTOCOL.md 7.6)")
            try:
                chunk = check_multi_agent_state(state, self._setup.module_for, max_steps=self._max_steps,
                                                required_extra=self._required_extra)
            except InvalidMessage as exc:
                raise IngestError(f"episodes[{i}]: {exc}") from exc
            if not chunk.agents:
                continue  # no agent completed a step: nothing to learn from
            try:
                episode = MultiAgentEpisode.from_state(self._rllib_state(chunk))  # ends with validate()
            except (AssertionError, ValueError, KeyError, TypeError, IndexError) as exc:
                raise IngestError(f"episodes[{i}] fails RLlib's validation: {exc!r}") from exc
            episodes.append(episode)
            steps += chunk.agent_steps if count_agents else chunk.env_steps
        return episodes, steps

    def _rllib_state(self, chunk: MultiAgentChunk) -> dict:
        env_t_to_agent_t: collections.defaultdict = collections.defaultdict(InfiniteLookbackBuffer)
        ticks = chunk.env_t - chunk.env_t_started + 1
        for agent in chunk.agents:
            row: list = [SKIP_TAG] * ticks
            for index, tick in enumerate(agent.env_t.tolist()):
                if tick >= chunk.env_t_started:
                    row[tick - chunk.env_t_started] = index
            env_t_to_agent_t[agent.agent_id] = InfiniteLookbackBuffer(data=row, lookback=0)
        return {
            "id_": chunk.id_,
            "agent_to_module_mapping_fn": self._setup.mapping_fn,
            "_agent_to_module_mapping": {a.agent_id: a.module_id for a in chunk.agents},
            "observation_space": None,
            "action_space": None,
            "env_t_started": chunk.env_t_started,
            "env_t": chunk.env_t,
            "agent_t_started": collections.defaultdict(int, {a.agent_id: a.state["t_started"] for a in chunk.agents}),
            "env_t_to_agent_t": env_t_to_agent_t,
            "_hanging_actions_end": {},
            "_hanging_extra_model_outputs_end": collections.defaultdict(dict),
            "_hanging_rewards_end": collections.defaultdict(float),
            "_hanging_rewards_begin": collections.defaultdict(float),
            "is_terminated": chunk.is_terminated,
            "is_truncated": chunk.is_truncated,
            "agent_episodes": [(a.agent_id, a.state) for a in chunk.agents],
            "_start_time": chunk.start_time,
            "_last_step_time": chunk.last_step_time,
            "custom_data": chunk.custom_data,
        }


#: Chunks of unfinished episodes remembered at most (oldest forgotten first).
_MAX_OPEN_EPISODES = 100_000


class MultiAgentMetrics:
    """RLlib's multi-agent episode and step metrics, and the policy lag per module."""

    def __init__(self, num_env_runners: int, window: int) -> None:
        self._open: collections.OrderedDict[str, list] = collections.OrderedDict()
        self._window = max(1, int(math.ceil(window / max(1, num_env_runners))))
        self._lags: dict[str, list[int]] = collections.defaultdict(list)

    def sampled(self, metrics: MetricsLogger, episodes: list[MultiAgentEpisode], lags: list[int]) -> int:
        """Log the step counters and finished episodes of one ``sample()``; return its env steps.

        ``lags[i]`` is the policy lag of ``episodes[i]``'s batch.
        """
        env_steps = 0
        done = 0
        for episode, lag in zip(episodes, lags):
            env_steps += len(episode)
            for agent_id, sa_episode in episode.agent_episodes.items():
                n = len(sa_episode)
                module_id = sa_episode.module_id
                metrics.log_value((NUM_AGENT_STEPS_SAMPLED, str(agent_id)), n, reduce="sum")
                metrics.log_value((NUM_AGENT_STEPS_SAMPLED_LIFETIME, str(agent_id)), n, reduce="lifetime_sum")
                metrics.log_value((NUM_MODULE_STEPS_SAMPLED, module_id), n, reduce="sum")
                metrics.log_value((NUM_MODULE_STEPS_SAMPLED_LIFETIME, module_id), n, reduce="lifetime_sum")
                self._lags[module_id].append(lag)
            if self._add(metrics, episode):
                done += 1
        metrics.log_value(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
        metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, env_steps, reduce="lifetime_sum", with_throughput=True)
        metrics.log_value(NUM_EPISODES, done, reduce="sum")
        metrics.log_value(NUM_EPISODES_LIFETIME, done, reduce="lifetime_sum")
        return env_steps

    def log_lags(self, metrics: MetricsLogger) -> None:
        """The policy lag of each module's steps since the last report (``rlinks/module_policy_lag_max/<module>``)."""
        for module_id, lags in self._lags.items():
            if lags:
                metrics.log_value((RUNNER_METRICS_KEY, "module_policy_lag_max", module_id), max(lags), reduce="max",
                                  window=100)
        self._lags.clear()

    def _add(self, metrics: MetricsLogger, episode: MultiAgentEpisode) -> bool:
        """Account a chunk; log the episode once its last chunk is in. Returns whether it finished."""
        totals = self._open.pop(episode.id_, None) or [0, 0.0, 0.0, collections.Counter(), collections.Counter()]
        totals[0] += len(episode)
        totals[2] += float(episode.get_duration_s() or 0.0)
        for agent_id, sa_episode in episode.agent_episodes.items():
            ret = float(sa_episode.get_return())
            totals[1] += ret
            totals[3][str(agent_id)] += ret
            totals[4][sa_episode.module_id] += ret
        if not episode.is_done:
            self._open[episode.id_] = totals
            while len(self._open) > _MAX_OPEN_EPISODES:
                self._open.popitem(last=False)
            return False
        length, ret, duration, agents, modules = totals
        log_episode(metrics, length, ret, duration, window=self._window, agents=dict(agents), modules=dict(modules))
        return True
