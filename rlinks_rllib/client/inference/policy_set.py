"""A simulator's policies for a multi-agent runner: one NumpyPolicy per module.

A runner that serves a multi-agent config (``multi_agent`` agreed) describes
its modules and agent mapping in ``SET_CONFIG`` and sends every module's
weights in one ``SET_STATE``. :class:`PolicySet` turns both into policies::

    client = RLinkClient(address, extensions=MULTI_AGENT_EXTENSIONS)
    ma = read_multi_agent_config(client.get_config())
    policies = PolicySet(ma, client.get_state().params)
    actions = policies.compute_actions({"runner_0": obs0, "chaser_1": obs1, ...})

and computes the actions of all agents of one module in one batched call.
No Ray, no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional

import numpy as np

from ...protocol.agent_mapping import AgentMapping
from ...protocol.extensions import Extension
from ...protocol.multi_agent import MultiAgentConfig, read_multi_agent_config
from ..network.connection import DEFAULT_EXTENSIONS
from ..policies.numpy_policy import NumpyPolicy
from ..policies.sampling import PolicyOutput

__all__ = ["MULTI_AGENT_EXTENSIONS", "PolicySet", "read_multi_agent_config"]

#: Agents whose module the runner named that a PolicySet remembers at most.
_MAX_TOLD = 65_536

#: What a multi-agent client offers: the defaults plus ``multi_agent``.
MULTI_AGENT_EXTENSIONS = (*DEFAULT_EXTENSIONS, Extension.MULTI_AGENT.value)


class PolicySet:
    """One :class:`NumpyPolicy` per module of a multi-agent runner, and the mapping of agents to them.

    Args:
        config: the runner's ``multi_agent`` description (:func:`read_multi_agent_config`).
        params: module id -> weights, as ``SET_STATE`` brings them.
        ask: for a runner that sends no mapping table (it maps agents with a
            Python function): agent ids -> their modules, asked once per new
            agent (``RLinkClient.get_modules``).
        policy_kwargs: passed to every :class:`NumpyPolicy` (``fcnet_activation``, ``rng``, ...).

    Raises:
        ValueError: neither a mapping table nor ``ask``, or ``params`` lacks a module.
        UnsupportedModelError: a module's weights are not RLlib's default MLP.
    """

    def __init__(self, config: MultiAgentConfig, params: Mapping[str, Mapping[str, Any]], *,
                 ask: Optional[Callable[[list[str]], dict[str, str]]] = None, **policy_kwargs: Any) -> None:
        self.config = config
        self.mapping: Optional[AgentMapping] = config.mapping
        if self.mapping is None and ask is None:
            raise ValueError("the runner maps agents with a Python function: pass `ask` (RLinkClient.get_modules)")
        self._ask = ask
        #: Modules the runner named for agents (no mapping table), kept for the connection's life.
        self._told: dict[str, str] = {}
        missing = sorted(set(config.modules) - set(params))
        if missing:
            raise ValueError(f"the weight set lacks modules {missing}")
        self.policies = {
            module_id: NumpyPolicy(params[module_id], module.action_space, **policy_kwargs)
            for module_id, module in config.modules.items()
        }

    def module_for(self, agent_id: str) -> str:
        """The module of ``agent_id``: from the table (``UnknownAgent`` when no pattern matches), or asked once."""
        if self.mapping is not None:
            return self.mapping.module_for(agent_id)
        if agent_id not in self._told:
            self.learn_modules([agent_id])
        return self._told[agent_id]

    def learn_modules(self, agent_ids: list[str]) -> None:
        """Ask the runner (one round trip) for the modules of the agents not known yet; no-op with a table."""
        unknown = [a for a in dict.fromkeys(agent_ids) if a not in self._told]
        if self.mapping is None and unknown:
            told = self._ask(unknown)
            missing = [a for a in unknown if told.get(a) not in self.policies]
            if missing:
                raise ValueError(f"the runner named no served module for agents {missing[:4]}")
            if len(self._told) + len(unknown) > _MAX_TOLD:
                self._told.clear()  # agent ids that come and go forever: forget old ones, ask again if needed
            self._told.update((a, told[a]) for a in unknown)

    def set_params(self, params: Mapping[str, Mapping[str, Any]]) -> None:
        """New weights for every module in ``params`` (a frozen one gets the same weights again)."""
        for module_id, module_params in params.items():
            policy = self.policies.get(module_id)
            if policy is not None:
                policy.set_params(module_params)

    def compute_actions(self, obs: Mapping[str, Any], *, explore: bool = True) -> dict[str, PolicyOutput]:
        """One action (with ``action_logp``/``action_dist_inputs``) per agent in ``obs``.

        The agents of one module are stacked into one batch and computed in one call.
        """
        by_module: dict[str, list[str]] = {}
        self.learn_modules(list(obs))
        for agent_id in obs:
            by_module.setdefault(self.module_for(agent_id), []).append(agent_id)
        out: dict[str, PolicyOutput] = {}
        for module_id, agent_ids in by_module.items():
            batch = np.stack([np.asarray(obs[a], dtype=np.float32) for a in agent_ids])
            result = self.policies[module_id].compute_actions(batch, explore=explore)
            for row, agent_id in enumerate(agent_ids):
                out[agent_id] = result.row(row)
        return out
