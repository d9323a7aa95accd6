"""Helpers the benchmarks share: payloads, RLlib's framing, medians, tables, process cleanup.

Payloads come in the two shapes that travel in practice:

* RLlib's dummy client format: ``SingleAgentEpisode.get_state()`` of
  episodes recorded step by step with ``add_env_step`` (one small array or
  number per step and column), packed with msgpack-numpy as RLlib's
  ``send_rllink_message`` does;
* our client's format: the same steps recorded with
  :class:`~rlinks_rllib.protocol.episode_builder.EpisodeBuilder` (one stacked
  array per column per chunk), packed with our ``encode_message``.

Ray is imported only inside the functions that need it, so a process that
imports this module for the sockets and timing helpers stays light.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rlinks_rllib.protocol.episode_builder import EpisodeBuilder  # noqa: E402
from rlinks_rllib.protocol import encode_message  # noqa: E402
from rlinks_rllib.protocol.episodes import build_episode_state  # noqa: E402
from rlinks_rllib.protocol.limits import HEADER_BYTES  # noqa: E402

MB = 1e6
LOOPBACK = "127.0.0.1"
#: Every blocking socket call in a benchmark gives up after this long.
SOCKET_TIMEOUT_S = 20.0

IMAGE_SHAPE = (480, 640, 3)

#: ``seq`` written into a numbered frame before its real value is patched in: at
#: least 2**32, so msgpack gives it the fixed-width uint64 form (0xcf + 8 bytes).
SEQ_PLACEHOLDER = 0xFEED_FACE_CAFE_BEEF
_UINT64 = struct.Struct(">Q")

__all__ = [
    "IMAGE_SHAPE",
    "LOOPBACK",
    "MB",
    "REPO",
    "SEQ_PLACEHOLDER",
    "SOCKET_TIMEOUT_S",
    "Payload",
    "cartpole_batch",
    "cartpole_payloads",
    "image_payload",
    "make_test_certificates",
    "set_seq",
    "median",
    "median_ratio",
    "print_table",
    "read_frame",
    "recv_exactly",
    "rllib_frame",
    "stop_process",
    "stop_processes",
    "kill_group",
]


# --------------------------------------------------------------------------
# Statistics and printing


def median(values: Iterable[float]) -> float:
    """Median of the finite values; NaN when there are none."""
    finite = [v for v in values if v == v]
    return statistics.median(finite) if finite else float("nan")


def median_ratio(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """Median of per-round ratios ``ours[i] / theirs[i]``: drift between rounds cancels."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b and a == a and b == b]
    return median(ratios)


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows under a header, first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in header]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for n, row in enumerate(cells):
        line = "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        print("  " + line.rstrip())
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"
    return str(value)


# --------------------------------------------------------------------------
# RLlib's framing


def rllib_frame(message: dict) -> bytes:
    """A frame as RLlib's ``send_rllink_message`` writes it (msgpack-numpy, zero-padded length)."""
    import msgpack
    import msgpack_numpy

    body = msgpack.packb(message, default=msgpack_numpy.encode, use_bin_type=True)
    return str(len(body)).zfill(HEADER_BYTES).encode() + body


def recv_exactly(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from ``sock``.

    Raises:
        ConnectionError: EOF first.
    """
    while len(view):
        n = sock.recv_into(view)
        if not n:
            raise ConnectionError("peer closed the connection mid-frame")
        view = view[n:]


def read_frame(sock: socket.socket, max_bytes: int = 1 << 27) -> bytearray:
    """Read one frame's body (no decoding), under the socket's own timeout.

    Raises:
        ConnectionError: EOF, or a header that is not 8 digits / too large.
        TimeoutError: the socket's timeout passed.
    """
    header = bytearray(HEADER_BYTES)
    recv_exactly(sock, memoryview(header))
    if not header.isdigit() or int(header) > max_bytes:
        raise ConnectionError(f"bad frame header {bytes(header)!r}")
    body = bytearray(int(header))
    recv_exactly(sock, memoryview(body))
    return body


# --------------------------------------------------------------------------
# Payloads


@dataclass(frozen=True)
class Payload:
    """One pre-built frame and what it carries.

    ``seq_offset``: where the 8 bytes of its ``seq`` value lie in ``frame``, for
    a frame built with ``seq=True`` (see :func:`set_seq`); ``None`` otherwise.
    """

    name: str
    frame: bytes
    steps: int
    episodes: int
    seq_offset: int | None = None

    @property
    def bytes_per_step(self) -> float:
        return len(self.frame) / self.steps


def _numbered(message: dict) -> tuple[bytes, int]:
    """``message`` with ``seq`` = :data:`SEQ_PLACEHOLDER`, encoded; and where that value's 8 bytes lie.

    Raises:
        ValueError: the placeholder's bytes are not found exactly once.
    """
    frame = encode_message({**message, "seq": SEQ_PLACEHOLDER})
    marker = b"\xcf" + _UINT64.pack(SEQ_PLACEHOLDER)
    at = frame.find(marker)
    if at < 0 or frame.find(marker, at + 1) >= 0:
        raise ValueError("the seq placeholder is not in the frame exactly once")
    return frame, at + 1


def set_seq(frame: bytearray, offset: int, seq: int) -> None:
    """Write ``seq`` over the uint64 at ``offset`` of a numbered frame (a :class:`Payload`'s ``seq_offset``)."""
    _UINT64.pack_into(frame, offset, seq)


def make_test_certificates(directory: Path) -> dict[str, str]:
    """A CA and a server certificate for localhost/127.0.0.1: ``tests/test_auth_tls.py::make_certificates``.

    Returns paths by name (``ca``, ``server``, ``server_key``, ...).

    Raises:
        subprocess.CalledProcessError: openssl failed.
    """
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from test_auth_tls import make_certificates

    return make_certificates(directory)


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max())
    return z / z.sum()


def cartpole_batch(
    steps: int, seed: int = 0, episode_steps: int | None = None
) -> tuple[list[Any], list[dict]]:
    """``steps`` CartPole steps recorded by both clients: (RLlib's episodes, our chunk states).

    The steps come from a random softmax policy, recorded into RLlib's
    ``SingleAgentEpisode`` exactly as ``dummy_external_client.py`` does and,
    step for step, into our ``EpisodeBuilder``; the last episode is cut where
    the batch ends, as both clients do. Episodes end where CartPole ends them
    (about 22 steps under a random policy) unless ``episode_steps`` is given:
    then each is truncated after that many steps, the env being reset
    underneath whenever CartPole falls over.
    """
    import gymnasium as gym
    from ray.rllib.core.columns import Columns
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    rng = np.random.default_rng(seed)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    theirs = [SingleAgentEpisode(observations=[obs])]
    builder = EpisodeBuilder()
    builder.reset(obs)
    for step in range(steps):
        logits = rng.standard_normal(2).astype(np.float32)
        probs = _softmax(logits)
        action = int(rng.choice(2, p=probs))
        logp = float(np.log(probs[action]))
        obs, reward, terminated, truncated, _ = env.step(action)
        if episode_steps is not None:
            if terminated or truncated:
                obs, _ = env.reset()
            terminated, truncated = False, len(theirs[-1]) + 1 == episode_steps
        theirs[-1].add_env_step(
            observation=obs, action=action, reward=reward, terminated=terminated, truncated=truncated,
            extra_model_outputs={Columns.ACTION_DIST_INPUTS: logits, Columns.ACTION_LOGP: logp},
        )
        builder.step(action, reward, obs, terminated, truncated,
                     extra={Columns.ACTION_LOGP: np.float32(logp), Columns.ACTION_DIST_INPUTS: logits})
        if (terminated or truncated) and step < steps - 1:
            obs, _ = env.reset()
            theirs.append(SingleAgentEpisode(observations=[obs]))
            builder.reset(obs)
    env.close()
    ours = builder.take_chunks()
    assert sum(len(e) for e in theirs) == steps == sum(len(s["rewards"]["data"]) for s in ours)
    return theirs, ours


def cartpole_payloads(
    steps: int, seed: int = 0, kind: str = "EPISODES", episode_steps: int | None = None, seq: bool = False
) -> tuple[Payload, Payload]:
    """One :func:`cartpole_batch` as two frames: (RLlib's dummy client's bytes, our client's bytes).

    With ``seq``, our client's frame carries a ``seq`` to patch per send (:func:`set_seq`).
    """
    theirs, ours = cartpole_batch(steps, seed, episode_steps)
    rllib_message = {"type": kind, "episodes": [e.get_state() for e in theirs], "timesteps": steps}
    ours_message = {"type": kind, "episodes": ours, "timesteps": steps}
    episodes = "" if episode_steps is None else f", {episode_steps}-step episodes"
    ours_frame, seq_offset = _numbered(ours_message) if seq else (encode_message(ours_message), None)
    numbered = ", numbered (seq)" if seq else ""
    return (
        Payload(f"cartpole{episodes}, RLlib dummy-client format", rllib_frame(rllib_message), steps, len(theirs)),
        Payload(f"cartpole{episodes}, our client's format{numbered}", ours_frame, steps, len(ours), seq_offset),
    )


def image_payload(steps: int, seed: int = 0, kind: str = "EPISODES", seq: bool = False,
                  nested: bool = False) -> Payload:
    """One chunk of ``steps`` steps with uint8 480x640x3 observations, in our client's format.

    With ``seq``, the frame carries a ``seq`` to patch per send (:func:`set_seq`).
    With ``nested``, each observation is a Dict (:data:`NESTED_IMAGE_KEYS`) of
    that image and a vector of 6 floats, one stacked array per key.
    """
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, size=(steps + 1, *IMAGE_SHAPE), dtype=np.uint8)
    if nested:
        frames = {"camera": frames, "joints": rng.standard_normal((steps + 1, 6)).astype(np.float32)}
    logits = rng.standard_normal((steps, 2)).astype(np.float32)
    state = build_episode_state(
        "image-episode",
        frames,
        rng.integers(0, 2, size=steps),
        np.zeros(steps, np.float32),
        extra_model_outputs={"action_logp": np.full(steps, -0.69, np.float32), "action_dist_inputs": logits},
        start_time=0.0,
        last_step_time=1.0,
    )
    message = {"type": kind, "episodes": [state], "timesteps": steps}
    frame, seq_offset = _numbered(message) if seq else (encode_message(message), None)
    numbered = ", numbered (seq)" if seq else ""
    image = f"uint8 {'x'.join(map(str, IMAGE_SHAPE))} images"
    name = f"{steps} steps of {'a Dict of ' + image + ' and 6 floats' if nested else image}, our format{numbered}"
    return Payload(name, frame, steps, 1, seq_offset)


# --------------------------------------------------------------------------
# Processes


def stop_process(proc: Any, timeout: float = 5.0) -> None:
    """Join a multiprocessing process; terminate, then kill it if it won't end."""
    proc.join(timeout)
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout)


def stop_processes(procs: Sequence[Any], timeout: float = 5.0) -> None:
    """Join several processes within one shared ``timeout``; terminate, then kill, the rest."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout)


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (one this benchmark created with ``os.setpgid``)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone


def now() -> float:
    return time.perf_counter()


def run_in_process(target: Any, args: tuple, limit: float) -> dict:
    """Run ``target(*args, send)`` in a fresh forked process; return what it sends, or ``{"error": ...}``.

    ``target`` sends one result dict through ``send`` (a pipe end). A process
    that sends nothing within ``limit`` seconds, or dies, is reported as an
    error; whatever it left behind (its process group) is ended.
    """
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, send))
    proc.start()
    send.close()
    try:
        if receive.poll(limit):
            return receive.recv()
        return {"error": f"no result within {limit:.0f} s"}
    except EOFError:
        return {"error": f"case process died (exit code {proc.exitcode})"}
    finally:
        receive.close()
        proc.join(15.0)
        if proc.is_alive():
            kill_group(proc.pid)
            stop_process(proc, timeout=5.0)
