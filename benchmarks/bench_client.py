"""Client speed: env steps per second of our dummy client loop against RLlib's, same sink, same run.

Both clients play CartPole-v1 on-policy with RLlib's default PPO MLP
(256x256, tanh) and send ``EPISODES_AND_GET_STATE`` every 500 steps:

* ours: ``run()`` of ``examples/dummy_cartpole_client.py`` as it ships
  (``NumpyPolicy`` inference, ``EpisodeBuilder``, ``RLinkClient``);
* RLlib's: ``_dummy_external_client(port)`` from
  ``ray.rllib.examples.envs.classes.utils.dummy_external_client`` (torch
  RLModule forward per step, ``SingleAgentEpisode.add_env_step``,
  msgpack-numpy send).

Each talks to its own sink: a loopback server thread that answers ``PONG``,
``SET_CONFIG`` (RLlib's pickled ``AlgorithmConfig`` for RLlib's client, our
plain description for ours; a bare ``PONG`` either way, so neither uses
extensions) and ``SET_STATE`` with the same pre-packed weights at once. It
skips over the episodes without decoding them and records when each batch
arrived and its ``timesteps``.

Both client processes run for the whole benchmark, but only one at a time:
the other's sink holds back its ``SET_STATE``, so it sits blocked in
``recv``. The clients take turns for ``--rounds`` windows each (ABBA order)
and the ratio is the median of per-round ratios. Usage::

    python benchmarks/bench_client.py [--quick] [--rounds N] [--window S]
"""

from __future__ import annotations

import argparse
import importlib.util
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
    REPO,
    SOCKET_TIMEOUT_S,
    median,
    median_ratio,
    now,
    print_table,
    read_frame,
    rllib_frame,
    stop_processes,
)

FRAGMENT = 500
#: Seconds a client may take from start to its first batch (RLlib's imports Ray and torch).
STARTUP_TIMEOUT_S = 120.0
#: Batches a window needs at least for a rate (the first only marks the start).
MIN_BATCHES = 3


# --------------------------------------------------------------------------
# The sink


class Sink:
    """A loopback RLlink server that answers at once and counts steps; one client at a time.

    Replies to ``EPISODES_AND_GET_STATE`` wait while the sink is closed
    (:meth:`close`); :meth:`open` lets them go.
    """

    def __init__(self, name: str, frames: dict[str, bytes]) -> None:
        self.name = name
        self._frames = frames
        self._listener = socket.create_server((LOOPBACK, 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._gate = threading.Event()
        self._parked = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.arrivals: list[tuple[float, int]] = []
        self._conns: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, name=f"sink-{name}", daemon=True)]
        self._threads[0].start()

    def open(self) -> None:
        self._parked.clear()
        self._gate.set()

    def close(self) -> None:
        self._gate.clear()

    def wait_parked(self, timeout: float) -> bool:
        """Wait until the client sent a batch and waits for its reply."""
        return self._parked.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._gate.set()
        for conn in list(self._conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the peer
        for thread in self._threads:
            thread.join(5.0)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)  # replies may wait at the gate for as long as the other client runs
            self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), name=f"sink-{self.name}-conn", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        import msgpack

        try:
            while not self._stop.is_set():
                body = read_frame(conn)
                # Read the top-level map; skip the episodes without building them.
                unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
                unpacker.feed(body)
                fields = {}
                for _ in range(unpacker.read_map_header()):
                    key = unpacker.unpack()
                    if key == "episodes":
                        unpacker.skip()
                    else:
                        fields[key] = unpacker.unpack()
                kind = fields.get("type")
                if kind in ("EPISODES", "EPISODES_AND_GET_STATE"):
                    with self._lock:
                        self.arrivals.append((now(), int(fields.get("timesteps", 0))))
                    if kind == "EPISODES":
                        continue
                    if not self._gate.is_set():
                        self._parked.set()
                        while not self._gate.wait(0.1):
                            if self._stop.is_set():
                                return
                    kind = "GET_STATE"
                conn.sendall(self._frames[kind])
        except (OSError, ConnectionError, ValueError):
            pass  # the client went away or the benchmark is stopping
        finally:
            conn.close()

    def rate(self, start: int, end: int) -> float:
        """Env steps/s over arrivals ``start..end-1`` (the first only marks the time)."""
        with self._lock:
            window = self.arrivals[start:end]
        if len(window) < 2:
            return float("nan")
        seconds = window[-1][0] - window[0][0]
        return sum(steps for _, steps in window[1:]) / seconds


def sink_frames() -> dict[str, dict[str, bytes]]:
    """What each sink answers: RLlib's pickled config for RLlib's client, our description for ours."""
    import logging
    import pickle

    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.utils.numpy import convert_to_numpy

    logging.getLogger("ray").setLevel(logging.ERROR)  # RLlib's deprecation chatter

    from rlinks_rllib.protocol import encode_message
    from rlinks_rllib.protocol.config import build_config
    from rlinks_rllib.protocol.spaces import describe_space
    from rlinks_rllib.protocol.weights import build_state

    env = gym.make("CartPole-v1")
    config = (
        PPOConfig()
        .environment(observation_space=env.observation_space, action_space=env.action_space)
        .env_runners(num_env_runners=0, rollout_fragment_length=FRAGMENT)
    )
    module = config.get_rl_module_spec(
        spaces={"default_policy": (env.observation_space, env.action_space)}, inference_only=True
    ).build()
    params = convert_to_numpy(module.get_state(inference_only=True))
    model = config.model_config if isinstance(config.model_config, dict) else dict(config.model_config)
    description = build_config(
        algorithm="PPO",
        observation_space=describe_space(env.observation_space),
        action_space=describe_space(env.action_space),
        rollout_fragment_length=FRAGMENT,
        on_policy=True,
        model_config={k: v for k, v in model.items() if isinstance(v, (int, float, str, bool, list, type(None)))},
    )
    env.close()
    state = encode_message({"type": "SET_STATE", "state": build_state(params, 1)})
    pong = rllib_frame({"type": "PONG"})
    return {
        "rllib": {"PING": pong, "GET_STATE": state,
                  "GET_CONFIG": rllib_frame({"type": "SET_CONFIG", "config": pickle.dumps(config)})},
        "ours": {"PING": pong, "GET_STATE": state,
                 "GET_CONFIG": encode_message({"type": "SET_CONFIG", "config": description})},
    }


# --------------------------------------------------------------------------
# The clients (spawned processes)


def _quiet() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def rllib_client_main(port: int) -> None:
    _quiet()  # RLlib's client prints as it connects
    import logging

    from ray.rllib.examples.envs.classes.utils.dummy_external_client import _dummy_external_client

    logging.getLogger("ray").setLevel(logging.ERROR)  # after importing Ray, which sets it
    _dummy_external_client(port)


def our_client_main(port: int) -> None:
    path = REPO / "examples" / "dummy_cartpole_client.py"
    spec = importlib.util.spec_from_file_location("dummy_cartpole_client", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    args = example.parse_args(["--address", f"{LOOPBACK}:{port}", "--max-steps", str(10**12),
                               "--timeout", str(STARTUP_TIMEOUT_S * 10), "--retry-attempts", "3", "--seed", "0"])
    try:
        example.run(args)
    except Exception:  # noqa: BLE001 - the sink cut us off: the benchmark is over
        pass


# --------------------------------------------------------------------------
# Measurement


def measure(sink: Sink, warmup_s: float, window_s: float) -> float:
    """Let ``sink``'s client run; return its env steps/s over one window."""
    sink.open()
    time.sleep(warmup_s)
    start = len(sink.arrivals)
    deadline = now() + window_s
    limit = now() + max(30.0, 10 * window_s)
    while now() < deadline or (len(sink.arrivals) - start < MIN_BATCHES and now() < limit):
        time.sleep(0.02)
    end = len(sink.arrivals)
    sink.close()
    if not sink.wait_parked(SOCKET_TIMEOUT_S):
        raise RuntimeError(f"the {sink.name} client did not come back to wait for weights")
    return sink.rate(start, end)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round (smoke test)")
    parser.add_argument("--rounds", type=int, default=None, help="windows per client (median taken)")
    parser.add_argument("--window", type=float, default=None, help="seconds per window")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 5)
    window_s = args.window or (1.0 if args.quick else 3.0)
    warmup_s = 0.2 if args.quick else 0.5

    started = now()
    frames = sink_frames()
    sinks = {name: Sink(name, frames[name]) for name in ("ours", "rllib")}
    ctx = mp.get_context("spawn")  # clean client processes: ours without Ray, as on a simulator machine
    procs = {
        "ours": ctx.Process(target=our_client_main, args=(sinks["ours"].port,), daemon=True),
        "rllib": ctx.Process(target=rllib_client_main, args=(sinks["rllib"].port,), daemon=True),
    }
    rates: dict[str, list[float]] = {"ours": [], "rllib": []}
    try:
        for proc in procs.values():
            proc.start()
        for name, sink in sinks.items():
            if not sink.wait_parked(STARTUP_TIMEOUT_S):
                raise RuntimeError(f"the {name} client sent no batch within {STARTUP_TIMEOUT_S:.0f} s")
        print(f"bench_client: env steps/s of one client process (CartPole-v1, PPO default MLP 256x256, "
              f"on-policy, {FRAGMENT}-step batches) against an instant sink; median of {rounds} "
              f"window(s) of {window_s:g} s each; {os.cpu_count()} CPUs")
        for r in range(rounds):
            order = ("ours", "rllib") if r % 2 == 0 else ("rllib", "ours")
            for name in order:
                rates[name].append(measure(sinks[name], warmup_s, window_s))
    finally:
        # RLlib's client never returns: end it first, so it can't complain about
        # the connection closing. Ours returns once its sink cuts it off.
        if procs["rllib"].pid is not None:
            procs["rllib"].terminate()
        for sink in sinks.values():
            sink.stop()
        stop_processes([p for p in procs.values() if p.pid is not None], timeout=10.0)

    print_table(["client", "env steps/s"], [
        ["ours: examples/dummy_cartpole_client.py (numpy)", median(rates["ours"])],
        ["RLlib: dummy_external_client (torch)", median(rates["rllib"])],
    ])
    print(f"  ratio ours/rllib client steps/s: {median_ratio(rates['ours'], rates['rllib']):6.2f}x  [>= 3x]")
    print(f"total {now() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
