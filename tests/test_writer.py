"""SharedWriter: large shared parts reach a slow reader whole and in order, without a copy per client."""

from __future__ import annotations

import asyncio
import socket
import threading

from rlinks_rllib.server.network.writer import HIGH_WATER_BYTES, SLICE_BYTES, SharedWriter


class _Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.writer: SharedWriter | None = None

    def connection_made(self, transport) -> None:
        self.writer = SharedWriter(transport)

    def pause_writing(self) -> None:
        self.writer.pause()

    def resume_writing(self) -> None:
        self.writer.resume()


def _read_all(sock: socket.socket, size: int, out: list) -> None:
    got = bytearray()
    while len(got) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    out.append(bytes(got))


def test_large_parts_arrive_in_order_and_the_transport_holds_only_a_slice():
    shared = bytes(range(256)) * (12 * 1024 * 1024 // 256)  # 12 MiB, "the weights"
    parts = [b"head-1", shared, b"small-ack", memoryview(shared)[: 3 * SLICE_BYTES + 7], b"tail"]
    expected = b"".join(bytes(p) for p in parts)
    ours, theirs = socket.socketpair()
    theirs.settimeout(30)
    loop = asyncio.new_event_loop()
    try:
        transport, sink = loop.run_until_complete(loop.connect_accepted_socket(_Sink, ours))
        assert sink.writer.write(parts) == len(expected)
        # Nothing was copied beyond what the socket did not take and one slice.
        assert transport.get_write_buffer_size() <= HIGH_WATER_BYTES + SLICE_BYTES
        assert sink.writer.queued > 0
        received: list = []
        reader = threading.Thread(target=_read_all, args=(theirs, len(expected), received))
        reader.start()
        peak = 0

        async def drain() -> None:
            nonlocal peak
            for _ in range(3000):
                peak = max(peak, transport.get_write_buffer_size())
                if sink.writer.queued == 0:
                    return
                await asyncio.sleep(0.005)

        loop.run_until_complete(asyncio.wait_for(drain(), 60))
        reader.join(30)
        assert sink.writer.queued == 0
        assert peak <= HIGH_WATER_BYTES + SLICE_BYTES
        assert received and received[0] == expected
        transport.close()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
        theirs.close()
