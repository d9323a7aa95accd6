"""RLlink over WebSocket beside plain TCP: env steps/s and MB/s into one runner's ``sample()``.

One :class:`RLinkEnvRunner` is built in-process (no Algorithm) from a
``PPOConfig``, and ``sample()`` (+ ``get_metrics()``) is called in a loop as
an Algorithm's training step does; the env steps returned per second are
counted. The clients are separate processes running our real client, the
same code over both transports; only the address differs (``127.0.0.1:P``
or ``ws://127.0.0.1:P``, the same port):

a. CartPole: each client plays CartPole-v1 with ``EnvClient`` and local
   inference (``NumpyPolicy``, RLlib's default 256x256 MLP), off-policy
   (its sender thread streams batches of 500 steps): steps/s;
b. images: each client sends one pre-built chunk of uint8 84x84x3
   observations (128 steps, ~2.7 MB a message) with ``RLinkClient.send_episodes``
   over and over (the ``ack`` window paces it): MB/s of frames.

Every run of a case is a fresh process (its runner, its clients, then
nothing left); TCP and WebSocket take turns, ``--rounds`` times, and each
ratio is the median of its per-round ratios, so drift of the machine
cancels. Usage::

    python benchmarks/bench_websocket.py [--quick] [--rounds N] [--window S] [--clients N]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    LOOPBACK,
    MB,
    SOCKET_TIMEOUT_S,
    median,
    median_ratio,
    now,
    print_table,
    run_in_process,
    stop_processes,
)
# bench_ingest's measuring loop, so both count sample()'s steps the same way.
from bench_ingest import Timing, _sample_loop  # noqa: E402
from rlinks_rllib.protocol import encode_message  # noqa: E402
from rlinks_rllib.protocol.episodes import build_episode_state  # noqa: E402

IMAGE = (84, 84, 3)
IMAGE_STEPS_PER_MESSAGE = 128
#: Steps one sample() call of the runner waits for (its rollout_fragment_length).
CARTPOLE_FRAGMENT = 1000
IMAGE_FRAGMENT = 512
SAMPLE_TIMEOUT_S = 4.0
#: Extra seconds a case process gets beyond warmup + window before it is killed.
CASE_SLACK_S = 90.0
TRANSPORTS = ("tcp", "ws")
WORKLOADS = ("cartpole", "images")


@dataclass(frozen=True)
class Case:
    workload: str  # "cartpole" or "images"
    transport: str  # "tcp" or "ws"
    clients: int

    @property
    def key(self) -> str:
        return f"{self.workload}-{self.transport}"


def image_chunks(seed: int = 0) -> list[dict]:
    """One episode chunk of :data:`IMAGE_STEPS_PER_MESSAGE` steps of uint8 84x84x3 observations."""
    rng = np.random.default_rng(seed)
    steps = IMAGE_STEPS_PER_MESSAGE
    state = build_episode_state(
        "image-episode", rng.integers(0, 256, size=(steps + 1, *IMAGE), dtype=np.uint8),
        rng.integers(0, 2, size=steps), np.zeros(steps, np.float32),
        extra_model_outputs={"action_logp": np.full(steps, -0.69, np.float32),
                             "action_dist_inputs": rng.standard_normal((steps, 2)).astype(np.float32)},
    )
    return [state]


def image_bytes_per_step() -> float:
    """Bytes of frame (header included) per env step of the image chunk, as the runner counts them."""
    chunks = image_chunks()
    return len(encode_message({"type": "EPISODES", "episodes": chunks})) / IMAGE_STEPS_PER_MESSAGE


# --------------------------------------------------------------------------
# The clients (processes forked from the case process)


def _address(transport: str, port: int) -> str:
    return f"ws://{LOOPBACK}:{port}" if transport == "ws" else f"{LOOPBACK}:{port}"


def _cartpole_client(address: str, seed: int, stop) -> None:
    """EnvClient's loop on CartPole-v1, local inference, until told to stop (or cut off)."""
    import gymnasium as gym

    from rlinks_rllib.client import EnvClient

    env = gym.make("CartPole-v1")
    try:
        client = EnvClient(address, on_policy=False, reliable=False, seed=seed, timeout=SOCKET_TIMEOUT_S)
        obs, _ = env.reset(seed=seed)
        while not stop.is_set():
            action = client.act(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            client.report(reward, obs, terminated=terminated, truncated=truncated)
            if terminated or truncated:
                obs, _ = env.reset()
    except Exception:  # noqa: BLE001 - the runner stopped first: the case is over
        pass


def _image_client(address: str, seed: int, stop) -> None:
    """Send the image chunk over and over (the ack window paces it), until told to stop (or cut off)."""
    from rlinks_rllib.client import RLinkClient

    chunks = image_chunks(seed)
    try:
        client = RLinkClient(address, timeout=SOCKET_TIMEOUT_S, reliable=False)
        client.get_state()
        while not stop.is_set():
            client.send_episodes(chunks)
    except Exception:  # noqa: BLE001 - the runner stopped first: the case is over
        pass


# --------------------------------------------------------------------------
# One run of one case, in its own process


def _ppo_config(workload: str):
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig

    if workload == "images":
        obs, fragment = gym.spaces.Box(0, 255, IMAGE, np.uint8), IMAGE_FRAGMENT
    else:
        obs, fragment = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), CARTPOLE_FRAGMENT
    return (
        PPOConfig()
        .environment(observation_space=obs, action_space=gym.spaces.Discrete(2),
                     env_config={"port": 0, "policy_graph": "off"})
        .env_runners(num_env_runners=0, rollout_fragment_length=fragment, sample_timeout_s=SAMPLE_TIMEOUT_S)
    )


def _case_main(case: Case, timing: Timing, result) -> None:
    os.setpgid(0, 0)  # our clients join this group, so the parent can end them all at once
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    logging.getLogger("ray").setLevel(logging.ERROR)
    logging.getLogger("rlinks_rllib").setLevel(logging.ERROR)
    from rlinks_rllib.server.env_runner import RLinkEnvRunner

    ctx = mp.get_context("fork")
    stop = ctx.Event()
    runner, clients = None, []
    try:
        runner = RLinkEnvRunner(config=_ppo_config(case.workload), worker_index=0)
        address = _address(case.transport, runner.address[1])
        target = _cartpole_client if case.workload == "cartpole" else _image_client
        clients = [ctx.Process(target=target, args=(address, seed, stop), daemon=True)
                   for seed in range(case.clients)]
        for proc in clients:
            proc.start()
        steps, seconds, cpu = _sample_loop(runner, timing)
        stats = runner.get_transport_stats()
        result.send({"steps": steps, "seconds": seconds, "cpu": cpu, "bytes_in": stats["bytes_in"],
                     "refused": stats.get("errors_total", 0), "errors": dict(stats.get("errors", {}))})
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which prints it
        result.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        stop.set()
        if runner is not None:
            runner.stop()  # closes every connection: blocked clients fail and exit
        stop_processes(clients, timeout=5.0)


def run_case(case: Case, timing: Timing) -> dict:
    """Run one case once in a fresh process; return its result or ``{"error": ...}``."""
    return run_in_process(_case_main, (case, timing), timing.warmup_s + timing.window_s + CASE_SLACK_S)


# --------------------------------------------------------------------------
# Report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round (smoke test)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every case (median taken)")
    parser.add_argument("--window", type=float, default=None, help="seconds measured per case per round")
    parser.add_argument("--clients", type=int, default=4, help="client processes per case (default 4)")
    parser.add_argument("--only", choices=WORKLOADS, default=None, help="one workload (default: both)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    timing = Timing(warmup_s=1.0 if args.quick else 2.0, window_s=args.window or (1.5 if args.quick else 4.0))
    started = now()
    # Imported once here, so every forked case process starts with RLlib loaded.
    import ray.rllib.algorithms.ppo  # noqa: F401

    per_step = image_bytes_per_step()
    print(f"bench_websocket: env steps/s returned by one runner's sample() (+ get_metrics()) from {args.clients} "
          f"client processes over plain TCP and over WebSocket (the same port, the same client code); median of "
          f"{rounds} round(s) of {timing.window_s:g} s after {timing.warmup_s:g} s warm-up; {os.cpu_count()} CPUs")
    print(f"  cartpole: EnvClient, CartPole-v1, local inference (RLlib's default 256x256 MLP), off-policy batches")
    print(f"  images: RLinkClient.send_episodes of {IMAGE_STEPS_PER_MESSAGE} steps of uint8 "
          f"{'x'.join(map(str, IMAGE))} observations, {per_step * IMAGE_STEPS_PER_MESSAGE / MB:.2f} MB a message")

    workloads = [args.only] if args.only else list(WORKLOADS)
    cases = [Case(w, t, args.clients) for w in workloads for t in TRANSPORTS]
    rates: dict[str, list[float]] = {c.key: [] for c in cases}
    per_cpu: dict[str, list[float]] = {c.key: [] for c in cases}
    mbps: dict[str, list[float]] = {c.key: [] for c in cases}
    problems: dict[str, str] = {}
    for round_no in range(rounds):
        # TCP first in even rounds, WebSocket first in odd ones (ABBA): a warming machine favours neither.
        order = cases if round_no % 2 == 0 else [c for w in workloads for c in reversed(cases) if c.workload == w]
        for case in order:
            res = run_case(case, timing)
            if "error" in res:
                problems[case.key] = res["error"]
                for series in (rates, per_cpu, mbps):
                    series[case.key].append(float("nan"))
                continue
            if res.get("refused"):
                problems[case.key] = f"the runner refused {res['refused']} message(s): {res['errors']}"
            rates[case.key].append(res["steps"] / res["seconds"])
            per_cpu[case.key].append(res["steps"] / res["cpu"] if res.get("cpu") else float("nan"))
            step_bytes = per_step if case.workload == "images" else float("nan")
            mbps[case.key].append(res["steps"] * step_bytes / res["seconds"] / MB)

    rows = [[f"{c.workload}, {'WebSocket' if c.transport == 'ws' else 'plain TCP'}", c.clients,
             median(rates[c.key]), median(per_cpu[c.key]), median(mbps[c.key])] for c in cases]
    print_table(["case", "clients", "env steps/s", "steps/CPU-s", "MB/s"], rows)
    print("  (steps/CPU-s: steps per CPU second of the runner's process, clients excluded)")
    for key, problem in problems.items():
        print(f"  ERROR in {key}: {problem}")
    print("ratios WebSocket/TCP (median of per-round ratios) [target]:")
    for workload, what in (("cartpole", "CartPole steps/s"), ("images", "images MB/s")):
        if workload not in workloads:
            continue
        ws, tcp = f"{workload}-ws", f"{workload}-tcp"
        print(f"  {what + ':':<18} {median_ratio(rates[ws], rates[tcp]):5.2f}x  [>= 0.5x]"
              f"  per runner CPU-s {median_ratio(per_cpu[ws], per_cpu[tcp]):5.2f}x")
    print(f"total {now() - started:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
