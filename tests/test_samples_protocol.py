"""The ``samples`` extension at the protocol layer (PROTOCOL.md 10.10): SAMPLES sent, checked, numbered, resent."""

from __future__ import annotations

import numpy as np
import pytest

from rlinks_rllib.protocol.connection import Connection, HandshakeDone, Role, SamplesReceived
from rlinks_rllib.protocol.errors import InvalidMessage, LocalProtocolError, UnsupportedMessage
from rlinks_rllib.protocol.extensions import Extension
from rlinks_rllib.protocol.framing import encode_message
from rlinks_rllib.protocol.messages import MessageType
from rlinks_rllib.protocol.samples import MAX_SAMPLES_PER_MESSAGE, SampleError, check_sample, read_samples

BOTH = [Extension.ACK, Extension.SAMPLES]
IMAGE = np.arange(480 * 640 * 3, dtype=np.uint32).astype(np.uint8).reshape(480, 640, 3)


def pair(client_ext=BOTH, server_ext=BOTH):
    c = Connection(Role.CLIENT, extensions=client_ext, client_id="actor-1")
    s = Connection(Role.SERVER, extensions=server_ext)
    c.start()
    pump(c, s)
    pump(s, c)
    return c, s


def pump(src: Connection, dst: Connection) -> list:
    dst.receive_data(b"".join(bytes(p) for p in src.data_to_send()))
    return list(iter(dst.next_event, None))


def test_samples_arrive_checked_and_numbered():
    c, s = pair()
    batch = c.send_samples([{"image_0": IMAGE, "action": np.ones((50, 14), np.float32), "index": 3, "tag": "x"}])
    assert (batch.seq, batch.kind, batch.steps) == (1, MessageType.SAMPLES, 1)
    assert c.window.pending[0] is batch
    [event] = pump(c, s)
    assert isinstance(event, SamplesReceived) and event.seq == 1
    [got] = event.samples
    np.testing.assert_array_equal(got["image_0"], IMAGE)
    assert got["action"].shape == (50, 14) and got["index"] == 3 and got["tag"] == "x"
    s.send_ack(1)
    [ack] = pump(s, c)
    assert ack.batch is batch and not c.window.pending


def test_resend_after_reconnect_carries_the_same_seq():
    c, s = pair()
    batch = c.send_samples([{"x": np.zeros(3)}], keep_for_resend=True)
    c.data_to_send()  # lost with the connection
    c2 = Connection(Role.CLIENT, extensions=BOTH, client_id="actor-1", window=c.window)
    s2 = Connection(Role.SERVER, extensions=BOTH)
    c2.start()
    pump(c2, s2)
    pump(s2, c2)
    c2.resend(batch)
    [event] = pump(c2, s2)
    assert isinstance(event, SamplesReceived) and event.seq == 1


def test_not_agreed_is_refused_both_ways():
    c, s = pair(server_ext=[Extension.ACK])
    with pytest.raises(LocalProtocolError):
        c.send_samples([{"x": 1}])
    s.receive_data(encode_message({"type": "SAMPLES", "samples": [{"x": 1}]}))
    with pytest.raises(UnsupportedMessage):
        s.next_event()


@pytest.mark.parametrize("samples", [
    [],
    [{}],
    ["not a map"],
    [{"x": [1, 2]}],
    [{"x": {"nested": 1}}],
    [{"x": None}],
    [{"": 1}],
    [{"k" * 129: 1}],
    [{"x": "t" * 5000}],
    [{"x": 1}] * (MAX_SAMPLES_PER_MESSAGE + 1),
])
def test_malformed_samples_are_invalid(samples):
    c, s = pair()
    s.receive_data(encode_message({"type": "SAMPLES", "samples": samples, "seq": 1}))
    with pytest.raises(InvalidMessage) as info:
        s.next_event()
    assert info.value.code == "invalid_message"
    with pytest.raises(SampleError):
        read_samples(samples)


def test_check_sample_refuses_what_can_not_travel():
    with pytest.raises(SampleError):
        check_sample({"x": np.array(["a"], dtype=object)})
    assert check_sample({"x": np.float32(2.0)})["x"].shape == ()


def test_handshake_agrees_samples():
    c = Connection(Role.CLIENT, extensions=BOTH)
    s = Connection(Role.SERVER, extensions=BOTH)
    c.start()
    [done] = pump(c, s)
    assert isinstance(done, HandshakeDone) and "samples" in done.extensions
