"""Local inference for :class:`~rlinks_rllib.client.EnvClient`: the policy runs here, episodes are recorded here.

One :class:`LocalInference` per connection. It holds the policy built from
the runner's config and weights (numpy for RLlib's default MLP, the exported
graph otherwise, one policy per module for a multi-agent runner), one episode
recorder per env, and the pacing the runner asks for:

* on-policy (PPO): once the runner's share of the next update is recorded
  (``want_steps``), the next :meth:`act` sends it and waits for the weights
  trained on it, the one wait exactness demands;
* off-policy (APPO, IMPALA, or ``on_policy=False``): every
  ``rollout_fragment_length`` steps a batch goes to a
  :class:`~.background_sender.BackgroundSender`, and newer weights are taken in
  whenever the sender has fetched some; :meth:`act` never waits for the learner.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from ...protocol.episode_builder import EpisodeBuilder
from ...protocol.episodes import STATE_OUT
from ...protocol.multi_agent import MultiAgentConfig
from ...protocol.multi_agent_builder import ALL, MultiAgentEpisodeBuilder
from ..network.connection import WeightsUpdate
from ..network.shared_client import SharedClient
from ..policies.choice import policy_for
from ..policies.numpy_policy import Policy
from ..policies.sampling import PolicyOutput
from .background_sender import BackgroundSender, paced_in_flight
from .policy_set import PolicySet

__all__ = ["LocalInference", "stack_rows"]


class LocalInference:
    """The policy, the episode recorders and the pacing of one connection.

    Args:
        client: the shared connection.
        config: the runner's ``SET_CONFIG`` description (or the stand-in
            built for RLlib's own server).
        update: the first weights.
        multi_agent: the runner's multi-agent description, or ``None``.
        on_policy: pace by the runner's shares (see the module docs).
        explore: sample actions (``False``: greedy).
        rng: the sampling generator.
        timeout, weights_every_s: for the background sender (off-policy).
        logger: where pacing is logged.

    Raises:
        UnsupportedModelError: no client policy can run the runner's module.
        ImportError: the module needs onnxruntime, which is not installed.
    """

    def __init__(self, client: SharedClient, config: Mapping[str, Any], update: WeightsUpdate, *,
                 multi_agent: Optional[MultiAgentConfig], on_policy: bool, explore: bool,
                 rng: np.random.Generator, timeout: float, weights_every_s: Optional[float],
                 logger: logging.Logger) -> None:
        self._client = client
        self._log = logger
        self._explore = explore
        self.multi_agent = multi_agent
        self.on_policy = on_policy
        self.fragment = int(config["rollout_fragment_length"])
        self.weights_seq_no = update.seq_no
        if multi_agent is None:
            self.policy: Policy | PolicySet = policy_for(config, update.params, rng=rng)
        else:
            activation = (config.get("model_config") or {}).get("fcnet_activation", "tanh")
            self.policy = PolicySet(multi_agent, update.params, fcnet_activation=activation, rng=rng,
                                    ask=lambda agents: client.call(client.raw.get_modules, agents))
        self.stateful = bool(getattr(self.policy, "stateful", False))
        self._follow_timestep(update)
        self._want = self._wanted(update)
        self._recorders: dict[int, EpisodeBuilder | MultiAgentEpisodeBuilder] = {}
        #: The output each env acted with and has not reported the outcome of yet.
        self._pending: dict[int, Any] = {}
        #: A recurrent policy's state per env, for its next step.
        self._state: dict[int, dict] = {}
        #: Envs whose running episode is not trained on (acted on, never recorded).
        self._untrained: set[int] = set()
        #: Envs whose pending action was taken over (a person or a script acted): marked when recorded.
        self._taken_over: set[int] = set()
        #: Multi-agent: the agents that left an env at its last report (their final observation acts on nothing).
        self._left: dict[int, set[str]] = {}
        self._unsent = 0
        self._sender = None if on_policy else BackgroundSender(
            client, timeout=timeout, weights_every_s=weights_every_s, weights_seq_no=update.seq_no,
            in_flight=paced_in_flight(config), logger=logger)

    # -- the loop's calls ---------------------------------------------------------------

    def is_open(self, env: int) -> bool:
        """Whether ``env`` has an episode running."""
        if env in self._untrained:
            return True
        recorder = self._recorders.get(env)
        return recorder is not None and recorder.episode_id is not None

    def awaiting_report(self, env: int) -> bool:
        """Whether ``env`` acted and its outcome was not reported yet."""
        return env in self._pending

    def start(self, env: int, obs: Any, train: bool = True) -> None:
        """Begin an episode for ``env`` at ``obs`` (a running one ends as truncated); ``train=False``: never sent."""
        recorder = self._recorders.get(env)
        if recorder is None:
            recorder = self._recorders[env] = self._new_recorder()
        self._pending.pop(env, None)
        self._taken_over.discard(env)
        self._left.pop(env, None)
        recorder.truncate()
        if train:
            self._untrained.discard(env)
            recorder.reset(obs)
        else:
            self._untrained.add(env)
        if self.stateful:
            self._state[env] = {k: v[0] for k, v in self.policy.initial_state().items()}

    def act(self, envs: list[int], rows: list[Any], taken: Any = None, takeover: bool = False) -> Any:
        """Actions for ``rows`` (one observation per env, each env with a running episode): an array
        with one row per env, or a list of ``{agent: action}`` for a multi-agent runner (agents that
        left at the env's last report, whose final observations an env gives once more, get none).

        With ``taken`` (one action per row, as the env takes it) the simulator
        chose the actions itself: they are recorded with the policy's
        log-probability of them and returned as the env takes them;
        ``takeover`` marks those steps taken over (the ``takeover`` extension).

        Raises:
            TrainingEnded, ConnectionLost, ...: from the pacing's network calls.
            ValueError: an observation that does not fit the policy.
        """
        self._pace()
        if taken is not None and self.multi_agent is not None:
            raise ValueError("actions chosen by the simulator are single-agent only")
        if self.multi_agent is not None:
            actions = []
            for env, obs in zip(envs, rows):
                left = self._left.get(env, ())
                acting = {agent: o for agent, o in obs.items() if agent not in left}
                outputs = self.policy.compute_actions(acting, explore=self._explore)
                self._pending[env] = outputs
                actions.append({agent: out.action_for_env for agent, out in outputs.items()})
            return actions
        batch = stack_rows(rows)
        state = stack_rows([self._state[env] for env in envs]) if self.stateful else None
        if taken is not None:
            out = self.policy.outputs_for(batch, np.asarray(taken), state)
        elif state is not None:
            out = self.policy.compute_actions(batch, state=state, explore=self._explore)
        else:
            out = self.policy.compute_actions(batch, explore=self._explore)
        for i, env in enumerate(envs):
            self._pending[env] = out.row(i)
        if takeover:
            self._taken_over.update(envs)
        else:
            self._taken_over.difference_update(envs)
        return out.action_for_env

    def report(self, env: int, reward: Any, obs: Any, terminated: Any, truncated: Any) -> bool:
        """Record the outcome of ``env``'s last action; return whether its episode ended.

        For a multi-agent env, the arguments are dicts by agent id (``"__all__"`` ends the episode).

        Raises:
            ValueError: a value that does not fit the episode.
        """
        out = self._pending.pop(env)
        recorder = self._recorders[env]
        takeover = env in self._taken_over
        self._taken_over.discard(env)
        if self.multi_agent is not None:
            self._left[env] = {agent for flags in (terminated, truncated) for agent, done in (flags or {}).items()
                               if done and agent != ALL}
        if env in self._untrained:
            if self.stateful:
                self._state[env] = out.state_out
            ended = _ended(terminated, truncated)
            if ended:
                self._untrained.discard(env)
            return ended
        if self.multi_agent is not None:
            actions = {agent: o.action for agent, o in out.items()}
            extras = {agent: _extra(o) for agent, o in out.items()}
            before = recorder.num_steps
            recorder.step(actions, reward, obs, terminated, truncated, extras)
            self._unsent += recorder.num_steps - before
            ended = recorder.episode_id is None
        else:
            extra = _extra(out)
            if self.stateful:
                extra[STATE_OUT] = out.state_out
                self._state[env] = out.state_out
            recorder.step(out.action, reward, obs, bool(terminated), bool(truncated), extra, takeover=takeover)
            self._unsent += 1
            ended = bool(terminated) or bool(truncated)
        return ended

    def after_report(self) -> None:
        """Send what a report call completed: on-policy the runner's share (and wait for the
        weights trained on it), off-policy a fragment (handed to the sender).

        Raises:
            TrainingEnded, ConnectionLost, ServerTimeout, ...: from the network calls.
        """
        if self._sender is not None:
            if self._unsent >= self.fragment:
                self._sender.send(self._take_chunks())
        elif self._unsent >= self._want:
            self._exchange()

    def end(self, env: int) -> None:
        """Cut ``env``'s running episode where it stands (truncated); its data still trains."""
        recorder = self._recorders.get(env)
        self._pending.pop(env, None)
        self._taken_over.discard(env)
        self._untrained.discard(env)
        if recorder is not None:
            recorder.truncate()

    def close(self) -> None:
        """Off-policy: send what is recorded and wait for its ACKs; on-policy: wait for ACKs only.

        On-policy, the steps of an unfinished share are not sent: the runner
        asks for whole shares, each trained with the weights it was sampled with.
        """
        if self._sender is not None:
            chunks = self._take_chunks()
            if chunks:
                self._sender.send(chunks)
            self._sender.close()
        else:
            self._client.call(self._client.raw.flush)

    # -- pacing ---------------------------------------------------------------------------

    def _pace(self) -> None:
        """Before acting: off-policy, take the newest weights; on-policy, wait for the next ones while
        the runner wants nothing (its share is in)."""
        if self._sender is not None:
            self._sender.check()
            update = self._sender.newest_weights()
            if update is not None:
                self._take_weights(update)
        elif self._unsent >= self._want:
            self._exchange()

    def refresh_weights(self) -> None:
        """Off-policy: fetch and take the newest weights now. On-policy they are the newest already."""
        if self._sender is not None:
            self._take_weights(self._client.call(self._client.raw.get_state))

    def _exchange(self) -> None:
        """Send the share (possibly empty) and take the weights trained on it."""
        update = self._client.call(self._client.raw.send_episodes_and_get_state, self._take_chunks())
        self._take_weights(update)
        self._want = self._wanted(update)

    def _take_chunks(self) -> list:
        chunks = [chunk for recorder in self._recorders.values() for chunk in recorder.take_chunks()]
        self._unsent = 0
        return chunks

    def _take_weights(self, update: WeightsUpdate) -> None:
        self.policy.set_params(update.params)
        self.weights_seq_no = update.seq_no
        self._follow_timestep(update)

    def _follow_timestep(self, update: WeightsUpdate) -> None:
        """An exploration schedule (DQN's epsilon) moves to RLlib's step count, where the runner says it."""
        set_timestep = getattr(self.policy, "set_timestep", None)
        if update.timestep is not None and set_timestep is not None:
            set_timestep(update.timestep)

    def _wanted(self, update: WeightsUpdate) -> int:
        return self.fragment if update.want_steps is None else update.want_steps

    def _new_recorder(self) -> EpisodeBuilder | MultiAgentEpisodeBuilder:
        if self.multi_agent is None:
            return EpisodeBuilder()
        return MultiAgentEpisodeBuilder(module_for=self.policy.module_for,
                                        count_steps_by=self.multi_agent.count_steps_by)


def _ended(terminated: Any, truncated: Any) -> bool:
    if isinstance(terminated, Mapping):
        return bool(terminated.get(ALL) or (truncated or {}).get(ALL))
    return bool(terminated) or bool(truncated)


def _extra(out: PolicyOutput) -> dict:
    return {"action_logp": out.action_logp, "action_dist_inputs": out.action_dist_inputs}


def stack_rows(rows: list[Any]) -> Any:
    """Observations of several envs as one batch: arrays stacked, dicts and tuples leaf by leaf."""
    first = rows[0]
    if len(rows) == 1 and isinstance(first, np.ndarray):
        return first[None]
    if isinstance(first, Mapping):
        return {key: stack_rows([row[key] for row in rows]) for key in first}
    if isinstance(first, tuple):
        return tuple(stack_rows([row[i] for row in rows]) for i in range(len(first)))
    if type(first) is np.ndarray:
        try:
            return np.array(rows)  # rows of one shape: what np.stack makes, at half its cost
        except ValueError:
            pass  # rows of different shapes: np.stack below says so
    return np.stack([np.asarray(row) for row in rows])
