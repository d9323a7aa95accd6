"""RLlink over WebSocket (PROTOCOL.md 16): the same port, the same messages, the same guards as TCP.

A real :class:`RLinkEnvRunner` serves one client over ``ws://`` and one over
plain TCP on one port, and what ``sample()`` returns is the same; ``wss://``
with the test certificates and the shared secret; the directory over
WebSocket; page origins let in or refused by ``ws_allowed_origins``. The
hostile cases are in ``test_websocket_hostile.py``.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

from peers import make_episode
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.client import ConnectFailed, EnvClient, RLinkClient, ask_directory
from rlinks_rllib.client.network.address import Address, parse_address
from rlinks_rllib.client.errors import AuthenticationFailed, ServerError
from rlinks_rllib.client.network.websocket import ClientWebSocket
from rlinks_rllib.protocol.websocket import FirstBytes, split_frames
from rlinks_rllib.protocol import encode_message, encode_message_parts
from rlinks_rllib.server.network.directory import Directory, Endpoint
from rlinks_rllib.server.settings import RLinkSettings, rlinks_env_config
from test_auth_tls import FAST, SECRET, secret_file, serving, wait_for  # noqa: F401 - secret_file is a fixture

pytestmark = pytest.mark.timeout(120)

ORIGIN = "http://game.example:8080"


#: Steps of the three episodes :func:`episodes_of` sends.
EPISODE_STEPS = (5, 6, 7)


def cartpole_chunks(seed: int) -> list[dict]:
    """Three CartPole episodes as PPO takes them (with logp and logits), the same for the same ``seed``."""
    builder, rng = EpisodeBuilder(), np.random.default_rng(seed)
    for steps in EPISODE_STEPS:
        builder.reset(rng.normal(size=4).astype(np.float32))
        for t in range(steps):
            builder.step(int(rng.integers(2)), 1.0, rng.normal(size=4).astype(np.float32), t == steps - 1, False,
                         extra={"action_logp": np.float32(-0.7), "action_dist_inputs": rng.normal(size=2)
                                .astype(np.float32)})
    return builder.take_chunks()


def episodes_of(client_address: str, seed: int, **options) -> None:
    """Send :func:`cartpole_chunks` from a fresh client at ``client_address``; wait for the ACK."""
    with RLinkClient(client_address, **{**FAST, "timeout": 30.0, **options}) as client:
        client.get_state()
        client.send_episodes(cartpole_chunks(seed))


def _arrays(episode) -> dict:
    return {"obs": np.asarray(episode.get_observations()), "actions": np.asarray(episode.get_actions()),
            "rewards": np.asarray(episode.get_rewards())}


# ----------------------------------------------------------------------
# The pure parts


def test_first_bytes_tell_rlink_from_an_upgrade_and_hold_no_more_than_a_prefix_of_get():
    first = FirstBytes()
    assert first.feed(b"G") is None and first.feed(b"ET") is None
    assert first.feed(b" /x") == b"GET /x" and first.websocket is True
    first = FirstBytes()
    assert first.feed(b"0000") == b"0000" and first.websocket is False
    first = FirstBytes()
    assert first.feed(b"GE") is None
    assert first.feed(b"T!") == b"GET!" and first.websocket is False  # not "GET ": the Connection refuses it


def test_split_frames_gives_each_body_without_its_header_however_the_parts_fall():
    one = encode_message({"type": "GET_STATE"})
    two = encode_message_parts({"type": "EPISODES", "episodes": [make_episode(300)]})
    body_two = b"".join(bytes(p) for p in two)[8:]
    stream = one + b"".join(bytes(p) for p in two)
    for parts in ([one, *two], [stream], [stream[:5], stream[5:13], stream[13:]]):
        bodies = [bytes(b) for b in split_frames(parts)]
        assert bodies == [one[8:], body_two]


def test_addresses_take_ws_and_wss_and_say_them_back():
    assert parse_address("ws://127.0.0.1:5555") == Address("127.0.0.1", 5555, False, True)
    assert parse_address("wss://learner.example:5556/") == Address("learner.example", 5556, True, True)
    assert str(parse_address("ws://[::1]:5555")) == "ws://[::1]:5555"
    assert str(parse_address("tls://h:1")) == "tls://h:1" and str(parse_address("h:1")) == "tcp://h:1"
    with pytest.raises(ValueError, match="no path"):
        parse_address("ws://h:1/path")


def test_the_origin_setting_is_checked_and_a_yaml_list_becomes_a_tuple():
    assert RLinkSettings(ws_allowed_origins=[ORIGIN]).ws_allowed_origins == (ORIGIN,)
    assert rlinks_env_config(ws_allowed_origins=["*"])["ws_allowed_origins"] == ("*",)
    with pytest.raises(ValueError, match="ws_allowed_origins"):
        RLinkSettings(ws_allowed_origins=ORIGIN)
    with pytest.raises(ValueError, match="ws_allowed_origins"):
        RLinkSettings(ws_allowed_origins=[ORIGIN, 3])


# ----------------------------------------------------------------------
# A real runner: ws:// beside tcp:// on one port


@pytest.fixture
def cartpole_runner(ray_local):
    """A fresh RLinkEnvRunner for CartPole (no Algorithm), settings from ``make(**settings)``."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from harness import CARTPOLE
    from rlinks_rllib import RLinkEnvRunner

    runners = []

    def make(**settings):
        config = (PPOConfig().environment(observation_space=CARTPOLE.observation_space,
                                          action_space=CARTPOLE.action_space,
                                          env_config=rlinks_env_config(port=0, **settings))
                  .env_runners(num_env_runners=0, sample_timeout_s=4.0, rollout_fragment_length=40))
        runners.append(RLinkEnvRunner(config=config, worker_index=0))
        return runners[-1]

    yield make
    for runner in runners:
        runner.stop()


def sample_until(runner, steps: int, timeout: float = 60.0) -> list:
    """``runner.sample()`` until ``steps`` env steps came (within ``timeout``)."""
    deadline = time.monotonic() + timeout
    episodes: list = []
    while sum(len(e) for e in episodes) < steps:
        assert time.monotonic() < deadline, f"{sum(len(e) for e in episodes)} of {steps} steps in {timeout} s"
        episodes += runner.sample()
    return episodes


def _sample_steps(runner, clients: list[threading.Thread]) -> list:
    """Start the clients, then sample until their episodes are in."""
    for client in clients:
        client.start()
    episodes = sample_until(runner, sum(EPISODE_STEPS) * len(clients))
    for client in clients:
        client.join(30)
        assert not client.is_alive()
    return episodes


def test_a_runner_serves_websocket_and_tcp_on_one_port_and_the_episodes_arrive_the_same(cartpole_runner):
    runner = cartpole_runner()
    port = runner.address[1]
    errors: list[BaseException] = []

    def client(address: str, seed: int) -> threading.Thread:
        def run() -> None:
            try:
                episodes_of(address, seed)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
        return threading.Thread(target=run, daemon=True)

    by_seed = {}
    for address in (f"127.0.0.1:{port}", f"ws://127.0.0.1:{port}"):
        episodes = _sample_steps(runner, [client(address, 100)])
        by_seed[address] = sorted((_arrays(e) for e in episodes), key=lambda a: len(a["actions"]))
    assert not errors
    tcp, ws = by_seed.values()
    assert len(tcp) == len(ws) == 3
    for a, b in zip(tcp, ws):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    # The weights come back the same way over both.
    with RLinkClient(f"ws://127.0.0.1:{port}", **FAST) as over_ws, RLinkClient(f"127.0.0.1:{port}", **FAST) as over_tcp:
        from_ws, from_tcp = over_ws.get_state(), over_tcp.get_state()
        assert from_ws.seq_no == from_tcp.seq_no and from_ws.params.keys() == from_tcp.params.keys()
        for name, value in from_tcp.params.items():
            np.testing.assert_array_equal(from_ws.params[name], value)
    stats = runner.get_transport_stats()
    assert stats["errors"] == {} and stats["batches_acked"] == 2


def test_env_client_runs_over_websocket_unchanged(cartpole_runner):
    runner = cartpole_runner()
    done = threading.Event()
    errors: list[BaseException] = []

    def simulate() -> None:
        try:
            with EnvClient(f"ws://127.0.0.1:{runner.address[1]}", on_policy=False, weights_every_s=0.0,
                           **FAST) as client:
                obs = np.zeros(4, np.float32)
                for t in range(1, 61):
                    client.act(obs)
                    obs = np.full(4, t / 100, np.float32)
                    client.report(1.0, obs, terminated=t % 10 == 0)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=simulate, daemon=True)
    thread.start()
    steps = sum(len(e) for e in sample_until(runner, 60))
    done.wait(30)
    assert not errors and steps == 60


def test_wss_with_the_shared_secret_and_tls_beside_it(cartpole_runner, certs, secret_file):
    runner = cartpole_runner(auth="on", auth_secret_file=secret_file, tls_cert_file=certs["server"],
                             tls_key_file=certs["server_key"])
    port = runner.address[1]
    clients = [threading.Thread(target=episodes_of, args=(f"{scheme}://localhost:{port}", 7),
                                kwargs=dict(ca_file=certs["ca"], secret=SECRET), daemon=True)
               for scheme in ("wss", "tls")]
    episodes = _sample_steps(runner, clients)
    assert sum(len(e) for e in episodes) == 2 * sum(EPISODE_STEPS)
    with pytest.raises(AuthenticationFailed):
        RLinkClient(f"wss://localhost:{port}", ca_file=certs["ca"], secret="not-the-runners-secret",
                    **FAST).connect()
    with pytest.raises(ConnectFailed):  # ws:// on a TLS port: the TLS layer refuses it
        RLinkClient(f"ws://localhost:{port}", **FAST).connect()
    stats = runner.get_transport_stats()
    assert stats["errors"] == {"auth_failed": 1} and stats["batches_acked"] == 2


# ----------------------------------------------------------------------
# Origins, the directory


def _upgrade_with_origin(port: int, origin: str | None):
    """A client's WebSocket upgrade that carries ``origin`` as a page's would."""
    import socket

    websocket = ClientWebSocket(Address("127.0.0.1", port, websocket=True), origin=origin)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"".join(websocket.upgrade_request()))
        while not websocket.open:
            websocket.receive_upgrade(sock.recv(65536))
    return websocket


def _refusal_of_origin(port: int, origin: str) -> ConnectFailed:
    """What the Python client's WebSocket layer raises for a page of ``origin``: upgraded, then closed.

    The close frame may come with the 101 or after it (then the client's ``PING`` went first, unanswered).
    """
    import socket

    from rlinks_rllib.protocol.connection import Connection, Role

    websocket = ClientWebSocket(Address("127.0.0.1", port, websocket=True), origin=origin)
    conn = Connection(Role.CLIENT)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"".join(websocket.upgrade_request()))
        with pytest.raises(ConnectFailed) as refused:
            while not websocket.open:
                websocket.receive_upgrade(sock.recv(65536))
            conn.start()  # the PING
            sock.sendall(b"".join(websocket.frames(conn.data_to_send())))
            while data := sock.recv(65536):  # (the socket's timeout bounds each read)
                websocket.receive(conn, data)
    return refused.value


def test_page_origins_are_let_in_by_the_setting_and_others_closed_with_1008_and_the_reason(caplog):
    """A browser hides an HTTP 403 from its page, but hands it a close frame's code and reason."""
    from websockets.exceptions import ConnectionClosedError
    from websockets.sync.client import connect

    evil = "http://evil.example"
    reason = f"origin '{evil}' is not in the runner's ws_allowed_origins setting"
    with serving(ws_allowed_origins=[ORIGIN]) as server:
        port = server.address[1]
        assert _upgrade_with_origin(port, ORIGIN).open
        assert _upgrade_with_origin(port, None).open  # not a page: Node, Python
        with caplog.at_level(logging.WARNING, logger="rlinks_rllib.server"):
            refused = _refusal_of_origin(port, evil)  # a client that goes without answering the close
            assert str(refused) == (f"ws://127.0.0.1:{port} refused the WebSocket connection "
                                    f"(WebSocket close 1008: {reason})")
            # A client that answers the close, as a browser does: the RLlink conversation never starts.
            with connect(f"ws://127.0.0.1:{port}", origin=evil, open_timeout=5, close_timeout=5) as page:
                with pytest.raises(ConnectionClosedError) as closed:
                    page.send(encode_message({"type": "PING"})[8:])  # (unless the close came first)
                    page.recv(timeout=5)
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, reason)
            wait_for(lambda: server.stats.errors["auth_failed"] == 2)
        lines = [r.getMessage() for r in caplog.records if "WebSocket upgrade refused" in r.getMessage()]
        assert len(lines) == 2 and all(line.endswith(f"{reason} (WebSocket close 1008)") for line in lines), lines
        assert server.stats.frames_in == 0  # neither refused page's PING reached the RLlink Connection
    with serving(ws_allowed_origins=["*"]) as server:
        assert _upgrade_with_origin(server.address[1], "http://anywhere.example").open
    with serving() as server:  # no setting: no page gets in
        assert "1008" in str(_refusal_of_origin(server.address[1], ORIGIN))


def test_the_directory_closes_a_page_of_another_origin_naming_the_runners_setting_and_logs_it_once(caplog):
    directory = Directory("127.0.0.1", 0, ws_allowed_origins=[ORIGIN]).start()
    try:
        port = directory.address[1]
        with caplog.at_level(logging.WARNING, logger="rlinks_rllib.server"):
            refused = _refusal_of_origin(port, "http://evil.example")
            assert "origin 'http://evil.example' is not in the runner's ws_allowed_origins setting" in str(refused)
            wait_for(lambda: any("refused" in r.getMessage() for r in caplog.records))
        assert _upgrade_with_origin(port, ORIGIN).open and _upgrade_with_origin(port, None).open
    finally:
        directory.stop()
    lines = [r.getMessage() for r in caplog.records if "WebSocket upgrade from" in r.getMessage()]
    assert len(lines) == 1 and "(WebSocket close 1008)" in lines[0], lines


def test_a_close_1008_before_any_message_fails_the_python_client_at_once_with_the_reason():
    """As a refused page origin is closed: ConnectFailed with the reason, no retry, no connect_wait."""
    from websockets.sync.server import serve

    reason = "origin 'http://elsewhere.example' is not in the runner's ws_allowed_origins setting"
    accepted = []

    def refuse(connection) -> None:
        accepted.append(connection.remote_address)
        connection.close(1008, reason)

    with serve(refuse, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        address = f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
        try:
            with pytest.raises(ConnectFailed) as refused:
                with RLinkClient(address, **{**FAST, "retry_attempts": 5, "connect_wait": 60.0}) as client:
                    client.get_state()
        finally:
            server.shutdown()
            thread.join(10)
    assert str(refused.value) == f"{address} refused the WebSocket connection (WebSocket close 1008: {reason})"
    assert len(accepted) == 1


def test_a_refusals_reason_fits_a_close_frame_and_always_names_the_setting():
    from rlinks_rllib.protocol.websocket import MAX_CLOSE_REASON_BYTES
    from rlinks_rllib.server.network.websocket import origin_refusal

    assert origin_refusal("https://game.example", "dataset") == (
        "origin 'https://game.example' is not in the dataset's ws_allowed_origins setting")
    for origin in ("http://" + "a" * 300 + ".example", "http://" + "\u00e9" * 100 + ".example"):
        reason = origin_refusal(origin, "runner")
        raw = reason.encode()
        assert len(raw) <= MAX_CLOSE_REASON_BYTES and raw.decode() == reason  # whole characters
        assert reason.startswith("origin 'http://")
        assert reason.endswith("... is not in the runner's ws_allowed_origins setting")


def test_the_directory_answers_over_websocket_and_wss(certs):
    for tls in (False, True):
        ssl_options = {}
        if tls:
            from rlinks_rllib.server.network.listener import server_ssl_context

            ssl_options = dict(ssl_context=server_ssl_context(
                RLinkSettings(tls_cert_file=certs["server"], tls_key_file=certs["server_key"])))
        directory = Directory("127.0.0.1", 0, **ssl_options).start()
        try:
            directory.update([Endpoint(0, "127.0.0.1", 6001, 3), Endpoint(1, "127.0.0.1", 6002, 1)])
            address = f"{'wss' if tls else 'ws'}://localhost:{directory.address[1]}"
            runners = ask_directory(address, ca_file=certs["ca"] if tls else None, timeout=5)
            assert [r["port"] for r in runners] == [6002, 6001]
        finally:
            directory.stop()


def test_a_client_that_asks_the_directory_over_websocket_goes_on_to_the_runner_over_websocket(caplog):
    with serving() as server:
        directory = Directory("127.0.0.1", 0).start()
        try:
            directory.update([Endpoint(0, "127.0.0.1", server.address[1], 0)])
            caplog.set_level(logging.INFO, logger="rlinks_rllib.server")
            with RLinkClient(f"ws://127.0.0.1:{directory.address[1]}", **FAST) as client:
                client.get_state()
                assert client.address == Address("127.0.0.1", server.address[1], websocket=True)
            assert any("over WebSocket" in r.getMessage() and "connected from" in r.getMessage()
                       for r in caplog.records)
        finally:
            directory.stop()


def test_a_python_client_that_closes_sends_a_normal_close_and_the_runner_logs_no_error(caplog):
    """close() sends a close frame (1000), from the client's own thread or from another one blocked in a wait."""
    caplog.set_level(logging.INFO, logger="rlinks_rllib.server")
    with serving(on_policy=True, update_steps=10_000) as server:
        with RLinkClient(f"ws://127.0.0.1:{server.address[1]}", **FAST) as client:
            client.get_state()
        # From another thread, while the client waits for weights: its batch is far from the
        # update's 10,000 steps, so the runner parks it.
        blocked = RLinkClient(f"ws://127.0.0.1:{server.address[1]}", **{**FAST, "timeout": 30.0})
        blocked.connect()
        failed: list[BaseException] = []
        waiter = threading.Thread(target=lambda: _wait_on(blocked, failed), daemon=True)
        waiter.start()
        wait_for(lambda: server.stats.batches_in == 1)
        blocked.close()
        waiter.join(30)
        assert not waiter.is_alive() and failed
        wait_for(lambda: sum("disconnected" in r.getMessage() for r in caplog.records) == 2)
    closed = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert all("client closed the WebSocket (1000" in r.getMessage() and r.levelno == logging.INFO
               for r in closed), [r.getMessage() for r in closed]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("rlinks_rllib.server")]
    assert server.stats.errors == {}


def test_close_from_another_thread_waits_for_a_message_being_read_and_still_sends_the_close_frame(caplog):
    """A thread reading a message holds the WebSocket's write side (it may have to answer); close() from
    another thread at that moment waits for it (up to ``CLOSE_WAIT_S``) and still sends the close frame.

    The test above lost it once in CI: the waiting thread was reading the runner's ACK of its batch when
    close() came, and close() gave up at once. Here the read is held for 0.3 s on purpose.
    """
    caplog.set_level(logging.INFO, logger="rlinks_rllib.server")
    with serving(on_policy=True, update_steps=10_000) as server:
        client = RLinkClient(f"ws://127.0.0.1:{server.address[1]}", **FAST)
        client.get_state()
        transport = client._link.transport  # the one place a test reaches inside: to hold a read open
        reading = threading.Event()

        def read_slowly() -> None:
            with transport._write_turn():
                reading.set()
                time.sleep(0.3)

        reader = threading.Thread(target=read_slowly, daemon=True)
        reader.start()
        assert reading.wait(10)
        client.close()
        reader.join(10)
        wait_for(lambda: any("disconnected" in r.getMessage() for r in caplog.records))
    closed = [r.getMessage() for r in caplog.records if "disconnected" in r.getMessage()]
    assert len(closed) == 1 and "client closed the WebSocket (1000" in closed[0], closed


def _wait_on(client: RLinkClient, failed: list) -> None:
    try:
        client.get_state()
        client.send_episodes_and_get_state(cartpole_chunks(1))  # waits for weights that never come
    except BaseException as exc:  # noqa: BLE001 - the test looks at it
        failed.append(exc)


def test_a_full_runners_refusal_reads_as_its_error_on_a_websocket_client():
    """A full runner sends ERROR limit_exceeded before it reads a byte: the client's upgrade reads that as ServerError.

    (Read from a raw socket first: a request written into a socket the runner is closing may
    draw a reset that loses the ERROR, over TCP as over WebSocket.)
    """
    import socket

    with serving(max_clients=1) as server:
        port = server.address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            wait_for(lambda: server.stats.clients_connected == 1)
            with socket.create_connection(("127.0.0.1", port), timeout=5) as refused:
                answer = refused.recv(65536)
        websocket = ClientWebSocket(Address("127.0.0.1", port, websocket=True))
        with pytest.raises(ServerError, match="already serves 1 clients") as caught:
            websocket.receive_upgrade(answer)
        assert caught.value.code == "limit_exceeded"


def test_another_websocket_implementation_talks_to_a_runner():
    """websockets' own blocking client (its I/O, its handshake, deflate offered) speaks RLlink to our port."""
    import msgpack
    from websockets.sync.client import connect

    with serving(ws_allowed_origins=[ORIGIN]) as server:
        with connect(f"ws://127.0.0.1:{server.address[1]}/any/path", origin=ORIGIN, open_timeout=5) as ws:
            ws.send(encode_message({"type": "PING"})[8:])
            assert msgpack.unpackb(ws.recv(timeout=5))["type"] == "PONG"
            ws.send(encode_message({"type": "GET_STATE"})[8:])
            reply = msgpack.unpackb(ws.recv(timeout=5), strict_map_key=False)
            assert reply["type"] == "SET_STATE" and ws.protocol.extensions == []  # no deflate agreed
            ws.send('{"type": "GET_STATE"}')  # a text message: refused
            error = msgpack.unpackb(ws.recv(timeout=5))
            assert error["type"] == "ERROR" and error["code"] == "bad_frame"
        assert ws.close_code == 1008
