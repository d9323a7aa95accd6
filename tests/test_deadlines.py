"""Connection deadlines: filed by time, so a tick looks only at the connections that are due.

The queue on its own (pure), then a real server: idle connections are filed
under their idle deadline and nothing else, a frame that starts files its
connection earlier, and a client that gets its weights after a long wait is
watched for idleness again.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import socket
import time
from typing import Any, Callable

import pytest

from peers import TEST_PARAMS, make_episode
from rlinks_rllib.protocol import FrameDecoder, encode_message
from rlinks_rllib.server.network.deadlines import DeadlineQueue
from rlinks_rllib.server.network.listener import RLinkServer
from test_auth_tls import serving

pytestmark = pytest.mark.timeout(60)


class _Item:
    """Something to file (hashable and weakly referable, as a session is)."""


# ----------------------------------------------------------------------
# The queue


def test_items_come_out_once_their_time_has_come_in_time_order():
    queue: DeadlineQueue[_Item] = DeadlineQueue()
    a, b, c = _Item(), _Item(), _Item()
    queue.schedule(a, 3.0)
    queue.schedule(b, 1.0)
    queue.schedule(c, 10.0)
    assert queue.pop_due(0.5) == []
    assert queue.pop_due(3.0) == [b, a]
    assert queue.filed(a) is None and queue.filed(c) == 10.0
    assert queue.pop_due(100.0) == [c]
    assert queue.pop_due(1000.0) == []


def test_filing_again_only_moves_an_item_earlier():
    queue: DeadlineQueue[_Item] = DeadlineQueue()
    item = _Item()
    queue.schedule(item, 5.0)
    queue.schedule(item, 9.0)  # later: it is looked at by 5 anyway
    assert queue.filed(item) == 5.0 and len(queue) == 1
    queue.schedule(item, 2.0)
    assert queue.filed(item) == 2.0
    assert queue.pop_due(2.0) == [item]
    # The superseded entry at 5 is skipped when its time comes.
    assert queue.pop_due(6.0) == [] and len(queue) == 0


def test_an_item_looked_at_and_filed_again_comes_out_again():
    queue: DeadlineQueue[_Item] = DeadlineQueue()
    item = _Item()
    queue.schedule(item, 1.0)
    assert queue.pop_due(1.0) == [item]
    queue.schedule(item, 7.0)
    assert queue.pop_due(5.0) == [] and queue.pop_due(7.0) == [item]


def test_gone_and_discarded_items_are_skipped_and_not_kept_alive():
    queue: DeadlineQueue[_Item] = DeadlineQueue()
    kept, dropped, gone = _Item(), _Item(), _Item()
    for item in (kept, dropped, gone):
        queue.schedule(item, 1.0)
    queue.discard(dropped)
    del gone, item  # the loop variable held the last one
    gc.collect()
    assert queue.pop_due(1.0) == [kept]


# ----------------------------------------------------------------------
# A real server


def _on_loop(server: RLinkServer, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the server's loop thread (which owns the sessions and the queue); return its result."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            done.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread, which raises it
            done.set_exception(exc)

    server._loop.call_soon_threadsafe(run)
    return done.result(timeout=10)


def _read_messages(sock: socket.socket, count: int, timeout: float) -> list[dict]:
    decoder = FrameDecoder(validate=False)
    messages: list[dict] = []
    sock.settimeout(timeout)
    while len(messages) < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        messages += decoder.feed(chunk)
    return messages


def test_idle_connections_are_filed_under_their_idle_deadline_only():
    clients = 40
    with serving(idle_timeout_s=30.0, handshake_timeout_s=0.3) as server, contextlib.ExitStack() as stack:
        for _ in range(clients):
            sock = stack.enter_context(socket.create_connection(server.address, timeout=5))
            sock.sendall(encode_message({"type": "PING"}))
            assert _read_messages(sock, 1, 5.0)[0]["type"] == "PONG"
        # Filed under their handshake deadline when they connected; looked at then, and
        # filed again under the idle one.
        time.sleep(0.3 + 0.25 * 3)

        def filed() -> list[float]:
            return [server.deadlines.filed(s) - s.last_activity for s in server._sessions]

        waits = _on_loop(server, filed)
        assert len(waits) == clients and all(w == pytest.approx(30.0) for w in waits)
        # Nothing is due before then, so no tick looks at any of them.
        assert _on_loop(server, lambda: server.deadlines.pop_due(time.monotonic() + 25.0)) == []


def test_a_frame_that_starts_files_its_connection_under_the_frame_deadline():
    with serving(idle_timeout_s=600.0, frame_timeout_s=0.5) as server, \
            socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(encode_message({"type": "PING"}))
        assert _read_messages(sock, 1, 5.0)[0]["type"] == "PONG"
        frame = encode_message({"type": "EPISODES", "episodes": [make_episode(5)]})
        sock.sendall(frame[: len(frame) // 2])  # and no more
        started = time.monotonic()
        reply = _read_messages(sock, 1, 10.0)
        assert reply and reply[0]["type"] == "ERROR" and "frame took longer" in reply[0]["message"]
        assert time.monotonic() - started < 10.0  # not the 600 s idle deadline


def test_a_client_answered_after_a_long_wait_is_watched_for_idleness_again():
    # On-policy: the client's batch is short of the update, so it waits for weights
    # (no idle deadline runs meanwhile), longer than the idle timeout; once answered,
    # it is READY again and must not stay connected while it sends nothing.
    with serving(on_policy=True, update_steps=4, idle_timeout_s=0.5, handshake_timeout_s=0.3) as server, \
            socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(encode_message({"type": "PING"}))
        assert _read_messages(sock, 1, 5.0)[0]["type"] == "PONG"
        # Its first batch fills the update, so it is answered with the current weights;
        # its second waits for the next ones.
        sock.sendall(encode_message({"type": "EPISODES_AND_GET_STATE", "episodes": [make_episode(5)]}))
        assert _read_messages(sock, 1, 5.0)[0]["type"] == "SET_STATE"
        sock.sendall(encode_message({"type": "EPISODES_AND_GET_STATE", "episodes": [make_episode(5, seed=1)]}))
        time.sleep(1.5)  # three idle timeouts while it waits: that is not idleness
        server.publish_weights(TEST_PARAMS, 2)
        answered = time.monotonic()
        replies = _read_messages(sock, 2, 10.0)
        assert [m["type"] for m in replies] == ["SET_STATE", "ERROR"], replies
        assert "idle" in replies[1]["message"]
        assert time.monotonic() - answered < 5.0


def test_a_runner_probes_its_idle_connections_so_a_peer_cut_off_without_a_word_is_found():
    """TCP keep-alive on every accepted connection (``ss`` shows its timer): a simulator cut off by a
    partition sends no FIN, and its connection, silent, stayed a client owing steps (seen after a 20 s link
    cut on five hosts: every later iteration waited 15 s for it)."""
    import shutil
    import subprocess

    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed: the runner's socket timers can't be read")
    with serving() as server, socket.create_connection(("127.0.0.1", server.address[1])) as client:
        port, mine = server.address[1], client.getsockname()[1]
        listed = ""
        deadline = time.monotonic() + 5
        while f":{mine}" not in listed and time.monotonic() < deadline:
            listed = subprocess.run(["ss", "-tnoH", "state", "established", f"( sport = :{port} )"],
                                    capture_output=True, text=True, timeout=10).stdout
            time.sleep(0.05)
        (line,) = [entry for entry in listed.splitlines() if f":{mine}" in entry]
        assert "timer:(keepalive," in line, line
