"""The wire form of a multi-agent episode chunk, the multi-agent config and weight set.

Only with the ``multi_agent`` extension agreed (a plain RLlib peer never
sees any of this). A multi-agent chunk is a map in the ``episodes`` list of
``EPISODES``/``EPISODES_AND_GET_STATE``, with the key names of RLlib's
``MultiAgentEpisode.get_state()``::

    {
      "id_": "9c1e...",                         # the same for every chunk of the episode
      "env_t_started": 0, "env_t": 7,           # env steps (ticks) before / after this chunk
      "is_terminated": false, "is_truncated": false,   # the whole episode ("__all__")
      "agent_episodes": [[agent_id, STATE], ...],      # one SingleAgentEpisode state per agent
      "agent_env_t": {agent_id: <int64 array>}, # compact form: the env tick of each of the agent's observations
      "_agent_to_module_mapping": {agent_id: module_id},  # optional
      "_start_time": 12.5, "_last_step_time": 13.0,      # optional
      "custom_data": {}                         # optional
    }

Each ``STATE`` is a single-agent chunk (``protocol.episodes``) of that
agent's own steps: ``T_a + 1`` observations and ``T_a`` actions, rewards and
model outputs, ``agent_id`` set (or nil), ``module_id`` nil or the module the
mapping names. An agent's step is complete when its next observation
arrives, so turn-based agents (acting on different ticks) simply have fewer
steps than the env, with the reward summed over the ticks in between. An
agent that joins mid-episode has ``t_started`` 0 and its first observation
at a later tick; one that leaves has ``is_terminated`` or ``is_truncated``
on its last chunk. When the episode ends (``__all__``) every agent's chunk
in it ends too.

``agent_env_t[agent]`` has ``T_a + 1`` ints: the env tick at which each of
the agent's observations arrived (0 is the reset). The ones after the first
strictly increase within ``(env_t_started, env_t]``; the first may precede
``env_t_started`` when the agent's chunk continues one cut earlier. This is
how a server knows which agent acted when, and that no agent claims more
steps than the env took.

RLlib's own form carries ``env_t_to_agent_t`` instead: per agent a buffer
state whose data lists, for every tick of the chunk, the agent's step index
or ``"S"`` (skipped). It is accepted where it is sane: lookback 0, one entry
per tick, indices increasing; the hanging-action fields (``_hanging_*``) must
be empty or nil, and ``agent_to_module_mapping_fn``, ``observation_space``,
``action_space`` nil or empty (Python objects; never read from the network).

The ``SET_CONFIG`` description of a multi-agent runner adds (``protocol.config``)::

    "multi_agent": {
      "modules": {module_id: {"observation_space": SPACE, "action_space": SPACE,
                              "trained": bool, "weights_layout": {...}}},
      "agent_mapping": [[pattern, module_id], ...] or nil,   # nil: a Python mapping function
      "count_steps_by": "env_steps" or "agent_steps"
    }

and its ``SET_STATE`` weight set holds every module the runner serves:
``{"rl_module": {module_id: {param: array}}, "weights_seq_no": n}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from . import episodes as ep
from .agent_mapping import AgentMapping
from .errors import InvalidMessage
from .spaces import check_space
from .weights import WeightsError, check_params, check_seq_no

__all__ = [
    "AGENT_EPISODES",
    "AGENT_ENV_T",
    "ENV_T",
    "ENV_T_STARTED",
    "ENV_T_TO_AGENT_T",
    "AGENT_TO_MODULE",
    "SKIP_TAG",
    "COUNT_ENV_STEPS",
    "COUNT_AGENT_STEPS",
    "MAX_AGENTS",
    "AgentChunk",
    "MultiAgentChunk",
    "MultiAgentConfig",
    "ModuleConfig",
    "is_multi_agent_state",
    "chunk_steps",
    "build_multi_agent_state",
    "check_multi_agent_state",
    "read_multi_agent_config",
    "read_module_states",
    "check_agent_ids",
    "read_modules",
]

ENV_T_STARTED = "env_t_started"
ENV_T = "env_t"
AGENT_EPISODES = "agent_episodes"
AGENT_ENV_T = "agent_env_t"
ENV_T_TO_AGENT_T = "env_t_to_agent_t"
AGENT_TO_MODULE = "_agent_to_module_mapping"
_HANGING = ("_hanging_actions_end", "_hanging_extra_model_outputs_end", "_hanging_rewards_end",
            "_hanging_rewards_begin")
_PYTHON_ONLY = ("agent_to_module_mapping_fn", "observation_space", "action_space")
#: RLlib's mark for a tick on which an agent got no observation.
SKIP_TAG = "S"

#: ``count_steps_by`` values: what ``want_steps`` and ``rollout_fragment_length`` count.
COUNT_ENV_STEPS = "env_steps"
COUNT_AGENT_STEPS = "agent_steps"

#: Most agents in one multi-agent chunk.
MAX_AGENTS = 1024
_MAX_T = 1 << 53


@dataclass
class AgentChunk:
    """One agent's part of a checked multi-agent chunk."""

    agent_id: str
    module_id: str
    state: dict  #: the checked single-agent state (``protocol.episodes``), ids filled in
    env_t: np.ndarray  #: the env tick of each observation (``T_a + 1`` ints)

    @property
    def steps(self) -> int:
        return self.state[ep.T] - self.state[ep.T_STARTED]


@dataclass
class MultiAgentChunk:
    """A checked multi-agent chunk."""

    id_: str
    env_t_started: int
    env_t: int
    is_terminated: bool
    is_truncated: bool
    agents: list[AgentChunk]
    start_time: Optional[float] = None
    last_step_time: Optional[float] = None
    custom_data: dict = field(default_factory=dict)

    @property
    def env_steps(self) -> int:
        return self.env_t - self.env_t_started

    @property
    def agent_steps(self) -> int:
        return sum(agent.steps for agent in self.agents)


def is_multi_agent_state(state: Any) -> bool:
    """Whether an ``episodes`` element is a multi-agent chunk (it has ``agent_episodes``)."""
    return isinstance(state, Mapping) and AGENT_EPISODES in state


def chunk_steps(state: Mapping, count_by: str = COUNT_ENV_STEPS) -> int:
    """Steps in a chunk of either kind, as RLlib's batch counts them.

    A single-agent chunk counts its steps either way; a multi-agent one its
    env steps (``env_t - env_t_started``) or the sum of its agents' steps.

    Raises:
        EpisodeError: the chunk has no readable counts.
    """
    if not is_multi_agent_state(state):
        return ep.episode_len(state)
    if count_by == COUNT_AGENT_STEPS:
        agents = state[AGENT_EPISODES]
        if not isinstance(agents, list):
            raise ep.EpisodeError(f"{AGENT_EPISODES}: expected a list of [agent_id, state] pairs")
        return sum(ep.episode_len(pair[1]) for pair in agents)
    started = ep._check_int(state.get(ENV_T_STARTED), ENV_T_STARTED, 0, _MAX_T)
    return ep._check_int(state.get(ENV_T), ENV_T, started, _MAX_T) - started


# --------------------------------------------------------------------------
# Building


def build_multi_agent_state(
    id_: str,
    *,
    env_t_started: int,
    env_t: int,
    agents: list[tuple[str, Optional[str], dict, np.ndarray]],
    terminated: bool = False,
    truncated: bool = False,
    start_time: Optional[float] = None,
    last_step_time: Optional[float] = None,
    custom_data: Optional[Mapping] = None,
) -> dict:
    """The compact wire form of one multi-agent chunk.

    Args:
        id_: the episode id, the same for every chunk.
        env_t_started, env_t: env ticks before and after this chunk.
        agents: ``(agent_id, module_id or None, single-agent state, env ticks)``
            per agent with steps in the chunk (the state from
            ``protocol.episodes.build_episode_state``; its ids are filled in here).
        terminated, truncated: the whole episode ended (``__all__``).

    Raises:
        EpisodeError: an id is malformed or ticks don't fit the agent's state.
    """
    ep._check_id(id_, ep.ID)
    agent_states = []
    ticks = {}
    mapping = {}
    for agent_id, module_id, state, env_ticks in agents:
        ep._check_id(agent_id, "agent_id")
        env_ticks = np.asarray(env_ticks, dtype=np.int64)
        if env_ticks.shape != (state[ep.T] - state[ep.T_STARTED] + 1,):
            raise ep.EpisodeError(f"agent {agent_id!r}: {AGENT_ENV_T} needs one tick per observation")
        state = dict(state)
        state[ep.AGENT_ID] = agent_id
        state[ep.MODULE_ID] = module_id
        state[ep.MULTI_AGENT_EPISODE_ID] = id_
        agent_states.append([agent_id, state])
        ticks[agent_id] = env_ticks
        if module_id is not None:
            mapping[agent_id] = module_id
    return {
        ep.ID: id_,
        ENV_T_STARTED: int(env_t_started),
        ENV_T: int(env_t),
        ep.IS_TERMINATED: bool(terminated),
        ep.IS_TRUNCATED: bool(truncated),
        AGENT_EPISODES: agent_states,
        AGENT_ENV_T: ticks,
        AGENT_TO_MODULE: mapping,
        ep.START_TIME: start_time,
        ep.LAST_STEP_TIME: last_step_time,
        ep.CUSTOM_DATA: {} if custom_data is None else dict(custom_data),
    }


# --------------------------------------------------------------------------
# Checking

#: ``(agent_id, module_id the peer named or None) -> (module_id, check_episode_state keyword rules)``;
#: raises EpisodeError (or InvalidMessage) for an agent or module the receiver doesn't serve.
AgentRules = Callable[[str, Optional[str]], tuple[str, dict]]


def check_multi_agent_state(
    state: Any,
    agent_rules: AgentRules,
    *,
    max_steps: int = ep.DEFAULT_MAX_STEPS,
    max_agents: int = MAX_AGENTS,
    required_extra: tuple[str, ...] = (),
    keep_infos: bool = True,
) -> MultiAgentChunk:
    """Vet a multi-agent chunk from a peer, in either form (see the module docstring).

    Every agent's state goes through ``check_episode_state`` with the rules
    of its module, so an error names the agent and the field.

    Raises:
        EpisodeError: the chunk is malformed, breaks a limit, or an agent's
            data doesn't fit its module (the message names agent and field).
        InvalidMessage: ``agent_rules`` refused an agent (unknown to the
            mapping, a module not served).
    """
    if not isinstance(state, Mapping):
        raise ep.EpisodeError(f"a multi-agent chunk must be a map, got {ep._type_name(state)}")
    id_ = ep._check_id(state.get(ep.ID), ep.ID)
    env_t_started = ep._check_int(state.get(ENV_T_STARTED), ENV_T_STARTED, 0, _MAX_T)
    env_t = ep._check_int(state.get(ENV_T), ENV_T, env_t_started, _MAX_T)
    if env_t - env_t_started > max_steps:
        raise ep.EpisodeError(f"{ENV_T}: {env_t - env_t_started} env steps in one chunk, more than {max_steps}")
    terminated = ep._check_bool(state.get(ep.IS_TERMINATED, False), ep.IS_TERMINATED)
    truncated = ep._check_bool(state.get(ep.IS_TRUNCATED, False), ep.IS_TRUNCATED)
    start_time, last_step_time = ep._check_times(state.get(ep.START_TIME), state.get(ep.LAST_STEP_TIME))
    custom_data = state.get(ep.CUSTOM_DATA) or {}
    if not isinstance(custom_data, Mapping):
        raise ep.EpisodeError(f"{ep.CUSTOM_DATA}: expected a map, got {ep._type_name(custom_data)}")
    ep._check_depth(custom_data, ep.CUSTOM_DATA)
    for key in _HANGING:
        if state.get(key):
            raise ep.EpisodeError(f"{key}: hanging actions and rewards are not accepted; "
                                  "send each agent's steps complete (PROTOCOL.md 7.6)")
    for key in _PYTHON_ONLY:
        if state.get(key):  # RLlib's own states hold empty maps here when no spaces were set
            raise ep.EpisodeError(f"{key}: must be nil (Python objects are never read from the network)")
    pairs = state.get(AGENT_EPISODES)
    if not isinstance(pairs, list):
        raise ep.EpisodeError(f"{AGENT_EPISODES}: expected a list of [agent_id, state] pairs")
    if len(pairs) > max_agents:
        raise ep.EpisodeError(f"{AGENT_EPISODES}: {len(pairs)} agents in one chunk, more than {max_agents}")
    named = state.get(AGENT_TO_MODULE) or {}
    if not isinstance(named, Mapping):
        raise ep.EpisodeError(f"{AGENT_TO_MODULE}: expected a map of agent id to module id")
    ticks_of = _ticks_reader(state, env_t_started, env_t)

    agents: list[AgentChunk] = []
    seen: set[str] = set()
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ep.EpisodeError(f"{AGENT_EPISODES}[{i}]: expected [agent_id, state]")
        agent_id = ep._check_id(pair[0], f"{AGENT_EPISODES}[{i}] agent_id")
        where = f"agent {agent_id!r}"
        if agent_id in seen:
            raise ep.EpisodeError(f"{where}: appears twice in {AGENT_EPISODES}")
        seen.add(agent_id)
        sa_state = pair[1]
        claimed = None
        if isinstance(sa_state, Mapping):
            claimed = sa_state.get(ep.MODULE_ID)
            inner_agent = sa_state.get(ep.AGENT_ID)
            if inner_agent is not None and inner_agent != agent_id:
                raise ep.EpisodeError(f"{where}: its state says agent_id {inner_agent!r:.80}")
        if claimed is None:
            claimed = named.get(agent_id)
        if claimed is not None and type(claimed) is not str:
            raise ep.EpisodeError(f"{where}: module_id must be a string, got {ep._type_name(claimed)}")
        module_id, rules = agent_rules(agent_id, claimed)
        try:
            clean = ep.check_episode_state(sa_state, max_steps=max_steps, allow_empty=True,
                                           required_extra=required_extra, keep_infos=keep_infos, **rules)
        except ep.EpisodeError as exc:
            raise ep.EpisodeError(f"{where} (module {module_id!r}): {exc}") from None
        clean[ep.AGENT_ID] = agent_id
        clean[ep.MODULE_ID] = module_id
        clean[ep.MULTI_AGENT_EPISODE_ID] = id_
        steps = clean[ep.T] - clean[ep.T_STARTED]
        ticks = ticks_of(agent_id, steps)
        if steps > env_t - env_t_started:
            raise ep.EpisodeError(f"{where}: {steps} steps in a chunk of {env_t - env_t_started} env steps")
        if (terminated or truncated) and not (clean[ep.IS_TERMINATED] or clean[ep.IS_TRUNCATED]):
            raise ep.EpisodeError(f"{where}: is_terminated and is_truncated are false, but the episode ended "
                                  "(__all__); every agent's last chunk ends with it")
        if steps == 0:
            continue  # nothing to learn; RLlib's own episodes drop such agents too
        agents.append(AgentChunk(agent_id, module_id, clean, ticks))
    return MultiAgentChunk(id_, env_t_started, env_t, terminated, truncated, agents,
                           start_time, last_step_time, dict(custom_data))


def _ticks_reader(state: Mapping, env_t_started: int, env_t: int) -> Callable[[str, int], np.ndarray]:
    """A function giving each agent's checked observation ticks, from whichever form the chunk uses."""
    compact = state.get(AGENT_ENV_T)
    rllib = state.get(ENV_T_TO_AGENT_T)
    if compact is not None:
        if not isinstance(compact, Mapping):
            raise ep.EpisodeError(f"{AGENT_ENV_T}: expected a map of agent id to an int array")

        def from_compact(agent_id: str, steps: int) -> np.ndarray:
            where = f"agent {agent_id!r}: {AGENT_ENV_T}"
            raw = compact.get(agent_id)
            if raw is None:
                raise ep.EpisodeError(f"{where}: missing")
            try:
                ticks = np.asarray(raw)
            except (ValueError, TypeError) as exc:
                raise ep.EpisodeError(f"{where}: not a list of ints ({exc})") from None
            if ticks.dtype.kind not in "iu" or ticks.shape != (steps + 1,):
                raise ep.EpisodeError(f"{where}: expected {steps + 1} ints (one per observation), "
                                      f"got shape {ticks.shape} of {ticks.dtype}")
            return _check_ticks(ticks.astype(np.int64), where, env_t_started, env_t)

        return from_compact
    if rllib is not None:
        if not isinstance(rllib, Mapping):
            raise ep.EpisodeError(f"{ENV_T_TO_AGENT_T}: expected a map of agent id to a buffer")
        return lambda agent_id, steps: _ticks_from_rllib(rllib.get(agent_id), agent_id, steps, env_t_started, env_t)
    raise ep.EpisodeError(f"a multi-agent chunk needs {AGENT_ENV_T} (or RLlib's {ENV_T_TO_AGENT_T})")


def _check_ticks(ticks: np.ndarray, where: str, env_t_started: int, env_t: int) -> np.ndarray:
    if ticks.size == 0 or ticks[0] < 0 or ticks[0] > env_t:
        raise ep.EpisodeError(f"{where}: the first observation's tick must lie in [0, {env_t}]")
    later = ticks[1:]
    if later.size:
        if np.any(np.diff(ticks) <= 0):
            raise ep.EpisodeError(f"{where}: ticks must strictly increase")
        if later[0] <= env_t_started or later[-1] > env_t:
            raise ep.EpisodeError(f"{where}: step ticks must lie in ({env_t_started}, {env_t}]")
    return ticks


def _ticks_from_rllib(buf: Any, agent_id: str, steps: int, env_t_started: int, env_t: int) -> np.ndarray:
    where = f"agent {agent_id!r}: {ENV_T_TO_AGENT_T}"
    if not isinstance(buf, Mapping) or not isinstance(buf.get(ep.BUFFER_DATA), list):
        raise ep.EpisodeError(f"{where}: expected a buffer state with a data list")
    if buf.get(ep.BUFFER_LOOKBACK, 0) != 0:
        raise ep.EpisodeError(f"{where}: only lookback 0 is accepted")
    data = buf[ep.BUFFER_DATA]
    if len(data) != env_t - env_t_started + 1:
        raise ep.EpisodeError(f"{where}: {len(data)} entries for {env_t - env_t_started + 1} ticks")
    ticks = {}
    for i, value in enumerate(data):
        if value == SKIP_TAG:
            continue
        if type(value) is not int or not 0 <= value <= steps or value in ticks:
            raise ep.EpisodeError(f"{where}[{i}]: expected a step index in [0, {steps}] once, or {SKIP_TAG!r}")
        ticks[value] = env_t_started + i
    first = ticks.get(0, env_t_started)  # a continuing agent's first observation is from an earlier chunk
    if sorted(ticks.keys() - {0}) != list(range(1, steps + 1)):
        raise ep.EpisodeError(f"{where}: needs a tick for each of the agent's {steps} steps")
    out = np.array([first] + [ticks[k] for k in range(1, steps + 1)], dtype=np.int64)
    return _check_ticks(out, where, env_t_started, env_t)


# --------------------------------------------------------------------------
# Config and weights


@dataclass(frozen=True)
class ModuleConfig:
    """What a client needs to know of one module."""

    observation_space: dict
    action_space: dict
    trained: bool = True


@dataclass(frozen=True)
class MultiAgentConfig:
    """The ``multi_agent`` part of a ``SET_CONFIG`` description."""

    modules: dict[str, ModuleConfig]
    mapping: Optional[AgentMapping]
    count_steps_by: str = COUNT_ENV_STEPS

    def to_wire(self, weights_layout: Optional[Mapping[str, Mapping[str, list[int]]]] = None) -> dict:
        modules = {}
        for module_id, module in self.modules.items():
            entry: dict[str, Any] = {"observation_space": module.observation_space,
                                     "action_space": module.action_space, "trained": module.trained}
            if weights_layout and module_id in weights_layout:
                entry["weights_layout"] = {k: [int(d) for d in v] for k, v in weights_layout[module_id].items()}
            modules[module_id] = entry
        return {"modules": modules, "agent_mapping": None if self.mapping is None else self.mapping.to_wire(),
                "count_steps_by": self.count_steps_by}


def read_multi_agent_config(description: Mapping[str, Any]) -> Optional[MultiAgentConfig]:
    """The ``multi_agent`` part of a ``SET_CONFIG`` description; ``None`` for a single-agent runner.

    Raises:
        InvalidMessage: the part is present but malformed.
    """
    raw = description.get("multi_agent")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("modules"), dict) or not raw["modules"]:
        raise InvalidMessage("SET_CONFIG 'multi_agent' needs a non-empty map 'modules'")
    modules = {}
    for module_id, entry in raw["modules"].items():
        if type(module_id) is not str or not isinstance(entry, dict):
            raise InvalidMessage("SET_CONFIG 'multi_agent.modules' maps module ids to maps")
        modules[module_id] = ModuleConfig(check_space(entry.get("observation_space")),
                                          check_space(entry.get("action_space")), bool(entry.get("trained", True)))
    mapping = raw.get("agent_mapping")
    count_by = raw.get("count_steps_by", COUNT_ENV_STEPS)
    if count_by not in (COUNT_ENV_STEPS, COUNT_AGENT_STEPS):
        raise InvalidMessage(f"SET_CONFIG 'multi_agent.count_steps_by' must be {COUNT_ENV_STEPS!r} "
                             f"or {COUNT_AGENT_STEPS!r}")
    return MultiAgentConfig(modules, None if mapping is None else AgentMapping.from_wire(mapping), count_by)


def check_agent_ids(agents: Any, error: type[Exception]) -> list[str]:
    """``agents`` of a ``GET_MODULES``, checked: 1 to :data:`MAX_AGENTS` ids of 1-256 chars.

    Raises:
        error: (the caller's class) anything else.
    """
    if not isinstance(agents, list) or not 0 < len(agents) <= MAX_AGENTS:
        raise error(f"GET_MODULES 'agents' must list 1 to {MAX_AGENTS} agent ids")
    for agent_id in agents:
        if type(agent_id) is not str or not 0 < len(agent_id) <= ep.MAX_ID_LENGTH:
            raise error(f"GET_MODULES 'agents' must be strings of 1-{ep.MAX_ID_LENGTH} chars, got {agent_id!r:.80}")
    return agents


def read_modules(raw: Any) -> dict[str, str]:
    """The ``modules`` of a ``MODULES`` answer: agent id -> module id.

    Raises:
        InvalidMessage: not a map of strings.
    """
    if not isinstance(raw, dict) or len(raw) > MAX_AGENTS:
        raise InvalidMessage(f"MODULES 'modules' must map at most {MAX_AGENTS} agent ids to module ids")
    for agent_id, module_id in raw.items():
        if type(agent_id) is not str or type(module_id) is not str:
            raise InvalidMessage("MODULES 'modules' must map strings to strings")
    return raw


def read_module_states(state: Mapping[str, Any]) -> tuple[dict[str, dict[str, np.ndarray]], int]:
    """``({module_id: params}, seq_no)`` from a multi-agent ``SET_STATE`` weight set.

    Raises:
        WeightsError: not a map with ``rl_module`` (a map of module ids to
            parameter maps) and ``weights_seq_no``.
    """
    if not isinstance(state, Mapping):
        raise WeightsError(f"weight set must be a map, got {type(state).__name__}")
    modules = state.get("rl_module")
    if not isinstance(modules, Mapping) or not modules:
        raise WeightsError("a multi-agent weight set needs 'rl_module': a map of module ids to parameters")
    out = {}
    for module_id, params in modules.items():
        if type(module_id) is not str:
            raise WeightsError(f"module ids must be strings, got {type(module_id).__name__}")
        out[module_id] = check_params(params)
    return out, check_seq_no(state.get("weights_seq_no"))
