"""put() of camera images into a training loop's dataset, vs a raw loopback socket, in one run (issue #22).

Four actor processes each send ``--samples`` samples of one 480x640x3 uint8
image and one 50x14 float32 action chunk (the seed's robot, ~0.92 MB each):

* ours: ``RLinkActor.put`` (reliable, one ``SAMPLES`` message per sample,
  confirmed when taken) into an ``RLinkDataset`` iterated by this process,
  which yields each sample as torch tensors;
* raw: what a user's minimal code would do with a plain loopback TCP socket
  per actor and no protocol: each process ``sendall``\ s the same bytes
  (image, then chunk); a thread per connection here ``recv_into``\ s them
  into a new image array and a new chunk array (a training loop keeps what
  it receives, so each sample needs memory of its own) and hands them to
  this thread through a bounded queue (64, the dataset's buffer here), which
  takes them as torch tensors (``torch.from_numpy``, no copy), as the
  dataset yields them. No framing, no confirmations, no resends;
* ours over TLS: the same ``put``\ s to ``tls://localhost`` (a test CA's
  certificate, made with ``openssl``; the column is left out without it),
  for what encryption costs on this path.

MB/s counts the image and chunk bytes, from the moment all senders are
told to go until the training thread holds the last sample. Rounds alternate (ours, TLS, raw,
raw, TLS, ours, ...); a ratio is the median of per-round ratios. Aim: >= 0.5x. The
seed's own package (``rlinks`` 1.0.3) was measured at 29 MB/s from one
actor and 41 MB/s from four on this kind of machine. Usage::

    python benchmarks/bench_put.py [--quick] [--rounds N] [--samples N] [--actors N]
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
#: Seconds a round may take before the benchmark gives up.
ROUND_TIMEOUT_S = 300.0


def _sample(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 255, IMAGE_SHAPE, dtype=np.uint8), rng.random(CHUNK_SHAPE, dtype=np.float32)


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
    from rlinks_rllib.training.dataset import RLinkDataset

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
    parser.add_argument("--actors", type=int, default=4)
    args = parser.parse_args(argv)
    rounds, samples = (1, 16) if args.quick else (args.rounds, args.samples)
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
