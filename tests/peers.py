"""Scripted RLlink servers for the client's tests: real sockets on 127.0.0.1.

:class:`PeerServer` accepts one connection at a time on a thread and hands
each to a handler the test writes (a hostile handler sends raw bytes).
:class:`RLinkTestServer` is a handler that speaks our protocol -- handshake,
config, weights, episodes with ACKs -- records what it receives, and lets a
test step in on any message (drop the connection, hold back an ACK, ...).

Every wait is bounded: accepting polls a stop flag, each read has a timeout,
and :meth:`PeerServer.stop` cuts the live connection before joining.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from rlinks_rllib.protocol.config import build_config
from rlinks_rllib.protocol.episodes import build_episode_state
from rlinks_rllib.protocol.extensions import make_offer, negotiate, parse_offer
from rlinks_rllib.protocol.framing import FrameDecoder, encode_message
from rlinks_rllib.protocol.weights import build_state

__all__ = [
    "PeerConnection",
    "PeerServer",
    "RLinkTestServer",
    "Received",
    "free_port",
    "make_episode",
    "TEST_PARAMS",
    "TEST_CONFIG",
]


def free_port() -> int:
    """A loopback port nobody listens on (at the moment of asking)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_episode(steps: int = 3, seed: int = 0) -> dict:
    """A small, valid episode chunk of ``steps`` steps (4-float observations, discrete actions)."""
    rng = np.random.default_rng(seed)
    return build_episode_state(
        f"ep-{seed}",
        rng.standard_normal((steps + 1, 4)).astype(np.float32),
        rng.integers(0, 2, size=steps),
        np.ones(steps, dtype=np.float32),
    )


TEST_PARAMS = {
    "pi.net.mlp.0.weight": np.arange(8, dtype=np.float32).reshape(2, 4),
    "pi.net.mlp.0.bias": np.zeros(2, dtype=np.float32),
}

TEST_CONFIG = build_config(
    algorithm="PPO",
    observation_space={
        "kind": "box",
        "shape": [4],
        "dtype": "<f4",
        "low": np.full(4, -1.0, dtype=np.float32),
        "high": np.full(4, 1.0, dtype=np.float32),
    },
    action_space={"kind": "discrete", "n": 2, "start": 0},
    rollout_fragment_length=64,
    on_policy=True,
    model_config={"fcnet_hiddens": [2], "fcnet_activation": "tanh"},
)


class PeerConnection:
    """One accepted connection, with bounded reads of whole messages."""

    def __init__(self, sock: socket.socket, index: int, timeout: float) -> None:
        self.sock = sock
        self.index = index
        self.timeout = timeout
        self.decoder = FrameDecoder()
        self._inbox: list[dict] = []
        sock.settimeout(timeout)

    def recv(self) -> Optional[dict]:
        """The next message, or ``None`` once the client has closed or reset the connection.

        Raises:
            TimeoutError: nothing complete arrived within ``timeout``.
        """
        deadline = time.monotonic() + self.timeout
        while not self._inbox:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"test peer: no message from the client within {self.timeout} s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                return None
            if not data:
                return None
            self._inbox.extend(self.decoder.feed(data))
        return self._inbox.pop(0)

    def send(self, message: dict) -> None:
        self.send_raw(encode_message(message))

    def send_raw(self, data: bytes) -> None:
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)

    def wait_closed(self) -> None:
        """Read and discard until the client closes (bounded by ``timeout``)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                if not self.sock.recv(1 << 16):
                    return
            except (ConnectionResetError, BrokenPipeError):
                return
            except TimeoutError:
                return

    def close(self) -> None:
        self.sock.close()

    def abort(self) -> None:
        """Close with a TCP reset, as a crashed server would."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()


class PeerServer:
    """A TCP server on 127.0.0.1 that runs ``handler(conn)`` for one connection at a time.

    Exceptions a handler raises (other than the client going away) are kept
    in :attr:`errors`; tests assert it is empty.
    """

    def __init__(self, handler: Callable[[PeerConnection], None], *, port: int = 0, timeout: float = 5.0) -> None:
        self.handler = handler
        self.timeout = timeout
        self.errors: list[BaseException] = []
        #: Connections accepted, and those whose handler has returned.
        self.connections = 0
        self.finished = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(8)
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._current: Optional[socket.socket] = None
        self._thread = threading.Thread(target=self._serve, name=f"test-peer-{self.port}", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "PeerServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        current = self._current
        if current is not None:
            try:
                current.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the handler
        self._thread.join(self.timeout + 2.0)
        self._listener.close()
        if self._thread.is_alive():
            raise RuntimeError("test peer thread did not stop")

    def __enter__(self) -> "PeerServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # listener closed
            conn = PeerConnection(sock, self.connections, self.timeout)
            self._current = sock
            self.connections += 1
            try:
                self.handler(conn)
            except (ConnectionError, OSError) as exc:
                if not self._stop.is_set() and not isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                    self.errors.append(exc)
            except BaseException as exc:  # recorded for the test to assert on
                self.errors.append(exc)
            finally:
                self._current = None
                sock.close()
                self.finished += 1


@dataclass(frozen=True)
class Received:
    """One batch the test server received."""

    conn: int
    type: str
    seq: Optional[int]
    client_id: Optional[str]
    duplicate: bool


#: Returned by an ``on_message`` hook.
HANDLED = "handled"  # the hook did what was needed; skip the default reply
CLOSE = "close"  # close the connection (FIN)
ABORT = "abort"  # reset the connection (RST)


class RLinkTestServer(PeerServer):
    """A small RLlink server for tests, speaking our extensions (or plain RLlink).

    Args:
        extensions: what it agrees to (cut down to what the client offers).
        plain: answer a bare ``PONG`` like RLlib's own server.
        config: the ``SET_CONFIG`` ``config`` field (a map, or pickle bytes).
        rlinks_config: an optional ``rlinks_config`` map next to it.
        want_steps: put in ``SET_STATE`` when ``want_steps`` is agreed.
        on_message: ``hook(server, conn, message)`` called for every message
            before the default handling; return ``None`` to go on, or
            :data:`HANDLED`, :data:`CLOSE`, :data:`ABORT`.

    Attributes:
        messages: ``(conn_index, message)`` for every message received.
        batches: a :class:`Received` for every EPISODES / EPISODES_AND_GET_STATE.
        client_ids: the client_id of each handshake, in order.
    """

    def __init__(
        self,
        *,
        extensions: tuple[str, ...] = ("want_steps", "ack"),
        plain: bool = False,
        config: Any = TEST_CONFIG,
        rlinks_config: Optional[dict] = None,
        want_steps: int = 64,
        on_message: Optional[Callable[["RLinkTestServer", PeerConnection, dict], Optional[str]]] = None,
        port: int = 0,
        timeout: float = 5.0,
    ) -> None:
        super().__init__(self._handle, port=port, timeout=timeout)
        self.extensions = extensions
        self.plain = plain
        self.config = config
        self.rlinks_config = rlinks_config
        self.want_steps = want_steps
        self.on_message = on_message
        self.weights_seq_no = 1
        self.messages: list[tuple[int, dict]] = []
        self.batches: list[Received] = []
        self.client_ids: list[Optional[str]] = []
        self._held: set[tuple[Optional[str], int]] = set()

    def seqs(self, conn: Optional[int] = None) -> list[Optional[int]]:
        """The seqs of the batches received (on connection ``conn`` only, if given)."""
        return [b.seq for b in self.batches if conn is None or b.conn == conn]

    def types(self, conn: Optional[int] = None) -> list[str]:
        return [m["type"] for c, m in self.messages if conn is None or c == conn]

    def _handle(self, conn: PeerConnection) -> None:
        agreed: frozenset[str] = frozenset()
        client_id: Optional[str] = None
        while True:
            message = conn.recv()
            if message is None:
                return
            kind = message["type"]
            self.messages.append((conn.index, message))
            if kind == "PING":
                offer = parse_offer(message)
                client_id = None if offer is None else offer.extra.get("client_id")
                self.client_ids.append(client_id)
                agreed = frozenset() if self.plain else negotiate(offer, self.extensions)
            if kind in ("EPISODES", "EPISODES_AND_GET_STATE"):
                seq = message.get("seq")
                key = (client_id, seq)
                duplicate = seq is not None and key in self._held
                if seq is not None:
                    self._held.add(key)
                self.batches.append(Received(conn.index, kind, seq, client_id, duplicate))
            if self.on_message is not None:
                action = self.on_message(self, conn, message)
                if action == CLOSE:
                    conn.close()
                    return
                if action == ABORT:
                    conn.abort()
                    return
                if action == HANDLED:
                    continue
                assert action is None, action
            self.reply(conn, message, agreed)

    def reply(self, conn: PeerConnection, message: dict, agreed: frozenset[str]) -> None:
        """The default answer to ``message``."""
        kind = message["type"]
        if kind == "PING":
            if self.plain:
                conn.send({"type": "PONG"})
            else:
                conn.send({"type": "PONG", "rlinks": make_offer(agreed, agent="rlinks-test-peer/0")})
        elif kind == "GET_CONFIG":
            reply = {"type": "SET_CONFIG", "config": self.config}
            if self.rlinks_config is not None:
                reply["rlinks_config"] = self.rlinks_config
            conn.send(reply)
        elif kind == "GET_STATE":
            conn.send(self.set_state(agreed))
        elif kind == "EPISODES":
            if "ack" in agreed and "seq" in message:
                conn.send({"type": "ACK", "seq": message["seq"]})
        elif kind == "EPISODES_AND_GET_STATE":
            if "ack" in agreed and "seq" in message:
                conn.send({"type": "ACK", "seq": message["seq"]})
            self.weights_seq_no += 1
            conn.send(self.set_state(agreed))
        else:
            conn.send({"type": "ERROR", "code": "unsupported_message", "message": f"test peer can't answer {kind}"})

    def set_state(self, agreed: frozenset[str]) -> dict:
        message = {"type": "SET_STATE", "state": build_state(TEST_PARAMS, self.weights_seq_no)}
        if "want_steps" in agreed:
            message["want_steps"] = self.want_steps
        return message
