"""put() into a training loop's dataset, vs a raw loopback socket, in one run (issues #22 and #31).

Small samples (``{"obs": float32[4], "i": i}``, the documented defaults:
``RLinkDataset()`` iterated one sample at a time, ``RLinkActor(address)``):

* latency: one ``put`` then ``flush`` (returns once the loop has the
  sample), 200 times after 200 that are not timed (the steady state a loop
  that puts and flushes sees; both sides warm up alike); raw: the same dict packed with msgpack (the array as
  its bytes) and sent on a loopback socket to a thread that unpacks it and
  hands it through a bounded queue to a consumer thread, which answers one
  byte once it has it. p50 in milliseconds; aim <= 0.2 ms.
* streaming: ``--small`` puts then one ``flush``; raw: as many packed
  dicts sent back to back, one byte back once the consumer has the last.
  Samples/s; aims >= 50,000/s and >= 0.25x raw. The actor runs in a
  process of its own on both sides; so does the raw sender.

Camera samples: actor processes each send ``--samples`` samples of one 480x640x3 uint8
image and one 50x14 float32 action chunk (the seed's robot, ~0.92 MB each):

* ours: ``RLinkActor.put`` (reliable, one ``SAMPLES`` message per sample,
  confirmed when taken) into an ``RLinkDataset`` iterated by this process,
  which yields each sample as torch tensors;
* raw: what a user's minimal code would do with a plain loopback TCP socket
  per actor and no protocol: each process ``sendall``\\ s the same bytes
  (image, then chunk); a thread per connection here ``recv_into``\\ s them
  into a new image array and a new chunk array (a training loop keeps what
  it receives, so each sample needs memory of its own) and hands them to
  this thread through a bounded queue (64, the dataset's buffer here), which
  takes them as torch tensors (``torch.from_numpy``, no copy), as the
  dataset yields them. No framing, no confirmations, no resends;
* ours over TLS: the same ``put``\\ s to ``tls://localhost`` (a test CA's
  certificate, made with ``openssl``; the column is left out without it),
  for what encryption costs on this path.

MB/s counts the image and chunk bytes, from the moment all senders are
told to go until the training thread holds the last sample. Rounds alternate (ours, TLS, raw,
raw, TLS, ours, ...); a ratio is the median of per-round ratios. Aim: >= 0.5x. The
seed's own package (``rlinks`` 1.0.3) was measured at 29 MB/s from one
actor and 41 MB/s from four on this kind of machine. Usage::

    python benchmarks/bench_put.py [--quick] [--rounds N] [--samples N] [--actors N] [--small N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    IMAGE_SHAPE,
    LOOPBACK,
    MB,
    make_test_certificates,
    median,
    median_ratio,
    now,
    print_table,
    recv_exactly,
)

CHUNK_SHAPE = (50, 14)
SAMPLE_BYTES = int(np.prod(IMAGE_SHAPE)) + int(np.prod(CHUNK_SHAPE)) * 4
#: Samples either side holds before its senders are pushed back.
BUFFER_SAMPLES = 64
#: put + flush round trips timed per round (small samples).
LATENCY_PUTS = 200
#: Seconds a round may take before the benchmark gives up.
ROUND_TIMEOUT_S = 300.0


def _sample(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 255, IMAGE_SHAPE, dtype=np.uint8), rng.random(CHUNK_SHAPE, dtype=np.float32)


# ----------------------------------------------------------------------
# Small samples


def _small(i: int) -> dict:
    return {"obs": np.full(4, i, np.float32), "i": i}


def _ours_small_actor(address: str, count: int, result) -> None:
    from rlinks_rllib.client.actor import RLinkActor

    with RLinkActor(address) as actor:
        for i in range(LATENCY_PUTS):  # warm-up, not timed
            actor.put(_small(-1 - i))
            actor.flush()
        latencies = []
        for i in range(LATENCY_PUTS):
            start = now()
            actor.put(_small(i))
            actor.flush()
            latencies.append(now() - start)
        start = now()
        for i in range(count):
            actor.put(_small(i))
        actor.flush()
        result.put((median(latencies), count / (now() - start)))


def ours_small(count: int) -> tuple[float, float]:
    """(put+flush p50 seconds, streaming samples/s) of one RLinkActor process into an RLinkDataset read here."""
    from rlinks_rllib.dataset import RLinkDataset

    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    with RLinkDataset() as dataset:
        stop = threading.Event()

        def loop() -> None:
            for _ in dataset:
                if stop.is_set():
                    return

        reader = threading.Thread(target=loop, daemon=True)
        reader.start()
        proc = ctx.Process(target=_ours_small_actor, args=(dataset.address, count, result), daemon=True)
        proc.start()
        got = result.get(timeout=ROUND_TIMEOUT_S)
        proc.join(ROUND_TIMEOUT_S)
        stop.set()
    return got


def _raw_small_actor(port: int, count: int, result) -> None:
    import msgpack

    packer = msgpack.Packer()
    with socket.create_connection((LOOPBACK, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def send(i: int) -> None:
            sample = _small(i)
            sock.sendall(packer.pack({"obs": sample["obs"].tobytes(), "i": i}))

        for i in range(LATENCY_PUTS):  # warm-up, not timed
            send(-1 - i)
            recv_exactly(sock, memoryview(bytearray(1)))
        latencies = []
        for i in range(LATENCY_PUTS):
            start = now()
            send(i)
            recv_exactly(sock, memoryview(bytearray(1)))
            latencies.append(now() - start)
        start = now()
        for i in range(count):
            send(i)
        recv_exactly(sock, memoryview(bytearray(1)))
        result.put((median(latencies), count / (now() - start)))


def raw_small(count: int) -> tuple[float, float]:
    """The same over a plain socket: a receiving thread unpacks, a consumer thread takes through a bounded queue.

    The consumer answers one byte per latency sample and one after the
    stream's last sample, as ``flush`` returns once the loop has it.
    """
    import msgpack
    import torch

    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    listener = socket.create_server((LOOPBACK, 0))
    proc = ctx.Process(target=_raw_small_actor, args=(listener.getsockname()[1], count, result), daemon=True)
    proc.start()
    conn, _ = listener.accept()
    listener.close()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    handed: queue.Queue = queue.Queue(maxsize=256)

    def receive() -> None:
        unpacker = msgpack.Unpacker()
        while True:
            data = conn.recv(1 << 16)
            if not data:
                handed.put(None)
                return
            unpacker.feed(data)
            for obj in unpacker:
                handed.put(obj)

    def consume() -> None:
        taken = 0
        while (obj := handed.get()) is not None:
            torch.from_numpy(np.frombuffer(obj["obs"], np.float32).copy())  # as the dataset copies a small array
            taken += 1
            if taken <= 2 * LATENCY_PUTS or taken == 2 * LATENCY_PUTS + count:
                conn.sendall(b"k")

    threads = [threading.Thread(target=receive, daemon=True), threading.Thread(target=consume, daemon=True)]
    for thread in threads:
        thread.start()
    got = result.get(timeout=ROUND_TIMEOUT_S)
    proc.join(ROUND_TIMEOUT_S)
    conn.close()
    return got


# ----------------------------------------------------------------------
# Camera samples


def _ours_actor(address: str, samples: int, seed: int, ca_file: Optional[str], ready, go) -> None:
    from rlinks_rllib.client.actor import RLinkActor

    image, chunk = _sample(seed)
    with RLinkActor(address, timeout=60, **({"ca_file": ca_file} if ca_file else {})) as actor:
        actor.client.connect()
        ready.release()
        go.wait()
        for i in range(samples):
            actor.put({"image_0": image, "action": chunk, "index": i})
        actor.flush()


def _raw_actor(port: int, samples: int, seed: int, ready, go) -> None:
    image, chunk = _sample(seed)
    with socket.create_connection((LOOPBACK, port)) as sock:
        ready.release()
        go.wait()
        for _ in range(samples):
            sock.sendall(image)
            sock.sendall(chunk)


def _start(target, args_for, actors: int) -> tuple[list, object]:
    ctx = mp.get_context("spawn")
    ready, go = ctx.Semaphore(0), ctx.Event()
    procs = [ctx.Process(target=target, args=(*args_for(i), ready, go), daemon=True) for i in range(actors)]
    for proc in procs:
        proc.start()
    for _ in procs:
        if not ready.acquire(timeout=120):
            raise RuntimeError("an actor process did not start within 120 s")
    return procs, go


def _join(procs: list) -> None:
    for proc in procs:
        proc.join(ROUND_TIMEOUT_S)
        if proc.exitcode != 0:
            raise RuntimeError(f"an actor process exited with {proc.exitcode}")


def ours(actors: int, samples: int, certs: Optional[dict[str, str]] = None) -> float:
    """MB/s of samples from ``actors`` RLinkActor processes out of one RLinkDataset (over TLS with ``certs``)."""
    from rlinks_rllib.dataset import RLinkDataset

    tls = {} if certs is None else {"tls_cert_file": certs["server"], "tls_key_file": certs["server_key"]}
    dataset = RLinkDataset(max_samples=actors * samples, idle_timeout=60, max_buffer_samples=BUFFER_SAMPLES, **tls)
    address = dataset.address if certs is None else f"tls://localhost:{dataset.port}"
    ca_file = None if certs is None else certs["ca"]
    try:
        procs, go = _start(_ours_actor, lambda i: (address, samples, i, ca_file), actors)
        start = now()
        go.set()
        count = sum(1 for _ in dataset)
        seconds = now() - start
        _join(procs)
    finally:
        dataset.close()
    if count != actors * samples:
        raise RuntimeError(f"the dataset yielded {count} samples, not {actors * samples}")
    return count * SAMPLE_BYTES / seconds / MB


def raw(actors: int, samples: int) -> float:
    """MB/s of the same bytes over plain loopback sockets into new arrays, taken as tensors by this thread."""
    import torch

    listener = socket.create_server((LOOPBACK, 0), backlog=actors)
    port = listener.getsockname()[1]
    procs, go = _start(_raw_actor, lambda i: (port, samples, i), actors)
    conns = [listener.accept()[0] for _ in range(actors)]
    listener.close()
    ready: queue.Queue = queue.Queue(maxsize=BUFFER_SAMPLES)

    def read(sock: socket.socket) -> None:
        with sock:
            for _ in range(samples):
                image, chunk = np.empty(IMAGE_SHAPE, np.uint8), np.empty(CHUNK_SHAPE, np.float32)
                recv_exactly(sock, memoryview(image).cast("B"))
                recv_exactly(sock, memoryview(chunk).cast("B"))
                ready.put((image, chunk), timeout=ROUND_TIMEOUT_S)

    threads = [threading.Thread(target=read, args=(conn,), daemon=True) for conn in conns]
    start = now()
    go.set()
    for thread in threads:
        thread.start()
    count = 0
    for _ in range(actors * samples):
        image, chunk = ready.get(timeout=ROUND_TIMEOUT_S)
        torch.from_numpy(image), torch.from_numpy(chunk)
        count += 1
    seconds = now() - start
    for thread in threads:
        thread.join(ROUND_TIMEOUT_S)
    _join(procs)
    return count * SAMPLE_BYTES / seconds / MB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round, 16 samples per actor (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=200, help="samples per actor per round")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--small", type=int, default=20000, help="small samples streamed per round")
    args = parser.parse_args(argv)
    rounds, samples = (1, 16) if args.quick else (args.rounds, args.samples)
    small = 2000 if args.quick else args.small
    timed: dict[str, list[tuple[float, float]]] = {"ours": [], "raw": []}
    for r in range(rounds):
        for kind in ("ours", "raw") if r % 2 == 0 else ("raw", "ours"):
            timed[kind].append((ours_small if kind == "ours" else raw_small)(small))
    p50 = {kind: median(t[0] for t in got) * 1e3 for kind, got in timed.items()}
    rate = {kind: [t[1] for t in got] for kind, got in timed.items()}
    print_table(["small samples", "put+flush p50 ms", f"streaming {small:,} samples/s"],
                [["put -> RLinkDataset", p50["ours"], median(rate["ours"])],
                 ["raw msgpack socket", p50["raw"], median(rate["raw"])]])
    print(f"  put+flush p50: {p50['ours']:.3f} ms [<= 0.2 ms]; streaming: {median(rate['ours']):,.0f} samples/s "
          f"[>= 50,000], {median_ratio(rate['ours'], rate['raw']):.2f}x raw [>= 0.25x]")
    counts = sorted({1, args.actors})
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_test_certificates(Path(tmp)) if shutil.which("openssl") else None
        kinds = ["ours", "raw"] if certs is None else ["ours", "tls", "raw"]
        runs = {"ours": ours, "raw": raw, "tls": lambda actors, samples: ours(actors, samples, certs)}
        rows = []
        for actors in counts:
            got: dict[str, list[float]] = {kind: [] for kind in kinds}
            for r in range(rounds):
                for kind in kinds if r % 2 == 0 else kinds[::-1]:
                    got[kind].append(runs[kind](actors, samples))
            rows.append((actors, got))
    header = ["actors", "put -> RLinkDataset MB/s", "raw loopback MB/s", "samples/s (ours)"]
    if certs is not None:
        header.insert(2, "put over TLS MB/s")
    print_table(header, [[a, median(got["ours"]), *([median(got["tls"])] if certs else []), median(got["raw"]),
                          median(got["ours"]) * MB / SAMPLE_BYTES] for a, got in rows])
    for actors, got in rows:
        print(f"  {actors} actor(s): put -> dataset MB/s / raw loopback MB/s: "
              f"{median_ratio(got['ours'], got['raw']):6.2f}x  [>= 0.5x]")
        if certs is not None:
            print(f"  {actors} actor(s): put over TLS / put plain (MB/s): {median_ratio(got['tls'], got['ours']):6.2f}x")
    if certs is None:
        print("  (no openssl command: the TLS column is left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
