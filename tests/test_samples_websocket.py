"""RLlink over WebSocket on the sample server (PROTOCOL.md 16): ``ws://`` and ``wss://`` actors -> RLinkDataset.

Real sockets on 127.0.0.1 (OS-chosen ports): the actor's own WebSocket
client, a raw socket for a page's upgrade, the TCP relay of
``test_samples.py`` to cut connections, and the ``certs`` fixture's
certificates for ``wss://``.
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import threading

import numpy as np
import pytest
from websockets.frames import Close, CloseCode, Frame, Opcode

torch = pytest.importorskip("torch")

from rlinks_rllib.client.actor import RLinkActor  # noqa: E402
from rlinks_rllib.dataset import SampleServer  # noqa: E402
from rlinks_rllib.dataset import RLinkDataset, RLinkSyncModel  # noqa: E402
from test_samples import Relay, sample  # noqa: E402

pytestmark = pytest.mark.timeout(60)

PAGE = "https://game.example"


def upgrade(port: int, origin: str, then: bytes = b"") -> bytes:
    """The server's answer to a page's upgrade request from ``origin``: a 101's head, or all until it closes.

    With ``then``: sent after a 101, and what follows read until the server closes.
    """
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {origin}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode())
        answer = b""
        while not (answer.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in answer):
            data = sock.recv(4096)
            if not data:
                break  # a refusal: the server closed after its answer
            answer += data
        if then and answer.startswith(b"HTTP/1.1 101"):
            sock.sendall(then)
            while data := sock.recv(4096):
                answer += data
    return answer


def test_ws_actor_beside_a_tcp_actor_puts_samples_the_dataset_yields_confirmed():
    with RLinkDataset(batch_size=10, idle_timeout=10, max_samples=60, max_buffer_samples=8) as dataset:
        got: list[dict] = []
        reader = threading.Thread(target=lambda: got.extend(dataset))
        reader.start()
        with RLinkActor(f"ws://127.0.0.1:{dataset.port}", timeout=20) as ws_actor, \
                RLinkActor(f"127.0.0.1:{dataset.port}", timeout=20) as tcp_actor:
            for i in range(30):
                ws_actor.put(sample(0, i))
                tcp_actor.put(sample(1, i))
            ws_actor.flush()  # returns once every sample of it is confirmed
            tcp_actor.flush()
            assert ws_actor.client.address.websocket and not tcp_actor.client.address.websocket
            reader.join(30)
            assert not reader.is_alive()
            assert ws_actor.client.window.pending_steps == 0  # every ws sample confirmed through the WebSocket
            big = {"w": torch.arange(300_000, dtype=torch.float32).reshape(600, 500)}  # 1.2 MB back over ws
            assert RLinkSyncModel(dataset).sync(big) == 1
            np.testing.assert_array_equal(ws_actor.get_remote_model().params["w"], big["w"].numpy())
    samples = [s for batch in got for s in _unbatch(batch)]
    for a in range(2):
        mine = [s for s in samples if s["actor"] == a]
        assert [s["index"] for s in mine] == list(range(30))
        assert all(s["pixel"] == s["index"] % 256 for s in mine)


def _unbatch(batch: dict) -> list[dict]:
    return [{"actor": int(a), "index": int(i), "pixel": int(img[0, 0, 0])}
            for a, i, img in zip(batch["actor"], batch["index"], batch["image_0"])]


def refusal(port: int, origin: str) -> Close:
    """The close frame a page of ``origin`` gets right after its 101 (answered as a browser answers it)."""
    close = Frame(Opcode.CLOSE, Close(CloseCode.NORMAL_CLOSURE, "").serialize()).serialize(mask=True, extensions=[])
    answer = upgrade(port, origin, then=close)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    body = answer[answer.index(b"\r\n\r\n") + 4:]
    assert body[0] == 0x88 and body[1] < 126, body  # one unmasked close frame, then the server closed
    return Close.parse(body[2:2 + body[1]])


def test_page_origin_not_allowed_is_closed_with_the_reason_and_a_log_line_an_allowed_one_is_let_in(caplog):
    caplog.set_level(logging.WARNING, logger="rlinks_rllib.server.samples")
    reason = "origin 'https://evil.example' is not in the dataset's ws_allowed_origins setting"
    with SampleServer(ws_allowed_origins=[PAGE]) as server:
        assert refusal(server.port, "https://evil.example") == Close(CloseCode.POLICY_VIOLATION, reason)
        text = Frame(Opcode.TEXT, b"PING").serialize(mask=True, extensions=[])
        answer = upgrade(server.port, PAGE, then=text)  # an allowed page origin is let in; a text message is not
        assert answer.startswith(b"HTTP/1.1 101") and b"bad_frame" in answer and b"binary" in answer
        with RLinkActor(f"ws://127.0.0.1:{server.port}", timeout=10) as actor:  # a program: no Origin
            actor.put(sample(0, 0))
            assert [int(s["index"]) for s in server.take(10.0)] == [0]
            actor.flush()
        assert server.stats.refused == 2  # the origin, the text message
    lines = [r.getMessage() for r in caplog.records if "WebSocket upgrade refused" in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith(f"{reason} (WebSocket close 1008)"), lines
    # The dataset's default is the runner's: no page origin at all.
    with RLinkDataset(idle_timeout=1) as dataset:
        assert dataset.server.ws_allowed_origins == ()
        assert refusal(dataset.port, PAGE).code == CloseCode.POLICY_VIOLATION
    with pytest.raises(ValueError, match="ws_allowed_origins"):
        SampleServer(ws_allowed_origins=PAGE)  # a string, not a list of origins


def test_ws_connections_dropped_twice_mid_stream_lose_nothing_and_keep_nothing_twice():
    with RLinkDataset(batch_size=8, idle_timeout=20, max_samples=120, max_buffer_samples=8) as dataset:
        relay = Relay(("127.0.0.1", dataset.port))
        batches: list[dict] = []
        reader = threading.Thread(target=lambda: batches.extend(dataset))
        reader.start()
        try:
            with RLinkActor(f"ws://{relay.address}", timeout=20, retry_attempts=20, backoff_initial=0.05) as actor:
                for i in range(120):
                    if i in (40, 80):
                        relay.cut()  # WebSocket messages in flight both ways are lost with the connection
                    actor.put(sample(0, i))
                actor.flush()
                reader.join(30)
                assert not reader.is_alive()
                assert actor.client.address.websocket and actor.client.stats.reconnects >= 2
        finally:
            relay.close()
    got = [s for batch in batches for s in _unbatch(batch)]
    assert [s["index"] for s in got] == list(range(120))
    assert all(s["pixel"] == s["index"] % 256 for s in got)


def test_wss_actor_puts_samples_and_gets_the_synced_model(certs):
    tls = dict(tls_cert_file=certs["server"], tls_key_file=certs["server_key"])
    with RLinkDataset(idle_timeout=10, max_samples=20, max_buffer_samples=4, **tls) as dataset:
        with RLinkActor(f"wss://localhost:{dataset.port}", ca_file=certs["ca"], timeout=20) as actor:
            got: list[dict] = []
            reader = threading.Thread(target=lambda: got.extend(dataset))
            reader.start()
            for i in range(20):
                actor.put({"image_0": np.full((240, 320, 3), i, np.uint8), "index": i})  # many TLS records
            actor.flush()
            reader.join(30)
            assert not reader.is_alive()
            assert [int(s["index"]) for s in got] == list(range(20))
            assert all(int(s["image_0"][-1, -1, -1]) == i for i, s in enumerate(got))
            assert actor.client.tls and actor.client.address.websocket
            assert RLinkSyncModel(dataset).sync({"w": torch.ones(4)}) == 1
            np.testing.assert_array_equal(actor.get_remote_model().params["w"], np.ones(4, np.float32))
    assert dataset.server.stats.tls_handshakes_failed == 0


def test_an_upgrade_left_unfinished_gets_408_at_the_handshake_deadline():
    with SampleServer(handshake_timeout=0.5) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and nothing more
            answer = b""
            while data := sock.recv(4096):
                answer += data
        assert answer.startswith(b"HTTP/1.1 408") and b"no handshake within" in answer


def test_an_env_client_over_ws_sends_episodes_and_acts_with_the_synced_module():
    from rlinks_rllib.client import EnvClient
    from test_dataset_episodes import SMALL, plays_as

    with RLinkDataset(env="CartPole-v1", model_config=SMALL, fragment_steps=20, idle_timeout=2) as dataset:
        module = dataset.default_module("PPO")
        RLinkSyncModel(dataset).sync(module)
        chunks: list[dict] = []
        reader = threading.Thread(target=lambda: chunks.extend(dataset))
        reader.start()
        with EnvClient(f"ws://127.0.0.1:{dataset.port}", explore=False, timeout=20) as client:
            assert plays_as(client, module, 60, seed=0)  # SET_CONFIG and SET_STATE came over ws
        reader.join(30)
        assert not reader.is_alive()
        assert sum(len(c["rewards"]) for c in chunks) == 60  # the client's close waited for their ACKs
