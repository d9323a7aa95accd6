"""The ingest hot path gives what the general path gives.

* Column decoding (``protocol/columns.py``): an ``EPISODES`` body in RLlib's
  per-step form decodes to the message the hooked decoder gives, with each
  per-step column stacked; every body it can't take, including every refused
  one, goes to the hooked decoder, so outcomes and errors are the same.
* ``episode_from_state`` builds, slot by slot, the episode RLlib's
  ``SingleAgentEpisode.from_state`` builds.
* ``log_episodes`` reports what nine ``log_value`` calls per episode report.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgpack
import msgpack_numpy
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _common import cartpole_batch  # noqa: E402
from rlinks_rllib.protocol.codec import decode_body  # noqa: E402
from rlinks_rllib.protocol.columns import NOT_COLUMNS, decode_columns, wants_columns  # noqa: E402
from rlinks_rllib.protocol.codec import _refuse_ext  # noqa: E402
from rlinks_rllib.protocol.episodes import check_episode_state  # noqa: E402
from rlinks_rllib.protocol.errors import ProtocolError  # noqa: E402
from rlinks_rllib.protocol.framing import FrameDecoder  # noqa: E402


def rllib_body(message: dict) -> bytes:
    return msgpack.packb(message, default=msgpack_numpy.encode, use_bin_type=True)


def rllib_message(steps: int = 60, episode_steps=None, kind: str = "EPISODES") -> dict:
    theirs, _ = cartpole_batch(steps, seed=3, episode_steps=episode_steps)
    return {"type": kind, "episodes": [e.get_state() for e in theirs], "timesteps": steps}


def outcome(body: bytes, *, columns: bool):
    try:
        return decode_body(body, columns=columns)
    except ProtocolError as exc:
        return type(exc), exc.code, str(exc)


def assert_same_episodes(fast: dict, slow: dict) -> None:
    """Both decode to the same episodes once checked (the form RLlib gets)."""
    assert fast.keys() == slow.keys()
    assert len(fast["episodes"]) == len(slow["episodes"])
    for a, b in zip(fast["episodes"], slow["episodes"], strict=True):
        ca, cb = check_episode_state(a, allow_empty=True), check_episode_state(b, allow_empty=True)
        for key in ("observations", "actions", "rewards"):
            np.testing.assert_array_equal(ca[key]["data"], cb[key]["data"])
            assert ca[key]["data"].dtype == cb[key]["data"].dtype
        for name in cb["extra_model_outputs"] or {}:
            np.testing.assert_array_equal(ca["extra_model_outputs"][name]["data"],
                                          cb["extra_model_outputs"][name]["data"])
        for key in ca:
            if key not in ("observations", "actions", "rewards", "extra_model_outputs"):
                assert ca[key] == cb[key], key


@pytest.mark.parametrize("episode_steps", [None, 30, 100])
@pytest.mark.parametrize("kind", ["EPISODES", "EPISODES_AND_GET_STATE"])
def test_rllib_bodies_decode_stacked_and_equal(episode_steps, kind):
    body = rllib_body(rllib_message(100, episode_steps, kind))
    assert wants_columns(body)
    fast = decode_columns(body, _refuse_ext)
    assert fast is not NOT_COLUMNS
    state = fast["episodes"][0]
    obs = state["observations"]
    assert obs["finalized"] is True and isinstance(obs["data"], np.ndarray) and obs["data"].shape[1:] == (4,)
    assert not obs["data"].flags.writeable
    assert_same_episodes(fast, decode_body(body))
    assert_same_episodes(decode_body(body, columns=True), decode_body(body))


def test_numpy_scalars_per_step_stack_too():
    message = rllib_message(40)
    for state in message["episodes"]:
        logp = state["extra_model_outputs"]["action_logp"]
        logp["data"] = [np.float32(v) for v in logp["data"]]
        state["actions"]["data"] = [np.int64(a) for a in state["actions"]["data"]]
    body = rllib_body(message)
    fast = decode_columns(body, _refuse_ext)
    assert fast is not NOT_COLUMNS
    assert fast["episodes"][0]["actions"]["data"].dtype == np.int64
    assert_same_episodes(fast, decode_body(body))


def test_our_stacked_bodies_keep_the_one_pass_decoder():
    _, ours = cartpole_batch(100, seed=1)
    from rlinks_rllib.protocol import encode_message

    body = encode_message({"type": "EPISODES", "episodes": ours})[8:]
    assert not wants_columns(body)


def mutate(body: bytes, data) -> bytes:
    raw = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    return bytes(raw)


BODY = rllib_body(rllib_message(24))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_bodies_give_the_hooked_outcome(data):
    body = mutate(BODY, data)
    fast, slow = outcome(body, columns=True), outcome(body, columns=False)
    if isinstance(slow, tuple):
        assert fast == slow  # refused the same way, with the same words
        return
    assert not isinstance(fast, tuple)
    if isinstance(slow, dict) and isinstance(slow.get("episodes"), list):
        try:
            expected = [check_episode_state(s, allow_empty=True) for s in slow["episodes"]]
        except (ProtocolError, TypeError, ValueError):
            expected = None
        if expected is not None:
            assert_same_episodes(fast, slow)


@pytest.mark.parametrize("change, error", [
    (lambda s: s["observations"]["data"].__setitem__(3, {**s["observations"]["data"][3], b"kind": b"O"}), "object"),
    (lambda s: s["observations"]["data"].__setitem__(2, {**s["observations"]["data"][2], b"type": "|O"}), "dtype"),
    (lambda s: s["observations"]["data"].__setitem__(1, {**s["observations"]["data"][1], b"nd": 1}), "nd"),
    (lambda s: s["observations"]["data"].__setitem__(1, {**s["observations"]["data"][1], b"shape": [True]}), "shape"),
    (lambda s: s["observations"]["data"].__setitem__(4, {**s["observations"]["data"][4], b"data": b"\0" * 15}), "bytes"),
])
def test_refused_steps_are_refused_as_before(change, error):
    from rlinks_rllib.protocol.arrays import array_map

    message = rllib_message(30)
    state = message["episodes"][0]
    state["observations"]["data"] = [array_map(o, o.tobytes()) for o in state["observations"]["data"]]
    change(state)
    body = rllib_body(message)
    slow = outcome(body, columns=False)
    assert isinstance(slow, tuple), slow
    assert outcome(body, columns=True) == slow


@pytest.mark.parametrize("depth", range(1016, 1026, 2))
def test_too_deep_elsewhere_is_refused_as_before(depth):
    message = rllib_message(30)
    deep: list = []
    for _ in range(depth):
        deep = [deep]
    message["episodes"][0]["custom"] = deep
    try:
        body = rllib_body(message)
    except (ValueError, RecursionError):
        pytest.skip("msgpack won't pack that deep here")
    fast, slow = outcome(body, columns=True), outcome(body, columns=False)
    if isinstance(slow, tuple):
        assert fast == slow
    else:
        assert isinstance(fast, dict)


def test_server_connection_and_decoder_stack_split_frames():
    body = rllib_body(rllib_message(50))
    frame = b"%08d" % len(body) + body
    decoder = FrameDecoder(columns=True)
    messages = []
    for i in range(0, len(frame), 777):
        messages += decoder.feed(bytearray(frame[i:i + 777]))
    [message] = messages
    assert message["episodes"][0]["observations"]["finalized"] is True
    assert_same_episodes(message, FrameDecoder().feed(frame)[0])


# --------------------------------------------------------------------------
# Episodes built directly


def slots(episode) -> dict:
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    return {name: getattr(episode, name) for name in SingleAgentEpisode.__slots__}


def same_buffer(a, b) -> None:
    assert type(a) is type(b)
    assert a.__dict__.keys() == b.__dict__.keys()
    for key, value in a.__dict__.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, b.__dict__[key])
        else:
            assert value == b.__dict__[key], key


@pytest.mark.parametrize("fmt", ["rllib", "ours"])
def test_episode_from_state_is_from_state(fmt):
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from rlinks_rllib.server.ingest.episodes import episode_from_state

    theirs, ours = cartpole_batch(80, seed=2)
    states = [e.get_state() for e in theirs] if fmt == "rllib" else ours
    for state in states:
        clean = check_episode_state(state)
        fast, slow = episode_from_state(clean), SingleAgentEpisode.from_state(clean)
        a, b = slots(fast), slots(slow)
        assert a.keys() == b.keys()
        for name in a:
            if name in ("observations", "actions", "rewards", "infos"):
                same_buffer(a[name], b[name])
            elif name == "extra_model_outputs":
                assert a[name].keys() == b[name].keys()
                for key in a[name]:
                    same_buffer(a[name][key], b[name][key])
                assert a[name].default_factory().lookback == b[name].default_factory().lookback
            else:
                assert a[name] == b[name], name
        fast.validate()
        assert len(fast) == len(slow) and fast.get_return() == slow.get_return()
        assert fast.is_done == slow.is_done


def test_log_episodes_reports_what_per_episode_logging_reports():
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from rlinks_rllib.server.metrics import log_episodes

    finished = [(10 + i, float(i) * 1.5, 0.01 * i) for i in range(37)]
    window = 20
    ours, theirs = MetricsLogger(), MetricsLogger()
    log_episodes(ours, finished[:5], window)
    log_episodes(ours, finished[5:], window)
    from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
    from ray.rllib.utils.metrics import (
        EPISODE_AGENT_RETURN_MEAN, EPISODE_DURATION_SEC_MEAN, EPISODE_LEN_MAX, EPISODE_LEN_MEAN, EPISODE_LEN_MIN,
        EPISODE_MODULE_RETURN_MEAN, EPISODE_RETURN_MAX, EPISODE_RETURN_MEAN, EPISODE_RETURN_MIN,
    )

    for length, ret, duration in finished:  # as SingleAgentEnvRunner logs them
        theirs.log_value(EPISODE_LEN_MEAN, length, window=window)
        theirs.log_value(EPISODE_RETURN_MEAN, ret, window=window)
        theirs.log_value(EPISODE_DURATION_SEC_MEAN, duration, window=window)
        theirs.log_value((EPISODE_AGENT_RETURN_MEAN, DEFAULT_AGENT_ID), ret, window=window)
        theirs.log_value((EPISODE_MODULE_RETURN_MEAN, DEFAULT_MODULE_ID), ret, window=window)
        theirs.log_value(EPISODE_LEN_MIN, length, reduce="min", window=window)
        theirs.log_value(EPISODE_RETURN_MIN, ret, reduce="min", window=window)
        theirs.log_value(EPISODE_LEN_MAX, length, reduce="max", window=window)
        theirs.log_value(EPISODE_RETURN_MAX, ret, reduce="max", window=window)
    assert ours.reduce() == theirs.reduce()


def test_transport_counters_that_did_not_grow_reduce_as_if_logged_again():
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from rlinks_rllib.server.metrics import _COUNTERS, RUNNER_METRICS_KEY, TransportMetrics

    reports = [{"bytes_in": 10, "frames_in": 1, "errors": {"bad_message": 1}},
               {"bytes_in": 10, "frames_in": 3, "errors": {"bad_message": 1}},
               {"bytes_in": 25, "frames_in": 3, "errors": {"bad_message": 2, "limit_exceeded": 1}},
               {"bytes_in": 25, "frames_in": 3, "errors": {"bad_message": 2, "limit_exceeded": 1}}]
    ours, theirs, metrics = MetricsLogger(), MetricsLogger(), TransportMetrics()
    last: dict = {}
    for report in reports:
        snapshot = {"clients_connected": 2, **report}
        metrics.log(ours, snapshot, inbox_steps=0, inbox_bytes=0, weights_seq_no=1, lags=[],
                    dropped_stale_steps=0)
        # Every counter logged every time, as a delta.
        key = RUNNER_METRICS_KEY
        for name in ("clients_connected", "inbox_steps", "inbox_bytes", "weights_seq_no"):
            theirs.log_value((key, name), {"clients_connected": 2, "weights_seq_no": 1}.get(name, 0),
                             reduce="max", window=1)
        counts = {**{name: snapshot.get(name, 0) for name in _COUNTERS},
                  **{("errors", code): n for code, n in report["errors"].items()}, "dropped_stale_steps": 0,
                  "dropped_backlog_steps": 0}
        for name, value in counts.items():
            path = (key, *name) if isinstance(name, tuple) else (key, name)
            theirs.log_value(path, value - last.get(name, 0), reduce="lifetime_sum")
            last[name] = value
        assert ours.reduce() == theirs.reduce()


def test_episode_totals_sum_a_chunked_episode_as_rllib_does():
    from rlinks_rllib.server.ingest.episodes import episode_from_state
    from rlinks_rllib.server.metrics import EpisodeTotals

    _, ours = cartpole_batch(90, seed=5, episode_steps=30)
    states = [check_episode_state(s) for s in ours]
    episodes = [episode_from_state(s) for s in states]
    totals = EpisodeTotals()
    done = [t for t in (totals.add(e) for e in episodes) if t is not None]
    assert [(length, ret) for length, ret, _ in done] == [
        (len(e), float(np.sum(e.get_rewards()))) for e in episodes if e.is_done]
