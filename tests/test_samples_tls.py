"""TLS on the sample server (issue #22's data path): ``tls://`` actors -> RLinkDataset, the model back.

Real sockets on 127.0.0.1 (OS-chosen ports), real TLS with certificates the
``certs`` fixture makes with ``openssl`` (``test_auth_tls.make_certificates``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlinks_rllib.client.actor import RLinkActor  # noqa: E402
from rlinks_rllib.client.errors import ConnectFailed, TLSFailed  # noqa: E402
from rlinks_rllib.dataset import SampleServer  # noqa: E402
from rlinks_rllib.dataset import RLinkDataset, RLinkSyncModel  # noqa: E402
from test_auth_tls import FAST as TLS_FAST, wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(60)

SECRET = "sample-server-tls-secret-0123"
FAST = {**TLS_FAST, "timeout": 10.0}


def tls_options(certs: dict[str, str], **extra: str) -> dict[str, str]:
    return dict(tls_cert_file=certs["server"], tls_key_file=certs["server_key"], **extra)


def sample(index: int) -> dict:
    return {"image_0": np.full((240, 320, 3), index % 256, np.uint8), "index": index}  # ~230 KB: many TLS records


def take(server: SampleServer, count: int) -> list[dict]:
    taken: list[dict] = []
    deadline = time.monotonic() + 20
    while len(taken) < count and time.monotonic() < deadline:
        taken += server.take(1.0)
    return taken


def test_tls_actor_puts_samples_and_gets_the_synced_model(certs):
    dataset = RLinkDataset(idle_timeout=10, max_samples=30, max_buffer_samples=4, secret=SECRET, **tls_options(certs))
    assert dataset.server.tls
    try:
        with RLinkActor(f"tls://localhost:{dataset.port}", ca_file=certs["ca"], secret=SECRET, max_unacked=4,
                        **FAST) as actor:
            assert actor.client.tls and actor.get_remote_model() is None
            got: list[dict] = []
            reader = threading.Thread(target=lambda: got.extend(dataset))
            reader.start()
            for i in range(30):
                actor.put(sample(i))  # the inbox holds 4: the actor is pushed back through TLS
            actor.flush()
            reader.join(30)
            assert not reader.is_alive()
            assert [int(s["index"]) for s in got] == list(range(30))
            assert all(int(s["image_0"][-1, -1, -1]) == i % 256 for i, s in enumerate(got))
            big = {"w": torch.arange(300_000, dtype=torch.float32).reshape(600, 500)}  # 1.2 MB back
            assert RLinkSyncModel(dataset).sync(big) == 1
            remote = actor.get_remote_model()
            assert remote.version == 1
            np.testing.assert_array_equal(remote.params["w"], big["w"].numpy())
    finally:
        dataset.close()
    assert dataset.server.stats.tls_handshakes_failed == 0


def test_wrong_ca_and_plain_tcp_are_refused_a_good_actor_loses_nothing(certs, caplog):
    caplog.set_level(logging.WARNING, logger="rlinks_rllib.server.samples")
    with SampleServer(max_buffer_samples=4, **tls_options(certs)) as server:
        address = f"tls://localhost:{server.port}"
        good = RLinkActor(address, ca_file=certs["ca"], max_unacked=4, **FAST)
        good.put(sample(0))
        with pytest.raises(TLSFailed, match="not trusted"):
            RLinkActor(address, ca_file=certs["other_ca"], **FAST).put(sample(99))
        good.put(sample(1))
        with pytest.raises(ConnectFailed, match="tls://"):
            RLinkActor(f"127.0.0.1:{server.port}", **FAST).put(sample(98))
        wait_for(lambda: server.stats.tls_handshakes_failed == 2)
        good.put(sample(2))
        taken = take(server, 3)
        good.flush()
        assert [int(s["index"]) for s in taken] == [0, 1, 2]
        assert server.stats.samples_received == 3 and server.stats.refused == 0
        assert sum("TLS handshake" in r.getMessage() for r in caplog.records) == 2
        good.close()


def test_client_certificates_required(certs):
    options = tls_options(certs, tls_client_ca_file=certs["ca"])
    with SampleServer(**options) as server:
        address = f"tls://localhost:{server.port}"
        with pytest.raises(ConnectFailed, match="client certificate"):
            RLinkActor(address, ca_file=certs["ca"], **FAST).put(sample(0))
        wait_for(lambda: server.stats.tls_handshakes_failed == 1)
        with RLinkActor(address, ca_file=certs["ca"], cert_file=certs["client"], key_file=certs["client_key"],
                        **FAST) as actor:
            actor.put(sample(1))
            assert [int(s["index"]) for s in take(server, 1)] == [1]
            actor.flush()
        assert server.stats.samples_received == 1


def test_a_silent_connection_is_cut_at_the_tls_handshake_deadline(certs):
    with SampleServer(handshake_timeout=0.5, **tls_options(certs)) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as silent:
            assert silent.recv(10) == b""  # closed, no bytes: no TLS was spoken
        wait_for(lambda: server.stats.tls_handshakes_failed == 1)
        with RLinkActor(f"tls://localhost:{server.port}", ca_file=certs["ca"], **FAST) as actor:
            actor.put(sample(0))
            assert len(take(server, 1)) == 1


def test_tls_files_are_checked_when_the_server_is_made(certs):
    with pytest.raises(ValueError, match="tls_cert_file"):
        SampleServer(tls_client_ca_file=certs["ca"])
    with pytest.raises(OSError):
        SampleServer(tls_cert_file=certs["server"] + ".missing")


def test_no_tls_warning_beyond_loopback_with_tls_and_a_secret(certs, caplog):
    caplog.set_level(logging.WARNING, logger="rlinks_rllib.server.samples")
    with SampleServer("0.0.0.0", secret=SECRET.encode(), **tls_options(certs)):
        pass
    with SampleServer("0.0.0.0", secret=SECRET.encode()):
        pass
    warnings = [r.getMessage() for r in caplog.records if "beyond loopback" in r.getMessage()]
    assert len(warnings) == 1 and "without TLS" in warnings[0]
