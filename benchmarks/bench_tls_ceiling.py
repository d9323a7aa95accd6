"""What TLS costs a receiver on this machine, before any of our code: bare sockets, plain beside TLS.

Issue #14 asks images over TLS at 0.7x of plain, and whether moving TLS off
the runner's single loop thread pays. This measures the ceiling both answers
live under, with no runner at all: ``--senders`` processes each write
480x640x3 image frames (16 per message, as ``bench_ingest.py`` sends them)
as fast as they can over loopback, and one receiving process reads them into
frame-sized buffers and counts bytes, three ways in the same run:

* plain: one thread reads every connection (a selector), as the runner's loop does;
* TLS, one thread: the same, through ``ssl`` (OpenSSL decrypts on that thread);
* TLS, a thread per connection: blocking reads, so each connection's
  decryption runs on its own thread (``SSL_read`` releases the GIL).

Printed: MB/s and the receiver's CPU share for each, and the two TLS/plain
ratios (median over ``--rounds``). The senders encrypt too, on the same
cores: on a machine with few cores that is part of what TLS costs. Usage::

    python benchmarks/bench_tls_ceiling.py [--rounds N] [--window S] [--senders N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import selectors
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import IMAGE_SHAPE, LOOPBACK, MB, SOCKET_TIMEOUT_S, make_test_certificates, median, stop_processes  # noqa: E402

FRAME_BYTES = 16 * (IMAGE_SHAPE[0] * IMAGE_SHAPE[1] * IMAGE_SHAPE[2])
MODES = ("plain", "TLS, one thread", "TLS, a thread per connection")


def _sender(port: int, ca: str | None, stop) -> None:
    sock = socket.create_connection((LOOPBACK, port), timeout=SOCKET_TIMEOUT_S)
    if ca is not None:
        context = ssl.create_default_context(cafile=ca)
        sock = context.wrap_socket(sock, server_hostname="localhost")
    frame = os.urandom(FRAME_BYTES)
    try:
        while not stop.is_set():
            sock.sendall(frame)
    except OSError:
        pass  # the receiver closed: the window is over
    finally:
        sock.close()


class _Frames:
    """Where one connection's bytes land: a fresh frame-sized buffer per frame, as the runner reads bodies."""

    def __init__(self) -> None:
        self.view, self.filled = memoryview(bytearray(FRAME_BYTES)), 0

    def space(self) -> memoryview:
        return self.view[self.filled:]

    def took(self, count: int) -> None:
        self.filled += count
        if self.filled == FRAME_BYTES:
            self.view, self.filled = memoryview(bytearray(FRAME_BYTES)), 0


def _read_on_one_thread(conns: list, window: float) -> int:
    received = 0
    frames = {conn: _Frames() for conn in conns}
    with selectors.DefaultSelector() as selector:
        for conn in conns:
            conn.setblocking(False)
            selector.register(conn, selectors.EVENT_READ)
        end = time.monotonic() + window
        while time.monotonic() < end:
            for key, _ in selector.select(0.1):
                conn, buf = key.fileobj, frames[key.fileobj]
                while True:  # TLS: drain what OpenSSL holds decrypted, not only what the socket has
                    try:
                        count = conn.recv_into(buf.space())
                    except (BlockingIOError, ssl.SSLWantReadError):
                        break
                    if not count:
                        break
                    received += count
                    buf.took(count)
    return received


def _read_on_a_thread_each(conns: list, window: float) -> int:
    counts = [0] * len(conns)
    done = threading.Event()

    def read(i: int, conn) -> None:
        conn.settimeout(SOCKET_TIMEOUT_S)
        buf = _Frames()
        while not done.is_set():
            try:
                count = conn.recv_into(buf.space())
            except (OSError, ssl.SSLError):
                return  # closed under us: the window is over
            if not count:
                return
            counts[i] += count
            buf.took(count)

    threads = [threading.Thread(target=read, args=(i, conn), daemon=True) for i, conn in enumerate(conns)]
    for thread in threads:
        thread.start()
    time.sleep(window)
    done.set()
    return sum(counts)


def run_mode(mode: str, senders: int, window: float, certs: dict[str, str]) -> tuple[float, float]:
    """One mode once: (MB/s received, receiver CPU as a share of one core)."""
    tls = mode != "plain"
    context = None
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs["server"], certs["server_key"])
    listener = socket.create_server((LOOPBACK, 0))
    listener.settimeout(SOCKET_TIMEOUT_S)
    port = listener.getsockname()[1]
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    procs = [ctx.Process(target=_sender, args=(port, certs["ca"] if tls else None, stop), daemon=True)
             for _ in range(senders)]
    conns: list = []
    try:
        for proc in procs:
            proc.start()
        for _ in procs:
            conn, _ = listener.accept()
            conns.append(context.wrap_socket(conn, server_side=True) if context else conn)
        start, cpu = time.monotonic(), time.process_time()
        reader = _read_on_a_thread_each if mode == MODES[2] else _read_on_one_thread
        received = reader(conns, window)
        seconds, cpu = time.monotonic() - start, time.process_time() - cpu
    finally:
        stop.set()
        for conn in conns:
            conn.close()
        listener.close()
        stop_processes(procs, timeout=5.0)
    return received / MB / seconds, cpu / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="round-robin rounds over the three modes (median)")
    parser.add_argument("--window", type=float, default=5.0, help="seconds measured per mode and round")
    parser.add_argument("--senders", type=int, default=4, help="sender processes (connections)")
    args = parser.parse_args(argv)
    print(f"bench_tls_ceiling: {args.senders} senders, {FRAME_BYTES / MB:.1f} MB frames, "
          f"{args.window:g} s x {args.rounds} rounds, {os.cpu_count()} cores, {ssl.OPENSSL_VERSION}")
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpus: dict[str, list[float]] = {mode: [] for mode in MODES}
    ratios: dict[str, list[float]] = {mode: [] for mode in MODES[1:]}
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_test_certificates(Path(tmp))
        for _ in range(args.rounds):
            for mode in MODES:
                rate, cpu = run_mode(mode, args.senders, args.window, certs)
                rates[mode].append(rate)
                cpus[mode].append(cpu)
            for mode in MODES[1:]:
                ratios[mode].append(rates[mode][-1] / rates["plain"][-1])
    for mode in MODES:
        print(f"  {mode:30s} {median(rates[mode]):8,.0f} MB/s   receiver CPU {100 * median(cpus[mode]):4.0f}% of a core")
    print("ratios (median of per-round ratios):")
    for mode in MODES[1:]:
        print(f"  {mode} / plain: {median(ratios[mode]):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
