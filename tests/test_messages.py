"""Message types and their fields, errors, extension offers and the SET_CONFIG description."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

from rlinks_rllib.protocol import (
    ERROR_CODES,
    EXTENSIONS_VERSION,
    OLD_API_TYPES,
    DecodeError,
    Extension,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    InvalidMessage,
    MessageType,
    Offer,
    ProtocolError,
    UnsafePayload,
    UnsupportedMessage,
    encode_message,
    make_offer,
    negotiate,
    parse_offer,
    validate_message,
)
from rlinks_rllib.protocol import messages as msgs
from rlinks_rllib.protocol.codec import encode_body
from rlinks_rllib.protocol.config import CONFIG_VERSION, build_config, read_config
from rlinks_rllib.protocol.spaces import check_space, describe_space


def raw_frame(obj) -> bytes:
    """A frame around any value, numpy included, skipping the encoder's validation."""
    body = b"".join(encode_body(obj))
    return b"%08d" % len(body) + body


def round_trip(message: dict) -> dict:
    [back] = FrameDecoder().feed(encode_message(message))
    return back


EPISODE = {"id_": "e1", "observations": {"data": [np.zeros(4, np.float32)], "lookback": 0}}

#: One valid message per current type, with every optional field.
FULL = {
    MessageType.PING: {"type": "PING", "rlinks": make_offer(["ack"], agent="test")},
    MessageType.PONG: {"type": "PONG", "rlinks": make_offer([], agent="srv")},
    MessageType.GET_CONFIG: {"type": "GET_CONFIG"},
    MessageType.GET_STATE: {"type": "GET_STATE"},
    MessageType.SET_CONFIG: {"type": "SET_CONFIG", "config": b"\x80\x05pickle", "rlinks_config": {"version": 1}},
    MessageType.SET_STATE: {
        "type": "SET_STATE",
        "state": {"rl_module": {"pi.w": np.ones((2, 3), np.float32)}, "weights_seq_no": 3},
        "want_steps": 500,
    },
    MessageType.EPISODES: {"type": "EPISODES", "episodes": [EPISODE], "timesteps": 1, "seq": 0},
    MessageType.EPISODES_AND_GET_STATE: {"type": "EPISODES_AND_GET_STATE", "episodes": [], "timesteps": 0, "seq": 9},
    MessageType.ERROR: {"type": "ERROR", "code": "frame_too_large", "message": "too big"},
    MessageType.ACK: {"type": "ACK", "seq": 4},
    MessageType.AUTH: {"type": "AUTH", "proof": b"\x01" * 32},
    MessageType.AUTH_OK: {"type": "AUTH_OK", "proof": b"\x02" * 32},
    MessageType.GET_ENDPOINTS: {"type": "GET_ENDPOINTS"},
    MessageType.ENDPOINTS: {"type": "ENDPOINTS", "endpoints": [{"worker_index": 1, "host": "127.0.0.1", "port": 5556, "clients": 0}]},
    MessageType.ACT: {"type": "ACT", "env": [0, 1], "obs": np.zeros((2, 4), np.float32),
                      "reward": np.array([1.0, 0.0], np.float32), "start": np.array([False, True]),
                      "terminated": np.array([False, False]), "truncated": np.array([False, False])},
    MessageType.ACTIONS: {"type": "ACTIONS", "env": [0, 1], "actions": np.array([1, 0]), "weights_seq_no": 2},
    MessageType.GET_MODULES: {"type": "GET_MODULES", "agents": ["seeker_0", "signal_1"]},
    MessageType.MODULES: {"type": "MODULES", "modules": {"seeker_0": "seeker", "signal_1": "signal"}},
    MessageType.SAMPLES: {"type": "SAMPLES", "samples": [{"index": 0, "reward": 1.5}], "seq": 1},
}
CURRENT = [t for t in MessageType if t not in OLD_API_TYPES]


def test_every_current_type_has_a_case():
    assert set(FULL) == set(CURRENT)
    assert len(OLD_API_TYPES) == 10 and set(CURRENT) | OLD_API_TYPES == set(MessageType)


def test_names_match_rllibs_enum():
    from ray.rllib.env.external.rllink import RLlink

    rllib = {m.value for m in RLlink if isinstance(m.value, str)}
    ours = {t.value for t in MessageType}
    assert ours - rllib == {"ERROR", "ACK", "AUTH", "AUTH_OK", "GET_ENDPOINTS", "ENDPOINTS", "ACT", "ACTIONS",
                            "GET_MODULES", "MODULES", "SAMPLES"}
    assert rllib <= ours


@pytest.mark.parametrize("kind", CURRENT, ids=str)
def test_round_trip_every_type(kind):
    message = FULL[kind]
    back = round_trip(message)
    assert back.keys() == message.keys()
    if kind is MessageType.SET_STATE:
        np.testing.assert_array_equal(back["state"]["rl_module"]["pi.w"], message["state"]["rl_module"]["pi.w"])
    elif kind in (MessageType.EPISODES,):
        np.testing.assert_array_equal(back["episodes"][0]["observations"]["data"][0], np.zeros(4, np.float32))
    elif kind in (MessageType.ACT, MessageType.ACTIONS):
        for key, value in message.items():
            np.testing.assert_array_equal(back[key], value)
    else:
        assert back == message


@pytest.mark.parametrize("kind", CURRENT, ids=str)
def test_minimal_form_of_every_type(kind):
    required = msgs._REQUIRED[kind]
    message = {"type": kind.value, **{name: FULL[kind][name] for name in required}}
    assert validate_message(message) is message
    assert round_trip(message).keys() == message.keys()


@pytest.mark.parametrize("kind", CURRENT, ids=str)
def test_unknown_extra_keys_are_kept(kind):
    message = dict(FULL[kind], x_vendor={"anything": [1, 2.5, None, b"\x00"]}, zz=7)
    back = round_trip(message)
    assert back["x_vendor"] == {"anything": [1, 2.5, None, b"\x00"]} and back["zz"] == 7


def test_constructors():
    assert msgs.ping() == {"type": "PING"}
    assert msgs.ping({"version": 1}) == {"type": "PING", "rlinks": {"version": 1}}
    assert msgs.pong() == {"type": "PONG"}
    assert msgs.pong({"version": 1})["rlinks"] == {"version": 1}
    assert msgs.error("bad_frame", "oops") == {"type": "ERROR", "code": "bad_frame", "message": "oops"}
    assert msgs.ack(5) == {"type": "ACK", "seq": 5}
    for message in (msgs.ping(), msgs.pong(), msgs.error("x", "y"), msgs.ack(0)):
        validate_message(message)


def test_message_type_str_is_its_wire_name():
    assert str(MessageType.EPISODES_AND_GET_STATE) == "EPISODES_AND_GET_STATE"
    assert MessageType("PING") is MessageType.PING
    assert msgs.message_type({"type": "GET_STATE"}) is MessageType.GET_STATE


# --------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize("kind", sorted(OLD_API_TYPES), ids=str)
def test_old_api_types_refused_both_ways(kind):
    with pytest.raises(UnsupportedMessage, match="old API stack"):
        FrameDecoder().feed(raw_frame({"type": kind.value}))
    with pytest.raises(UnsupportedMessage):
        encode_message({"type": kind.value})
    with pytest.raises(UnsupportedMessage) as info:
        validate_message({"type": kind.value, "episode_id": "x"})
    assert info.value.code == "unsupported_message"


@pytest.mark.parametrize("name", ["FOO", "ping", "", "PING ", "x" * 10_000])
def test_unknown_types_refused(name):
    with pytest.raises(UnsupportedMessage) as info:
        FrameDecoder().feed(raw_frame({"type": name}))
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    "message",
    [{}, {"kind": "PING"}, {"type": 1}, {"type": None}, {"type": b"PING"}, {"type": ["PING"]}, [], "PING", 5, None],
    ids=repr,
)
def test_messages_without_a_str_type_refused(message):
    with pytest.raises(InvalidMessage) as info:
        FrameDecoder().feed(raw_frame(message))
    assert type(info.value) is InvalidMessage


REQUIRED_CASES = [(kind, name) for kind in CURRENT for name in msgs._REQUIRED[kind]]


@pytest.mark.parametrize("kind,name", REQUIRED_CASES, ids=lambda v: str(v))
def test_missing_required_field(kind, name):
    message = dict(FULL[kind])
    del message[name]
    with pytest.raises(InvalidMessage, match=f"missing required field '{name}'") as info:
        FrameDecoder().feed(raw_frame(message))
    assert type(info.value) is InvalidMessage
    with pytest.raises(InvalidMessage):
        encode_message(message)


WRONG_TYPES = [
    ("SET_CONFIG", "config", "text"),
    ("SET_CONFIG", "config", None),
    ("SET_CONFIG", "rlinks_config", []),
    ("SET_STATE", "state", []),
    ("SET_STATE", "state", b"\x80"),
    ("SET_STATE", "want_steps", True),
    ("SET_STATE", "want_steps", -1),
    ("SET_STATE", "want_steps", 1.0),
    ("EPISODES", "episodes", {}),
    ("EPISODES", "episodes", None),
    ("EPISODES", "episodes", [1]),
    ("EPISODES", "episodes", [[]]),
    ("EPISODES", "timesteps", "5"),
    ("EPISODES", "timesteps", False),
    ("EPISODES", "seq", -3),
    ("EPISODES_AND_GET_STATE", "episodes", [None]),
    ("EPISODES_AND_GET_STATE", "timesteps", 2.5),
    ("ERROR", "code", 5),
    ("ERROR", "message", None),
    ("ACK", "seq", "1"),
    ("ACK", "seq", True),
    ("ACK", "seq", -1),
    ("PING", "rlinks", "v1"),
    ("PONG", "rlinks", []),
]


@pytest.mark.parametrize("name,field,value", WRONG_TYPES, ids=repr)
def test_wrong_field_types(name, field, value):
    message = {**{k: v for k, v in FULL[MessageType(name)].items() if not isinstance(v, np.ndarray)}, field: value}
    if name == "SET_STATE":
        message.setdefault("state", {})
    with pytest.raises(InvalidMessage) as info:
        validate_message(message)
    assert type(info.value) is InvalidMessage


def test_numpy_ints_are_not_message_ints():
    # The wire has one int type; a numpy scalar arrives as an array map.
    with pytest.raises(InvalidMessage):
        validate_message({"type": "ACK", "seq": np.int64(1)})


# --------------------------------------------------------------------------
# Errors


ERROR_CLASSES = [ProtocolError, FrameError, FrameTooLarge, DecodeError, UnsafePayload, InvalidMessage,
                 UnsupportedMessage]


def test_error_hierarchy_and_codes():
    codes = [cls.code for cls in ERROR_CLASSES]
    assert len(set(codes)) == len(codes)
    assert set(codes) <= ERROR_CODES
    assert ERROR_CODES - set(codes) == {"auth_failed", "limit_exceeded", "bad_episode", "server_error", "shutting_down"}
    for cls in ERROR_CLASSES:
        assert issubclass(cls, ProtocolError)
    assert issubclass(FrameTooLarge, FrameError)
    assert issubclass(UnsafePayload, DecodeError)
    assert issubclass(UnsupportedMessage, InvalidMessage)
    for code in ERROR_CODES:
        assert code.isascii() and code == code.lower() and " " not in code


# --------------------------------------------------------------------------
# Extension offers


def test_offer_round_trip_through_ping():
    offer = make_offer([Extension.WANT_STEPS, "ack", "ack", "x-future"], agent="sim/1.0", build="abc")
    assert offer == {"version": EXTENSIONS_VERSION, "extensions": ["ack", "want_steps", "x-future"],
                     "agent": "sim/1.0", "build": "abc"}
    parsed = parse_offer(round_trip(msgs.ping(offer)))
    assert parsed == Offer(version=1, extensions=frozenset({"ack", "want_steps", "x-future"}), agent="sim/1.0",
                           extra={"build": "abc"})
    assert negotiate(parsed, [Extension.WANT_STEPS]) == {"want_steps"}
    assert negotiate(parsed, ["ack", "want_steps"]) == {"ack", "want_steps"}


def test_plain_rllink_peer_has_no_offer():
    assert parse_offer({"type": "PING"}) is None
    assert negotiate(None, list(Extension)) == frozenset()


def test_minimal_offer():
    assert parse_offer({"type": "PONG", "rlinks": {"version": 1}}) == Offer(version=1)
    assert make_offer([]) == {"version": 1, "extensions": []}


def test_extension_names():
    assert {e.value for e in Extension} == {"want_steps", "ack", "auth", "endpoints", "served_actions", "served_taken",
                                             "policy_graph", "multi_agent", "takeover", "timestep", "samples",
                                             "weights_notice"}


@pytest.mark.parametrize(
    "raw",
    [
        [],
        {},
        {"version": 0},
        {"version": "1"},
        {"version": True},
        {"version": 1, "extensions": "ack"},
        {"version": 1, "extensions": ["ack", 1]},
        {"version": 1, "extensions": [""]},
        {"version": 1, "extensions": ["x" * 65]},
        {"version": 1, "extensions": ["e%d" % i for i in range(65)]},
        {"version": 1, "agent": 5},
    ],
    ids=repr,
)
def test_malformed_offers_refused(raw):
    with pytest.raises(InvalidMessage):
        parse_offer({"type": "PING", "rlinks": raw})


def test_long_agent_is_cut():
    assert len(parse_offer({"rlinks": {"version": 1, "agent": "a" * 1000}}).agent) == 128


# --------------------------------------------------------------------------
# SET_CONFIG: the msgpack description and RLlib's pickle


def cartpole_config(**extra) -> dict:
    return build_config(
        algorithm="PPO",
        observation_space=describe_space(gym.spaces.Box(-1.0, 1.0, (4,), np.float32)),
        action_space=describe_space(gym.spaces.Discrete(2)),
        rollout_fragment_length=500,
        on_policy=True,
        model_config={"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh"},
        weights_layout={"pi.net.mlp.0.weight": (2, 256)},
        **extra,
    )


def test_config_description_round_trip():
    config = cartpole_config(gamma=0.99)
    assert config["version"] == CONFIG_VERSION
    back = round_trip({"type": "SET_CONFIG", "config": config})
    described = read_config(back)
    assert described["algorithm"] == "PPO" and described["on_policy"] is True and described["gamma"] == 0.99
    assert described["weights_layout"] == {"pi.net.mlp.0.weight": [2, 256]}
    box = described["observation_space"]
    assert box["kind"] == "box" and box["shape"] == [4] and box["dtype"] == "<f4"
    np.testing.assert_array_equal(box["low"], -np.ones(4, np.float32))
    assert described["action_space"] == {"kind": "discrete", "n": 2, "start": 0}


def test_config_next_to_rllibs_pickle():
    # unsafe_pickle_config: RLlib's pickle in "config", our map in "rlinks_config".
    message = {"type": "SET_CONFIG", "config": pickle.dumps({"harmless": 1}), "rlinks_config": cartpole_config()}
    back = round_trip(message)
    assert isinstance(back["config"], bytes)
    assert read_config(back)["algorithm"] == "PPO"
    assert read_config({"type": "SET_CONFIG", "config": b"\x80\x05."}) is None


@pytest.mark.parametrize(
    "change",
    [
        {"algorithm": 1},
        {"rollout_fragment_length": "500"},
        {"on_policy": 1},
        {"model_config": []},
        {"observation_space": {"kind": "graph"}},
        {"action_space": None},
    ],
    ids=repr,
)
def test_malformed_config_refused(change):
    with pytest.raises(InvalidMessage):
        read_config({"type": "SET_CONFIG", "config": {**cartpole_config(), **change}})
    with pytest.raises(InvalidMessage):
        read_config({"type": "SET_CONFIG", "config": b"", "rlinks_config": []})


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Discrete(5, start=-2),
        gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
        gym.spaces.Box(np.array([-1.0, -2.0]), np.array([1.0, 2.0]), dtype=np.float64),
        gym.spaces.MultiDiscrete([3, 4]),
    ],
    ids=lambda s: type(s).__name__,
)
def test_spaces_round_trip(space):
    desc = round_trip({"type": "SET_CONFIG", "config": {"space": describe_space(space)}})["config"]["space"]
    assert check_space(desc) is desc


def test_unsupported_space_kinds():
    with pytest.raises(TypeError):
        describe_space(gym.spaces.Text(4))


@pytest.mark.parametrize(
    "desc",
    [
        None,
        {"kind": "discrete", "n": 0},
        {"kind": "discrete", "n": True},
        {"kind": "discrete", "n": 2, "start": 0.5},
        {"kind": "box", "shape": [-1], "dtype": "<f4", "low": np.zeros(1), "high": np.zeros(1)},
        {"kind": "box", "shape": [2], "dtype": "nope", "low": np.zeros(2), "high": np.zeros(2)},
        {"kind": "box", "shape": [2], "dtype": "(2,)|01", "low": np.zeros(2), "high": np.zeros(2)},
        {"kind": "box", "shape": [2], "dtype": "<f4", "low": [0, 0], "high": np.zeros(2)},
        {"kind": "box", "shape": [2], "dtype": "<f4", "low": np.zeros(3), "high": np.zeros(2)},
        {"kind": "multi_discrete", "nvec": [2, 3]},
    ],
    ids=repr,
)
def test_malformed_spaces_refused(desc):
    with pytest.raises(InvalidMessage):
        check_space(desc)
