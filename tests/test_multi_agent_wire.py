"""The multi-agent wire form, agent mapping table and episode builder (no Ray; RLlib's own episodes where named)."""

from __future__ import annotations

import numpy as np
import pytest

from rlinks_rllib.protocol.agent_mapping import AgentMapping, UnknownAgent
from rlinks_rllib.protocol.codec import decode_body
from rlinks_rllib.protocol.framing import encode_body_once
from rlinks_rllib.protocol.episodes import EpisodeError
from rlinks_rllib.protocol.errors import InvalidMessage
from rlinks_rllib.protocol.multi_agent import (
    chunk_steps,
    check_multi_agent_state,
    read_module_states,
    read_multi_agent_config,
)
from rlinks_rllib.protocol.multi_agent_builder import ALL, MultiAgentEpisodeBuilder
from rlinks_rllib.protocol.weights import WeightsError

MAPPING = AgentMapping([["mover_*", "mover"], ["turn_*", "turner"]])
RULES = {
    "mover": dict(obs_shape=(2,), obs_dtype=np.dtype(np.float32), num_actions=3, action_shape=(),
                  action_dtype=np.dtype(np.int64)),
    "turner": dict(obs_shape=(3,), obs_dtype=np.dtype(np.float32), num_actions=2, action_shape=(),
                   action_dtype=np.dtype(np.int64)),
}
SIZES = {"mover": 2, "turner": 3}


def rules(agent_id, claimed):
    module = MAPPING.module_for(agent_id)
    if claimed is not None and claimed != module:
        raise EpisodeError(f"agent {agent_id!r}: module_id {claimed!r} is not served")
    return module, RULES[module]


def obs_for(agent_id, value=0.0):
    return np.full(SIZES[MAPPING.module_for(agent_id)], value, np.float32)


def extra():
    return {"action_logp": np.float32(-0.5), "action_dist_inputs": np.zeros(3, np.float32)}


def tick(builder, rewards, obs_ids, terminateds=None, truncateds=None):
    """Every agent that may act acts 1; the agents in obs_ids report an observation."""
    acting = builder.acting_agents
    builder.step({a: 1 for a in acting}, rewards, {a: obs_for(a) for a in obs_ids}, terminateds, truncateds,
                 {a: extra() for a in acting})


def scripted_episode(builder):
    """Turn-based turners, a mover that joins at tick 2 and one that leaves at tick 3; 5 ticks, __all__ truncated."""
    builder.reset({"mover_0": obs_for("mover_0"), "turn_a": obs_for("turn_a")})
    tick(builder, {"mover_0": 1.0, "turn_a": 0.5}, ["mover_0", "turn_b"])           # turn_a waits for its turn
    tick(builder, {"mover_0": 1.0, "turn_a": 0.25, "turn_b": 1.0}, ["mover_0", "turn_a", "mover_1"])
    tick(builder, {"mover_0": 1.0, "mover_1": 2.0}, ["mover_0", "mover_1", "turn_b"], terminateds={"mover_0": True})
    tick(builder, {"mover_1": 2.0, "turn_a": 1.0}, ["mover_1", "turn_a"])
    tick(builder, {"mover_1": 2.0, "turn_b": 1.0}, ["mover_1", "turn_b"], truncateds={ALL: True})


def test_agent_mapping_first_match_wins_and_names_unknown_agents():
    mapping = AgentMapping([["red_*", "red"], ["*_boss", "boss"], ["*", "shared"]])
    assert mapping.module_for("red_boss") == "red" and mapping("blue_boss", None) == "boss"
    assert mapping.module_for("x") == "shared" and mapping.module_ids == {"red", "boss", "shared"}
    assert AgentMapping.from_wire(mapping.to_wire()) == mapping
    with pytest.raises(UnknownAgent, match="'green_3'"):
        AgentMapping([["red_*", "red"]]).module_for("green_3")
    for bad in ([], [["a"]], [["", "m"]], [[1, "m"]], "red_*"):
        with pytest.raises(InvalidMessage):
            AgentMapping.from_wire(bad)


def test_builder_turn_based_joining_and_leaving_agents_round_trip_through_the_check():
    builder = MultiAgentEpisodeBuilder(module_for=MAPPING.module_for)
    scripted_episode(builder)
    assert builder.num_env_steps == 5
    (chunk,) = [decode_body(encode_body_once(c)) for c in builder.take_chunks()]
    checked = check_multi_agent_state(chunk, rules, required_extra=("action_logp",))
    assert (checked.env_t_started, checked.env_t, checked.is_truncated) == (0, 5, True)
    agents = {a.agent_id: a for a in checked.agents}
    assert set(agents) == {"mover_0", "mover_1", "turn_a", "turn_b"}
    # turn-based: turn_a saw ticks 0, 2 and 4, its rewards summed over the ticks between; its last
    # action had no observation before __all__, so that step ends on its last one
    assert agents["turn_a"].env_t.tolist() == [0, 2, 4, 5]
    assert agents["turn_a"].state["rewards"]["data"].tolist() == [0.75, 1.0, 0.0]
    # mover_1 joined at tick 2; mover_0 left (terminated) at tick 3
    assert agents["mover_1"].env_t.tolist() == [2, 3, 4, 5]
    assert agents["mover_0"].state["is_terminated"] and agents["mover_0"].env_t.tolist() == [0, 1, 2, 3]
    assert all(a.state["is_truncated"] or a.state["is_terminated"] for a in checked.agents)
    assert {a.module_id for a in checked.agents} == {"mover", "turner"}
    assert checked.agent_steps == 3 + 3 + 3 + 2 == builder.agent_steps_total
    assert chunk_steps(chunk) == 5 and chunk_steps(chunk, "agent_steps") == 11


def test_builder_cuts_each_agent_at_its_latest_observation():
    builder = MultiAgentEpisodeBuilder(module_for=MAPPING.module_for, count_steps_by="agent_steps")
    builder.reset({"mover_0": obs_for("mover_0"), "turn_a": obs_for("turn_a")})
    tick(builder, {"mover_0": 1.0, "turn_a": 0.5}, ["mover_0"])   # turn_a's action is still out
    assert builder.num_steps == 1
    first = builder.take_chunks()
    assert [a for a, _ in first[0]["agent_episodes"]] == ["mover_0"]
    tick(builder, {"mover_0": 1.0, "turn_a": 0.5}, ["mover_0", "turn_a"])
    (second,) = builder.take_chunks()
    checked = check_multi_agent_state(second, rules)
    turn_a = next(a for a in checked.agents if a.agent_id == "turn_a")
    assert (checked.env_t_started, checked.env_t) == (1, 2)
    assert turn_a.state["rewards"]["data"].tolist() == [1.0] and turn_a.env_t.tolist() == [0, 2]
    mover = next(a for a in checked.agents if a.agent_id == "mover_0")
    assert (mover.state["t_started"], mover.state["t"]) == (1, 2) and mover.state["id_"] == first[0][
        "agent_episodes"][0][1]["id_"]


def test_builder_refuses_what_breaks_the_rules():
    builder = MultiAgentEpisodeBuilder(module_for=MAPPING.module_for)
    with pytest.raises(RuntimeError):
        tick(builder, {}, [])
    builder.reset({"mover_0": obs_for("mover_0")})
    with pytest.raises(ValueError, match="missing"):
        builder.step({}, {}, {})
    with pytest.raises(ValueError, match="finite"):
        builder.step({"mover_0": 1}, {"mover_0": float("nan")}, {})
    builder.reset({"mover_0": obs_for("mover_0")})
    tick(builder, {}, ["mover_0"], terminateds={"mover_0": True})
    builder.take_chunks()
    with pytest.raises(ValueError, match="may not come back"):
        tick(builder, {}, ["mover_0"])


def test_rllibs_own_multi_agent_episode_state_is_accepted():
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    episode = MultiAgentEpisode()
    o2, o3 = obs_for("mover_0"), obs_for("turn_a")
    episode.add_env_reset(observations={"mover_0": o2, "turn_a": o3})
    episode.add_env_step(observations={"mover_0": o2}, actions={"mover_0": 0, "turn_a": 1},
                         rewards={"mover_0": 1.0, "turn_a": 0.5},
                         extra_model_outputs={"mover_0": {"action_logp": -0.1}, "turn_a": {"action_logp": -0.2}})
    episode.add_env_step(observations={"mover_0": o2, "turn_a": o3}, actions={"mover_0": 2},
                         rewards={"mover_0": 1.0, "turn_a": 0.5}, extra_model_outputs={"mover_0": {"action_logp": -0.1}},
                         terminateds={ALL: True})
    episode.to_numpy()
    state = episode.get_state()
    # What a sane RLlib-side sender puts on the wire: buffers as their states, no Python objects.
    state["env_t_to_agent_t"] = {a: b.get_state() for a, b in state["env_t_to_agent_t"].items()}
    state["agent_to_module_mapping_fn"] = None
    state["_agent_to_module_mapping"] = {}
    state["agent_episodes"] = [[a, s] for a, s in state["agent_episodes"]]
    for _, sa in state["agent_episodes"]:
        sa["module_id"] = None
    wire = decode_body(encode_body_once(state))
    checked = check_multi_agent_state(wire, rules, required_extra=("action_logp",))
    agents = {a.agent_id: a for a in checked.agents}
    assert checked.env_steps == 2 and checked.is_terminated
    assert agents["turn_a"].env_t.tolist() == [0, 2] and agents["turn_a"].state["rewards"]["data"].tolist() == [1.0]


def _chunk():
    builder = MultiAgentEpisodeBuilder(module_for=MAPPING.module_for)
    scripted_episode(builder)
    return decode_body(encode_body_once(builder.take_chunks()[0]))


def _agent_state(chunk, agent_id):
    return next(s for a, s in chunk["agent_episodes"] if a == agent_id)


@pytest.mark.parametrize("spoil, message", [
    (lambda c: c["agent_episodes"].append(["robot_7", dict(_agent_state(c, "mover_0"), agent_id=None)]),
     "'robot_7'.*no pattern"),
    (lambda c: _agent_state(c, "turn_a")["actions"].update(data=np.zeros(5, np.int64)),
     "agent 'turn_a'.*actions: 5 entries"),
    (lambda c: _agent_state(c, "mover_1").update(module_id="sniper"), "agent 'mover_1'.*'sniper' is not served"),
    (lambda c: _agent_state(c, "turn_b")["observations"].update(data=np.zeros((3, 2), np.float32)),
     "agent 'turn_b'.*observations.*shape"),
    (lambda c: c["agent_env_t"].update(mover_1=np.array([2, 3, 3, 5])), "'mover_1'.*strictly increase"),
    (lambda c: c.update(env_t=3), "step ticks must lie in"),
    (lambda c: _agent_state(c, "turn_a").update(is_truncated=False, is_terminated=False), "'turn_a'.*__all__"),
    (lambda c: c.update(_hanging_actions_end={"mover_1": 1}), "_hanging_actions_end"),
    (lambda c: c["agent_env_t"].pop("turn_b"), "'turn_b'.*missing"),
    (lambda c: c.update(agent_episodes="nope"), "agent_episodes"),
])
def test_hostile_chunks_are_refused_naming_agent_and_field(spoil, message):
    chunk = _chunk()
    spoil(chunk)
    with pytest.raises(InvalidMessage, match=message):
        check_multi_agent_state(chunk, rules)


def test_multi_agent_config_and_weight_set_forms():
    description = {"multi_agent": {
        "modules": {"mover": {"observation_space": {"kind": "discrete", "n": 4, "start": 0},
                              "action_space": {"kind": "discrete", "n": 3, "start": 0}, "trained": False}},
        "agent_mapping": [["*", "mover"]], "count_steps_by": "agent_steps"}}
    config = read_multi_agent_config(decode_body(encode_body_once(description)))
    assert config.mapping.module_for("anyone") == "mover" and not config.modules["mover"].trained
    assert config.count_steps_by == "agent_steps" and read_multi_agent_config({}) is None
    with pytest.raises(InvalidMessage):
        read_multi_agent_config({"multi_agent": {"modules": {}}})
    params, seq = read_module_states({"rl_module": {"a": {"w": np.zeros(2, np.float32)}, "b": {}}, "weights_seq_no": 3})
    assert set(params) == {"a", "b"} and seq == 3
    with pytest.raises(WeightsError):
        read_module_states({"rl_module": {"a": {"w": "x"}}, "weights_seq_no": 3})


def _vector_messages(name):
    from pathlib import Path

    from rlinks_rllib.protocol.framing import FrameDecoder

    decoder = FrameDecoder()
    data = (Path(__file__).parent / "vectors" / f"{name}.bin").read_bytes()
    return decoder.feed(data)


def test_the_vectors_two_forms_of_one_chunk_check_the_same():
    vector_rules = {"seeker": dict(obs_shape=(2,), obs_dtype=np.dtype(np.float32), num_actions=3),
                    "signal": dict(obs_shape=(3,), obs_dtype=np.dtype(np.float32), num_actions=3)}
    mapping = AgentMapping([["seeker_*", "seeker"], ["signal_*", "signal"]])

    def check(name):
        (message,) = _vector_messages(name)
        (chunk,) = message["episodes"]
        return check_multi_agent_state(chunk, lambda a, m: (mapping.module_for(a), vector_rules[mapping.module_for(a)]),
                                       required_extra=("action_logp", "action_dist_inputs"))

    compact, rllib = check("valid_episodes_multi_agent"), check("valid_episodes_multi_agent_rllib")
    for checked in (compact, rllib):
        assert (checked.env_steps, checked.agent_steps, checked.is_truncated) == (4, 4 + 2 + 2, True)
        assert {a.agent_id: a.env_t.tolist() for a in checked.agents} == {
            "seeker_0": [0, 1, 2, 3, 4], "signal_0": [0, 2, 4], "seeker_1": [2, 3, 4]}
    (config,) = _vector_messages("valid_set_config_multi_agent")
    ma = read_multi_agent_config(config["config"])
    assert ma.mapping == mapping and not ma.modules["signal"].trained
    (state,) = _vector_messages("valid_set_state_multi_agent")
    params, seq = read_module_states(state["state"])
    assert set(params) == {"seeker", "signal"} and seq == 3
