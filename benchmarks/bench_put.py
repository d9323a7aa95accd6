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
  dataset yields them. No framing, no confirmations, no resends.

MB/s counts the image and chunk bytes, from the moment all senders are
told to go until the training thread holds the last sample. Rounds alternate (ours, raw, raw,
ours, ...); the ratio is the median of per-round ratios. Aim: >= 0.5x. The
seed's own package (``rlinks`` 1.0.3) was measured at 29 MB/s from one
actor and 41 MB/s from four on this kind of machine. Usage::

    python benchmarks/bench_put.py [--quick] [--rounds N] [--samples N] [--actors N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import IMAGE_SHAPE, LOOPBACK, MB, median, median_ratio, now, print_table, recv_exactly  # noqa: E402

CHUNK_SHAPE = (50, 14)
SAMPLE_BYTES = int(np.prod(IMAGE_SHAPE)) + int(np.prod(CHUNK_SHAPE)) * 4
#: Samples either side holds before its senders are pushed back.
BUFFER_SAMPLES = 64
#: Seconds a round may take before the benchmark gives up.
ROUND_TIMEOUT_S = 300.0


def _sample(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 255, IMAGE_SHAPE, dtype=np.uint8), rng.random(CHUNK_SHAPE, dtype=np.float32)


def _ours_actor(address: str, samples: int, seed: int, ready, go) -> None:
    from rlinks_rllib.client.actor import RLinkActor

    image, chunk = _sample(seed)
    with RLinkActor(address, timeout=60) as actor:
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


def ours(actors: int, samples: int) -> float:
    """MB/s of samples from ``actors`` RLinkActor processes out of one RLinkDataset."""
    from rlinks_rllib.training.dataset import RLinkDataset

    dataset = RLinkDataset(max_samples=actors * samples, idle_timeout=60, max_buffer_samples=BUFFER_SAMPLES)
    try:
        procs, go = _start(_ours_actor, lambda i: (dataset.address, samples, i), actors)
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
    rows = []
    for actors in counts:
        mine, theirs = [], []
        for r in range(rounds):
            order = (ours, raw) if r % 2 == 0 else (raw, ours)
            for run in order:
                (mine if run is ours else theirs).append(run(actors, samples))
        rows.append((actors, mine, theirs))
    print_table(["actors", "put -> RLinkDataset MB/s", "raw loopback MB/s", "samples/s (ours)"],
                [[a, median(m), median(t), median(m) * MB / SAMPLE_BYTES] for a, m, t in rows])
    for actors, mine, theirs in rows:
        print(f"  {actors} actor(s): put -> dataset MB/s / raw loopback MB/s: {median_ratio(mine, theirs):6.2f}x"
              "  [>= 0.5x]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
