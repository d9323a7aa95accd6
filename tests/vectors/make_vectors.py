"""Write the RLlink test vectors: one ``NAME.bin`` (raw stream bytes) and one ``NAME.json`` (its meaning) per case.

Usage::

    python tests/vectors/make_vectors.py [OUT_DIR]     # default: this directory

Valid frames are packed with msgpack-numpy, the codec RLlib's own peers use,
so the vectors pin what RLlib sends, not what our encoder happens to do.
Invalid ones are built by hand. Everything is deterministic: no clocks, no
random ids, no pickles of numpy objects (whose bytes change between numpy
versions). See ``README.md`` here for the JSON format.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any, Callable

import msgpack_numpy
import numpy as np

HERE = Path(__file__).resolve().parent

#: The receiver's default frame limit (limits.DEFAULT_MAX_FRAME_BYTES), written into each JSON.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024

#: The error class and code of each refusal (errors.py).
ERRORS = {
    "FrameError": "bad_frame",
    "FrameTooLarge": "frame_too_large",
    "DecodeError": "bad_body",
    "UnsafePayload": "unsafe_payload",
    "InvalidMessage": "invalid_message",
    "UnsupportedMessage": "unsupported_message",
}

OLD_API_TYPES = [
    "ACTION_SPACE", "OBSERVATION_SPACE", "GET_WORKER_ARGS", "GET_WEIGHTS", "REPORT_SAMPLES",
    "START_EPISODE", "GET_ACTION", "LOG_ACTION", "LOG_RETURNS", "END_EPISODE",
]  # fmt: skip

#: ``gym_space_to_dict`` of RLlib's rewards space, as its episodes carry it (base64 of zlib of np.save).
REWARDS_SPACE = {
    "space": "box",
    "low": "eJyb7BfqGxDJyFDGUK2eklqcXKRupaBuk2airqOgnpZfVFKUmBefX5SSChJ3S8wpTgWKF2ckFqQC+RqaOgq1ChQBLgaGhv8AupYcug==",
    "high": "eJyb7BfqGxDJyFDGUK2eklqcXKRupaBuk2airqOgnpZfVFKUmBefX5SSChJ3S8wpTgWKF2ckFqQC+RqaOgq1ChQBLgaGhnoAuhYcOg==",
    "shape": [],
    "dtype": "<f4",
}


# --------------------------------------------------------------------------
# Packing and meaning


def pack(obj: Any) -> bytes:
    """msgpack-numpy's body for ``obj`` (what RLlib's ``send_rllink_message`` writes)."""
    return msgpack_numpy.packb(obj, use_bin_type=True)


def frame(body: bytes) -> bytes:
    return b"%08d" % len(body) + body


def _plain(value: Any) -> Any:
    if isinstance(value, (complex, np.complexfloating)):
        return [float(value.real), float(value.imag)]
    if isinstance(value, np.generic):
        return value.item()
    return value


def meaning(value: Any) -> Any:
    """The JSON form of a decoded value (see README.md)."""
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        return {"$ndarray": {"dtype": value.dtype.str, "shape": list(value.shape), "data": [_plain(x) for x in flat]}}
    if isinstance(value, np.generic) and not isinstance(value, (float, str, bytes)):
        return {"$scalar": {"dtype": value.dtype.str, "data": _plain(value)}}
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        assert all(isinstance(k, str) and not k.startswith("$") for k in value), value.keys()
        return {k: meaning(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [meaning(v) for v in value]
    assert value is None or isinstance(value, (bool, int, float, str)), type(value)
    return value


# --------------------------------------------------------------------------
# Sample payloads


def weights() -> dict:
    return {
        "rl_module": {
            "encoder.actor_encoder.net.mlp.0.weight": (np.arange(12, dtype=np.float32).reshape(3, 4) - 6) / 8,
            "encoder.actor_encoder.net.mlp.0.bias": np.array([0.5, -0.25, 0.0], np.float32),
            "pi.net.mlp.0.weight": np.array([[1.0, -1.0, 0.5], [0.25, 0.0, -0.5]], np.float32),
            "pi.net.mlp.0.bias": np.zeros(2, np.float32),
            "pi.log_std_clip_param_const": np.array([20.0], np.float32),
        },
        "weights_seq_no": 3,
    }


def buffer(data: Any, *, finalized: bool, space: Any = None, lookback: int = 0) -> dict:
    return {"data": data, "lookback": lookback, "finalized": finalized, "space": space}


def cartpole_obs(i: int) -> np.ndarray:
    return np.array([0.01 * i, -0.02 * i, 0.03, -0.5 + 0.125 * i], np.float32)


def episode_lists(id_: str, steps: int, *, t_started: int, terminated: bool) -> dict:
    """A state as ``SingleAgentEpisode.get_state()`` returns it after ``add_env_step`` calls."""
    logits = [np.array([0.125 * i, -0.125 * i], np.float32) for i in range(steps)]
    return {
        "id_": id_,
        "agent_id": None,
        "module_id": None,
        "multi_agent_episode_id": None,
        "observations": buffer([cartpole_obs(t_started + i) for i in range(steps + 1)], finalized=False),
        "actions": buffer([i % 2 for i in range(steps)], finalized=False),
        "rewards": buffer([1.0] * steps, finalized=False, space=REWARDS_SPACE),
        "infos": buffer([{} for _ in range(steps + 1)], finalized=False),
        "extra_model_outputs": {
            "action_dist_inputs": buffer(logits, finalized=False),
            "action_logp": buffer([-0.6931471805599453] * steps, finalized=False),
        },
        "is_terminated": terminated,
        "is_truncated": False,
        "t_started": t_started,
        "t": t_started + steps,
        "_observation_space": None,
        "_action_space": None,
        "_start_time": 1000.5,
        "_last_step_time": 1000.75,
        "custom_data": {},
    }


def episode_stacked(id_: str, steps: int) -> dict:
    """The same state with each column stacked into one array (``finalized``)."""
    state = episode_lists(id_, steps, t_started=0, terminated=False)
    for key, dtype in (("observations", np.float32), ("actions", np.int64), ("rewards", np.float32)):
        state[key] = buffer(np.asarray(state[key]["data"], dtype), finalized=True)
    state["extra_model_outputs"] = {
        name: buffer(np.asarray(buf["data"], np.float32), finalized=True)
        for name, buf in state["extra_model_outputs"].items()
    }
    state["_start_time"] = state["_last_step_time"] = None
    return state


def takeover_chunk() -> dict:
    """A stacked chunk of 3 steps whose step 1 was taken over (the ``takeover`` extension)."""
    state = episode_stacked("takeover-ep", 3)
    state["extra_model_outputs"]["rlinks_takeover"] = buffer(np.array([False, True, False]), finalized=True)
    return state


def agent_state(agent_id: str, module_id: str, episode_id: str, steps: int, *, obs_size: int, done: bool) -> dict:
    """One agent's part of a multi-agent chunk: a stacked single-agent state with its ids filled in."""
    obs = (np.arange((steps + 1) * obs_size, dtype=np.float32).reshape(steps + 1, obs_size) - 4) / 8
    return {
        "id_": f"{agent_id}-{episode_id[:8]}",
        "agent_id": agent_id,
        "module_id": module_id,
        "multi_agent_episode_id": episode_id,
        "observations": buffer(obs, finalized=True),
        "actions": buffer(np.arange(steps, dtype=np.int64) % 3, finalized=True),
        "rewards": buffer(np.full(steps, 0.5, np.float32), finalized=True),
        "infos": buffer([{} for _ in range(steps + 1)], finalized=False),
        "extra_model_outputs": {
            "action_dist_inputs": buffer(np.zeros((steps, 3), np.float32), finalized=True),
            "action_logp": buffer(np.full(steps, -1.0986123, np.float32), finalized=True),
        },
        "is_terminated": False,
        "is_truncated": done,
        "t_started": 0,
        "t": steps,
        "_observation_space": None,
        "_action_space": None,
        "_start_time": None,
        "_last_step_time": None,
        "custom_data": {},
    }


#: The multi-agent episode of the vectors: 4 ticks, __all__ truncated; seeker_0 acts every tick,
#: signal_0 on even ticks (turn-based), seeker_1 joins at tick 2.
MA_EPISODE_ID = "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"
MA_AGENTS = (("seeker_0", "seeker", 2, [0, 1, 2, 3, 4]), ("signal_0", "signal", 3, [0, 2, 4]),
             ("seeker_1", "seeker", 2, [2, 3, 4]))


def multi_agent_chunk(*, rllib_form: bool) -> dict:
    """The compact form (``agent_env_t``) or RLlib's own (``env_t_to_agent_t``) of MA_EPISODE_ID."""
    agents = [[a, agent_state(a, m, MA_EPISODE_ID, len(ticks) - 1, obs_size=size, done=True)]
              for a, m, size, ticks in MA_AGENTS]
    chunk = {
        "id_": MA_EPISODE_ID,
        "env_t_started": 0,
        "env_t": 4,
        "is_terminated": False,
        "is_truncated": True,
        "agent_episodes": agents,
        "_agent_to_module_mapping": {a: m for a, m, _, _ in MA_AGENTS},
        "_start_time": None,
        "_last_step_time": None,
        "custom_data": {},
    }
    if rllib_form:
        chunk["env_t_to_agent_t"] = {
            a: buffer([ticks.index(t) if t in ticks else "S" for t in range(5)], finalized=False)
            for a, _, _, ticks in MA_AGENTS
        }
        for key in ("_hanging_actions_end", "_hanging_extra_model_outputs_end", "_hanging_rewards_end",
                    "_hanging_rewards_begin"):
            chunk[key] = {}
        chunk["agent_to_module_mapping_fn"] = chunk["observation_space"] = chunk["action_space"] = None
    else:
        chunk["agent_env_t"] = {a: np.array(ticks, np.int64) for a, _, _, ticks in MA_AGENTS}
    return chunk


def all_dtypes() -> dict:
    return {
        "bool": np.array([True, False, True]),
        "int8": np.array([-128, 0, 127], np.int8),
        "int16": np.array([-32768, 1, 32767], np.int16),
        "int32": np.array([[-(2**31), 2], [3, 2**31 - 1]], np.int32),
        "int64": np.array([-(2**63), 2**63 - 1], np.int64),
        "uint8": np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
        "uint16": np.array([0, 65535], np.uint16),
        "uint32": np.array([0, 2**32 - 1], np.uint32),
        "uint64": np.array([0, 2**64 - 1], np.uint64),
        "float16": np.array([0.5, -2.0, 65504.0], np.float16),
        "float32": np.array([0.1, -1.5, 3.4028234663852886e38], np.float32),
        "float64": np.array([0.1, -1e-300, 1e300]),
        "complex64": np.array([1 + 2j, -0.5j], np.complex64),
        "complex128": np.array([3 - 4j], np.complex128),
        "big_endian_int32": np.array([1, -2], ">i4"),
        "big_endian_float64": np.array([1.5, -0.25], ">f8"),
        "zero_d": np.array(7.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }


# --------------------------------------------------------------------------
# Cases


Case = tuple[bytes, dict]


def valid(description: str, *messages: dict, canonical: bool = True) -> Case:
    data = b"".join(frame(pack(m)) for m in messages)
    return data, {
        "description": description,
        "max_frame_bytes": DEFAULT_MAX_FRAME_BYTES,
        "canonical": canonical,
        "messages": [meaning(m) for m in messages],
        "error": None,
    }


def invalid(description: str, data: bytes, error: str, *, when: str = "feed", before: list[dict] = (),
            max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Case:
    return data, {
        "description": description,
        "max_frame_bytes": max_frame_bytes,
        "canonical": False,
        "messages": [meaning(m) for m in before],
        "error": {"class": error, "code": ERRORS[error], "when": when},
    }


def raw(obj: Any) -> bytes:
    return frame(pack(obj))


def array_map(**fields: Any) -> dict:
    base = {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [2], b"data": b"\x00" * 8}
    base.update({k.encode(): v for k, v in fields.items()})
    return base


def cases() -> dict[str, Callable[[], Case]]:
    c: dict[str, Callable[[], Case]] = {}

    # Valid: every current message type.
    c["valid_ping"] = lambda: valid("RLlib's handshake request.", {"type": "PING"})
    c["valid_ping_offer"] = lambda: valid(
        "PING announcing rlinks extensions (an extra key RLlib's server ignores).",
        {"type": "PING", "rlinks": {"version": 1, "extensions": ["ack", "want_steps"], "agent": "vectors/1"}},
    )
    c["valid_pong"] = lambda: valid("Handshake answer.", {"type": "PONG"})
    c["valid_pong_offer"] = lambda: valid(
        "PONG agreeing to one extension.", {"type": "PONG", "rlinks": {"version": 1, "extensions": ["want_steps"]}}
    )
    c["valid_get_config"] = lambda: valid("Config request.", {"type": "GET_CONFIG"})
    c["valid_get_state"] = lambda: valid("Weights request.", {"type": "GET_STATE"})
    c["valid_set_config_pickle"] = lambda: valid(
        "SET_CONFIG as RLlib's server sends it: 'config' is a pickle, carried as opaque bin and never unpickled.",
        {"type": "SET_CONFIG", "config": pickle.dumps({"algo": "PPO"}, protocol=4)},
    )
    c["valid_set_config_msgpack"] = lambda: valid(
        "SET_CONFIG with the plain msgpack description of the runner's setup.",
        {
            "type": "SET_CONFIG",
            "config": {
                "version": 1,
                "algorithm": "PPO",
                "observation_space": {"kind": "box", "shape": [4], "dtype": "<f4",
                                      "low": np.full(4, -10.0, np.float32), "high": np.full(4, 10.0, np.float32)},
                "action_space": {"kind": "discrete", "n": 2, "start": 0},
                "rollout_fragment_length": 500,
                "on_policy": True,
                "model_config": {"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh", "vf_share_layers": False},
                "weights_layout": {"pi.net.mlp.0.weight": [2, 256], "pi.net.mlp.0.bias": [2]},
            },
        },
    )
    c["valid_set_config_nested_spaces"] = lambda: valid(
        "SET_CONFIG whose observation is a dict of an image, a vector and a tuple; uniform bounds as 0-d arrays.",
        {
            "type": "SET_CONFIG",
            "config": {
                "version": 1,
                "algorithm": "PPO",
                "observation_space": {
                    "kind": "dict",
                    "spaces": {
                        "camera": {"kind": "box", "shape": [4, 4, 3], "dtype": "|u1",
                                   "low": np.array(0, np.uint8), "high": np.array(255, np.uint8)},
                        "joints": {"kind": "box", "shape": [2], "dtype": "<f4",
                                   "low": np.array([-1.0, -2.0], np.float32), "high": np.array([1.0, 2.0], np.float32)},
                        "sensors": {"kind": "tuple", "spaces": [{"kind": "multi_binary", "shape": [3]},
                                                                {"kind": "discrete", "n": 3, "start": 1}]},
                    },
                },
                "action_space": {"kind": "multi_discrete", "nvec": np.array([3, 2], np.int64)},
                "rollout_fragment_length": 200,
                "on_policy": True,
                "model_config": {"conv_filters": [[16, [4, 4], 2], [32, [2, 2], 1]]},
            },
        },
    )
    c["valid_set_state_weights"] = lambda: valid(
        "SET_STATE carrying a weight set as RLlib's server sends it.", {"type": "SET_STATE", "state": weights()}
    )
    c["valid_set_state_want_steps"] = lambda: valid(
        "SET_STATE with the want_steps extension field.",
        {"type": "SET_STATE", "state": weights(), "want_steps": 500},
    )
    c["valid_set_state_large_array"] = lambda: valid(
        "A 16 KiB parameter (above the encoder's zero-copy threshold; same bytes).",
        {"type": "SET_STATE", "state": {"rl_module": {"w": (np.arange(4096, dtype=np.float32) - 2048) / 256},
                                        "weights_seq_no": 0}},
    )
    c["valid_episodes_rllib_lists"] = lambda: valid(
        "EPISODES as RLlib's dummy client sends them: a finished episode and a chunk cut from a running one, "
        "each buffer a list with one item per step.",
        {
            "type": "EPISODES",
            "episodes": [
                episode_lists("0a1b2c3d4e5f60718293a4b5c6d7e8f9", 3, t_started=0, terminated=True),
                episode_lists("ffeeddccbbaa99887766554433221100", 2, t_started=5, terminated=False),
            ],
            "timesteps": 5,
        },
    )
    c["valid_episodes_stacked"] = lambda: valid(
        "EPISODES with each column stacked into one array (finalized buffers).",
        {"type": "EPISODES", "episodes": [episode_stacked("00112233445566778899aabbccddeeff", 4)], "timesteps": 4},
    )
    c["valid_episodes_and_get_state"] = lambda: valid(
        "On-policy batch: the sender then waits for SET_STATE. 'seq' belongs to the ack extension.",
        {"type": "EPISODES_AND_GET_STATE",
         "episodes": [episode_lists("0123456789abcdef0123456789abcdef", 2, t_started=0, terminated=False)],
         "timesteps": 2, "seq": 7},
    )
    c["valid_episodes_multi_agent"] = lambda: valid(
        "A multi-agent chunk in the compact form (multi_agent extension, PROTOCOL.md 7.6): turn-based and "
        "joining agents, __all__ truncated, each agent's env ticks in agent_env_t.",
        {"type": "EPISODES_AND_GET_STATE", "episodes": [multi_agent_chunk(rllib_form=False)], "timesteps": 4,
         "seq": 1},
    )
    c["valid_episodes_multi_agent_rllib"] = lambda: valid(
        "The same chunk in RLlib's MultiAgentEpisode.get_state() form (env_t_to_agent_t, empty hanging caches).",
        {"type": "EPISODES", "episodes": [multi_agent_chunk(rllib_form=True)], "timesteps": 4},
    )
    c["valid_set_config_multi_agent"] = lambda: valid(
        "SET_CONFIG of a multi-agent runner: modules, the agent mapping table, what a step counts.",
        {"type": "SET_CONFIG", "config": {
            "version": 1, "algorithm": "PPO",
            "observation_space": {"kind": "box", "shape": [2], "dtype": "<f4",
                                  "low": np.array(-2.0, np.float32), "high": np.array(2.0, np.float32)},
            "action_space": {"kind": "discrete", "n": 3, "start": 0},
            "rollout_fragment_length": 1000, "on_policy": True, "model_config": {"fcnet_hiddens": [32]},
            "weights_layout": {},
            "multi_agent": {
                "modules": {
                    "seeker": {"observation_space": {"kind": "box", "shape": [2], "dtype": "<f4",
                                                     "low": np.array(-2.0, np.float32),
                                                     "high": np.array(2.0, np.float32)},
                               "action_space": {"kind": "discrete", "n": 3, "start": 0}, "trained": True},
                    "signal": {"observation_space": {"kind": "box", "shape": [3], "dtype": "<f4",
                                                     "low": np.array(0.0, np.float32),
                                                     "high": np.array(1.0, np.float32)},
                               "action_space": {"kind": "discrete", "n": 3, "start": 0}, "trained": False},
                },
                "agent_mapping": [["seeker_*", "seeker"], ["signal_*", "signal"]],
                "count_steps_by": "env_steps",
            }}},
    )
    c["valid_set_state_multi_agent"] = lambda: valid(
        "SET_STATE of a multi-agent runner: every module's weights in one set, keyed by module id.",
        {"type": "SET_STATE", "state": {"rl_module": {"seeker": weights()["rl_module"],
                                                      "signal": weights()["rl_module"]}, "weights_seq_no": 3},
         "want_steps": 500},
    )
    c["valid_error"] = lambda: valid(
        "ERROR sent just before closing.",
        {"type": "ERROR", "code": "frame_too_large", "message": "frame of 70,000,000 bytes exceeds the limit"},
    )
    c["valid_ack"] = lambda: valid("ACK for EPISODES seq 7 (ack extension).", {"type": "ACK", "seq": 7})
    c["valid_ack_weights_notice"] = lambda: valid(
        "ACK for seq 7 naming the runner's weights version 42 (weights_notice extension, PROTOCOL.md 10.2.1); "
        "a client that did not agree to it reads a plain ACK.", {"type": "ACK", "seq": 7, "weights_seq_no": 42})
    c["valid_auth_handshake"] = lambda: valid(
        "The auth extension: PING with the client's nonce, then AUTH and AUTH_OK with 32-byte HMAC proofs "
        "(see docs/PROTOCOL.md 10.3 for how nonces and proofs are made).",
        {"type": "PING", "rlinks": {"version": 1, "extensions": ["ack", "auth", "want_steps"],
                                    "client_id": "c0ffee", "auth_nonce": bytes(range(32))}},
        {"type": "AUTH", "proof": bytes(range(32, 64))},
        {"type": "AUTH_OK", "proof": bytes(range(64, 96))},
    )
    c["valid_directory"] = lambda: valid(
        "The endpoints extension: GET_ENDPOINTS to a directory and its ENDPOINTS answer, least-loaded first.",
        {"type": "GET_ENDPOINTS"},
        {"type": "ENDPOINTS", "endpoints": [
            {"worker_index": 2, "host": "127.0.0.1", "port": 5557, "clients": 1},
            {"worker_index": 1, "host": "127.0.0.1", "port": 5556, "clients": 3}]},
    )
    c["valid_served_actions"] = lambda: valid(
        "The served_actions extension (docs/PROTOCOL.md 10.5): an ACT for 3 rows (env 4 ends its episode and "
        "starts the next in the same ACT) and its ACTIONS for the rows that want one, in row order.",
        {"type": "ACT", "env": [0, 4, 4], "obs": np.stack([cartpole_obs(i) for i in range(3)]),
         "reward": np.array([1.0, 1.0, 0.0], np.float32), "start": np.array([False, False, True]),
         "terminated": np.array([False, True, False]), "truncated": np.array([False, False, False])},
        {"type": "ACTIONS", "env": [0, 4], "actions": np.array([1, 0], np.int64), "weights_seq_no": 3},
    )
    c["valid_served_taken"] = lambda: valid(
        "The served_taken extension (docs/PROTOCOL.md 10.5.1): env 1 takes its own action (answered with itself), "
        "env 2 starts an episode that is not trained on.",
        {"type": "ACT", "env": [0, 1, 2], "obs": np.stack([cartpole_obs(i) for i in range(3)]),
         "reward": np.array([1.0, 1.0, 0.0], np.float32), "start": np.array([False, False, True]),
         "terminated": np.array([False, False, False]), "truncated": np.array([False, False, False]),
         "taken_mask": np.array([False, True, False]), "taken": np.array([0, 1, 0], np.int64),
         "train": np.array([True, True, False])},
        {"type": "ACTIONS", "env": [0, 1, 2], "actions": np.array([0, 1, 1], np.int64), "weights_seq_no": 3},
    )
    c["valid_takeover"] = lambda: valid(
        "The takeover extension (docs/PROTOCOL.md 10.8): a stacked chunk whose step 1 a person or a script took "
        "over (extra model output rlinks_takeover), and an ACT whose env 1 is taken over (the takeover column "
        "beside served_taken's taken_mask).",
        {"type": "EPISODES", "episodes": [takeover_chunk()], "seq": 4},
        {"type": "ACT", "env": [0, 1], "obs": np.stack([cartpole_obs(i) for i in range(2)]),
         "reward": np.array([1.0, 1.0], np.float32), "start": np.array([False, False]),
         "terminated": np.array([False, False]), "truncated": np.array([False, False]),
         "taken_mask": np.array([False, True]), "taken": np.array([0, 1], np.int64),
         "takeover": np.array([False, True])},
    )
    c["valid_array_dtypes"] = lambda: valid(
        "Every accepted array dtype, byte orders, a 0-d and an empty array.",
        {"type": "GET_STATE", "arrays": all_dtypes()},
    )
    c["valid_numpy_scalars"] = lambda: valid(
        "numpy scalars (msgpack-numpy's nd=false form).",
        {"type": "GET_STATE", "scalars": [np.float32(1.5), np.int64(-7), np.bool_(True), np.uint8(255),
                                          np.float16(0.25)]},
    )
    c["valid_unknown_keys"] = lambda: valid(
        "Unknown keys are kept, whatever their values.",
        {"type": "GET_STATE", "x_vendor": {"nested": [1, "two", None, True, 2.5, -(2**63), 2**64 - 1]}},
    )
    c["valid_strings_and_bin"] = lambda: valid(
        "str is UTF-8 msgpack str; bytes are msgpack bin.",
        {"type": "PONG", "text": "h\u00e9llo \u4e16\u754c", "blob": bytes(range(16)), "empty": b""},
    )
    c["valid_two_frames"] = lambda: valid("Two frames back to back.", {"type": "PING"}, {"type": "GET_CONFIG"})

    # Framing.
    def bad_header(header: bytes, what: str) -> Callable[[], Case]:
        body = pack({"type": "PING", "p": "xxxxx"})
        assert len(header) == 8
        return lambda: invalid(f"Header {what}: refused (RLlib's int() would take it).", header + body, "FrameError")

    body_len = len(pack({"type": "PING", "p": "xxxxx"}))
    c["invalid_header_leading_space"] = bad_header(b" %07d" % body_len, "with a leading space")
    c["invalid_header_plus_sign"] = bad_header(b"+%07d" % body_len, "with a sign")
    c["invalid_header_underscore"] = bad_header(b"00000_%02d" % body_len, "with an underscore")
    c["invalid_header_arabic_indic_digits"] = bad_header(
        "".join(chr(0x0660 + int(d)) for d in "%04d" % body_len).encode(), "in Arabic-Indic digits (UTF-8)"
    )
    c["invalid_header_letters"] = lambda: invalid("Header with a hex digit.", b"0000001a" + b"\x80" * 26, "FrameError")
    c["invalid_empty_body"] = lambda: invalid("A zero-length body.", b"00000000", "FrameError")
    c["invalid_oversize_header_only"] = lambda: invalid(
        "99,999,999 bytes announced: refused from the header alone, before any body arrives.",
        b"99999999", "FrameTooLarge",
    )
    c["invalid_oversize_custom_limit"] = lambda: invalid(
        "A 26-byte body against a 16-byte limit.", raw({"type": "PING", "pad": "0123456789"}), "FrameTooLarge",
        max_frame_bytes=16,
    )
    c["invalid_truncated_header"] = lambda: invalid(
        "Stream ends inside a header.", b"0000", "FrameError", when="eof"
    )
    c["invalid_truncated_body"] = lambda: invalid(
        "Stream ends inside a body.", raw({"type": "PING", "pad": "abc"})[:-3], "FrameError", when="eof"
    )
    c["invalid_ping_then_bad_header"] = lambda: invalid(
        "A good frame, then a bad header: the first message is delivered.",
        raw({"type": "PING"}) + b"-0000001" + b"\xc0", "FrameError", before=[{"type": "PING"}],
    )

    # Arrays.
    c["invalid_pickle_object_array"] = lambda: invalid(
        "An object array (kind O): msgpack-numpy would pickle.loads its data. Never decoded.",
        raw({"type": "EPISODES", "episodes": [{"obs": array_map(type="|O", kind=b"O", shape=[1],
                                                                  data=pickle.dumps(["harmless"], protocol=2))}]}),
        "UnsafePayload",
    )
    c["invalid_object_dtype_plain_kind"] = lambda: invalid(
        "dtype '|O' without kind O.", raw({"type": "GET_STATE", "a": array_map(type="|O", data=b"\x00" * 16)}),
        "UnsafePayload",
    )
    c["invalid_structured_array"] = lambda: invalid(
        "A structured array (kind V, descr list).",
        raw({"type": "GET_STATE", "a": array_map(type=[["x", "<f4"], ["y", "<i4"]], kind=b"V", shape=[1])}),
        "UnsafePayload",
    )
    c["invalid_datetime_array"] = lambda: invalid(
        "A datetime64 array.", raw({"type": "GET_STATE", "a": array_map(type="<M8[s]", data=b"\x00" * 16)}),
        "UnsafePayload",
    )
    c["invalid_array_shape_mismatch"] = lambda: invalid(
        "shape [3] of <f4 needs 12 bytes; data has 8.",
        raw({"type": "GET_STATE", "a": array_map(shape=[3])}), "DecodeError",
    )
    c["invalid_array_data_as_str"] = lambda: invalid(
        "Array data as str (a use_bin_type=False packer): must be bin.",
        raw({"type": "GET_STATE", "a": array_map(data="\x00" * 8)}), "DecodeError",
    )
    c["invalid_array_bad_dtype"] = lambda: invalid(
        "An unparseable dtype string.", raw({"type": "GET_STATE", "a": array_map(type="float99")}), "DecodeError"
    )

    # Bodies.
    c["invalid_body_not_msgpack"] = lambda: invalid("0xc1 is never used in msgpack.", frame(b"\xc1"), "DecodeError")
    c["invalid_body_truncated_msgpack"] = lambda: invalid(
        "The body is shorter than its msgpack says.", frame(pack({"type": "PING"})[:-1]), "DecodeError"
    )
    c["invalid_body_trailing_bytes"] = lambda: invalid(
        "Two msgpack values in one body.", frame(pack({"type": "PING"}) + b"\xc0"), "DecodeError"
    )
    c["invalid_body_ext_type"] = lambda: invalid(
        "msgpack extension types are not part of RLlink.",
        frame(b"\x82" + pack("type") + pack("PING") + pack("x") + b"\xd4\x01\x00"),  # fixext 1, type 1
        "DecodeError",
    )
    c["invalid_body_too_deep"] = lambda: invalid(
        "Nesting deeper than msgpack's stack.", frame(b"\x81\xa1x" + b"\x91" * 2000 + b"\xc0"), "DecodeError"
    )

    # Messages.
    c["invalid_body_not_a_map"] = lambda: invalid("A list instead of a map.", raw(["PING"]), "InvalidMessage")
    c["invalid_missing_type"] = lambda: invalid("No 'type'.", raw({"kind": "PING"}), "InvalidMessage")
    c["invalid_type_not_str"] = lambda: invalid("'type' is an int.", raw({"type": 1}), "InvalidMessage")
    c["invalid_type_as_bin"] = lambda: invalid("'type' is bin, not str.", raw({"type": b"PING"}), "InvalidMessage")
    c["invalid_unknown_type"] = lambda: invalid("An unknown type.", raw({"type": "HELLO"}), "UnsupportedMessage")
    for name in OLD_API_TYPES:
        c[f"invalid_old_api_{name.lower()}"] = (
            lambda name=name: invalid(
                f"{name} belongs to RLlib's old API stack: refused (RLlib's server ignores it silently).",
                raw({"type": name}), "UnsupportedMessage",
            )
        )
    c["invalid_set_state_missing_state"] = lambda: invalid(
        "SET_STATE without 'state'.", raw({"type": "SET_STATE"}), "InvalidMessage"
    )
    c["invalid_episodes_missing_episodes"] = lambda: invalid(
        "EPISODES without 'episodes'.", raw({"type": "EPISODES", "timesteps": 0}), "InvalidMessage"
    )
    c["invalid_error_missing_code"] = lambda: invalid(
        "ERROR without 'code'.", raw({"type": "ERROR", "message": "x"}), "InvalidMessage"
    )
    c["invalid_set_config_missing_config"] = lambda: invalid(
        "SET_CONFIG without 'config'.", raw({"type": "SET_CONFIG"}), "InvalidMessage"
    )
    c["invalid_timesteps_bool"] = lambda: invalid(
        "'timesteps' must be an int, not a bool.", raw({"type": "EPISODES", "episodes": [], "timesteps": True}),
        "InvalidMessage",
    )
    c["invalid_auth_proof_not_bin"] = lambda: invalid(
        "AUTH's proof must be bin.", raw({"type": "AUTH", "proof": "not-bytes"}), "InvalidMessage"
    )
    c["invalid_endpoints_not_list"] = lambda: invalid(
        "ENDPOINTS needs a list 'endpoints'.", raw({"type": "ENDPOINTS", "endpoints": {}}), "InvalidMessage"
    )
    c["invalid_seq_negative"] = lambda: invalid(
        "'seq' must be >= 0.", raw({"type": "ACK", "seq": -1}), "InvalidMessage"
    )
    c["invalid_episode_not_map"] = lambda: invalid(
        "Each episode must be a map.", raw({"type": "EPISODES_AND_GET_STATE", "episodes": [[1, 2]]}), "InvalidMessage"
    )
    c["invalid_state_not_map"] = lambda: invalid(
        "'state' must be a map.", raw({"type": "SET_STATE", "state": b"\x80\x04."}), "InvalidMessage"
    )
    return c


def to_json(value: Any, indent: str = "") -> str:
    """JSON with one key per line, but lists of plain values kept on one line."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {to_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + to_json(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": "))


def generate(out: Path) -> list[Path]:
    """Write every vector into ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in cases().items():
        data, meta = make()
        (out / f"{name}.bin").write_bytes(data)
        (out / f"{name}.json").write_text(to_json(meta) + "\n")
        written += [out / f"{name}.bin", out / f"{name}.json"]
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    paths = generate(target)
    print(f"wrote {len(paths) // 2} vectors to {target}")
