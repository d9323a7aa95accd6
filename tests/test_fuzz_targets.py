"""The fuzz targets of ``fuzz/targets.py``, driven by hypothesis: bounded in CI, as long as you like locally.

In CI each target runs a few hundred examples (about 20 s for the file).
``RLINKS_FUZZ_EXAMPLES=100000`` runs that many per target instead
(``make fuzz``); hypothesis keeps every failure it finds in
``.hypothesis/`` and replays it first on the next run.

Inputs start from the shared test vectors and are mutated (bytes flipped,
inserted, deleted, duplicated, spliced from another vector, the length
header fixed up so the mutation reaches the body), from valid messages
with fields replaced, and from a valid CartPole episode with any part
replaced. A live server (no Ray) also takes random sequences of such
frames, with and without authentication, and must stay up, count, and
close cleanly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fuzz import targets  # noqa: E402
from rlinks_rllib.protocol import make_offer  # noqa: E402
from rlinks_rllib.protocol.episodes import check_episode_state  # noqa: E402
from rlinks_rllib.server.network.listener import RLinkServer  # noqa: E402
from rlinks_rllib.server.errors import IngestError  # noqa: E402
from rlinks_rllib.server.settings import RLinkSettings  # noqa: E402

#: Examples per target; ``RLINKS_FUZZ_EXAMPLES`` overrides the CI default.
LONG = int(os.environ.get("RLINKS_FUZZ_EXAMPLES", "0"))

settings.register_profile(
    "rlinks-fuzz",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)


def examples(ci: int) -> settings:
    """The fuzz profile with ``ci`` examples, or ``RLINKS_FUZZ_EXAMPLES`` when set."""
    return settings(settings.get_profile("rlinks-fuzz"), max_examples=LONG or ci)


#: Bounded by the example count; a long run gets ~50 ms per example and target.
pytestmark = pytest.mark.timeout(max(120, int(LONG * 0.05)))


# ----------------------------------------------------------------------
# Strategies


@st.composite
def mutated_streams(draw) -> bytes:
    """A test vector with up to 8 mutations."""
    data = bytearray(draw(st.sampled_from(targets.SEEDS)))
    for _ in range(draw(st.integers(0, 8))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "duplicate", "splice", "truncate", "header"]))
        n = len(data)
        at = draw(st.integers(0, max(n - 1, 0)))
        if op == "flip" and n:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and n:
            data[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xC0, 0xC1, 0xC4, 0xD9, 0xDC, 0xDE, 0xFF,
                                             0x30, 0x39, 0x20, 0x2B, 0x91, 0x81]))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete" and n:
            del data[at : at + draw(st.integers(1, 16))]
        elif op == "duplicate" and n:
            data[at:at] = data[at : at + draw(st.integers(1, 64))]
        elif op == "splice":
            other = draw(st.sampled_from(targets.SEEDS))
            start = draw(st.integers(0, len(other)))
            data[at:] = other[start:]
        elif op == "truncate":
            del data[at:]
        elif op == "header" and n >= 8:
            # Make the first header agree with the (mutated) length, so the body is decoded.
            data[:8] = b"%08d" % min(n - 8, 99_999_999)
    return bytes(data)


cuts = st.lists(st.integers(0, 1 << 16), max_size=6)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=8),
    st.binary(max_size=40),
)
arrays = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64, np.int64, np.int8, np.uint8, np.bool_, np.float16, np.complex64]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
)
values = st.recursive(
    st.one_of(scalars, arrays),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=16,
)

TEMPLATES = {
    "PING": {"type": "PING", "rlinks": make_offer(["ack", "want_steps", "auth"], agent="fuzz",
                                                   client_id="c", auth_nonce=b"\0" * 32)},
    "AUTH": {"type": "AUTH", "proof": b"\0" * 32},
    "GET_STATE": {"type": "GET_STATE"},
    "GET_CONFIG": {"type": "GET_CONFIG"},
    "EPISODES": {"type": "EPISODES", "episodes": [targets.valid_episode(3)], "timesteps": 3, "seq": 1},
    "EPISODES_AND_GET_STATE": {"type": "EPISODES_AND_GET_STATE", "episodes": [targets.valid_episode(3, seed=1)],
                               "seq": 2},
    "ACK": {"type": "ACK", "seq": 1},
    "ERROR": {"type": "ERROR", "code": "x", "message": "y"},
    "GET_ACTION": {"type": "GET_ACTION"},
}


@st.composite
def messages(draw) -> dict:
    """A message template with fields replaced, added or removed."""
    message = dict(draw(st.sampled_from(list(TEMPLATES.values()))))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(["type", "episodes", "seq", "timesteps", "rlinks", "proof", "state", "config",
                                    "code", "message", "want_steps", "extra"]))
        if draw(st.booleans()):
            message[key] = draw(values)
        else:
            message.pop(key, None)
    return message


EPISODE_PATHS = [
    ("id_",), ("agent_id",), ("module_id",), ("t",), ("t_started",), ("is_terminated",), ("is_truncated",),
    ("_start_time",), ("_last_step_time",), ("_observation_space",), ("custom_data",), ("extra_model_outputs",),
    ("observations",), ("observations", "data"), ("observations", "lookback"), ("observations", "finalized"),
    ("observations", "space"), ("actions", "data"), ("actions", "finalized"), ("rewards", "data"),
    ("rewards", "lookback"), ("infos", "data"), ("infos", "finalized"),
    ("extra_model_outputs", "action_logp", "data"), ("extra_model_outputs", "action_dist_inputs", "data"),
    ("extra_model_outputs", "action_logp"), ("extra_model_outputs", "vf_preds"),
]


@st.composite
def episodes(draw) -> dict:
    """A valid CartPole chunk with up to four parts replaced or removed."""
    state = targets.valid_episode(draw(st.integers(1, 8)), seed=draw(st.integers(0, 3)))
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(EPISODE_PATHS))
        node = state
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        choice = draw(st.integers(0, 4))
        if choice == 0:
            node.pop(path[-1], None)
        elif choice == 1 and isinstance(node.get(path[-1]), np.ndarray):
            old = node[path[-1]]
            node[path[-1]] = old.astype(draw(st.sampled_from([np.float64, np.int32, np.uint8, np.bool_, np.float16])))
        elif choice == 2 and isinstance(node.get(path[-1]), np.ndarray) and node[path[-1]].size:
            old = node[path[-1]].astype(np.float64)
            old.reshape(-1)[0] = draw(st.sampled_from([np.nan, np.inf, -1.0, 2.0, 1e300]))
            with np.errstate(invalid="ignore", over="ignore"):
                node[path[-1]] = old.astype(node[path[-1]].dtype) if draw(st.booleans()) else old
        else:
            node[path[-1]] = draw(values)
    return state


def over_the_wire(value):
    """What a peer's value looks like after our encoder and decoder (or None if it can't be sent)."""
    from rlinks_rllib.protocol.codec import decode_body, encode_body

    try:
        return decode_body(b"".join(encode_body(value)))
    except (TypeError, ValueError, OverflowError):
        return None


# ----------------------------------------------------------------------
# Protocol targets


@examples(3000)
@given(data=mutated_streams(), cuts=cuts)
def test_frame_decoder_on_mutated_vectors(data, cuts):
    decoded = targets.check_stream(data, cuts)
    target(float(len(decoded)), label="messages decoded before an error")


@examples(1500)
@given(message=messages())
def test_message_validation(message):
    wire = over_the_wire(message)
    if wire is not None:
        targets.check_message(wire)


leaf_spaces = st.one_of(
    st.builds(lambda n, start: {"kind": "discrete", "n": n, "start": start}, st.integers(-1, 4), st.integers(-2, 2)),
    st.builds(
        lambda shape, dtype: {"kind": "box", "shape": list(shape), "dtype": dtype,
                              "low": np.array(-1.0), "high": np.array(1.0)},
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), st.sampled_from(["<f4", "|u1", "<i8", "|b1", "<c8", "x"]),
    ),
    st.builds(lambda shape: {"kind": "multi_binary", "shape": list(shape)}, hnp.array_shapes(max_dims=2, max_side=3)),
    st.builds(lambda nvec: {"kind": "multi_discrete", "nvec": np.array(nvec)}, st.lists(st.integers(0, 3), max_size=3)),
)
space_descriptions = st.recursive(
    st.one_of(leaf_spaces, values),
    lambda inner: st.one_of(
        st.builds(lambda d: {"kind": "dict", "spaces": d}, st.dictionaries(st.text(max_size=4), inner, max_size=3)),
        st.builds(lambda items: {"kind": "tuple", "spaces": items}, st.lists(inner, max_size=3)),
    ),
    max_leaves=8,
)


@examples(400)
@given(desc=space_descriptions, value=values, data=st.data())
def test_space_descriptions_and_values(desc, value, data):
    wire_desc = over_the_wire(desc)
    if wire_desc is None:
        return
    targets.check_space_and_value(wire_desc, value)
    if isinstance(wire_desc, dict) and wire_desc.get("kind") == "dict" and isinstance(wire_desc.get("spaces"), dict):
        # A value shaped like the space, so the checks get past the first key.
        shaped = {key: data.draw(values) for key in wire_desc["spaces"]}
        targets.check_space_and_value(wire_desc, shaped)


def _rllib_available() -> bool:
    try:
        import ray.rllib  # noqa: F401
    except ImportError:
        return False
    return True


@examples(600)
@given(state=episodes())
def test_episode_check_accepts_only_what_rllib_can_train_on(state):
    wire = over_the_wire(state)
    if wire is None:
        return
    clean = targets.check_episode(wire, rllib=_rllib_available())
    event("accepted" if clean is not None else "refused")


@examples(1000)
@given(ping=st.one_of(messages(), values), proof=st.one_of(st.binary(min_size=31, max_size=33), values))
def test_handshake_never_accepts_a_proof_made_without_the_secret(ping, proof):
    targets.check_handshake(over_the_wire(ping), over_the_wire(proof))


# ----------------------------------------------------------------------
# A live server


def _ingest(wire: list) -> tuple[list, int]:
    try:
        states = [check_episode_state(w, **targets.CARTPOLE_RULES) for w in wire]
    except ValueError as exc:
        raise IngestError(str(exc)) from exc
    return states, sum(s["t"] - s["t_started"] for s in states)


@contextlib.contextmanager
def live_server(**settings_):
    server = RLinkServer(RLinkSettings(port=0, handshake_timeout_s=2.0, frame_timeout_s=2.0, **settings_), port=0,
                         ingest=_ingest, config_message=lambda _with_graph: {"type": "SET_CONFIG", "config": {"version": 1}},
                         update_steps=16, on_policy=False)
    server.replace_weights({"w": np.zeros((2, 2), np.float32)}, 1)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class _Errors(logging.Handler):
    """Collects ERROR records: an exception escaping a session shows up as one."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module", params=["open", "auth"])
def server(request, tmp_path_factory):
    kwargs = {}
    if request.param == "auth":
        secret = tmp_path_factory.mktemp("secret") / "secret"
        secret.write_text("fuzzing-secret-fuzzing-secret")
        secret.chmod(0o600)
        kwargs = dict(auth="on", auth_secret_file=str(secret))
    errors = _Errors()
    for name in ("asyncio", "rlinks_rllib.server"):
        logging.getLogger(name).addHandler(errors)
    try:
        with live_server(**kwargs) as live:
            yield live
            # Whatever came before, an honest client still gets in.
            assert live.healthy
    finally:
        for name in ("asyncio", "rlinks_rllib.server"):
            logging.getLogger(name).removeHandler(errors)
    assert not errors.records, [r.getMessage() for r in errors.records]


def _np(value):
    """msgpack-numpy's map form, as RLlib's peers write arrays."""
    if isinstance(value, np.ndarray):
        return {b"nd": True, b"type": value.dtype.str, b"kind": b"", b"shape": list(value.shape),
                b"data": value.tobytes()}
    if isinstance(value, np.generic):
        return {b"nd": False, b"type": value.dtype.str, b"data": value.tobytes()}
    raise TypeError(type(value).__name__)


def _frame(message: dict) -> bytes:
    """``message`` as one frame, or nothing if msgpack can't hold it."""
    try:
        body = msgpack.packb(message, use_bin_type=True, default=_np)
    except (TypeError, ValueError, OverflowError):
        return b""
    return b"%08d" % len(body) + body


frames = st.one_of(messages().map(_frame), mutated_streams())


@examples(150)
@given(conversation=st.lists(frames, min_size=1, max_size=6))
def test_live_server_survives_any_conversation(server, conversation):
    before = server.stats.connections_total
    with socket.create_connection(server.address, timeout=5) as sock:
        for chunk in conversation:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server has had enough of us: fine
        with contextlib.suppress(OSError):  # the server may have closed already
            sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if not sock.recv(1 << 16):
                    break
            except ConnectionResetError:
                break
            except TimeoutError:
                break
    deadline = time.monotonic() + 5
    while (server.stats.connections_total == before or server.stats.clients_connected) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert server.healthy
    assert server.stats.clients_connected == 0
    server.inbox.take(1 << 30, 0)  # keep the inbox from filling up over many examples
