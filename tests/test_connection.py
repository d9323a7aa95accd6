"""The connection core (``protocol/connection.py``), driven by bytes alone.

No sockets, threads or Ray: every test makes :class:`Connection` objects,
moves what one queues into the other (:func:`pump`) or feeds frames made by
hand, and reads the events (:func:`events`). Where a peer is needed to reach
a state, it is a :class:`Connection` too, so both ends of every rule run.

Layout: helpers and the connections in each named state (``SETUPS``); the
handshake; what may arrive in each state (``RECEIVE_RULES``) and what may be
sent (``SEND_RULES``); auth; the ACK window; a conversation split at every
byte; the shared test vectors (``tests/vectors``).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from test_vectors import VECTORS, meaning

from rlinks_rllib.protocol.auth import NONCE_KEY
from rlinks_rllib.protocol.connection import (
    MAX_CLIENT_ID_CHARS,
    Acked,
    ActionsReceived,
    ActReceived,
    ConfigReceived,
    ConfigRequested,
    Connection,
    ConnectionClosed,
    EndpointsReceived,
    EndpointsRequested,
    EpisodesReceived,
    ErrorReceived,
    HandshakeDone,
    ModulesReceived,
    ModulesRequested,
    Role,
    State,
    StateReceived,
    StateRequested,
)
from rlinks_rllib.protocol.errors import (
    AuthFailed,
    DecodeError,
    FrameError,
    FrameTooLarge,
    InvalidMessage,
    LocalProtocolError,
    UnexpectedMessage,
    UnsupportedMessage,
)
from rlinks_rllib.protocol.framing import FrameDecoder, encode_body_once, encode_frame, encode_message
from rlinks_rllib.protocol.limits import HANDSHAKE_MAX_FRAME_BYTES
from rlinks_rllib.protocol.messages import OLD_API_TYPES, MessageType
from rlinks_rllib.protocol.weights import WeightsError, build_state
from rlinks_rllib.protocol.window import AckWindow

T = MessageType
SECRET = b"a-shared-secret-of-32-bytes-long"
#: What our clients offer and our servers agree to, unless a test says otherwise.
EXT = ("ack", "want_steps")

CONFIG_FRAME = (VECTORS / "valid_set_config_msgpack.bin").read_bytes()
STATE_BODY = encode_body_once(build_state({"pi.w": np.arange(6, dtype=np.float32).reshape(2, 3)}, 1))
EPISODE = {
    "id_": "e1",
    "observations": np.arange(20, dtype=np.float32).reshape(5, 4),
    "actions": np.array([0, 1, 1, 0, 1]),
    "rewards": [1.0] * 5,
}

# ---------------------------------------------------------------------------
# Helpers


def wire(conn: Connection) -> bytes:
    """Everything ``conn`` queued, as one byte string."""
    return b"".join(conn.data_to_send())


def pump(a: Connection, b: Connection) -> bytes:
    """Move what ``a`` queued into ``b``; return the bytes moved."""
    data = wire(a)
    if data:
        b.receive_data(data)
    return data


def events(conn: Connection) -> list:
    """Every event ``conn`` has ready."""
    out = []
    while (event := conn.next_event()) is not None:
        out.append(event)
    return out


def converse(client: Connection, server: Connection) -> tuple[list, list]:
    """Move bytes both ways until both sides are quiet; the events (client's, server's)."""
    seen_client, seen_server = [], []
    while True:
        to_server = pump(client, server)
        seen_server += events(server)
        to_client = pump(server, client)
        seen_client += events(client)
        if not to_server and not to_client:
            return seen_client, seen_server


def client(**kw) -> Connection:
    return Connection(Role.CLIENT, **{"extensions": EXT, "client_id": "sim-1", "agent": "test-client/1", **kw})


def server(**kw) -> Connection:
    return Connection(Role.SERVER, **{"extensions": EXT, "agent": "test-server/1", **kw})


def directory(**kw) -> Connection:
    return Connection(Role.DIRECTORY, **{"extensions": ["endpoints"], **kw})


def connect(c: Connection | None = None, s: Connection | None = None) -> tuple[Connection, Connection]:
    """A client and a server (or directory) through their handshake."""
    c, s = c or client(), s or server()
    c.start()
    converse(c, s)
    assert c.state is State.READY and s.state is State.READY
    return c, s


def frame(message: dict) -> bytes:
    return encode_message(message)


def raw_frame(message: dict) -> bytes:
    """A frame of a message the encoder would refuse to make (an old-API type)."""
    return encode_frame(encode_body_once(message))


def comparable(value):
    """``value`` with each array as (dtype, shape, bytes), so that == compares contents (faster than ``meaning``)."""
    if isinstance(value, np.ndarray):
        return value.dtype.str, value.shape, value.tobytes()
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def plain(event, form=meaning) -> tuple:
    """An event as data: class name, fields in the vectors' JSON form (a batch by its seq)."""
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    if isinstance(event, Acked):
        fields["batch"] = None if event.batch is None else event.batch.seq
    return type(event).__name__, form(fields)


def sent_types(data: bytes) -> list[str]:
    return [m["type"] for m in FrameDecoder().feed(data)]


def assert_closed_for_good(conn: Connection) -> None:
    """CLOSED, and stays so whatever arrives next (bytes, garbage, the end of the stream)."""
    assert conn.state is State.CLOSED
    conn.receive_data(frame({"type": "PING"}) + frame({"type": "GET_STATE"}) + b"garbage!")
    conn.receive_eof()
    assert conn.next_event() is None
    assert conn.read_buffer() is None
    assert conn.state is State.CLOSED
    assert conn.data_to_send() == []


# ---------------------------------------------------------------------------
# Connections in each state, reached by bytes


def _drained(conn: Connection) -> Connection:
    conn.data_to_send()
    return conn


def _greeting(c: Connection) -> Connection:
    c.start()
    return _drained(c)


def _half_auth(c: Connection | None = None, s: Connection | None = None) -> tuple[Connection, Connection]:
    """PING and PONG of an auth handshake; the client's AUTH stays queued."""
    c, s = c or client(secret=SECRET), s or server(secret=SECRET)
    c.start()
    pump(c, s)
    assert events(s) == []
    pump(s, c)
    assert events(c) == []
    return c, s


def _client_after(*sends, c: Connection | None = None, s: Connection | None = None) -> Connection:
    """A client past its handshake that has made ``sends`` (see ``SENDS``), none answered."""
    c, _ = connect(c, s)
    for send in sends:
        SENDS[send](c)
    return _drained(c)


def _server_after(*messages: dict, c: Connection | None = None, s: Connection | None = None) -> Connection:
    """A server (or directory) past its handshake that has read ``messages`` and answered nothing."""
    _, s = connect(c, s)
    s.receive_data(b"".join(frame(m) for m in messages))
    events(s)
    return s


def _idle_with_ping_read(s: Connection, offer: bool) -> Connection:
    message = {"type": "PING", "rlinks": {"version": 1, "extensions": list(EXT)}} if offer else {"type": "PING"}
    s.receive_data(frame(message))
    events(s)
    return _drained(s)


#: Every send call, with arguments that are right whenever the call is legal.
SENDS = {
    "start": lambda c: c.start(),
    "send_get_config": lambda c: c.send_get_config(),
    "send_get_state": lambda c: c.send_get_state(),
    "send_get_endpoints": lambda c: c.send_get_endpoints(),
    "send_episodes": lambda c: c.send_episodes([], steps=0, timesteps=0, on_policy=False),
    "send_episodes(on_policy)": lambda c: c.send_episodes([], steps=0, timesteps=0, on_policy=True),
    "send_config": lambda c: c.send_config(CONFIG_FRAME),
    "send_state": lambda c: c.send_state(STATE_BODY),
    "send_state(want_steps)": lambda c: c.send_state(STATE_BODY, want_steps=10),
    "send_ack": lambda c: c.send_ack(1),
    "send_endpoints": lambda c: c.send_endpoints([]),
}


#: name -> (the state it is in, a factory for a fresh connection in it)
SETUPS = {
    "client IDLE": (State.IDLE, lambda: client()),
    "client GREETING": (State.GREETING, lambda: _greeting(client())),
    "client AUTHENTICATING": (State.AUTHENTICATING, lambda: _drained(_half_auth()[0])),
    "client READY": (State.READY, lambda: connect()[0]),
    "client READY owing SET_CONFIG": (State.READY, lambda: _client_after("send_get_config")),
    "client READY, 7 batches sent": (State.READY, lambda: _client_after(*["send_episodes"] * 7)),
    "client READY, weights_notice, 7 batches sent": (State.READY, lambda: _client_after(
        *["send_episodes"] * 7, c=client(extensions=EXT + ("weights_notice",)),
        s=server(extensions=EXT + ("weights_notice",)))),
    "client AWAITING_WEIGHTS": (State.AWAITING_WEIGHTS, lambda: _client_after("send_episodes(on_policy)")),
    "client READY owing ENDPOINTS": (
        State.READY, lambda: _client_after("send_get_endpoints", c=client(extensions=["endpoints"]), s=directory())),
    "server IDLE": (State.IDLE, lambda: server()),
    "server IDLE with a secret": (State.IDLE, lambda: server(secret=SECRET)),
    "server AUTHENTICATING": (State.AUTHENTICATING, lambda: _half_auth()[1]),
    "server READY": (State.READY, lambda: _server_after()),
    "server READY owing SET_CONFIG, SET_STATE": (
        State.READY, lambda: _server_after({"type": "GET_CONFIG"}, {"type": "GET_STATE"})),
    "server READY, plain, owing SET_STATE": (
        State.READY, lambda: _server_after({"type": "GET_STATE"}, c=client(extensions=()))),
    "server AWAITING_WEIGHTS": (
        State.AWAITING_WEIGHTS,
        lambda: _server_after({"type": "EPISODES_AND_GET_STATE", "episodes": [], "seq": 1})),
    "directory IDLE": (State.IDLE, lambda: directory()),
    "directory READY": (State.READY, lambda: _idle_with_ping_read(directory(), offer=False)),
    "directory READY owing ENDPOINTS": (
        State.READY,
        lambda: _server_after({"type": "GET_ENDPOINTS"}, c=client(extensions=["endpoints"]), s=directory())),
}


def make(setup: str) -> Connection:
    return SETUPS[setup][1]()


@pytest.mark.parametrize("name", SETUPS)
def test_setup_reaches_its_state(name):
    conn = make(name)
    assert conn.state is SETUPS[name][0]
    assert conn.data_to_send() == []


# ---------------------------------------------------------------------------
# The handshake, and the states of each role in order


def test_client_and_server_walk_through_every_state():
    c, s = client(), server()
    assert (c.state, s.state) == (State.IDLE, State.IDLE)
    assert c.handshaking and s.handshaking
    c.start()
    assert c.state is State.GREETING
    pump(c, s)
    [done] = events(s)
    assert s.state is State.READY and not s.handshaking
    assert done == HandshakeDone(frozenset(EXT), plain=False, peer_agent="test-client/1", client_id="sim-1")
    pump(s, c)
    [done] = events(c)
    assert c.state is State.READY
    assert done == HandshakeDone(frozenset(EXT), plain=False, peer_agent="test-server/1")

    c.send_episodes([EPISODE], steps=5, timesteps=5, on_policy=True)
    assert c.state is State.AWAITING_WEIGHTS and c.awaiting is T.SET_STATE
    pump(c, s)
    [got] = events(s)
    assert got.on_policy and got.seq == 1 and s.state is State.AWAITING_WEIGHTS
    s.send_ack(1)
    assert s.state is State.AWAITING_WEIGHTS  # the ACK comes before the weights
    s.send_state(STATE_BODY, want_steps=64)
    assert s.state is State.READY
    pump(s, c)
    acked, weights = events(c)
    assert acked.seq == 1 and acked.batch.acked
    assert weights.seq_no == 1 and weights.want_steps == 64
    assert c.state is State.READY and c.awaiting is None

    c.receive_eof()
    assert events(c) == [ConnectionClosed()] and c.state is State.CLOSED
    s.send_error("shutting_down", "bye")
    assert s.state is State.CLOSED
    assert sent_types(wire(s)) == ["ERROR"]


def test_directory_walks_idle_ready_closed():
    c, d = client(extensions=["endpoints"]), directory()
    assert d.state is State.IDLE
    c.start()
    seen_c, seen_d = converse(c, d)
    assert d.state is State.READY
    assert seen_d == [
        HandshakeDone(frozenset({"endpoints"}), plain=False, peer_agent="test-client/1", client_id="sim-1")]
    assert seen_c[0].peer_is_directory and c.peer_is_directory
    c.send_get_endpoints()
    c.send_get_endpoints()  # requests may be pipelined
    pump(c, d)
    assert events(d) == [EndpointsRequested(), EndpointsRequested()]
    d.send_endpoints([{"host": "h", "port": 1}])
    d.send_endpoints([])
    pump(d, c)
    assert events(c) == [EndpointsReceived([{"host": "h", "port": 1}]), EndpointsReceived([])]
    d.receive_eof()
    assert events(d) == [ConnectionClosed()] and d.state is State.CLOSED


def test_plain_rllib_client_gets_a_bare_pong():
    s = server()
    s.receive_data(frame({"type": "PING"}))
    assert events(s) == [HandshakeDone(frozenset(), plain=True)]
    assert wire(s) == frame({"type": "PONG"})
    assert not s.peer_offered and s.extensions == frozenset()


def test_client_facing_a_plain_rllib_server_agrees_to_nothing():
    c = _greeting(client())
    c.receive_data(frame({"type": "PONG"}))
    assert events(c) == [HandshakeDone(frozenset(), plain=True)]
    assert c.extensions == frozenset()
    batch = c.send_episodes([], steps=0, timesteps=0, on_policy=False)
    assert batch.seq is None and "seq" not in FrameDecoder().feed(wire(c))[0]


def test_negotiation_cuts_the_offer_to_what_both_speak():
    c, s = client(extensions=["ack", "want_steps", "endpoints"]), server(extensions=["ack"])
    c.start()
    seen_c, seen_s = converse(c, s)
    assert seen_s[0].extensions == seen_c[0].extensions == frozenset({"ack"})
    assert c.extensions == s.extensions == frozenset({"ack"})
    assert c.our_extensions == frozenset({"ack", "want_steps", "endpoints"})


def test_client_offers_its_extensions_agent_and_id():
    c = client()
    c.start()
    [ping] = FrameDecoder().feed(wire(c))
    assert ping == {"type": "PING", "rlinks": {"version": 1, "extensions": sorted(EXT),
                                              "agent": "test-client/1", "client_id": "sim-1"}}


@pytest.mark.parametrize("given, taken", [
    ("c0ffee", "c0ffee"),
    ("x" * MAX_CLIENT_ID_CHARS, "x" * MAX_CLIENT_ID_CHARS),
    ("x" * (MAX_CLIENT_ID_CHARS + 1), None),
    ("", None),
    (42, None),
])
def test_server_takes_a_usable_client_id(given, taken):
    s = server()
    s.receive_data(frame({"type": "PING", "rlinks": {"version": 1, "client_id": given}}))
    [done] = events(s)
    assert done.client_id == taken == s.client_id


def test_malformed_offer_is_invalid_message():
    s = server()
    s.receive_data(frame({"type": "PING", "rlinks": {"version": "one"}}))
    with pytest.raises(InvalidMessage) as info:
        events(s)
    assert info.value.code == "invalid_message"
    assert_closed_for_good(s)


@pytest.mark.parametrize("offer", [True, False], ids=["offer", "plain"])
def test_keep_alive_ping_is_answered_in_kind(offer):
    s = _idle_with_ping_read(server(), offer)
    # A later PING's offer changes nothing: the agreement stands as made.
    s.receive_data(frame({"type": "PING", "rlinks": {"version": 1, "extensions": ["endpoints"]}}))
    assert events(s) == []
    [pong] = FrameDecoder().feed(wire(s))
    if offer:
        assert pong == {"type": "PONG", "rlinks": {"version": 1, "extensions": sorted(EXT), "agent": "test-server/1"}}
    else:
        assert pong == {"type": "PONG"}
    assert s.state is State.READY


def test_directory_answers_keep_alive():
    d = make("directory READY")
    d.receive_data(frame({"type": "PING"}))
    assert events(d) == [] and wire(d) == frame({"type": "PONG"})


def _padded_ping(body_bytes: int) -> bytes:
    """A PING whose body is exactly ``body_bytes`` long (an unknown key pads it)."""
    base = len(encode_body_once({"type": "PING", "pad": b""}))
    for extra in range(8):  # the bin header grows with the length
        data = frame({"type": "PING", "pad": b"x" * (body_bytes - base - extra)})
        if len(data) - 8 == body_bytes:
            return data
    raise AssertionError("no padding fits")


@pytest.mark.parametrize("role", [Role.SERVER, Role.DIRECTORY])
def test_frame_cap_before_the_handshake(role):
    conn = Connection(role)
    conn.receive_data(_padded_ping(HANDSHAKE_MAX_FRAME_BYTES))  # exactly the cap: taken
    assert isinstance(conn.next_event(), HandshakeDone)

    conn = Connection(role)
    conn.receive_data(b"%08d" % (HANDSHAKE_MAX_FRAME_BYTES + 1))  # refused from its header alone
    with pytest.raises(FrameTooLarge) as info:
        events(conn)
    assert info.value.code == "frame_too_large"
    assert_closed_for_good(conn)


def test_frame_cap_holds_while_authenticating_and_lifts_after():
    _, s = _half_auth()
    s.receive_data(b"%08d" % (HANDSHAKE_MAX_FRAME_BYTES + 1))
    with pytest.raises(FrameTooLarge):
        events(s)

    big = {"type": "EPISODES", "episodes": [{"obs": np.zeros(50_000, np.float32)}]}
    s = make("server READY")
    s.receive_data(frame(big))
    [got] = events(s)
    assert got.frame_bytes > HANDSHAKE_MAX_FRAME_BYTES
    # A client has no handshake cap: it takes a large PONG.
    c = make("client GREETING")
    c.receive_data(_padded_ping(HANDSHAKE_MAX_FRAME_BYTES * 2).replace(b"PING", b"PONG"))
    assert isinstance(c.next_event(), HandshakeDone)


def test_a_smaller_own_limit_wins_before_the_handshake():
    s = server(max_frame_bytes=1000)
    s.receive_data(b"%08d" % 1001)
    with pytest.raises(FrameTooLarge):
        events(s)


def test_server_refuses_a_frame_over_its_own_limit_after_the_handshake():
    s = _server_after(s=server(max_frame_bytes=HANDSHAKE_MAX_FRAME_BYTES * 2))
    s.receive_data(b"%08d" % (HANDSHAKE_MAX_FRAME_BYTES * 2 + 1))
    with pytest.raises(FrameTooLarge):
        events(s)


@pytest.mark.parametrize("kwargs", [{"extensions": ["auth"]}, {"extensions": ["nope"]}])
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        Connection(Role.CLIENT, **kwargs)


def test_eof_delivers_what_came_before_it():
    s = make("server READY")
    s.receive_data(frame({"type": "GET_STATE"}))
    s.receive_eof()
    assert events(s) == [StateRequested(), ConnectionClosed()]
    assert s.state is State.CLOSED


def test_eof_mid_frame_is_a_bad_frame():
    s = make("server READY")
    s.receive_data(frame({"type": "GET_STATE"})[:-1])
    s.receive_eof()
    with pytest.raises(FrameError) as info:
        events(s)
    assert info.value.code == "bad_frame"
    assert_closed_for_good(s)


# ---------------------------------------------------------------------------
# What may arrive in each state

UNEXPECTED = (UnexpectedMessage, "unexpected_message")
UNSUPPORTED = (UnsupportedMessage, "unsupported_message")
AUTH_FAILED = (AuthFailed, "auth_failed")

#: One well-formed message of each type (ACK 99: a seq no setup ever sent; proofs that prove nothing).
SAMPLES = {
    T.PING: {"type": "PING"},
    T.PONG: {"type": "PONG"},
    T.GET_CONFIG: {"type": "GET_CONFIG"},
    T.GET_STATE: {"type": "GET_STATE"},
    T.GET_ENDPOINTS: {"type": "GET_ENDPOINTS"},
    T.SET_CONFIG: {"type": "SET_CONFIG", "config": b"\x80\x04N."},
    T.SET_STATE: {"type": "SET_STATE", "state": build_state({"w": np.zeros(3, np.float32)}, 2)},
    T.EPISODES: {"type": "EPISODES", "episodes": [], "timesteps": 0},
    T.EPISODES_AND_GET_STATE: {"type": "EPISODES_AND_GET_STATE", "episodes": [], "timesteps": 0},
    T.ERROR: {"type": "ERROR", "code": "server_error", "message": "oops"},
    T.ACK: {"type": "ACK", "seq": 99},
    T.AUTH: {"type": "AUTH", "proof": bytes(32)},
    T.AUTH_OK: {"type": "AUTH_OK", "proof": bytes(32)},
    T.ENDPOINTS: {"type": "ENDPOINTS", "endpoints": []},
    T.GET_MODULES: {"type": "GET_MODULES", "agents": ["a"]},
    T.MODULES: {"type": "MODULES", "modules": {"a": "m"}},
    **{kind: {"type": kind.value} for kind in OLD_API_TYPES},
}

#: setup -> (what a message not listed raises, {message type: what it gives: an event class,
#: None for no event, or the error it raises}). Old-API types are refused by the decoder
#: (``unsupported_message``) whatever the state.
RECEIVE_RULES = {
    # A client reads only the reply it waits for, an ACK for a batch it sent, or ERROR.
    "client IDLE": (UNEXPECTED, {T.ERROR: ErrorReceived}),
    "client GREETING": (UNEXPECTED, {T.PONG: HandshakeDone, T.ERROR: ErrorReceived}),
    "client AUTHENTICATING": (UNEXPECTED, {T.AUTH_OK: AUTH_FAILED, T.ERROR: ErrorReceived}),
    "client READY": (UNEXPECTED, {T.ERROR: ErrorReceived}),
    "client READY owing SET_CONFIG": (UNEXPECTED, {T.SET_CONFIG: ConfigReceived, T.ERROR: ErrorReceived}),
    "client AWAITING_WEIGHTS": (UNEXPECTED, {T.SET_STATE: StateReceived, T.ERROR: ErrorReceived}),
    "client READY owing ENDPOINTS": (UNEXPECTED, {T.ENDPOINTS: EndpointsReceived, T.ERROR: ErrorReceived}),
    # A server reads PING first, then (with a secret) AUTH, then requests; nothing while it owes weights.
    "server IDLE": (UNSUPPORTED, {T.PING: HandshakeDone}),
    "server IDLE with a secret": (AUTH_FAILED, {}),  # a PING without the auth offer fails too
    "server AUTHENTICATING": (AUTH_FAILED, {}),  # AUTH with a wrong proof as well
    "server READY": (UNSUPPORTED, {
        T.PING: None, T.GET_CONFIG: ConfigRequested, T.GET_STATE: StateRequested,
        T.EPISODES: EpisodesReceived, T.EPISODES_AND_GET_STATE: EpisodesReceived,
    }),
    # (ERROR from a client is refused with the server-to-client types, though PROTOCOL.md section 5
    # says it may go either way.)
    "server AWAITING_WEIGHTS": (UNSUPPORTED, {}),
    "directory IDLE": (UNSUPPORTED, {T.PING: HandshakeDone}),
    "directory READY": (UNSUPPORTED, {T.PING: None, T.GET_ENDPOINTS: EndpointsRequested}),
}
RECEIVE_CASES = [(setup, kind) for setup in RECEIVE_RULES for kind in SAMPLES]


def receive_outcome(setup: str, kind: MessageType):
    default, legal = RECEIVE_RULES[setup]
    return UNSUPPORTED if kind in OLD_API_TYPES else legal.get(kind, default)


@pytest.mark.parametrize("setup, kind", RECEIVE_CASES, ids=[f"{s}-{k.value}" for s, k in RECEIVE_CASES])
def test_receive(setup, kind):
    conn = make(setup)
    outcome = receive_outcome(setup, kind)
    # The start of a next frame rides along: it must not matter once the connection is closed.
    conn.receive_data(raw_frame(SAMPLES[kind]) + b"0000")
    if isinstance(outcome, tuple):
        error, code = outcome
        with pytest.raises(error) as info:
            conn.next_event()
        assert type(info.value) is error and info.value.code == code
        assert_closed_for_good(conn)
        conn.send_error(info.value.code, str(info.value))  # a peer is still told why
        assert sent_types(wire(conn)) == ["ERROR"]
    else:
        assert [type(e) for e in events(conn)] == ([] if outcome is None else [outcome])
        if outcome is ErrorReceived:
            assert_closed_for_good(conn)
            with pytest.raises(LocalProtocolError):
                conn.send_error("protocol_error", "an ERROR is never answered")


def test_error_received_is_cut_to_bounded_length():
    c = make("client READY")
    c.receive_data(frame({"type": "ERROR", "code": "c" * 100, "message": "m" * 10_000}))
    [error] = events(c)
    assert (len(error.code), len(error.message)) == (64, 4096)


def test_weights_that_are_not_a_weight_set_are_invalid():
    c = make("client AWAITING_WEIGHTS")
    c.receive_data(frame({"type": "SET_STATE", "state": {"rl_module": {}}}))  # no weights_seq_no
    with pytest.raises(InvalidMessage) as info:
        events(c)
    assert info.value.code == "invalid_message"
    assert_closed_for_good(c)


def test_client_that_did_not_agree_to_ack_refuses_one():
    c, s = connect(client(extensions=["want_steps"]))
    batch = c.send_episodes([], steps=0, timesteps=0, on_policy=False)
    assert batch.seq is None
    c.receive_data(frame({"type": "ACK", "seq": 1}))
    with pytest.raises(UnexpectedMessage) as info:
        events(c)
    assert info.value.code == "unexpected_message"


def test_replies_must_come_in_the_order_asked():
    c = _client_after("send_get_config", "send_get_state")
    c.receive_data(frame(SAMPLES[T.SET_STATE]))
    with pytest.raises(UnexpectedMessage):
        events(c)


def test_peer_error_after_an_error_received_is_ignored():
    c = make("client READY")
    c.receive_data(frame(SAMPLES[T.ERROR]) + b"garbage!")
    assert [type(e) for e in events(c)] == [ErrorReceived]
    assert_closed_for_good(c)


# Messages before a bad frame, or a message out of turn, in the same chunk are delivered first.


def test_messages_before_a_bad_frame_come_first():
    s = make("server READY")
    s.receive_data(frame({"type": "GET_CONFIG"}) + frame({"type": "GET_STATE"}) + b"nonsense" + frame({"type": "PING"}))
    assert s.next_event() == ConfigRequested()
    assert s.next_event() == StateRequested()
    with pytest.raises(FrameError):
        s.next_event()
    assert_closed_for_good(s)


def test_messages_before_one_out_of_turn_come_first_and_none_after():
    s = make("server READY")
    s.receive_data(frame({"type": "GET_STATE"}) + frame(SAMPLES[T.SET_STATE]) + frame({"type": "GET_CONFIG"}))
    assert s.next_event() == StateRequested()
    with pytest.raises(UnsupportedMessage):
        s.next_event()
    assert_closed_for_good(s)


@pytest.mark.parametrize("answer_first", [True, False])
def test_a_message_is_judged_by_the_state_when_it_is_read(answer_first):
    s = make("server READY")
    s.receive_data(frame(SAMPLES[T.EPISODES_AND_GET_STATE]) + frame({"type": "GET_STATE"}))
    assert s.next_event().on_policy
    if answer_first:
        s.send_state(STATE_BODY, want_steps=10)
        assert s.next_event() == StateRequested()
    else:
        with pytest.raises(UnsupportedMessage):
            s.next_event()


def test_client_reads_ack_then_weights_in_one_chunk():
    c = make("client AWAITING_WEIGHTS")
    c.receive_data(frame({"type": "ACK", "seq": 1}) + frame(SAMPLES[T.SET_STATE]))
    acked, weights = events(c)
    assert acked.seq == 1 and acked.batch.seq == 1
    assert isinstance(weights, StateReceived) and c.state is State.READY


# ---------------------------------------------------------------------------
# What may be sent in each state

_REQUESTS = {"send_get_config", "send_get_state", "send_episodes", "send_episodes(on_policy)"}

#: setup -> the sends it allows; every other one raises LocalProtocolError.
SEND_RULES = {
    "client IDLE": {"start"},
    "client GREETING": set(),
    "client AUTHENTICATING": set(),
    "client READY": _REQUESTS,  # not GET_ENDPOINTS: the peer is a runner
    "client READY owing SET_CONFIG": _REQUESTS,  # requests may be pipelined
    "client AWAITING_WEIGHTS": set(),
    "client READY owing ENDPOINTS": {"send_get_endpoints"},  # a directory answers nothing else
    "server IDLE": set(),
    "server AUTHENTICATING": set(),
    "server READY": {"send_ack"},  # nothing was asked
    "server READY owing SET_CONFIG, SET_STATE": {"send_config", "send_ack"},  # replies in order
    "server READY, plain, owing SET_STATE": {"send_state"},  # no want_steps, no ACK agreed
    "server AWAITING_WEIGHTS": {"send_state(want_steps)", "send_ack"},
    "directory IDLE": set(),
    "directory READY": set(),
    "directory READY owing ENDPOINTS": {"send_endpoints"},
}
SEND_CASES = [(setup, send) for setup in SEND_RULES for send in SENDS]


def snapshot(conn: Connection) -> tuple:
    return conn.state, conn.awaiting, conn.window.next_seq, len(conn.window.pending), conn.extensions


@pytest.mark.parametrize("setup, send", SEND_CASES, ids=[f"{s}-{n}" for s, n in SEND_CASES])
def test_send(setup, send):
    conn = make(setup)
    before = snapshot(conn)
    if send in SEND_RULES[setup]:
        SENDS[send](conn)
        assert wire(conn)
    else:
        with pytest.raises(LocalProtocolError):
            SENDS[send](conn)
        assert conn.data_to_send() == []
        assert snapshot(conn) == before


@pytest.mark.parametrize("setup", SETUPS)
def test_send_error_once_in_any_state(setup):
    conn = make(setup)
    conn.send_error("server_error", "x" * 5000)
    [error] = FrameDecoder().feed(wire(conn))
    assert error == {"type": "ERROR", "code": "server_error", "message": "x" * 1000}
    assert conn.state is State.CLOSED
    with pytest.raises(LocalProtocolError):
        conn.send_error("server_error", "again")
    assert conn.data_to_send() == []
    assert_closed_for_good(conn)


def test_no_send_after_closing():
    c = make("client READY")
    c.receive_eof()
    assert events(c) == [ConnectionClosed()]
    for send in _REQUESTS:
        with pytest.raises(LocalProtocolError):
            SENDS[send](c)
    assert c.data_to_send() == []


# ---------------------------------------------------------------------------
# Auth


def test_right_secret_both_ways():
    c, s = client(secret=SECRET), server(secret=SECRET)
    c.start()
    ping = wire(c)
    [offer] = [m["rlinks"] for m in FrameDecoder().feed(ping)]
    assert "auth" in offer["extensions"] and len(offer[NONCE_KEY]) == 32
    s.receive_data(ping)
    assert events(s) == [] and s.state is State.AUTHENTICATING
    pump(s, c)
    assert events(c) == [] and c.state is State.AUTHENTICATING
    pump(c, s)
    [done_s] = events(s)
    assert s.state is State.READY and done_s.extensions == frozenset({*EXT, "auth"}) and done_s.client_id == "sim-1"
    pump(s, c)
    [done_c] = events(c)
    assert c.state is State.READY and done_c.extensions == frozenset({*EXT, "auth"}) and not done_c.plain


def test_wrong_secret_fails_on_auth_and_the_client_is_told():
    c, s = _half_auth(client(secret=b"another-secret-also-32-bytes-ok!"))
    pump(c, s)
    with pytest.raises(AuthFailed) as info:
        events(s)
    assert info.value.code == "auth_failed"
    assert_closed_for_good(s)
    s.send_error(info.value.code, "not accepted")
    pump(s, c)
    assert events(c) == [ErrorReceived("auth_failed", "not accepted")]
    assert c.state is State.CLOSED


def test_client_with_a_secret_refuses_a_server_without_auth():
    c, s = client(secret=SECRET), server()
    c.start()
    pump(c, s)
    assert isinstance(events(s)[0], HandshakeDone)  # the server does not agree to auth
    pump(s, c)
    with pytest.raises(AuthFailed):
        events(c)
    assert_closed_for_good(c)


def test_server_with_a_secret_refuses_a_client_without_one():
    c, s = client(), server(secret=SECRET)
    c.start()
    pump(c, s)
    with pytest.raises(AuthFailed):
        events(s)
    assert s.data_to_send() == []  # no PONG, no nonce


def test_directory_with_a_secret_authenticates_like_a_runner():
    c, d = client(extensions=["endpoints"], secret=SECRET), directory(secret=SECRET)
    c.start()
    seen_c, seen_d = converse(c, d)
    assert c.state is d.state is State.READY
    assert seen_c[0].peer_is_directory and "auth" in seen_c[0].extensions
    c.send_get_endpoints()
    pump(c, d)
    assert [type(e).__name__ for e in events(d)] == ["EndpointsRequested"]


def test_directory_with_a_secret_refuses_a_client_without_one():
    c, d = client(extensions=["endpoints"]), directory(secret=SECRET)
    c.start()
    pump(c, d)
    with pytest.raises(AuthFailed):
        events(d)
    assert d.data_to_send() == []  # no PONG, no nonce, no runner named


def test_directory_refuses_a_wrong_secret():
    c, d = client(extensions=["endpoints"], secret=b"another-secret-also-32-bytes-ok!"), directory(secret=SECRET)
    c.start()
    pump(c, d)
    events(d)
    pump(d, c)
    events(c)
    pump(c, d)  # the AUTH with the wrong proof
    with pytest.raises(AuthFailed):
        events(d)


def test_client_with_a_secret_refuses_a_directory_without_auth():
    c, d = client(extensions=["endpoints"], secret=SECRET), directory()
    c.start()
    pump(c, d)
    events(d)
    pump(d, c)
    with pytest.raises(AuthFailed):
        events(c)


# ---------------------------------------------------------------------------
# The ACK window


def _batches(c: Connection, n: int, **kw) -> list:
    return [c.send_episodes([EPISODE], steps=5, timesteps=5, on_policy=False, **kw) for _ in range(n)]


def test_numbered_batches_acked_in_and_out_of_order():
    c, s = connect()
    b1, b2, b3, b4 = _batches(c, 4)
    assert [b.seq for b in (b1, b2, b3, b4)] == [1, 2, 3, 4] and c.window.next_seq == 5
    pump(c, s)
    assert [e.seq for e in events(s)] == [1, 2, 3, 4]
    for seq in (1, 3, 2):
        s.send_ack(seq)
    pump(s, c)
    got = events(c)
    assert [(e.seq, e.batch) for e in got] == [(1, b1), (3, b3), (2, b2)]
    assert all(b.acked for b in (b1, b2, b3)) and not b4.acked
    assert list(c.window.pending) == [b4]


def test_resend_on_a_new_connection_sharing_the_window():
    window = AckWindow()
    c1, s1 = connect(client(window=window))
    b1, b2 = _batches(c1, 2)
    pump(c1, s1)
    events(s1)  # the runner dies before acknowledging
    c2, s2 = connect(client(window=window))
    for batch in list(window.pending):
        c2.resend(batch)
    b3 = _batches(c2, 1)[0]
    assert b3.seq == 3  # numbering goes on across connections
    pump(c2, s2)
    got = events(s2)
    assert [e.seq for e in got] == [1, 2, 3]
    assert plain(got[0])[1]["episodes"] == meaning([EPISODE])
    for seq in (1, 2, 3, 1):  # 1 twice: the original and the resend were both taken
        s2.send_ack(seq)
    pump(s2, c2)
    assert [(e.seq, e.batch) for e in events(c2)] == [(1, b1), (2, b2), (3, b3), (1, None)]
    assert not window.pending
    with pytest.raises(LocalProtocolError):
        c2.resend(b1)  # acknowledged: nothing to resend
    assert c2.data_to_send() == []


def test_resend_needs_a_peer_that_acknowledges():
    window = AckWindow()
    c1, _ = connect(client(window=window))
    [batch] = _batches(c1, 1)
    c2, _ = connect(client(window=window), server(extensions=()))
    with pytest.raises(LocalProtocolError):
        c2.resend(batch)
    assert c2.data_to_send() == []
    unnumbered = c2.send_episodes([], steps=0, timesteps=0, on_policy=False)
    c2.data_to_send()
    with pytest.raises(LocalProtocolError):
        c2.resend(unnumbered)


def test_resent_on_policy_batch_waits_for_weights_again():
    window = AckWindow()
    c1, _ = connect(client(window=window))
    batch = c1.send_episodes([EPISODE], steps=5, timesteps=5, on_policy=True)
    c2, s2 = connect(client(window=window))
    c2.resend(batch)
    assert c2.state is State.AWAITING_WEIGHTS and c2.awaiting is T.SET_STATE
    pump(c2, s2)
    [got] = events(s2)
    assert got.on_policy and got.seq == 1


@pytest.mark.parametrize("keep", [True, False])
def test_keep_for_resend_copies_the_frame(keep):
    obs = np.arange(4096, dtype=np.float32)  # 16 KiB: sent as a view of the caller's memory
    window = AckWindow()
    c1, _ = connect(client(window=window))
    batch = c1.send_episodes([{"obs": obs}], steps=1, timesteps=1, on_policy=False, keep_for_resend=keep)
    original = obs.copy()
    obs[:] = -1  # the caller reuses its array before the ACK
    c2, s2 = connect(client(window=window))
    c2.resend(batch)
    pump(c2, s2)
    [got] = events(s2)
    np.testing.assert_array_equal(got.episodes[0]["obs"], original if keep else obs)


def test_unnumbered_on_policy_batch():
    c, s = connect()
    batch = c.send_episodes([], steps=0, timesteps=0, on_policy=True, numbered=False)
    assert batch.seq is None and c.window.next_seq == 1 and not c.window.pending
    assert c.state is State.AWAITING_WEIGHTS
    pump(c, s)
    [got] = events(s)
    assert (got.seq, got.on_policy, got.episodes) == (None, True, [])


def test_ack_for_a_seq_never_sent():
    window = AckWindow()
    assert window.take_seq() == 1
    with pytest.raises(UnexpectedMessage) as info:
        window.acknowledge(2)
    assert info.value.code == "unexpected_message"
    with pytest.raises(UnexpectedMessage):
        window.acknowledge(0)
    assert window.acknowledge(1) is None  # sent, and no longer held


# ---------------------------------------------------------------------------
# A whole conversation, split at every byte


def serve(s: Connection, event) -> None:
    """What a runner answers."""
    if isinstance(event, ConfigRequested):
        s.send_config(CONFIG_FRAME)
    elif isinstance(event, StateRequested):
        s.send_state(STATE_BODY, want_steps=32)
    elif isinstance(event, EpisodesReceived):
        if event.seq is not None:
            s.send_ack(event.seq)
        if event.on_policy:
            s.send_state(STATE_BODY, want_steps=64)


def simulate(c: Connection, event) -> None:
    """What a simulator asks: config, an on-policy batch, then an off-policy one and weights."""
    if isinstance(event, HandshakeDone):
        c.send_get_config()
    elif isinstance(event, ConfigReceived):
        c.send_episodes([EPISODE], steps=5, timesteps=5, on_policy=True)
    elif isinstance(event, StateReceived) and event.want_steps == 64:
        c.send_episodes([EPISODE, EPISODE], steps=10, timesteps=10, on_policy=False)
        c.send_get_state()


def answer(conn: Connection, react) -> list:
    """Read every event ready, each answered by ``react`` before the next is read."""
    seen = []
    while (event := conn.next_event()) is not None:
        seen.append(event)
        react(conn, event)
    return seen


def live_conversation() -> tuple[bytes, bytes, list, list]:
    """Run it: (bytes to the server, bytes to the client, client's events, server's events)."""
    c, s = client(), server()
    c.start()
    to_server, to_client, seen_c, seen_s = b"", b"", [], []
    while True:
        data = pump(c, s)
        to_server += data
        seen_s += answer(s, serve)
        back = pump(s, c)
        to_client += back
        seen_c += answer(c, simulate)
        if not data and not back:
            return to_server, to_client, seen_c, seen_s


def replay(conn: Connection, react, chunks) -> tuple[list, bytes]:
    """Feed ``chunks`` to ``conn``, reacting to each event; (its events as data, what it sent)."""
    seen, sent = [], wire(conn)
    for chunk in chunks:
        conn.receive_data(chunk)
        seen += [plain(event, comparable) for event in answer(conn, react)]
        sent += wire(conn)
    return seen, sent


def splits(data: bytes):
    yield "whole", [data]
    yield "bytewise", [data[i : i + 1] for i in range(len(data))]
    for i in range(1, len(data)):
        yield i, [data[:i], data[i:]]


def test_conversation_is_the_same_however_it_is_split():
    to_server, to_client, seen_c, seen_s = live_conversation()
    assert [type(e).__name__ for e in seen_s] == [
        "HandshakeDone", "ConfigRequested", "EpisodesReceived", "EpisodesReceived", "StateRequested"]
    assert [type(e).__name__ for e in seen_c] == [
        "HandshakeDone", "ConfigReceived", "Acked", "StateReceived", "Acked", "StateReceived"]
    assert isinstance(seen_s[2].episodes[0]["observations"], np.ndarray)
    expected_s, expected_c = [plain(e, comparable) for e in seen_s], [plain(e, comparable) for e in seen_c]
    for where, chunks in splits(to_server):
        assert replay(server(), serve, chunks) == (expected_s, to_client), where
    for where, chunks in splits(to_client):
        c = client()
        c.start()
        assert replay(c, simulate, chunks) == (expected_c, to_server), where


def test_large_body_read_in_place():
    obs = np.random.default_rng(0).standard_normal((1 << 17, 4)).astype(np.float32)  # 2 MiB
    data = frame({"type": "EPISODES", "episodes": [{"obs": obs}], "seq": 1}) + frame({"type": "GET_STATE"})
    s = make("server READY")
    assert s.read_buffer() is None  # no body under way: read a chunk
    s.receive_data(data[:100])
    assert s.in_frame
    pos = 100
    while (buf := s.read_buffer()) is not None:
        n = min(len(buf), 65536)
        buf[:n] = data[pos : pos + n]
        s.received_into(n)
        pos += n
    assert s.read_buffer() is None and not s.in_frame
    s.receive_data(data[pos:])
    got, request = events(s)
    assert got.seq == 1 and got.frame_bytes == len(data) - len(frame({"type": "GET_STATE"}))
    np.testing.assert_array_equal(got.episodes[0]["obs"], obs)
    assert not got.episodes[0]["obs"].flags.writeable  # a view of the frame, not a copy
    assert request == StateRequested()


def test_large_body_read_in_place_that_is_not_msgpack():
    s = make("server READY")
    s.receive_data(frame({"type": "GET_STATE"}) + b"%08d" % 5000)
    buf = s.read_buffer()
    buf[:] = b"\xc1" * len(buf)  # 0xc1: never valid msgpack
    s.received_into(len(buf))
    assert s.next_event() == StateRequested()
    with pytest.raises(DecodeError) as info:
        s.next_event()
    assert info.value.code == "bad_body"
    assert_closed_for_good(s)


# ---------------------------------------------------------------------------
# The shared test vectors

VECTOR_NAMES = sorted(p.stem for p in VECTORS.glob("*.json"))


def vector(name: str) -> tuple[dict, bytes]:
    return json.loads((VECTORS / f"{name}.json").read_text()), (VECTORS / f"{name}.bin").read_bytes()


def split_frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        end = pos + 8 + int(data[pos : pos + 8])
        out.append(data[pos:end])
        pos = end
    return out


def _done(**fields):
    return lambda m: [("HandshakeDone", fields)]


def _one(event: str, **fields):
    return lambda m: [(event, fields)]


def _episodes(on_policy: bool):
    return lambda m: [("EpisodesReceived", {
        "episodes": m[0]["episodes"], "timesteps": m[0]["timesteps"], "seq": m[0].get("seq"), "on_policy": on_policy})]


def _weights(m):
    return [("StateReceived", {
        "params": m[0]["state"]["rl_module"], "seq_no": m[0]["state"]["weights_seq_no"],
        "want_steps": m[0].get("want_steps")})]


def _error(m):
    return [("ErrorReceived", {"code": m[0]["code"], "message": m[0]["message"]})]


#: (vector, which of its frames (None: all), the setup that receives them, what it makes of them:
#: [(event class name, fields that must match)], ending with an error tuple where it fails).
VALID_VECTORS = [
    ("valid_ping", None, "server IDLE", _done(plain=True, extensions=set())),
    ("valid_ping", None, "directory IDLE", _done(plain=True, extensions=set())),
    ("valid_ping_offer", None, "server IDLE", _done(plain=False, extensions=set(EXT), peer_agent="vectors/1")),
    ("valid_ping_offer", None, "directory IDLE", _done(plain=False, extensions=set())),
    ("valid_two_frames", None, "server IDLE", lambda m: [("HandshakeDone", {}), ("ConfigRequested", {})]),
    ("valid_two_frames", None, "directory IDLE", lambda m: [("HandshakeDone", {}), UNSUPPORTED]),
    ("valid_pong", None, "client GREETING", _done(plain=True, extensions=set())),
    ("valid_pong_offer", None, "client GREETING", _done(plain=False, extensions={"want_steps"})),
    ("valid_strings_and_bin", None, "client GREETING", _done(plain=True)),
    ("valid_get_config", None, "server READY", _one("ConfigRequested")),
    ("valid_get_state", None, "server READY", _one("StateRequested")),
    ("valid_numpy_scalars", None, "server READY", _one("StateRequested")),
    ("valid_unknown_keys", None, "server READY", _one("StateRequested")),
    ("valid_array_dtypes", None, "server READY", _one("StateRequested")),
    ("valid_get_state", None, "server AWAITING_WEIGHTS", lambda m: [UNSUPPORTED]),
    ("valid_episodes_and_get_state", None, "server READY", _episodes(True)),
    ("valid_episodes_rllib_lists", None, "server READY", _episodes(False)),
    ("valid_episodes_stacked", None, "server READY", _episodes(False)),
    ("valid_set_config_msgpack", None, "client READY owing SET_CONFIG",
     lambda m: [("ConfigReceived", {"description": m[0]["config"], "pickled": None})]),
    ("valid_set_config_nested_spaces", None, "client READY owing SET_CONFIG",
     lambda m: [("ConfigReceived", {"description": m[0]["config"], "pickled": None})]),
    ("valid_set_config_pickle", None, "client READY owing SET_CONFIG",
     lambda m: [("ConfigReceived", {"description": None, "pickled": m[0]["config"]})]),
    ("valid_set_config_pickle", None, "client READY", lambda m: [UNEXPECTED]),
    ("valid_set_state_weights", None, "client AWAITING_WEIGHTS", _weights),
    ("valid_set_state_want_steps", None, "client AWAITING_WEIGHTS", _weights),
    ("valid_set_state_large_array", None, "client AWAITING_WEIGHTS", _weights),
    ("valid_ack", None, "client READY, 7 batches sent", _one("Acked", seq=7, batch=7)),
    ("valid_ack", None, "client READY", lambda m: [UNEXPECTED]),
    ("valid_ack_weights_notice", None, "client READY, weights_notice, 7 batches sent",
     _one("Acked", seq=7, batch=7, weights_seq_no=42)),
    ("valid_ack_weights_notice", None, "client READY, 7 batches sent",
     _one("Acked", seq=7, batch=7, weights_seq_no=None)),
    ("valid_error", None, "client READY", _error),
    ("valid_error", None, "client AWAITING_WEIGHTS", _error),
    ("valid_directory", [0], "directory READY", _one("EndpointsRequested")),
    ("valid_directory", [1], "client READY owing ENDPOINTS",
     lambda m: [("EndpointsReceived", {"endpoints": m[1]["endpoints"]})]),
    ("valid_directory", [0], "server READY", lambda m: [UNSUPPORTED]),
    # The vector's proofs are placeholders, not HMACs under a secret we know: PING opens the
    # exchange (no event yet), AUTH fails it; AUTH_OK fails on a client that is waiting for it.
    ("valid_auth_handshake", [0, 1], "server IDLE with a secret", lambda m: [AUTH_FAILED]),
    ("valid_auth_handshake", [2], "client AUTHENTICATING", lambda m: [AUTH_FAILED]),
    ("valid_auth_handshake", [0], "server IDLE", _done(plain=False, extensions=set(EXT), client_id="c0ffee")),
    # Without served_actions agreed (these setups don't offer it); with it: test_served_actions_vector.
    ("valid_served_actions", [0], "server READY", lambda m: [UNSUPPORTED]),
    ("valid_served_actions", [1], "client READY", lambda m: [UNEXPECTED]),
    ("valid_served_taken", [0], "server READY", lambda m: [UNSUPPORTED]),
    ("valid_served_taken", [1], "client READY", lambda m: [UNEXPECTED]),
    # The takeover marker is an extra model output: any server reads the chunk; its ACT needs served_actions.
    ("valid_takeover", [0], "server READY", lambda m: [("EpisodesReceived", {
        "episodes": m[0]["episodes"], "timesteps": m[0].get("timesteps"), "seq": m[0].get("seq"), "on_policy": False})]),
    ("valid_takeover", [1], "server READY", lambda m: [UNSUPPORTED]),
    # Multi-agent chunks are plain episodes to the connection; the runner's ingest reads them.
    ("valid_episodes_multi_agent", None, "server READY", _episodes(True)),
    ("valid_episodes_multi_agent_rllib", None, "server READY", _episodes(False)),
    ("valid_set_config_multi_agent", None, "client READY owing SET_CONFIG",
     lambda m: [("ConfigReceived", {"description": m[0]["config"], "pickled": None})]),
    # Without multi_agent agreed a weight set of several modules is refused; with it: test_multi_agent_vectors.
    ("valid_set_state_multi_agent", None, "client AWAITING_WEIGHTS", lambda m: [(WeightsError, "invalid_message")]),
]


def test_multi_agent_vectors_and_modules_exchange():
    """With multi_agent agreed: SET_STATE carries every module; GET_MODULES is answered by MODULES."""
    multi = EXT + ("multi_agent",)
    c, s = connect(client(extensions=multi), server(extensions=multi))
    _, data = vector("valid_set_state_multi_agent")
    c.send_get_state()
    pump(c, s)
    assert [type(e) for e in events(s)] == [StateRequested]
    c.receive_data(data)
    [got] = events(c)
    assert isinstance(got, StateReceived) and set(got.params) == {"seeker", "signal"} and got.seq_no == 3
    c, s = connect(client(extensions=multi), server(extensions=multi))
    c.send_get_modules(["seeker_0", "x"])
    pump(c, s)
    [request] = events(s)
    assert isinstance(request, ModulesRequested) and request.agents == ["seeker_0", "x"]
    s.send_modules({"seeker_0": "seeker", "x": "signal"})
    pump(s, c)
    [answer] = events(c)
    assert isinstance(answer, ModulesReceived) and answer.modules == {"seeker_0": "seeker", "x": "signal"}
    with pytest.raises(LocalProtocolError):
        c.send_get_modules([])
    plain_client, _ = connect()
    with pytest.raises(LocalProtocolError, match="multi_agent"):
        plain_client.send_get_modules(["a"])


def test_served_actions_vector():
    """The ACT reaches a server that agreed to served_actions as its rows; the ACTIONS answers a client's ACT."""
    spec, data = vector("valid_served_actions")
    act_frame, actions_frame = split_frames(data)
    served = EXT + ("served_actions",)
    c, s = connect(client(extensions=served), server(extensions=served))
    s.receive_data(act_frame)
    [event] = events(s)
    assert isinstance(event, ActReceived) and s.state is State.AWAITING_ACTIONS
    assert event.rows.env == [0, 4, 4] and list(event.rows.wants_action) == [True, False, True]
    act = spec["messages"][0]
    c.send_act(act["env"], event.rows.obs, event.rows.reward, event.rows.start, event.rows.terminated,
               event.rows.truncated)
    assert b"".join(bytes(p) for p in c.data_to_send()) == act_frame  # the client encodes it byte for byte
    c.receive_data(actions_frame)
    [reply] = events(c)
    assert isinstance(reply, ActionsReceived) and reply.env == [0, 4] and reply.weights_seq_no == 3
    assert list(reply.actions) == [1, 0] and c.state is State.READY


def test_served_taken_vector():
    """With served_taken agreed the ACT's own actions and train flags arrive as columns; without, it is refused."""
    spec, data = vector("valid_served_taken")
    act_frame, actions_frame = split_frames(data)
    taken = EXT + ("served_actions", "served_taken")
    c, s = connect(client(extensions=taken), server(extensions=taken))
    s.receive_data(act_frame)
    [event] = events(s)
    rows = event.rows
    assert rows.taken_mask.tolist() == [False, True, False] and list(rows.taken) == [0, 1, 0]
    assert rows.train.tolist() == [True, True, False]
    c.send_act(rows.env, rows.obs, rows.reward, rows.start, rows.terminated, rows.truncated,
               taken_mask=rows.taken_mask, taken=np.asarray(rows.taken), train=rows.train)
    assert b"".join(bytes(p) for p in c.data_to_send()) == act_frame  # the client encodes it byte for byte
    c.receive_data(actions_frame)
    [reply] = events(c)
    assert list(reply.actions) == [0, 1, 1] and c.state is State.READY
    # Agreed to served_actions alone: the columns are refused on both sides.
    served = EXT + ("served_actions",)
    c, s = connect(client(extensions=served), server(extensions=served))
    with pytest.raises(LocalProtocolError, match="served_taken"):
        c.send_act(rows.env, rows.obs, rows.reward, rows.start, rows.terminated, rows.truncated, train=rows.train)
    s.receive_data(act_frame)
    with pytest.raises(UnsupportedMessage, match="served_taken"):
        events(s)


def outcome_of(conn: Connection, chunks) -> list:
    """Events as (class name, fields), ending with (error class, code) if one is raised."""
    out = []
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not None:
                out.append(plain(event))
    except Exception as exc:  # noqa: BLE001 - the class is what is checked
        out.append((type(exc), exc.code))
        assert conn.state is State.CLOSED
    return out


def test_every_valid_vector_is_replayed():
    assert {row[0] for row in VALID_VECTORS} == {n for n in VECTOR_NAMES if n.startswith("valid_")}


@pytest.mark.parametrize("name, frames, setup, expect", VALID_VECTORS,
                         ids=[f"{row[0]}-{row[2]}" for row in VALID_VECTORS])
def test_valid_vector(name, frames, setup, expect):
    spec, data = vector(name)
    if frames is not None:
        data = b"".join(split_frames(data)[i] for i in frames)
    whole = outcome_of(make(setup), [data])
    step = 1 if len(data) < 4096 else 61  # byte by byte, but for the 16 KiB one
    assert outcome_of(make(setup), [data[i : i + step] for i in range(0, len(data), step)]) == whole
    expected = expect(spec["messages"])
    assert len(whole) == len(expected), whole
    for got, want in zip(whole, expected):
        if isinstance(want, tuple) and isinstance(want[1], dict):
            assert got[0] == want[0]
            assert {k: got[1][k] for k in want[1]} == want[1]
        else:
            assert got == want


def test_auth_vector_ping_opens_the_exchange():
    s = server(secret=SECRET)
    s.receive_data(split_frames(vector("valid_auth_handshake")[1])[0])
    assert events(s) == [] and s.state is State.AUTHENTICATING
    [pong] = FrameDecoder().feed(wire(s))
    assert pong["rlinks"]["extensions"] == sorted({*EXT, "auth"}) and len(pong["rlinks"][NONCE_KEY]) == 32


#: Who receives each invalid vector: a server and a directory from the first byte, a client past a plain handshake.
def _fresh(role: Role, max_frame_bytes: int) -> Connection:
    conn = Connection(role, max_frame_bytes=max_frame_bytes)
    if role is Role.CLIENT:
        conn.start()
        conn.data_to_send()
        conn.receive_data(frame({"type": "PONG"}))
        assert isinstance(conn.next_event(), HandshakeDone)
    return conn


INVALID_CASES = [
    (name, role) for name in VECTOR_NAMES if name.startswith("invalid_")
    for role in (Role.SERVER, Role.DIRECTORY, Role.CLIENT)
    if role is not Role.CLIENT or not vector(name)[0]["messages"]  # a client reads no PING
]


@pytest.mark.parametrize("name, role", INVALID_CASES, ids=[f"{n}-{r.value}" for n, r in INVALID_CASES])
def test_invalid_vector(name, role):
    spec, data = vector(name)
    error = spec["error"]
    conn = _fresh(role, spec["max_frame_bytes"])
    conn.receive_data(data)
    got = []
    if error["when"] == "eof":
        got = events(conn)
        conn.receive_eof()
    with pytest.raises(Exception) as info:
        while (event := conn.next_event()) is not None:
            got.append(event)
    assert type(info.value).__name__ == error["class"] and info.value.code == error["code"]
    # The messages before the error: here only a PING, which opens a handshake.
    assert [m["type"] for m in spec["messages"]] == ["PING"] * len(got)
    assert all(isinstance(e, HandshakeDone) for e in got)
    assert sent_types(wire(conn)) == ["PONG"] * len(got) * (role is not Role.CLIENT)
    assert_closed_for_good(conn)


def test_timestep_goes_with_set_state_exactly_when_agreed():
    """``timestep`` (PROTOCOL.md 10.9): RLlib's step count, for a client's exploration schedule."""
    with_timestep = [*EXT, "timestep"]
    c, s = connect(client(extensions=with_timestep), server(extensions=with_timestep))
    c.send_get_state()
    pump(c, s)
    events(s)
    with pytest.raises(LocalProtocolError):
        s.send_state(STATE_BODY, want_steps=8)  # agreed, so it must be there
    s.send_state(STATE_BODY, want_steps=8, timestep=12_345)
    pump(s, c)
    [weights] = events(c)
    assert weights.timestep == 12_345 and weights.want_steps == 8

    c, s = connect(client(extensions=with_timestep), server())  # a server that did not agree
    c.send_get_state()
    pump(c, s)
    events(s)
    with pytest.raises(LocalProtocolError):
        s.send_state(STATE_BODY, want_steps=8, timestep=1)
    s.send_state(STATE_BODY, want_steps=8)
    pump(s, c)
    [weights] = events(c)
    assert weights.timestep is None
