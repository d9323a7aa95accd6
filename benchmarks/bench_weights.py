"""Weights to many: how long one runner takes to hand a weight set to 1 and to 64 clients.

One ``RLinkEnvRunner`` is built in-process (as in ``bench_ingest.py``) and
serves either its own module's weights (PPO's default CartPole network, "the
default set") or a 50 MB set put in with ``server.replace_weights`` (the
runner's own path: packed once, the same bytes to every client). Client
threads in ``--procs`` processes each hold one connection (plain ``PING``
handshake); on a signal every client sends ``GET_STATE`` and reads the whole
``SET_STATE`` into a buffer of its own. The time from the signal until the
last client has its last byte is taken, best of ``--rounds``.

Anchors, in the same run:

* the same set to one client (default set: 64 clients in <= 2x that time);
* a raw loopback socket moving the same bytes from one process to another
  (``sendall`` of a prepared buffer, ``recv_into``): the MB/s ceiling (50 MB
  set: the 64 clients' total MB/s >= 0.5x of it).

Usage::

    python benchmarks/bench_weights.py [--quick] [--clients N] [--rounds N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    LOOPBACK,
    MB,
    SOCKET_TIMEOUT_S,
    now,
    print_table,
    read_frame,
    recv_exactly,
    rllib_frame,
    stop_processes,
)
from rlinks_rllib.protocol.limits import HEADER_BYTES  # noqa: E402

BIG_SET_BYTES = 50 * 1000 * 1000
_PING = rllib_frame({"type": "PING"})
_GET_STATE = rllib_frame({"type": "GET_STATE"})


def _read_into(sock: socket.socket, buf: bytearray) -> int:
    """Read one frame into ``buf`` (grown when needed); return the body's size."""
    header = bytearray(HEADER_BYTES)
    recv_exactly(sock, memoryview(header))
    size = int(header)
    if size > len(buf):
        buf.extend(bytes(size - len(buf)))
    recv_exactly(sock, memoryview(buf)[:size])
    return size


def _client_proc(count: int, port: int, rounds: int, ready, go_events, done_queue) -> None:
    """``count`` connections in threads; each round: GET_STATE, read SET_STATE, report the time."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection((LOOPBACK, port), timeout=SOCKET_TIMEOUT_S * 3)
        sock.sendall(_PING)
        read_frame(sock)
        socks.append(sock)
    ready.release()

    def one(sock: socket.socket, buf: bytearray, go, results: list) -> None:
        go.wait(120)
        sock.sendall(_GET_STATE)
        results.append((_read_into(sock, buf), time.monotonic()))

    buffers = [bytearray() for _ in socks]
    try:
        for r in range(rounds):
            results: list = []
            threads = [threading.Thread(target=one, args=(s, b, go_events[r], results)) for s, b in zip(socks, buffers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            done_queue.put((max(t for _, t in results), sum(n for n, _ in results), len(results)))
    finally:
        for sock in socks:
            sock.close()


def fan_out(runner, clients: int, procs: int, rounds: int) -> tuple[float, int]:
    """Best time (s) for ``clients`` to get the runner's weights, and the bytes each got."""
    ctx = mp.get_context("fork")
    ready = ctx.Semaphore(0)
    gos = [ctx.Event() for _ in range(rounds)]
    done = ctx.Queue()
    procs = min(procs, clients)
    shares = [clients // procs + (i < clients % procs) for i in range(procs)]
    workers = [ctx.Process(target=_client_proc, args=(n, runner.address[1], rounds, ready, gos, done), daemon=True)
               for n in shares]
    for w in workers:
        w.start()
    best, size = float("inf"), 0
    try:
        for _ in workers:
            if not ready.acquire(timeout=120):
                raise TimeoutError("clients did not connect")
        for r in range(rounds):
            time.sleep(0.3)
            start = time.monotonic()
            gos[r].set()
            results = [done.get(timeout=300) for _ in workers]
            if sum(n for _, _, n in results) != clients:
                raise RuntimeError("a client got no weights")
            best = min(best, max(t for t, _, _ in results) - start)
            size = results[0][1] // max(1, results[0][2])
    finally:
        stop_processes(workers, timeout=10.0)
    return best, size


def _raw_receiver(port, nbytes: int, rounds: int, ready, result) -> None:
    listener = socket.create_server((LOOPBACK, 0))
    port.value = listener.getsockname()[1]
    ready.release()
    conn, _ = listener.accept()
    buf = bytearray(nbytes)
    best = float("inf")
    for _ in range(rounds):
        conn.recv_into(memoryview(buf)[:1])  # the sender's start byte
        start = time.monotonic()
        recv_exactly(conn, memoryview(buf)[: nbytes])
        best = min(best, time.monotonic() - start)
        conn.sendall(b"k")
    result.value = best
    conn.close()
    listener.close()


def loopback_rate(nbytes: int, rounds: int) -> float:
    """MB/s of one raw loopback connection moving ``nbytes`` (best of ``rounds``)."""
    ctx = mp.get_context("fork")
    port, result, ready = ctx.Value("i", 0), ctx.Value("d", 0.0), ctx.Semaphore(0)
    proc = ctx.Process(target=_raw_receiver, args=(port, nbytes, rounds, ready, result), daemon=True)
    proc.start()
    ready.acquire(timeout=30)
    payload = bytes(nbytes)
    with socket.create_connection((LOOPBACK, port.value), timeout=SOCKET_TIMEOUT_S * 3) as sock:
        for _ in range(rounds):
            sock.sendall(b"s")
            sock.sendall(payload)
            sock.recv(1)
    stop_processes([proc], timeout=10.0)
    return nbytes / result.value / MB


def _runner():
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib.server.env_runner import RLinkEnvRunner

    env = gym.make("CartPole-v1")
    config = (
        PPOConfig()
        .environment(observation_space=env.observation_space, action_space=env.action_space,
                     env_config={"port": 0, "max_clients": 256, "max_write_buffer_bytes": 2 * BIG_SET_BYTES})
        .env_runners(num_env_runners=0)
    )
    env.close()
    return RLinkEnvRunner(config=config, worker_index=0)


def main(argv: list[str] | None = None) -> int:
    import logging

    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 clients, one round, a 5 MB set (smoke test)")
    parser.add_argument("--clients", type=int, default=None, help="clients of the fan-out (default 64)")
    parser.add_argument("--procs", type=int, default=4, help="client processes (threads in each)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per case (best taken)")
    args = parser.parse_args(argv)
    many = args.clients or (8 if args.quick else 64)
    rounds = args.rounds or (1 if args.quick else 3)
    big = BIG_SET_BYTES // 10 if args.quick else BIG_SET_BYTES
    logging.getLogger("rlinks_rllib").setLevel(logging.WARNING)
    print(f"bench_weights: time until every client has a weight set (GET_STATE -> SET_STATE), best of {rounds}; "
          f"{os.cpu_count()} CPUs")
    started = now()
    runner = _runner()
    try:
        default_one, default_size = fan_out(runner, 1, args.procs, rounds)
        default_many, _ = fan_out(runner, many, args.procs, rounds)
        runner.server.replace_weights({"big": np.zeros(big // 4, np.float32)}, 0)
        big_one, big_size = fan_out(runner, 1, args.procs, rounds)
        big_many, _ = fan_out(runner, many, args.procs, rounds)
    finally:
        runner.stop()
    raw = loopback_rate(big_size, rounds)
    rows = [
        ["default set, 1 client", 1, default_size / 1e3, default_one * 1000, default_size / default_one / MB],
        [f"default set, {many} clients", many, default_size / 1e3, default_many * 1000,
         many * default_size / default_many / MB],
        [f"{big / MB:.0f} MB set, 1 client", 1, big_size / 1e3, big_one * 1000, big_size / big_one / MB],
        [f"{big / MB:.0f} MB set, {many} clients", many, big_size / 1e3, big_many * 1000,
         many * big_size / big_many / MB],
        ["raw loopback socket, same bytes", 1, big_size / 1e3, big_size / raw / MB * 1000, raw],
    ]
    print_table(["case", "clients", "frame KB", "ms", "MB/s (all clients)"], rows)
    print("ratios [aim]:")
    print(f"  default set, time {many} clients / 1 client: {default_many / default_one:6.2f}x  [<= 2x]")
    print(f"  {big / MB:.0f} MB set, {many} clients' MB/s / raw loopback MB/s: "
          f"{many * big_size / big_many / MB / raw:6.2f}x  [>= 0.5x]")
    print(f"  {big / MB:.0f} MB set, time {many} clients / 1 client: {big_many / big_one:6.2f}x  [info]")
    print(f"total {now() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
