"""The wire form of spaces: nested descriptions, their limits, and values held against them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlinks_rllib.protocol.codec import decode_body, encode_body
from rlinks_rllib.protocol.errors import InvalidMessage
from rlinks_rllib.protocol.spaces import (
    MAX_KEY_BYTES,
    MAX_SPACE_DEPTH,
    MAX_SPACE_LEAVES,
    SpaceMismatch,
    check_column,
    check_space,
    check_value,
    describe_space,
    format_path,
    leaves,
)

ROBOT = gym.spaces.Dict(
    {
        "camera": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
        "joints": gym.spaces.Box(-np.pi, np.pi, (6,), np.float32),
        "sensors": gym.spaces.Tuple((gym.spaces.MultiBinary(4), gym.spaces.Discrete(3, start=1))),
        "gears": gym.spaces.MultiDiscrete([2, 5]),
    }
)


def wire(space):
    """A description as a peer receives it: through the codec."""
    return decode_body(b"".join(encode_body({"space": describe_space(space)})))["space"]


def robot_value(rng, space=ROBOT):
    space.seed(int(rng.integers(1 << 30)))
    return space.sample()


def test_nested_space_round_trips_through_the_codec():
    desc = check_space(wire(ROBOT))
    assert desc["kind"] == "dict"
    # gymnasium sorts a Dict's keys; the description keeps that order, which is the leaf order.
    assert list(desc["spaces"]) == ["camera", "gears", "joints", "sensors"]
    assert [path for path, _ in leaves(desc)] == [("camera",), ("gears",), ("joints",), ("sensors", 0), ("sensors", 1)]
    assert desc["spaces"]["sensors"]["spaces"][0] == {"kind": "multi_binary", "shape": [4]}
    # Uniform bounds travel as one number, not one per pixel.
    assert desc["spaces"]["camera"]["low"].shape == ()
    assert desc["spaces"]["camera"]["dtype"] == "|u1"


def test_sampled_values_fit_and_come_back_in_the_space_dtypes():
    desc = wire(ROBOT)
    rng = np.random.default_rng(0)
    for _ in range(20):
        checked = check_value(desc, robot_value(rng))
        assert checked["camera"].dtype == np.uint8
        assert checked["sensors"][1].dtype == np.int64


def test_stacked_column_checks_every_leaf_once():
    desc = wire(ROBOT)
    rng = np.random.default_rng(1)
    steps = [robot_value(rng) for _ in range(5)]
    column = {
        "camera": np.stack([s["camera"] for s in steps]),
        "gears": np.stack([s["gears"] for s in steps]),
        "joints": np.stack([s["joints"] for s in steps]),
        "sensors": [np.stack([s["sensors"][0] for s in steps]), np.array([s["sensors"][1] for s in steps])],
    }
    checked = check_column(desc, column, 5)
    assert checked["camera"].shape == (5, 8, 8, 3)
    with pytest.raises(SpaceMismatch, match=r"observations\['camera'\]: shape \[5, 8, 8, 3\], expected \[4, 8, 8, 3\]"):
        check_column(desc, column, 4)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda v: v.pop("joints"), r"observation\['joints'\]: missing key"),
        (lambda v: v.update(extra=np.zeros(1)), r"observation\['extra'\]: unexpected key"),
        (lambda v: v.update(camera=v["camera"].astype(np.float32)), r"\['camera'\]: dtype <f4 does not cast to the space's \|u1"),
        (lambda v: v.update(camera=v["camera"][:4]), r"\['camera'\]: shape \[4, 8, 3\], expected \[8, 8, 3\]"),
        (lambda v: v["joints"].__setitem__(2, np.nan), r"\['joints'\]: NaN or infinity"),
        (lambda v: v.update(sensors=(v["sensors"][0],)), r"\['sensors'\]: expected a list of 2 entries"),
        (lambda v: v.update(sensors=(np.array([0, 2, 0, 1]), 1)), r"\['sensors'\]\[0\]: value out of"),
        (lambda v: v.update(sensors=(v["sensors"][0], 0)), r"\['sensors'\]\[1\]: value out of the discrete"),
        (lambda v: v.update(gears=np.array([1.0, 2.0])), r"\['gears'\]: dtype <f8: multi_discrete values are integers"),
        (lambda v: v.update(gears="fast"), r"\['gears'\]: expected an array or number, got str"),
    ],
    ids=["missing", "extra", "dtype", "shape", "nan", "tuple-length", "binary-range", "discrete-start", "float-int", "str"],
)
def test_a_bad_value_is_named_by_its_key_path(change, message):
    desc = wire(ROBOT)
    value = robot_value(np.random.default_rng(2))
    change(value)
    with pytest.raises(SpaceMismatch, match=message) as info:
        check_value(desc, value)
    assert isinstance(info.value, InvalidMessage)


def test_a_box_accepts_values_that_cast_in_kind():
    desc = wire(gym.spaces.Box(-1, 1, (3,), np.float32))
    assert check_value(desc, [0.5, 0, -1]).dtype == np.float32
    assert check_value(desc, np.zeros(3, np.float64)).dtype == np.float32


def nest(depth):
    space = gym.spaces.Discrete(2)
    for _ in range(depth - 1):
        space = gym.spaces.Tuple((space,))
    return space


def test_limits_hold_on_both_sides():
    check_space(describe_space(nest(MAX_SPACE_DEPTH)))
    with pytest.raises(TypeError, match="nest deeper"):
        describe_space(nest(MAX_SPACE_DEPTH + 1))
    wide = {"kind": "tuple", "spaces": [{"kind": "discrete", "n": 2}] * (MAX_SPACE_LEAVES + 1)}
    with pytest.raises(InvalidMessage, match=f"more than {MAX_SPACE_LEAVES} leaf spaces"):
        check_space(wide)
    deep = {"kind": "discrete", "n": 2}
    for _ in range(1000):
        deep = {"kind": "dict", "spaces": {"a": deep}}
    with pytest.raises(InvalidMessage, match=r"space\['a'\]\['a'\].*nest deeper"):
        check_space(deep)


@pytest.mark.parametrize(
    "desc, message",
    [
        ({"kind": "dict", "spaces": {}}, "non-empty map"),
        ({"kind": "dict", "spaces": {"": {"kind": "discrete", "n": 2}}}, "non-empty strings"),
        ({"kind": "dict", "spaces": {"k" * (MAX_KEY_BYTES + 1): {"kind": "discrete", "n": 2}}}, "at most"),
        ({"kind": "dict", "spaces": {1: {"kind": "discrete", "n": 2}}}, "non-empty strings"),
        ({"kind": "dict", "spaces": {"a": {"kind": "discrete", "n": 0}}}, r"space\['a'\]: discrete"),
        ({"kind": "tuple", "spaces": []}, "non-empty list"),
        ({"kind": "tuple", "spaces": [None]}, r"space\[0\]: a space description must be a map"),
        ({"kind": "multi_binary", "shape": 4}, "multi_binary space needs 'shape'"),
        ({"kind": "multi_discrete", "nvec": np.array([2, 0])}, "positive counts"),
        ({"kind": "multi_discrete", "nvec": np.array([2.0])}, "int array"),
        ({"kind": "box", "shape": [1], "dtype": "<c8", "low": np.zeros(1), "high": np.zeros(1)}, "plain bool, int or float"),
        ({"kind": "box", "shape": [1], "dtype": "<M8[s]", "low": np.zeros(1), "high": np.zeros(1)}, "plain bool"),
    ],
)
def test_malformed_nested_descriptions_are_refused_with_their_path(desc, message):
    with pytest.raises(InvalidMessage, match=message):
        check_space(desc)


@pytest.mark.parametrize("space", [gym.spaces.Text(5), gym.spaces.Sequence(gym.spaces.Discrete(2))])
def test_spaces_without_a_wire_form(space):
    with pytest.raises(TypeError, match="cannot describe"):
        describe_space(space)


def test_format_path():
    assert format_path(()) == ""
    assert format_path(("camera", 0)) == "['camera'][0]"


ROBOT_YAML = """\
algorithm: PPO
spaces:
  observation:
    dict:
      camera: {box: {low: 0, high: 255, shape: [8, 8, 3], dtype: uint8}}
      joints: {box: {low: -3.2, high: 3.2, shape: [6]}}
      sensors:
        tuple: [{multi_binary: 4}, {discrete: 3}]
  action: {multi_binary: [2, 2]}
"""


def test_yaml_names_nested_spaces(tmp_path):
    from rlinks_rllib.training.config_file import load_spec, resolve_spaces

    path = tmp_path / "robot.yaml"
    path.write_text(ROBOT_YAML)
    observation, action = resolve_spaces(load_spec(path))
    assert isinstance(observation, gym.spaces.Dict) and observation["camera"].dtype == np.uint8
    assert isinstance(observation["sensors"][0], gym.spaces.MultiBinary)
    assert action.shape == (2, 2)
    assert [p for p, _ in leaves(describe_space(observation))][-1] == ("sensors", 1)


@pytest.mark.parametrize(
    "observation, message",
    [
        ("{dict: {camera: {box: {low: 0, high: 1, shape: [2], dtype: complex64}}}}", r"\['camera'\]: bad box space"),
        ("{tuple: [{discrete: 2}, {spiral: 3}]}", r"observation\[1\]: unknown space kind 'spiral'"),
        ("{dict: {}}", "a dict space maps keys to spaces"),
        ("{tuple: [" * (MAX_SPACE_DEPTH + 1) + "{discrete: 2}" + "]}" * (MAX_SPACE_DEPTH + 1), "nest deeper"),
    ],
)
def test_yaml_space_errors_name_the_key_path(tmp_path, observation, message):
    from rlinks_rllib.training.config_file import ConfigFileError, load_spec, resolve_spaces

    path = tmp_path / "bad.yaml"
    path.write_text(f"algorithm: PPO\nspaces:\n  observation: {observation}\n  action: {{discrete: 2}}\n")
    with pytest.raises(ConfigFileError, match=message):
        resolve_spaces(load_spec(path))


def test_the_nested_spaces_vector_is_a_valid_config():
    from pathlib import Path

    from rlinks_rllib.protocol.config import read_config
    from rlinks_rllib.protocol.framing import FrameDecoder

    raw = (Path(__file__).parent / "vectors" / "valid_set_config_nested_spaces.bin").read_bytes()
    [message] = FrameDecoder().feed(raw)
    config = read_config(message)
    observation = config["observation_space"]
    assert [path for path, _ in leaves(observation)] == [("camera",), ("joints",), ("sensors", 0), ("sensors", 1)]
    check_value(observation, {"camera": np.zeros((4, 4, 3), np.uint8), "joints": [0.0, 1.5], "sensors": [[0, 1, 1], 3]})
