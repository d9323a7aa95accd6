"""Interop with RLlib's own RLlink helpers over a real socket, both directions.

RLlib's side is ``ray.rllib.env.external.rllink.send_rllink_message`` /
``get_rllink_message`` (what its ``EnvRunnerServerForExternalInference`` and
its dummy external client use); ours is :func:`encode_message` and
:class:`FrameDecoder`. The payloads are real: a PPO RLModule's weights and
``SingleAgentEpisode`` states built with ``add_env_step`` the way RLlib's dummy
client builds them.
"""

from __future__ import annotations

import copy
import pickle
import socket
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns
from ray.rllib.env.external.rllink import RLlink, get_rllink_message, send_rllink_message
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rlinks_rllib.protocol import FrameDecoder, encode_message, encode_message_parts

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT_SPACE = gym.spaces.Discrete(2)
TIMEOUT_S = 30.0


# --------------------------------------------------------------------------
# Transport helpers


@pytest.fixture
def pair():
    left, right = socket.socketpair()
    left.settimeout(TIMEOUT_S)
    right.settimeout(TIMEOUT_S)
    yield left, right
    left.close()
    right.close()


def in_thread(target, *args) -> threading.Thread:
    """Run a send in the background so a large frame can't fill the socket buffers and block us."""
    errors: list[BaseException] = []

    def run():
        try:
            target(*args)
        except BaseException as exc:  # re-raised in the test thread by join()
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.errors = errors
    thread.start()
    return thread


def join(thread: threading.Thread) -> None:
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), "sender did not finish"
    if thread.errors:
        raise thread.errors[0]


def send_parts(sock: socket.socket, parts: list) -> None:
    """Write a frame from its buffers with ``sendmsg``, as our I/O layers do."""
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


def send_ours(sock: socket.socket, message: dict) -> None:
    send_parts(sock, encode_message_parts(message))


def recv_ours(sock: socket.socket, decoder: FrameDecoder | None = None) -> dict:
    """Read exactly one message the way our I/O layers do (small reads, then recv_into the body)."""
    decoder = decoder or FrameDecoder()
    while True:
        view = decoder.next_read_buffer()
        if view is not None:
            n = sock.recv_into(view)
            del view
            if n == 0:
                decoder.eof()
            messages = decoder.advance(n)
        else:
            # Never read past the header: the next frame isn't ours to take.
            data = sock.recv(8 - decoder.buffered_bytes if decoder.expected_bytes is None else 1)
            if not data:
                decoder.eof()
                raise ConnectionError("closed between frames")
            messages = decoder.feed(data)
        if messages:
            [message] = messages
            return message


def rllib_to_ours(pair, message: dict) -> dict:
    left, right = pair
    thread = in_thread(send_rllink_message, left, message)
    got = recv_ours(right)
    join(thread)
    return got


def ours_to_rllib(pair, message: dict) -> tuple[RLlink, dict]:
    left, right = pair
    thread = in_thread(send_ours, left, message)
    got = get_rllink_message(right)
    join(thread)
    return got


def rllib_frame(pair, message: dict) -> bytes:
    """The exact bytes RLlib's ``send_rllink_message`` puts on the wire."""
    left, right = pair
    thread = in_thread(send_rllink_message, left, message)
    header = b""
    while len(header) < 8:
        header += right.recv(8 - len(header))
    body = bytearray()
    while len(body) < int(header):
        body += right.recv(int(header) - len(body))
    join(thread)
    return header + bytes(body)


# --------------------------------------------------------------------------
# Real payloads


def build_module(seed: int):
    torch.manual_seed(seed)
    return PPOConfig().environment(observation_space=OBS_SPACE, action_space=ACT_SPACE).get_rl_module_spec().build()


@pytest.fixture(scope="module")
def weights():
    return {"rl_module": build_module(0).get_state(inference_only=True), "weights_seq_no": 3}


def logits(module, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: torch.from_numpy(obs)})
    return out[Columns.ACTION_DIST_INPUTS].numpy()


def collect_episodes(steps: int, seed: int = 0, spaces: bool = False) -> list[SingleAgentEpisode]:
    """CartPole episodes as RLlib's dummy external client makes them, cut after ``steps`` env steps."""
    rng = np.random.default_rng(seed)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    kwargs = {"observation_space": OBS_SPACE, "action_space": ACT_SPACE} if spaces else {}
    episode = SingleAgentEpisode(observations=[obs], **kwargs)
    episodes = [episode]
    for step in range(steps):
        action_logits = rng.standard_normal(2).astype(np.float32)
        probs = np.exp(action_logits) / np.exp(action_logits).sum()
        action = int(rng.choice(2, p=probs))
        obs, reward, terminated, truncated, _ = env.step(action)
        episode.add_env_step(
            action=action,
            reward=reward,
            observation=obs,
            terminated=terminated,
            truncated=truncated,
            extra_model_outputs={
                Columns.ACTION_DIST_INPUTS: action_logits,
                Columns.ACTION_LOGP: float(np.log(probs[action])),
            },
        )
        if episode.is_done and step < steps - 1:
            obs, _ = env.reset()
            episode = SingleAgentEpisode(observations=[obs], **kwargs)
            episodes.append(episode)
    env.close()
    assert sum(map(len, episodes)) == steps
    assert any(e.is_done for e in episodes)
    return episodes


def assert_same_episode(got: SingleAgentEpisode, want: SingleAgentEpisode) -> None:
    assert got.id_ == want.id_
    assert len(got) == len(want)
    assert (got.t_started, got.t, got.is_terminated, got.is_truncated) == (
        want.t_started,
        want.t,
        want.is_terminated,
        want.is_truncated,
    )
    np.testing.assert_array_equal(np.asarray(got.get_observations()), np.asarray(want.get_observations()))
    np.testing.assert_array_equal(np.asarray(got.get_actions()), np.asarray(want.get_actions()))
    np.testing.assert_array_equal(np.asarray(got.get_rewards()), np.asarray(want.get_rewards()))
    for key in (Columns.ACTION_DIST_INPUTS, Columns.ACTION_LOGP):
        np.testing.assert_array_equal(
            np.asarray(got.get_extra_model_outputs(key)), np.asarray(want.get_extra_model_outputs(key))
        )


# --------------------------------------------------------------------------
# Handshake and config


def test_ping_pong(pair):
    assert rllib_to_ours(pair, {"type": RLlink.PING.name}) == {"type": "PING"}
    assert ours_to_rllib(pair, {"type": "PONG"}) == (RLlink.PONG, {})
    # Our extension offer is an extra key RLlib's side passes over.
    assert ours_to_rllib(pair, {"type": "PING", "rlinks": {"version": 1, "extensions": ["ack"]}}) == (
        RLlink.PING,
        {"rlinks": {"version": 1, "extensions": ["ack"]}},
    )


def test_get_config_and_rllibs_pickled_config(pair):
    assert rllib_to_ours(pair, {"type": RLlink.GET_CONFIG.name}) == {"type": "GET_CONFIG"}
    config = PPOConfig().environment(observation_space=OBS_SPACE, action_space=ACT_SPACE)
    blob = pickle.dumps(config)
    got = rllib_to_ours(pair, {"type": RLlink.SET_CONFIG.name, "config": blob})
    # Carried as opaque bytes; nothing on our side unpickles it.
    assert got == {"type": "SET_CONFIG", "config": blob}


def test_our_config_description_reaches_rllib(pair):
    description = {"version": 1, "algorithm": "PPO", "rollout_fragment_length": 200, "on_policy": True,
                   "model_config": {}, "observation_space": {"kind": "discrete", "n": 3, "start": 0}}
    kind, body = ours_to_rllib(pair, {"type": "SET_CONFIG", "config": description})
    assert kind is RLlink.SET_CONFIG and body == {"config": description}


# --------------------------------------------------------------------------
# Weights


def test_set_state_from_rllib(pair, weights):
    message = {"type": RLlink.SET_STATE.name, "state": weights}
    got = rllib_to_ours(pair, message)
    assert got["state"]["weights_seq_no"] == 3
    params = got["state"]["rl_module"]
    assert params.keys() == weights["rl_module"].keys()
    for name, value in weights["rl_module"].items():
        assert params[name].dtype == value.dtype and params[name].shape == value.shape
        np.testing.assert_array_equal(params[name], value)
        assert not params[name].flags.writeable
    # What RLlib's dummy client does with it: load into a module of its own.
    module = build_module(1)
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    assert not np.allclose(logits(module, obs), logits(build_module(0), obs))
    module.set_state(params)
    np.testing.assert_array_equal(logits(module, obs), logits(build_module(0), obs))


def test_set_state_to_rllib(pair, weights):
    kind, body = ours_to_rllib(pair, {"type": "SET_STATE", "state": weights})
    assert kind is RLlink.SET_STATE and body["state"]["weights_seq_no"] == 3
    module = build_module(2)
    module.set_state(body["state"]["rl_module"])
    obs = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(logits(module, obs), logits(build_module(0), obs))


def test_weights_frame_is_byte_identical_to_rllibs(pair, weights):
    message = {"type": "SET_STATE", "state": weights}
    assert encode_message(message) == rllib_frame(pair, message)


# --------------------------------------------------------------------------
# Episodes


@pytest.mark.parametrize("kind", ["EPISODES", "EPISODES_AND_GET_STATE"])
def test_episodes_from_rllibs_client(pair, kind):
    episodes = collect_episodes(300)
    states = [e.get_state() for e in episodes]
    got = rllib_to_ours(pair, {"type": kind, "episodes": states, "timesteps": 300})
    assert got["type"] == kind and got["timesteps"] == 300
    assert len(got["episodes"]) == len(episodes)
    for state, episode in zip(got["episodes"], episodes):
        assert state.keys() == episode.get_state().keys()
        # What RLlib's EnvRunnerServerForExternalInference does with each state.
        rebuilt = SingleAgentEpisode.from_state(state).to_numpy()
        assert_same_episode(rebuilt, episode)


def test_episodes_to_rllibs_server(pair):
    episodes = collect_episodes(300, seed=1)
    kind, body = ours_to_rllib(
        pair, {"type": "EPISODES_AND_GET_STATE", "episodes": [e.get_state() for e in episodes], "timesteps": 300}
    )
    assert kind is RLlink.EPISODES_AND_GET_STATE and body["timesteps"] == 300
    for state, episode in zip(body["episodes"], episodes):
        assert_same_episode(SingleAgentEpisode.from_state(state).to_numpy(), episode)


def test_what_we_decode_we_can_forward(pair):
    """A state decoded by us (read-only arrays) re-encodes to the same bytes and still works in RLlib."""
    episodes = collect_episodes(100, seed=2)
    message = {"type": "EPISODES", "episodes": [e.get_state() for e in episodes]}
    decoded = rllib_to_ours(pair, message)
    assert encode_message(decoded) == encode_message(message)
    kind, body = ours_to_rllib(pair, decoded)
    for state, episode in zip(body["episodes"], episodes):
        assert_same_episode(SingleAgentEpisode.from_state(state).to_numpy(), episode)


def test_stacked_episodes_both_ways(pair):
    """The finalized form: one stacked array per column per chunk."""
    episodes = collect_episodes(200, seed=3)
    stacked = [copy.deepcopy(e).to_numpy().get_state() for e in episodes]
    assert isinstance(stacked[0]["observations"]["data"], np.ndarray) and stacked[0]["observations"]["finalized"]
    got = rllib_to_ours(pair, {"type": "EPISODES", "episodes": stacked})
    for state, episode in zip(got["episodes"], episodes):
        assert isinstance(state["observations"]["data"], np.ndarray)
        assert_same_episode(SingleAgentEpisode.from_state(state).to_numpy(), episode)
    _, body = ours_to_rllib(pair, {"type": "EPISODES", "episodes": stacked})
    for state, episode in zip(body["episodes"], episodes):
        assert_same_episode(SingleAgentEpisode.from_state(state).to_numpy(), episode)


@pytest.mark.parametrize("lookback", [0, 2])
def test_continuation_chunk(pair, lookback):
    """A chunk made by ``episode.cut()``, as the dummy client sends after each batch."""
    episode = SingleAgentEpisode(observations=[np.zeros(4, np.float32)])
    for i in range(5):
        episode.add_env_step(
            observation=np.full(4, i + 1, np.float32), action=i % 2, reward=0.5,
            extra_model_outputs={Columns.ACTION_LOGP: -0.7},
        )
    chunk = episode.cut(len_lookback_buffer=lookback)
    for i in range(3):
        chunk.add_env_step(
            observation=np.full(4, 10 + i, np.float32), action=1, reward=1.0,
            extra_model_outputs={Columns.ACTION_LOGP: -0.1},
        )
    state = chunk.get_state()
    assert state["t_started"] == 5 and state["observations"]["lookback"] == lookback
    got = rllib_to_ours(pair, {"type": "EPISODES", "episodes": [state]})
    rebuilt = SingleAgentEpisode.from_state(got["episodes"][0])
    assert rebuilt.id_ == episode.id_ and len(rebuilt) == 3 and rebuilt.t == 8
    np.testing.assert_array_equal(rebuilt.get_observations(-1), np.full(4, 12, np.float32))
    if lookback:
        last_lookback = rebuilt.get_observations(-1, neg_index_as_lookback=True)
        np.testing.assert_array_equal(last_lookback, np.full(4, 4, np.float32))


def test_episodes_with_spaces(pair):
    # RLlib writes spaces as maps of base64 strings; they pass through as data.
    episodes = collect_episodes(50, seed=4, spaces=True)
    got = rllib_to_ours(pair, {"type": "EPISODES", "episodes": [e.get_state() for e in episodes]})
    for state, episode in zip(got["episodes"], episodes):
        assert isinstance(state["_observation_space"], dict)
        rebuilt = SingleAgentEpisode.from_state(state)
        assert rebuilt.observation_space == OBS_SPACE and rebuilt.action_space == ACT_SPACE
        assert_same_episode(rebuilt.to_numpy(), episode)


def test_episodes_frame_is_byte_identical_to_rllibs(pair):
    message = {"type": "EPISODES", "episodes": [e.get_state() for e in collect_episodes(120, seed=5)], "timesteps": 120}
    assert encode_message(message) == rllib_frame(pair, message)


# --------------------------------------------------------------------------
# A short session in both roles


def test_rllib_client_session_against_our_framing(pair, weights):
    """RLlib's dummy-client sequence, with our decoder/encoder standing in for a server."""
    client, server = pair
    decoder = FrameDecoder()
    steps = 0

    def client_side():
        nonlocal steps
        send_rllink_message(client, {"type": RLlink.PING.name})
        assert get_rllink_message(client)[0] is RLlink.PONG
        send_rllink_message(client, {"type": RLlink.GET_STATE.name})
        kind, body = get_rllink_message(client)
        assert kind is RLlink.SET_STATE
        module = build_module(9)
        module.set_state(body["state"]["rl_module"])
        for round_ in range(2):
            episodes = collect_episodes(64, seed=10 + round_)
            send_rllink_message(
                client,
                {"type": "EPISODES_AND_GET_STATE", "episodes": [e.get_state() for e in episodes], "timesteps": 64},
            )
            kind, body = get_rllink_message(client)
            assert kind is RLlink.SET_STATE and body["state"]["weights_seq_no"] == 3 + round_ + 1
            steps += 64

    thread = in_thread(client_side)
    assert recv_ours(server, decoder) == {"type": "PING"}
    send_ours(server, {"type": "PONG"})
    assert recv_ours(server, decoder) == {"type": "GET_STATE"}
    send_ours(server, {"type": "SET_STATE", "state": weights})
    for round_ in range(2):
        message = recv_ours(server, decoder)
        assert message["type"] == "EPISODES_AND_GET_STATE"
        assert sum(len(SingleAgentEpisode.from_state(s)) for s in message["episodes"]) == 64
        send_ours(server, {"type": "SET_STATE", "state": {**weights, "weights_seq_no": 4 + round_}})
    join(thread)
    assert steps == 128 and decoder.frames == 4
