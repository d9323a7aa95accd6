"""Receive and decode speed: our FrameDecoder against RLlib's own RLlink reader, on the same bytes.

For each payload the same frame is

* decoded from memory: ``FrameDecoder().feed(frame)`` (and, as a runner
  decodes, ``FrameDecoder(columns=True)``) against what RLlib's
  ``get_rllink_message`` does with a body once read
  (``msgpack.unpackb(body, object_hook=msgpack_numpy.decode, raw=False)``);
* received over a ``socket.socketpair()`` (a thread sends it with
  ``sendall``) and decoded: our recv/recv_into loop around the decoder against
  RLlib's ``get_rllink_message(sock)``;
* encoded: ``encode_message`` against ``msgpack.packb(..., default=msgpack_numpy.encode)``.

Payloads: (a) a 4,000-step CartPole batch as RLlib's dummy client formats it
(``SingleAgentEpisode.get_state()``, one small array per step) and the same
batch with each column stacked into one array per chunk; (b) 16 image
observations, uint8 480x640x3, as one episode chunk. A memcpy of the largest
frame (``bytearray`` slice assignment and ``np.copyto``) gives the ceiling.

Each figure is the median of several repetitions. Usage::

    python benchmarks/bench_codec.py [--quick] [--reps N]
"""

from __future__ import annotations

import argparse
import copy
import socket
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import msgpack
import msgpack_numpy
import numpy as np

# RLlib patches the msgpack module the first time it uses it; keep the plain
# functions so the reference decode below is msgpack-numpy's cost, nothing else.
_plain_unpackb = msgpack.unpackb
_plain_packb = msgpack.packb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gymnasium as gym  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.env.external.rllink import get_rllink_message  # noqa: E402
from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402

from rlinks_rllib.protocol import FrameDecoder, encode_message  # noqa: E402

GB = 1e9


# --------------------------------------------------------------------------
# Payloads


def cartpole_episodes(steps: int, seed: int = 0) -> list[SingleAgentEpisode]:
    """CartPole under a random policy, recorded with ``add_env_step`` as RLlib's dummy client does."""
    rng = np.random.default_rng(seed)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    episodes = [SingleAgentEpisode(observations=[obs])]
    for step in range(steps):
        logits = rng.standard_normal(2).astype(np.float32)
        probs = np.exp(logits) / np.exp(logits).sum()
        action = int(rng.choice(2, p=probs))
        obs, reward, terminated, truncated, _ = env.step(action)
        episodes[-1].add_env_step(
            observation=obs, action=action, reward=reward, terminated=terminated, truncated=truncated,
            extra_model_outputs={Columns.ACTION_DIST_INPUTS: logits, Columns.ACTION_LOGP: float(np.log(probs[action]))},
        )
        if episodes[-1].is_done and step < steps - 1:
            obs, _ = env.reset()
            episodes.append(SingleAgentEpisode(observations=[obs]))
    env.close()
    return episodes


def image_episode(images: int, seed: int = 0) -> SingleAgentEpisode:
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, size=(480, 640, 3), dtype=np.uint8) for _ in range(images)]
    episode = SingleAgentEpisode(observations=[frames[0]])
    for frame in frames[1:]:
        episode.add_env_step(observation=frame, action=0, reward=0.0, extra_model_outputs={Columns.ACTION_LOGP: -0.69})
    return episode


def payloads(quick: bool) -> list[tuple[str, dict]]:
    steps, images = (400, 4) if quick else (4000, 16)
    episodes = cartpole_episodes(steps)
    lists = [e.get_state() for e in episodes]
    stacked = [copy.deepcopy(e).to_numpy().get_state() for e in episodes]
    image = image_episode(images)
    return [
        (f"cartpole {steps} steps, per-step lists ({len(episodes)} episodes)",
         {"type": "EPISODES_AND_GET_STATE", "episodes": lists, "timesteps": steps}),
        (f"cartpole {steps} steps, stacked per chunk",
         {"type": "EPISODES_AND_GET_STATE", "episodes": stacked, "timesteps": steps}),
        (f"{images} images uint8 480x640x3, per-step lists",
         {"type": "EPISODES", "episodes": [image.get_state()], "timesteps": images - 1}),
    ]


# --------------------------------------------------------------------------
# Timing


def median_seconds(fn: Callable[[], object], reps: int, min_rep_s: float) -> float:
    """Median time of one call over ``reps`` repetitions of a calibrated number of calls."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    inner = max(1, int(min_rep_s / once))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


class Link:
    """A socketpair and a sender thread that writes one frame per request."""

    def __init__(self, frame: bytes) -> None:
        self.frame = frame
        self.tx, self.rx = socket.socketpair()
        self.rx.settimeout(60)
        self._go = threading.Semaphore(0)
        self._stop = False
        self._thread = threading.Thread(target=self._send_loop, daemon=True)
        self._thread.start()

    def _send_loop(self) -> None:
        while True:
            if not self._go.acquire(timeout=60) or self._stop:
                return
            self.tx.sendall(self.frame)

    def request(self) -> socket.socket:
        self._go.release()
        return self.rx

    def close(self) -> None:
        self._stop = True
        self._go.release()
        self._thread.join(10)
        self.tx.close()
        self.rx.close()


def recv_ours(sock: socket.socket) -> dict:
    """One message, read the way our I/O layers read: header by recv, body by recv_into."""
    decoder = FrameDecoder()
    while True:
        view = decoder.next_read_buffer()
        if view is not None:
            n = sock.recv_into(view)
            del view
            if not n:
                decoder.eof()
            messages = decoder.advance(n)
        else:
            data = sock.recv(8 - decoder.buffered_bytes)
            if not data:
                decoder.eof()
                raise ConnectionError("closed")
            messages = decoder.feed(data)
        if messages:
            return messages[0]


@dataclass
class Row:
    what: str
    ours_s: float
    theirs_s: float
    nbytes: int

    def line(self) -> str:
        def rate(seconds: float) -> str:
            return f"{1 / seconds:9.1f} msg/s {self.nbytes / seconds / GB:7.3f} GB/s"

        return (f"  {self.what:<7} ours {rate(self.ours_s)}   rllib {rate(self.theirs_s)}   "
                f"ratio ours/rllib {self.theirs_s / self.ours_s:6.2f}x")


def bench_payload(message: dict, reps: int, min_rep_s: float) -> tuple[int, list[Row]]:
    frame = encode_message(message)
    reference = _plain_packb(message, default=msgpack_numpy.encode, use_bin_type=True)
    assert frame[8:] == reference, "our frame differs from msgpack-numpy's"
    body = frame[8:]

    def rllib_decode():
        int(frame[:8].decode("utf-8"))
        return _plain_unpackb(body, object_hook=msgpack_numpy.decode, raw=False)

    rows = [
        Row("decode", median_seconds(lambda: FrameDecoder().feed(frame), reps, min_rep_s),
            median_seconds(rllib_decode, reps, min_rep_s), len(frame)),
        # What a runner's sessions use: EPISODES bodies a column at a time (protocol/columns.py).
        Row("decode, server", median_seconds(lambda: FrameDecoder(columns=True).feed(frame), reps, min_rep_s),
            median_seconds(rllib_decode, reps, min_rep_s), len(frame)),
    ]
    link = Link(frame)
    try:
        ours = median_seconds(lambda: recv_ours(link.request()), reps, min_rep_s)
        theirs = median_seconds(lambda: get_rllink_message(link.request()), reps, min_rep_s)
    finally:
        link.close()
    rows.append(Row("socket", ours, theirs, len(frame)))
    rows.append(Row("encode", median_seconds(lambda: encode_message(message), reps, min_rep_s),
                    median_seconds(lambda: _plain_packb(message, default=msgpack_numpy.encode, use_bin_type=True),
                                   reps, min_rep_s), len(frame)))
    return len(frame), rows


def bench_memcpy(nbytes: int, reps: int, min_rep_s: float) -> tuple[float, float]:
    src = bytes(np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8))
    dst = bytearray(nbytes)
    a, b = np.frombuffer(src, np.uint8), np.empty(nbytes, np.uint8)

    def copy_bytearray():
        dst[:] = src

    t_ba = median_seconds(copy_bytearray, reps, min_rep_s)
    t_np = median_seconds(lambda: np.copyto(b, a), reps, min_rep_s)
    return nbytes / t_ba / GB, nbytes / t_np / GB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small payloads, few repetitions (smoke test)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per figure (median taken)")
    args = parser.parse_args(argv)
    reps = args.reps or (2 if args.quick else 7)
    min_rep_s = 0.002 if args.quick else 0.05

    started = time.perf_counter()
    print(f"bench_codec: median of {reps} repetitions; ratio > 1 means we are faster")
    largest = 0
    for name, message in payloads(args.quick):
        size, rows = bench_payload(message, reps, min_rep_s)
        largest = max(largest, size)
        print(f"{name}: frame {size / 1e6:.2f} MB")
        for row in rows:
            print(row.line())
    ba, npc = bench_memcpy(largest, reps, min_rep_s)
    print(f"memcpy {largest / 1e6:.2f} MB: bytearray copy {ba:.2f} GB/s, np.copyto {npc:.2f} GB/s")
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
