"""EnvClient where the rewritten examples met it first, against scripted runners: agents that leave, and the
learner's end for a reliable client."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from peers import ABORT, HANDLED, TEST_CONFIG, RLinkTestServer
from rlinks_rllib.client import EnvClient
from rlinks_rllib.protocol.multi_agent import MultiAgentConfig, ModuleConfig
from rlinks_rllib.protocol.weights import COMPONENT_RL_MODULE, WEIGHTS_SEQ_NO
from test_env_client import FAST, PARAMS, SHARE, our_weights, walk

TICKS_SHARE = 6  # the multi-agent runner's want_steps: two episodes of three ticks

#: One module for every agent: TEST_CONFIG's spaces and an MLP's weights (PARAMS).
MULTI_AGENT = MultiAgentConfig({"walker": ModuleConfig(TEST_CONFIG["observation_space"], TEST_CONFIG["action_space"])},
                               None, "env_steps")


def module_weights(server: RLinkTestServer, conn, message: dict):
    """Answer GET_STATE and on-policy batches with the one module's weights; tell every agent it is a walker."""
    kind = message["type"]
    if kind == "GET_MODULES":
        conn.send({"type": "MODULES", "modules": {agent: "walker" for agent in message["agents"]}})
    elif kind in ("GET_STATE", "EPISODES_AND_GET_STATE"):
        if kind == "EPISODES_AND_GET_STATE":
            conn.send({"type": "ACK", "seq": message["seq"]})
        state = {COMPONENT_RL_MODULE: {"walker": PARAMS}, WEIGHTS_SEQ_NO: server.weights_seq_no}
        conn.send({"type": "SET_STATE", "state": state, "want_steps": TICKS_SHARE})
    else:
        return None
    return HANDLED


#: One episode, tick by tick: (agents observed after the tick, terminateds, truncateds).
TICKS = [(["a", "b"], {"b": True}, {}),  # b leaves, with its final observation
         (["a", "c"], {}, {}),  # c joins
         (["a", "c"], {}, {"__all__": True})]


def test_an_agent_that_left_is_not_asked_to_act_on_its_final_observation():
    config = {**TEST_CONFIG, "multi_agent": MULTI_AGENT.to_wire()}
    server = RLinkTestServer(config=config, extensions=("want_steps", "ack", "multi_agent"),
                             on_message=module_weights).start()
    try:
        acted = []
        with EnvClient(server.address, inference="local", reliable=False, **FAST) as client:
            for _ in range(2):
                obs = {"a": np.zeros(4, np.float32), "b": np.zeros(4, np.float32)}
                for agents, terminateds, truncateds in TICKS:
                    actions = client.act(obs)
                    acted.append(sorted(actions))
                    obs = {agent: np.full(4, 0.5, np.float32) for agent in agents}
                    client.report({agent: 1.0 for agent in actions}, obs, terminateds, truncateds)
            assert (client.stats.steps, client.stats.episodes, client.stats.mean_return) == (6, 2, 5.0)
        assert acted == [["a", "b"], ["a"], ["a", "c"]] * 2
        assert [m["timesteps"] for _, m in server.messages if m["type"] == "EPISODES_AND_GET_STATE"] == [TICKS_SHARE]
    finally:
        server.stop()


@pytest.mark.parametrize("then", ["stops listening", "says so again to every reconnection"])
def test_a_reliable_client_ends_quietly_when_the_learner_stops_and_does_not_come_back(then):
    def shut_down(server, conn, message):
        if conn.index == 0 and message["type"] != "EPISODES_AND_GET_STATE":
            return our_weights(server, conn, message)
        conn.send({"type": "ERROR", "code": "shutting_down", "message": "training is over"})
        if then == "stops listening":
            threading.Thread(target=server.stop).start()
        return ABORT

    server = RLinkTestServer(on_message=shut_down, extensions=("want_steps", "ack")).start()
    try:
        with EnvClient(server.address, retry_attempts=3, **FAST) as client:  # reliable: tries again, gives up
            walk(client, 10 * SHARE)
        assert not client.running and client.stats.steps == SHARE
        assert server.connections == (1 if then == "stops listening" else 1 + 3)
    finally:
        server.stop()
