"""Hostile WebSocket peers against a runner's port, while a good WebSocket client keeps sending.

Each attack runs on its own loopback connection to our real server
(:class:`RLinkServer`, the runner's network side; no Ray): a bad upgrade
(not HTTP, no ``Sec-WebSocket-Key``, a wrong version, an endless request),
an oversized message before and after the RLlink handshake, a fragmented
message that grows past the limit, a text message, and peers that never
finish the upgrade or the RLlink handshake. Each must end with a clear
answer (an HTTP status with a reason, or an RLlink ``ERROR`` and a WebSocket
close with a code and a reason), a log line and a count in the server's
``errors``; the good client, connected the whole time, loses nothing.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time

import msgpack
import pytest
from websockets.client import ClientProtocol
from websockets.frames import CloseCode, Frame, Opcode
from websockets.protocol import OPEN
from websockets.uri import parse_uri

from peers import make_episode
from rlinks_rllib.client import RLinkClient
from rlinks_rllib.protocol import encode_message, make_offer
from rlinks_rllib.protocol.limits import HANDSHAKE_MAX_FRAME_BYTES
from rlinks_rllib.server.network.websocket import MAX_UPGRADE_BYTES
from test_auth_tls import FAST, serving, wait_for

pytestmark = pytest.mark.timeout(120)

MAX_FRAME = 1024 * 1024
LIMITS = dict(max_frame_bytes=MAX_FRAME, handshake_timeout_s=1.0)
PING_BODY = encode_message({"type": "PING", "rlinks": make_offer(["ack"], agent="attacker")})[8:]
UPGRADE = ("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: {version}\r\n\r\n")


class RawWebSocket:
    """A hand-driven WebSocket client: websockets' ClientProtocol to upgrade and read, raw frames to attack."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.ws = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/"), max_size=None)
        self.ws.send_request(self.ws.connect())
        self._flush()
        while self.ws.state is not OPEN:
            data = self.sock.recv(65536)
            assert data, "the server closed during the upgrade"
            self.ws.receive_data(data)
        self.events = self.ws.events_received()[1:]  # after the 101

    def _flush(self) -> None:
        for chunk in self.ws.data_to_send():
            if chunk:
                self.sock.sendall(chunk)

    def send(self, body: bytes, opcode: Opcode = Opcode.BINARY, fin: bool = True) -> None:
        self.sock.sendall(Frame(opcode, body, fin).serialize(mask=True))

    def handshake(self) -> None:
        self.send(PING_BODY)
        assert any(m["type"] == "PONG" for m in self.read(until="PONG")[0])

    def read(self, until: str | None = None, timeout: float = 10.0) -> tuple[list[dict], object]:
        """RLlink messages and the close frame that came, until the server closes (or ``until`` arrives)."""
        messages, close = [], None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                if event.opcode is Opcode.BINARY:
                    messages.append(msgpack.unpackb(event.data, raw=False))
                elif event.opcode is Opcode.CLOSE:
                    close = self.ws.close_rcvd
            self.events = []
            if until is not None and any(m["type"] == until for m in messages):
                break
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            self.ws.receive_data(data)
            self.events = self.ws.events_received()
        return messages, close

    def close(self) -> None:
        self.sock.close()


def http_answer(port: int, request: bytes, timeout: float = 10.0) -> bytes:
    """Send ``request`` on a fresh connection; everything the server says until it closes."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
    return answer


def masked_header(length: int, opcode: Opcode = Opcode.BINARY, fin: bool = True) -> bytes:
    """The header of a client frame declaring ``length`` bytes (its payload need not follow)."""
    return bytes([(0x80 if fin else 0) | opcode, 0x80 | 127]) + struct.pack("!Q", length) + b"\x00" * 4


class GoodClient(threading.Thread):
    """An off-policy client over ws:// that sends a small batch every few milliseconds until stopped."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.address = f"ws://127.0.0.1:{port}"
        self.stop_event = threading.Event()
        self.steps = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with RLinkClient(self.address, extensions=["want_steps"], **FAST) as client:
                client.get_state()
                seed = 0
                while not self.stop_event.is_set():
                    client.send_episodes([make_episode(4, seed=seed)])
                    self.steps += 4
                    seed += 1
                    time.sleep(0.005)
                client.get_state()  # a round trip: every batch before it was read
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


@pytest.fixture
def attacked(caplog):
    """A server with short limits and a good client sending throughout; checks the client lost nothing."""
    caplog.set_level(logging.INFO, logger="rlinks_rllib.server")
    with serving(**LIMITS) as server:
        good = GoodClient(server.address[1])
        good.start()
        wait_for(lambda: good.steps > 0)
        yield server
        good.stop_event.set()
        good.join(30)
        assert good.error is None and not good.is_alive()
        wait_for(lambda: server.stats.steps_in == good.steps)


def logged(caplog, *parts: str) -> bool:
    return any(all(p in r.getMessage() for p in parts) for r in caplog.records)


@pytest.mark.parametrize(("request_bytes", "status", "why"), [
    (b"GET \x00\x01\x02 nonsense\r\n\r\n", b"400", "not a valid HTTP upgrade request"),
    (UPGRADE.format(version=13).replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "").encode(),
     b"400", "Sec-WebSocket-Key"),
    (UPGRADE.format(version=8).encode(), b"400", "Sec-WebSocket-Version"),
    (b"GET / HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 8000 + b"\r\n" * 1 + (b"X-More: " + b"b" * 8000 + b"\r\n") * 4,
     b"431", "longer than"),
    (UPGRADE.format(version=13).replace("\r\n\r\n", "\r\nOrigin: http://a.example\r\nOrigin: http://b.example"
                                         "\r\n\r\n").encode(), b"400", "multiple values"),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", b"414", "expected no more than 8192 bytes"),
], ids=["not-http", "no-key", "wrong-version", "endless-request", "two-origins", "long-request-line"])
def test_a_bad_upgrade_gets_an_http_answer_and_a_log_line(attacked, caplog, request_bytes, status, why):
    answer = http_answer(attacked.address[1], request_bytes)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert why.encode() in answer
    wait_for(lambda: logged(caplog, "WebSocket upgrade refused", why))
    assert attacked.stats.errors["bad_frame"] == 1
    assert len(request_bytes) <= MAX_UPGRADE_BYTES or status == b"431"


@pytest.mark.parametrize("before_handshake", [True, False], ids=["before-PING", "after-PING"])
def test_an_oversized_message_is_refused_from_its_header(attacked, caplog, before_handshake):
    attacker = RawWebSocket(attacked.address[1])
    try:
        if not before_handshake:
            attacker.handshake()
        limit = HANDSHAKE_MAX_FRAME_BYTES if before_handshake else MAX_FRAME
        attacker.sock.sendall(masked_header(limit + 1))
        messages, close = attacker.read()
    finally:
        attacker.close()
    assert [m["code"] for m in messages if m["type"] == "ERROR"] == ["frame_too_large"]
    assert close.code == CloseCode.MESSAGE_TOO_BIG and f"exceeds limit of {limit} bytes" in close.reason
    wait_for(lambda: logged(caplog, "ERROR frame_too_large", "WebSocket message too large"))
    assert attacked.stats.errors["frame_too_large"] == 1


def test_a_fragmented_message_is_refused_once_it_grows_past_the_limit(attacked, caplog):
    attacker = RawWebSocket(attacked.address[1])
    try:
        attacker.handshake()
        piece = b"\x00" * (MAX_FRAME // 3)
        attacker.send(piece, Opcode.BINARY, fin=False)
        attacker.send(piece, Opcode.CONT, fin=False)
        attacker.send(piece, Opcode.CONT, fin=False)
        attacker.sock.sendall(masked_header(len(piece), Opcode.CONT, fin=True))  # past the limit in total
        messages, close = attacker.read()
    finally:
        attacker.close()
    assert [m["code"] for m in messages if m["type"] == "ERROR"] == ["frame_too_large"]
    assert close.code == CloseCode.MESSAGE_TOO_BIG
    wait_for(lambda: logged(caplog, "ERROR frame_too_large"))


def test_a_text_message_is_refused_with_an_error_and_a_close(attacked, caplog):
    attacker = RawWebSocket(attacked.address[1])
    try:
        attacker.handshake()
        attacker.send(b'{"type": "GET_STATE"}', Opcode.TEXT)
        messages, close = attacker.read()
    finally:
        attacker.close()
    errors = [m for m in messages if m["type"] == "ERROR"]
    assert [e["code"] for e in errors] == ["bad_frame"] and "binary" in errors[0]["message"]
    assert close.code == CloseCode.POLICY_VIOLATION and "text" in close.reason
    wait_for(lambda: logged(caplog, "ERROR bad_frame", "text WebSocket message"))


def test_a_message_that_is_not_rlink_is_refused_as_over_tcp(attacked, caplog):
    attacker = RawWebSocket(attacked.address[1])
    try:
        attacker.send(b"\xc1 not msgpack")
        messages, close = attacker.read()
    finally:
        attacker.close()
    assert [m["type"] for m in messages] == ["ERROR"] and close is not None
    assert sum(attacked.stats.errors.values()) == 1


@pytest.mark.parametrize("stage", ["upgrade", "rlink"])
def test_a_peer_that_never_finishes_the_handshake_is_cut_off_at_the_deadline(attacked, caplog, stage):
    if stage == "upgrade":
        answer = http_answer(attacked.address[1], b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and nothing more
        assert answer.startswith(b"HTTP/1.1 408") and b"handshake not done" in answer
    else:
        attacker = RawWebSocket(attacked.address[1])  # upgraded, but never a PING
        try:
            messages, close = attacker.read()
        finally:
            attacker.close()
        assert [m["code"] for m in messages] == ["limit_exceeded"] and "handshake" in close.reason
    wait_for(lambda: logged(caplog, "ERROR limit_exceeded", "handshake not done within 1 s"))
    assert attacked.stats.errors["limit_exceeded"] == 1


def test_a_clean_close_from_the_client_is_logged_as_such(attacked, caplog):
    attacker = RawWebSocket(attacked.address[1])
    try:
        attacker.handshake()
        attacker.ws.send_close(CloseCode.NORMAL_CLOSURE, "done")
        attacker._flush()
        _, close = attacker.read()
    finally:
        attacker.close()
    assert close.code == CloseCode.NORMAL_CLOSURE
    wait_for(lambda: logged(caplog, "client closed the WebSocket", "done"))
    assert not attacked.stats.errors


def test_an_unmasked_frame_breaks_rfc_6455_and_is_refused(attacked, caplog):
    attacker = RawWebSocket(attacked.address[1])
    try:
        attacker.handshake()
        attacker.sock.sendall(Frame(Opcode.BINARY, PING_BODY).serialize(mask=False))  # a client must mask
        messages, close = attacker.read()
    finally:
        attacker.close()
    assert [m["code"] for m in messages if m["type"] == "ERROR"] == ["bad_frame"]
    assert close.code == CloseCode.PROTOCOL_ERROR and "masking" in close.reason
    wait_for(lambda: logged(caplog, "ERROR bad_frame", "invalid WebSocket framing"))
