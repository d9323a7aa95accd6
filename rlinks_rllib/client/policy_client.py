"""RLlib's old ``PolicyClient``, on the new API stack: the same calls, over :class:`~.env_client.EnvClient`.

RLlib's old stack let a simulator drive training with ``PolicyClient``
(``ray.rllib.env.policy_client``): start an episode, get or log actions, log
rewards, end the episode. The new stack has no such class; scripts written
for it run against ``rlinks learner`` with their import changed::

    from rlinks_rllib.client import PolicyClient   # was: from ray.rllib.env.policy_client import PolicyClient

    client = PolicyClient("http://localhost:9900", inference_mode="local")
    episode_id = client.start_episode(training_enabled=True)
    obs, _ = env.reset()
    while True:
        action = client.get_action(episode_id, obs)
        obs, reward, terminated, truncated, _ = env.step(action)
        client.log_returns(episode_id, reward)
        if terminated or truncated:
            client.end_episode(episode_id, obs)
            ...

The meanings are the old ones: rewards logged between two actions add up to
that step's reward; ``end_episode`` gives the final observation and ends the
episode as done (terminated); ``log_action`` records an action the simulator
chose itself with the policy's log-probability of it; an episode started
with ``training_enabled=False`` is played and never trained on; the
multi-agent forms take dicts by agent id. Episodes run side by side, each in
an env slot of one :class:`EnvClient` (at most ``max_episodes`` at once).

What differs: ``inference_mode="remote"`` is served actions (the runner
computes each action, and records ``log_action``'s and skips untrained
episodes itself: ``served_taken``); ``update_interval`` is how often an
off-policy client fetches weights (on-policy, weights come with every
update, as exactness needs); there is no HTTP: the address's port is the
learner's RLlink port (``rlinks learner`` prints it).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from ..protocol.multi_agent_builder import ALL
from .env_client import EnvClient

__all__ = ["PolicyClient"]

#: ``inference_mode`` -> EnvClient's ``inference``.
_MODES = {"local": "local", "remote": "served"}


@dataclass
class _Episode:
    env: int
    training_enabled: bool
    acted: bool = False
    reward: Any = 0.0
    done_agents: dict = field(default_factory=dict)


class PolicyClient:
    """RLlib's old ``PolicyClient`` calls over an :class:`EnvClient`.

    Args:
        address: ``"http://HOST:PORT"`` (as RLlib's old client took it),
            ``"HOST:PORT"`` or ``"tls://HOST:PORT"``: the learner's RLlink port.
        inference_mode: ``"local"`` (the policy runs here) or ``"remote"``
            (the runner computes the actions).
        update_interval: off-policy, the least seconds between weight fetches.
        session: ignored (RLlib's old client took a ``requests.Session``; there is no HTTP here).
        max_episodes: episodes that may run at once.
        **options: passed to :class:`EnvClient` (``secret_file=``, ``timeout=``, ...).

    Raises:
        ValueError: an unknown ``inference_mode``, or as EnvClient.
    """

    def __init__(self, address: str, inference_mode: str = "local", update_interval: Optional[float] = 10.0,
                 session: Any = None, *, max_episodes: int = 1024, **options: Any) -> None:
        if inference_mode not in _MODES:
            raise ValueError(f"inference_mode must be 'local' or 'remote', got {inference_mode!r}")
        self.address = _rlink_address(address)
        self.inference_mode = inference_mode
        self.env_client = EnvClient(self.address, num_envs=max_episodes, inference=_MODES[inference_mode],
                                    weights_every_s=update_interval or 0.0, **options)
        self._episodes: dict[str, _Episode] = {}
        self._free = list(range(max_episodes - 1, -1, -1))

    def start_episode(self, episode_id: Optional[str] = None, training_enabled: bool = True) -> str:
        """Start an episode and return its id; its first observation comes with the first action.

        Raises:
            ValueError: the id is in use, or ``max_episodes`` are running.
        """
        episode_id = episode_id if episode_id is not None else uuid.uuid4().hex
        if episode_id in self._episodes:
            raise ValueError(f"episode {episode_id!r} is already running")
        if not self._free:
            raise ValueError(f"{len(self._episodes)} episodes are running, the most this client takes "
                             "(max_episodes=): end some first")
        self._episodes[episode_id] = _Episode(self._free.pop(), bool(training_enabled))
        return episode_id

    def get_action(self, episode_id: Any, observation: Any) -> Any:
        """The policy's action for ``observation`` (``{agent: obs}`` -> ``{agent: action}`` multi-agent).

        ``episode_id`` may be a list of ids, with ``observation`` a dict by
        episode id: then every episode's action comes from one batched
        forward pass (one round trip served), as ``{episode_id: action}``.
        """
        if isinstance(episode_id, (list, tuple)):
            return self._get_actions(list(episode_id), observation)
        episode = self._step(episode_id, observation)
        if self._multi_agent:
            return self.env_client.act(observation, env=episode.env)
        return self.env_client.act([observation], env=[episode.env])[0]

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        """Record ``action``, chosen by the simulator, at ``observation`` (with the policy's log-probability of it).

        Raises:
            ValueError: a multi-agent runner (the message says why), or an action out of the space.
            NotAgreed: ``inference_mode="remote"`` and the runner records only its own actions.
        """
        episode = self._step(episode_id, observation)
        self.env_client.log_action([observation], [action], env=[episode.env])

    def log_returns(self, episode_id: str, reward: Any, info: Any = None,
                    multiagent_done_dict: Optional[Mapping[str, bool]] = None) -> None:
        """Add ``reward`` (``{agent: reward}`` multi-agent) to the current step's; ``info`` is not sent.

        ``multiagent_done_dict`` names agents that are done (they leave the
        episode with the next observation).
        """
        episode = self._episode(episode_id)
        if isinstance(reward, Mapping):
            total = dict(episode.reward) if isinstance(episode.reward, Mapping) else {}
            for agent, value in reward.items():
                total[agent] = total.get(agent, 0.0) + float(value)
            episode.reward = total
        else:
            episode.reward = float(episode.reward) + float(reward)
        if multiagent_done_dict:
            episode.done_agents.update(multiagent_done_dict)

    def end_episode(self, episode_id: str, observation: Any) -> None:
        """End the episode at its final ``observation`` (done: terminated)."""
        episode = self._episode(episode_id)
        if episode.acted:
            self._report(episode, observation, done=True)
        del self._episodes[episode_id]
        self._free.append(episode.env)

    def update_policy_weights(self) -> None:
        """Fetch the learner's newest weights now (local, off-policy; on-policy they are always the newest)."""
        self.env_client.refresh_weights()

    def close(self) -> None:
        """Deliver what was recorded and close the connection."""
        self.env_client.close()

    # -- inside ---------------------------------------------------------------------------

    def _get_actions(self, episode_ids: list, observations: Mapping) -> dict:
        episodes = [self._step(eid, observations[eid]) for eid in episode_ids]
        if self._multi_agent:
            return {eid: self.env_client.act(observations[eid], env=ep.env) for eid, ep in zip(episode_ids, episodes)}
        actions = self.env_client.act([observations[eid] for eid in episode_ids], env=[ep.env for ep in episodes])
        return dict(zip(episode_ids, actions))

    @property
    def _multi_agent(self) -> bool:
        return self.env_client.multi_agent

    def _episode(self, episode_id: str) -> _Episode:
        try:
            return self._episodes[episode_id]
        except KeyError:
            raise ValueError(f"no running episode {episode_id!r}: call start_episode() first") from None

    def _step(self, episode_id: str, observation: Any) -> _Episode:
        """Report the last step's outcome at ``observation``, or start the episode there."""
        episode = self._episode(episode_id)
        if episode.acted:
            self._report(episode, observation, done=False)
        else:
            obs = observation if self._multi_agent else [observation]
            self.env_client.start_episode(obs, env=[episode.env] if not self._multi_agent else episode.env,
                                          train=episode.training_enabled)
        episode.acted = True
        return episode

    def _report(self, episode: _Episode, observation: Any, *, done: bool) -> None:
        if self._multi_agent:
            rewards = episode.reward if isinstance(episode.reward, Mapping) else {}
            terminateds = {**episode.done_agents, ALL: done}
            self.env_client.report(rewards, observation, terminateds, {ALL: False}, env=episode.env)
        else:
            self.env_client.report([episode.reward], [observation], [done], [False], env=[episode.env])
        episode.reward = 0.0
        episode.done_agents = {}


def _rlink_address(address: str) -> str:
    """RLlib's old ``http://HOST:PORT`` as ``HOST:PORT``; other forms unchanged."""
    for scheme in ("http://", "https://"):
        if address.lower().startswith(scheme):
            return address[len(scheme):].rstrip("/")
    return address
