"""Collect a multi-agent simulator's ticks into multi-agent chunks ready to send.

The loop of a simulator with many agents, in RLlib's ``MultiAgentEnv`` terms
(dicts keyed by agent id, ``"__all__"`` for the whole episode)::

    builder = MultiAgentEpisodeBuilder(module_for=mapping.module_for)
    obs, infos = env.reset()
    builder.reset(obs, infos)
    while True:
        actions, extras = policies(builder.observations_to_act())  # agents that left are not in obs any more
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        builder.step(actions, rewards, obs, terminateds, truncateds, extras, infos)
        if terminateds["__all__"] or truncateds["__all__"]:
            obs, infos = env.reset()
            builder.reset(obs, infos)
        if builder.num_steps >= want_steps:
            send(builder.take_chunks())

The rules, RLlib's: an agent acts on a tick when it got an observation on
the tick before (so ``actions`` must name exactly the agents of the last
``obs``); its step is complete when its next observation arrives, with the
rewards of every tick in between summed. Agents that act on different ticks
(turn-based) are fine. An agent that appears in ``obs`` for the first time
joins the episode; one that is terminated or truncated leaves it (with its
final observation in ``obs``, or its last one when none comes) and may not
come back. ``"__all__"`` ends every agent.

Each agent's steps go to its own :class:`~.episode_builder.EpisodeBuilder`;
:meth:`MultiAgentEpisodeBuilder.take_chunks` cuts each running agent at its
latest observation (an action still waiting for its observation stays for
the next chunk, with its reward so far) and returns one multi-agent state per
episode (``protocol.multi_agent``). Numpy only; never Ray.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from .episode_builder import EpisodeBuilder
from .multi_agent import COUNT_AGENT_STEPS, COUNT_ENV_STEPS, build_multi_agent_state

__all__ = ["ALL", "MultiAgentEpisodeBuilder"]

#: The key of ``terminateds``/``truncateds`` that ends the whole episode.
ALL = "__all__"


@dataclass
class _Agent:
    builder: EpisodeBuilder
    module_id: Optional[str]
    ticks: list[int]
    last_obs: Any
    action: Any = None
    extra: Optional[Mapping] = None
    acting: bool = False  #: an action was taken and its observation has not come yet
    reward: float = 0.0
    done: bool = False


@dataclass
class _Episode:
    id_: str
    env_t_started: int = 0
    env_t: int = 0
    start_time: Optional[float] = None
    last_step_time: Optional[float] = None
    agents: dict[str, _Agent] = field(default_factory=dict)
    left: set[str] = field(default_factory=set)  #: agents gone whose last chunk was sent
    steps_since_cut: int = 0  #: agent steps in the current chunk


class MultiAgentEpisodeBuilder:
    """Turns a multi-agent env's reset/step dicts into multi-agent chunk states.

    Args:
        module_for: agent id -> module id, written into each agent's state
            (``None``: leave it to the runner's mapping).
        count_steps_by: what :attr:`num_steps` counts, as the runner's
            config says (``"env_steps"`` or ``"agent_steps"``).
        clock: seconds on a monotonic clock, for RLlib's duration metric.

    Raises (from the methods):
        RuntimeError: :meth:`step` before :meth:`reset`.
        ValueError: dicts that break the rules above (an action for an agent
            that has no observation to act on, an agent missing its action,
            an agent coming back after it left, a non-finite reward), or a
            value that does not fit the agent's earlier ones.
    """

    def __init__(
        self,
        *,
        module_for: Optional[Callable[[str], str]] = None,
        count_steps_by: str = COUNT_ENV_STEPS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if count_steps_by not in (COUNT_ENV_STEPS, COUNT_AGENT_STEPS):
            raise ValueError(f"count_steps_by must be {COUNT_ENV_STEPS!r} or {COUNT_AGENT_STEPS!r}")
        self._module_for = module_for
        self._count_agent_steps = count_steps_by == COUNT_AGENT_STEPS
        self._clock = clock
        self._episode: Optional[_Episode] = None
        self._finished: list[dict] = []
        self._finished_env_steps = 0
        self._finished_agent_steps = 0
        #: Env and agent steps of every chunk built so far (what a runner counts once it has them all).
        self.env_steps_total = 0
        self.agent_steps_total = 0

    # -- state ------------------------------------------------------------------

    @property
    def num_steps(self) -> int:
        """Steps collected and not yet taken, counted as ``count_steps_by`` says."""
        return self.num_agent_steps if self._count_agent_steps else self.num_env_steps

    @property
    def num_env_steps(self) -> int:
        """Env steps (ticks) collected and not yet taken."""
        running = self._episode
        return self._finished_env_steps + (running.env_t - running.env_t_started if running else 0)

    @property
    def num_agent_steps(self) -> int:
        """Agent steps collected and not yet taken."""
        return self._finished_agent_steps + (self._episode.steps_since_cut if self._episode else 0)

    @property
    def episode_id(self) -> Optional[str]:
        """Id of the running episode, or ``None`` between episodes."""
        return self._episode.id_ if self._episode is not None else None

    @property
    def acting_agents(self) -> list[str]:
        """The agents that got an observation on the last tick and must act on the next."""
        episode = self._episode
        if episode is None:
            return []
        return [aid for aid, agent in episode.agents.items() if not agent.done and not agent.acting]

    def observations_to_act(self) -> dict[str, Any]:
        """The latest observation of each agent in :attr:`acting_agents`: what the policies act on next.

        Agents that left (with their final observation) are not in it.
        """
        episode = self._episode
        if episode is None:
            return {}
        return {aid: agent.last_obs for aid, agent in episode.agents.items() if not agent.done and not agent.acting}

    # -- recording --------------------------------------------------------------

    def reset(self, obs: Mapping[str, Any], infos: Optional[Mapping[str, Mapping]] = None, *,
              episode_id: Optional[str] = None) -> str:
        """Start a new episode with the agents in ``obs``; return its id.

        A running episode is ended as truncated (its agents' data still trains).
        """
        if self._episode is not None:
            self._end(terminated=False, truncated=True)
        self._episode = _Episode(episode_id or uuid.uuid4().hex, start_time=self._clock())
        infos = infos or {}
        for agent_id, value in obs.items():
            self._join(agent_id, value, infos.get(agent_id))
        return self._episode.id_

    def step(
        self,
        actions: Mapping[str, Any],
        rewards: Mapping[str, float],
        obs: Mapping[str, Any],
        terminateds: Optional[Mapping[str, bool]] = None,
        truncateds: Optional[Mapping[str, bool]] = None,
        extras: Optional[Mapping[str, Mapping[str, Any]]] = None,
        infos: Optional[Mapping[str, Mapping]] = None,
    ) -> None:
        """Record one env tick: ``actions`` taken, then ``rewards``, ``obs`` and the done flags seen."""
        episode = self._episode
        if episode is None:
            raise RuntimeError("step() needs a running episode: call reset() first")
        terminateds, truncateds = terminateds or {}, truncateds or {}
        extras, infos = extras or {}, infos or {}
        acting = set(self.acting_agents)
        if set(actions) != acting:
            extra_ids = sorted(map(str, set(actions) - acting))[:4]
            missing = sorted(map(str, acting - set(actions)))[:4]
            raise ValueError(f"actions must name exactly the agents that got an observation last tick: "
                             f"unexpected {extra_ids}, missing {missing}")
        for agent_id, reward in rewards.items():
            agent = episode.agents.get(agent_id)
            if agent is None or agent.done:
                raise ValueError(f"reward for agent {agent_id!r}, which is not in the episode")
            value = float(reward)
            if not np.isfinite(value):
                raise ValueError(f"agent {agent_id!r}: reward must be finite, got {reward!r}")
            agent.reward += value
        for agent_id, action in actions.items():
            agent = episode.agents[agent_id]
            agent.action, agent.extra, agent.acting = action, extras.get(agent_id), True
        episode.env_t += 1
        all_done = bool(terminateds.get(ALL) or truncateds.get(ALL))
        now = self._clock()
        for agent_id, value in obs.items():
            agent = episode.agents.get(agent_id)
            if agent is None and agent_id not in episode.left:
                self._join(agent_id, value, infos.get(agent_id))
                continue
            if agent is None or agent.done:
                raise ValueError(f"agent {agent_id!r} left the episode and may not come back")
            if not agent.acting:
                raise ValueError(f"agent {agent_id!r} got an observation without having acted on its last one")
            # "__all__" ends every agent that reports now, with the episode's flags.
            self._complete(agent, value, infos.get(agent_id), bool(terminateds.get(agent_id) or terminateds.get(ALL)),
                           bool(truncateds.get(agent_id) or truncateds.get(ALL)))
        for agent_id in set(terminateds) | set(truncateds):
            if agent_id == ALL or agent_id in obs:
                continue
            agent = episode.agents.get(agent_id)
            if agent is not None and not agent.done and (terminateds.get(agent_id) or truncateds.get(agent_id)):
                self._leave(agent, bool(terminateds.get(agent_id)), bool(truncateds.get(agent_id)))
        episode.last_step_time = now
        if all_done:
            self._end(terminated=bool(terminateds.get(ALL)), truncated=bool(truncateds.get(ALL)))

    def truncate(self) -> None:
        """End the running episode where it stands, as truncated (its agents' data still trains); no-op between episodes."""
        if self._episode is not None:
            self._end(terminated=False, truncated=True)

    def take_chunks(self) -> list[dict]:
        """Return every multi-agent chunk collected since the last call.

        Finished episodes first; the running one is cut (each agent at its
        latest observation) if any agent completed a step since the last cut.
        """
        episode = self._episode
        if episode is not None and episode.steps_since_cut:
            self._emit(episode, terminated=False, truncated=False)
            episode.env_t_started = episode.env_t
            episode.start_time = episode.last_step_time
            episode.steps_since_cut = 0
            for agent_id in [aid for aid, agent in episode.agents.items() if agent.done]:
                del episode.agents[agent_id]  # already sent their last chunk
                episode.left.add(agent_id)
        chunks, self._finished = self._finished, []
        self._finished_env_steps = self._finished_agent_steps = 0
        return chunks

    # -- inside -------------------------------------------------------------------

    def _join(self, agent_id: str, obs: Any, info: Optional[Mapping]) -> None:
        if not isinstance(agent_id, str):
            raise ValueError(f"agent ids must be strings, got {type(agent_id).__name__}")
        episode = self._episode
        builder = EpisodeBuilder(clock=self._clock)
        builder.reset(obs, info)
        module_id = self._module_for(agent_id) if self._module_for is not None else None
        episode.agents[agent_id] = _Agent(builder, module_id, [episode.env_t], obs)

    def _complete(self, agent: _Agent, obs: Any, info: Optional[Mapping], terminated: bool, truncated: bool) -> None:
        agent.builder.step(agent.action, agent.reward, obs, terminated, truncated, agent.extra, info)
        agent.ticks.append(self._episode.env_t)
        agent.last_obs, agent.action, agent.extra, agent.acting, agent.reward = obs, None, None, False, 0.0
        self._episode.steps_since_cut += 1
        agent.done = terminated or truncated

    def _leave(self, agent: _Agent, terminated: bool, truncated: bool) -> None:
        if agent.acting:
            # No final observation came: the step ends on the last one seen.
            self._complete(agent, agent.last_obs, None, terminated, truncated)
        else:
            agent.builder.truncate()  # nothing outstanding; its data ends at its last observation
        agent.done = True

    def _end(self, terminated: bool, truncated: bool) -> None:
        episode = self._episode
        for agent in episode.agents.values():
            if not agent.done:
                self._leave(agent, terminated, truncated or not terminated)
        if episode.steps_since_cut:
            self._emit(episode, terminated=terminated, truncated=truncated)
        self._episode = None

    def _emit(self, episode: _Episode, *, terminated: bool, truncated: bool) -> None:
        agents = []
        for agent_id, agent in episode.agents.items():
            states = agent.builder.take_chunks()
            if not states:
                continue
            (state,) = states  # an agent has one chunk per multi-agent chunk: it never restarts
            steps = state["t"] - state["t_started"]
            agents.append((agent_id, agent.module_id, state, agent.ticks[-(steps + 1):]))
            agent.ticks = agent.ticks[-1:]
        chunk = build_multi_agent_state(
            episode.id_, env_t_started=episode.env_t_started, env_t=episode.env_t, agents=agents,
            terminated=terminated, truncated=truncated, start_time=episode.start_time,
            last_step_time=episode.last_step_time,
        )
        self._finished.append(chunk)
        env_steps, agent_steps = episode.env_t - episode.env_t_started, episode.steps_since_cut
        self._finished_env_steps += env_steps
        self._finished_agent_steps += agent_steps
        self.env_steps_total += env_steps
        self.agent_steps_total += agent_steps
