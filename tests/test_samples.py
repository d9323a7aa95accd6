"""Plain samples end to end (issue #22): RLinkActor.put -> SampleServer / RLinkDataset, model sync back.

Real sockets on 127.0.0.1 (OS-chosen ports), real torch. A small TCP relay
between actor and dataset lets a test cut every connection mid-stream.
"""

from __future__ import annotations

import logging
import socket
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlinks_rllib.client.actor import ActorNode, RLinkActor  # noqa: E402
from rlinks_rllib.client.errors import NotAgreed, ServerTimeout  # noqa: E402
from rlinks_rllib.protocol.connection import Connection, ErrorReceived, HandshakeDone, Role  # noqa: E402
from rlinks_rllib.protocol.extensions import Extension  # noqa: E402
from rlinks_rllib.protocol.framing import encode_message  # noqa: E402
from rlinks_rllib.dataset import LearnerNode, SampleServer  # noqa: E402
from rlinks_rllib.dataset import RLinkDataset, RLinkSyncModel  # noqa: E402
from peers import RLinkTestServer  # noqa: E402

pytestmark = pytest.mark.timeout(60)


class Relay:
    """Forwards loopback TCP to ``target``; :meth:`cut` resets every connection going through it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.target, timeout=5)
            with self.lock:
                self.socks += [client, server]
            for a, b in ((client, server), (server, client)):
                thread = threading.Thread(target=self._pipe, args=(a, b), daemon=True)
                self.threads.append(thread)
                thread.start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass  # cut: the other direction closes too
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            socks, self.socks = self.socks, []
        for sock in socks:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()
        self.cut()
        for thread in self.threads:
            thread.join(5)


def sample(actor: int, index: int) -> dict:
    return {"image_0": np.full((48, 64, 3), index % 256, np.uint8), "action": np.full((50, 14), index, np.float32),
            "actor": actor, "index": index}


def test_every_sample_once_in_order_across_a_dropped_connection():
    dataset = RLinkDataset(idle_timeout=20, max_samples=80, max_buffer_samples=8)
    relay = Relay(("127.0.0.1", dataset.port))
    actors = [RLinkActor(relay.address, timeout=20, max_unacked=4, retry_attempts=20, backoff_initial=0.05)
              for _ in range(2)]
    got: list[dict] = []
    reader = threading.Thread(target=lambda: got.extend(dataset))
    reader.start()
    try:
        for i in range(40):
            if i == 20:
                relay.cut()
            for a, actor in enumerate(actors):
                actor.put(sample(a, i))
        for actor in actors:
            actor.flush()
        reader.join(30)
        assert not reader.is_alive()
        for a in range(2):
            mine = [s for s in got if int(s["actor"]) == a]
            assert [int(s["index"]) for s in mine] == list(range(40))
            assert all(isinstance(s["image_0"], torch.Tensor) and s["image_0"].shape == (48, 64, 3) for s in mine)
            assert all(int(s["image_0"][0, 0, 0]) == int(s["index"]) for s in mine)
        assert sum(actor.client.stats.reconnects for actor in actors) >= 1
    finally:
        for actor in actors:
            actor.close()
        relay.close()
        dataset.close()


def test_slow_consumer_blocks_put_and_loses_nothing():
    with SampleServer(max_buffer_samples=2) as server:
        actor = RLinkActor(server.address, timeout=1.0, max_unacked=4)
        sent = 0
        with pytest.raises(ServerTimeout):
            for i in range(50):
                actor.put(sample(0, i))
                sent += 1
        # The window (max_unacked) bounds what is in flight (plus one message of at most half of it) and
        # what waits to be sent (as much again, plus the message the sender holds); the inbox bounds what
        # the server holds.
        assert 4 <= sent <= (4 - 1 + 2) + 4 + 2
        assert server.stats.samples_received <= 2 + 2  # the inbox's 2, overshot by at most one message
        taken: list[dict] = []
        while len(taken) < sent:
            taken += server.take(5.0)
        actor.put(sample(0, sent))  # room again
        actor.client.timeout = 10.0
        while len(taken) < sent + 1:
            taken += server.take(5.0)
        actor.flush()
        assert [int(s["index"]) for s in taken] == list(range(sent + 1))
        actor.close()


def test_malformed_samples_refused_other_actors_unaffected(caplog):
    caplog.set_level(logging.WARNING, logger="rlinks_rllib.server.samples")
    with SampleServer() as server:
        good = RLinkActor(server.address, timeout=10)
        good.put(sample(0, 0))
        bad = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        conn = Connection(Role.CLIENT, extensions=[Extension.ACK, Extension.SAMPLES])
        conn.start()
        bad.sendall(b"".join(bytes(p) for p in conn.data_to_send()))
        events = []
        while not any(isinstance(e, HandshakeDone) for e in events):
            conn.receive_data(bad.recv(1 << 16))
            events += iter(conn.next_event, None)
        bad.sendall(encode_message({"type": "SAMPLES", "seq": 1, "samples": [{"image": [1, 2, 3]}]}))
        while not any(isinstance(e, ErrorReceived) for e in events):
            data = bad.recv(1 << 16)
            assert data, "closed without an ERROR"
            conn.receive_data(data)
            events += iter(conn.next_event, None)
        error = next(e for e in events if isinstance(e, ErrorReceived))
        assert error.code == "invalid_message" and "samples[0]" in error.message
        bad.close()
        good.put(sample(0, 1))
        taken: list[dict] = []
        while len(taken) < 2:
            taken += server.take(5.0)
        assert [int(s["index"]) for s in taken] == [0, 1]
        assert any("refused" in r.getMessage() and "invalid_message" in r.getMessage() for r in caplog.records)
        good.close()


def test_sync_reaches_get_remote_model():
    dataset = RLinkDataset(gpu_id=None, idle_timeout=5)
    try:
        actor = RLinkActor(dataset.address, timeout=10)
        assert actor.get_remote_model() is None
        model = torch.nn.Linear(3, 2)
        sync = RLinkSyncModel(dataset)
        assert sync.sync(model) == 1
        remote = actor.get_remote_model()
        assert remote.version == 1 and set(remote.params) == {"weight", "bias"}
        np.testing.assert_array_equal(remote.params["weight"], model.weight.detach().numpy())
        with torch.no_grad():
            model.weight.add_(1.0)
        assert sync.sync(model.state_dict()) == 2
        remote = actor.get_remote_model()
        assert remote.version == 2
        np.testing.assert_array_equal(remote.params["weight"], model.weight.detach().numpy())
        actor.close()
    finally:
        dataset.close()


def test_batches_and_seed_getitem():
    dataset = RLinkDataset(gpu_id=None, batch_size=4, idle_timeout=10, max_samples=8)
    try:
        actor = RLinkActor(dataset.address, timeout=10, max_unacked=16)
        for i in range(9):
            actor.put(sample(0, i))
        batches = list(dataset)
        assert [b["image_0"].shape for b in batches] == [(4, 48, 64, 3)] * 2
        assert batches[1]["index"].tolist() == [4, 5, 6, 7]
        assert batches[0]["image_0"].device == torch.device("cpu")
        assert int(dataset[0]["index"]) == 8  # the seed's __getitem__: the next sample
        dataset.close()  # confirms the last one it handed over, then says shutting_down
        actor.close()  # everything was confirmed first: returns at once
    finally:
        dataset.close()


def test_seed_001_names():
    learner = LearnerNode(port=0, reliable=True, retry_attempts=3)
    try:
        actor = ActorNode(learner_address=learner.address)
        actor.send_trajectory({"obs": [[0.0, 1.0], [1.0, 2.0]], "actions": [0, 1], "rewards": [1.0, 0.5]})
        data = learner.receive(timeout=10)
        assert data["obs"].shape == (2, 2) and data["actions"].tolist() == [0, 1]
        with pytest.raises(TimeoutError):
            learner.receive(timeout=0.2)
        actor.close()
    finally:
        learner.close()


def test_put_to_a_runner_without_samples_is_refused():
    with RLinkTestServer() as server:
        actor = RLinkActor(server.address, timeout=5)
        with pytest.raises(NotAgreed):
            actor.put(sample(0, 0))
        actor.close()


def test_bad_sample_refused_at_put():
    with SampleServer() as server:
        with RLinkActor(server.address, timeout=5) as actor:
            with pytest.raises(ValueError):
                actor.put({"x": object()})
            with pytest.raises(ValueError):
                actor.put({})


def test_with_rlinks_secret_set_only_actors_that_know_it_put(monkeypatch):
    from rlinks_rllib.client.errors import ClientError

    monkeypatch.setenv("RLINKS_SECRET", "a-shared-secret-of-the-team-0123")
    dataset = RLinkDataset(idle_timeout=5, max_samples=1)
    try:
        actor = RLinkActor(dataset.address, timeout=10)  # reads the same variable
        actor.put({"x": np.arange(3, dtype=np.float32)})
        [sample] = list(dataset)
        actor.close()
        np.testing.assert_array_equal(sample["x"].numpy(), np.arange(3, dtype=np.float32))
        with pytest.raises(ClientError):
            RLinkActor(dataset.address, timeout=5, secret="not-the-secret-of-the-team-0123",
                       retry_attempts=1).put({"x": np.zeros(3, np.float32)})
    finally:
        dataset.close()


def test_camera_images_reach_torch_without_a_copy_and_stay_the_samples_own():
    """A 480x640x3 sample's body (0.93 MB) is read into a buffer of its own; its tensors are writable views of it."""
    from rlinks_rllib.dataset.torch_dataset import _frame_view

    dataset = RLinkDataset(idle_timeout=10, max_samples=3)
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 255, (480, 640, 3), dtype=np.uint8) for _ in range(3)]
    try:
        with RLinkActor(dataset.address, timeout=10) as actor:
            for i, image in enumerate(images):
                actor.put({"image_0": image, "mask": np.full((50, 100), i, np.uint8), "index": i})
            got = list(dataset)
        for i, (sample, image) in enumerate(zip(got, images)):
            np.testing.assert_array_equal(sample["image_0"].numpy(), image)
            # Views of one frame, not copies: the mask lies right after the image.
            gap = sample["mask"].data_ptr() - sample["image_0"].data_ptr()
            assert image.nbytes < gap < image.nbytes + 256
            assert sample["image_0"].numpy().flags.writeable and int(sample["index"]) == i
            sample["image_0"].fill_(7)  # the consumer's to write; no other sample changes
        for i, sample in enumerate(got):
            assert int(sample["mask"][0, 0]) == i and int(sample["image_0"].max()) == 7
    finally:
        dataset.close()
    # Arrays backed by bytes (copied out of their frame) are never handed out writable.
    assert _frame_view(np.frombuffer(b"\x01\x02\x03\x04", np.uint8)) is None
    assert _frame_view(np.zeros(3)) is None


def test_a_batch_says_which_actor_sent_each_sample():
    dataset = RLinkDataset(batch_size=4, max_samples=4, idle_timeout=10, sender_key="sender")
    actors = [RLinkActor(dataset.address, timeout=10) for _ in range(2)]
    try:
        for i in range(2):
            for a, actor in enumerate(actors):
                actor.put({"x": np.float32(a), "index": i})
        [batch] = list(dataset)
        ids = [actor.client_id for actor in actors]
        assert sorted(batch["sender"]) == sorted(ids * 2)
        assert all(ids[int(x)] == sender for x, sender in zip(batch["x"], batch["sender"]))
    finally:
        dataset.close()
        for actor in actors:
            actor.close()


def test_one_actor_fills_batches_larger_than_its_own_window():
    """The dataset names its window in the handshake (two batches and its buffer); a lone actor follows it.

    With the actor's own default (64 samples in flight) a batch of 128 could never fill: the
    dataset confirms nothing before its loop asks for the next batch. Nothing here is flushed
    and a partial batch would wait a minute, so the full batches can only come from the window.
    """
    dataset = RLinkDataset(batch_size=128, max_samples=256, partial_batch_after=60, idle_timeout=60)
    actor = RLinkActor(dataset.address, timeout=60)
    try:
        for i in range(256):
            actor.put({"x": np.float32(i), "index": i})
        batches = list(dataset)
        assert [len(b["index"]) for b in batches] == [128, 128]
        assert [int(i) for b in batches for i in b["index"]] == list(range(256))
        assert actor.client.window.max_steps == 2 * 128 + 256
        assert actor.client.window.max_steps > 64  # what the actor holds in flight on its own
    finally:
        dataset.close()
        actor.close()
