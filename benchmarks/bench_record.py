"""What recording costs ingest: env steps/s and MB/s into one runner's ``sample()``, recording on and off.

One :class:`RLinkEnvRunner` is built in-process (no Algorithm) and
``sample()`` (+ ``get_metrics()``) is called in a loop as an Algorithm's
training step does (``bench_ingest``'s loop); client processes send as fast
as the runner takes (``bench_websocket``'s clients, over plain TCP):

a. CartPole: ``EnvClient`` playing CartPole-v1 with local inference, off-policy;
b. images: ``RLinkClient.send_episodes`` of uint8 84x84x3 observations
   (random pixels: the worst case for compression).

Three modes of the same runner, in turn within each round (ABBA order):

- ``off``: no ``record_dir``;
- ``thread``: ``record_dir`` set, as shipped: ``sample()`` copies the columns,
  the recorder's thread compresses and writes;
- ``inline``: the same recorder writing inside ``sample()`` on RLlib's thread,
  to see what the thread buys.

Each ratio is the median of per-round ratios against ``off``. The recording
of a case is deleted after it. Usage::

    python benchmarks/bench_record.py [--quick] [--rounds N] [--window S] [--clients N]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import MB, median, median_ratio, now, print_table, run_in_process, stop_processes  # noqa: E402
from bench_ingest import Timing, _sample_loop  # noqa: E402
# The same clients, spaces and image chunk as the WebSocket benchmark, over plain TCP here.
from bench_websocket import (  # noqa: E402
    CASE_SLACK_S,
    IMAGE,
    IMAGE_STEPS_PER_MESSAGE,
    WORKLOADS,
    _address,
    _cartpole_client,
    _image_client,
    _ppo_config,
    image_bytes_per_step,
)

MODES = ("off", "thread", "inline")


@dataclass(frozen=True)
class Case:
    workload: str  # "cartpole" or "images"
    mode: str  # one of MODES
    clients: int

    @property
    def key(self) -> str:
        return f"{self.workload}-{self.mode}"


def _case_main(case: Case, timing: Timing, result) -> None:
    os.setpgid(0, 0)  # our clients join this group, so the parent can end them all at once
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    logging.getLogger("ray").setLevel(logging.ERROR)
    logging.getLogger("rlinks_rllib").setLevel(logging.ERROR)
    from rlinks_rllib.server.env_runner import RLinkEnvRunner
    from rlinks_rllib.server.recorder import Recorder, file_prefix

    ctx = mp.get_context("fork")
    stop = ctx.Event()
    runner, clients = None, []
    folder = tempfile.mkdtemp(prefix="bench_record-")
    try:
        config = _ppo_config(case.workload)
        env_config = {**config.env_config, "served_actions": False}  # the clients run the policy themselves
        if case.mode != "off":
            # Caps far above what a window writes: the case measures writing, not the cap.
            env_config.update(record_dir=folder, record_max_total_mb=1e6)
        config.environment(env_config=env_config)
        runner = RLinkEnvRunner(config=config, worker_index=0)
        if case.mode == "inline":
            runner._recorder.close()
            runner._recorder = Recorder(folder, max_file_bytes=64 * 10**6, max_total_bytes=10**12,
                                        prefix=file_prefix(0) + "-inline", threaded=False)
        address = _address("tcp", runner.address[1])
        target = _cartpole_client if case.workload == "cartpole" else _image_client
        clients = [ctx.Process(target=target, args=(address, seed, stop), daemon=True)
                   for seed in range(case.clients)]
        for proc in clients:
            proc.start()
        steps, seconds, cpu = _sample_loop(runner, timing)
        stats = runner.get_transport_stats()
        result.send({"steps": steps, "seconds": seconds, "cpu": cpu,
                     "recorded": stats.get("record_steps", 0), "dropped": stats.get("record_dropped_steps", 0)})
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which prints it
        result.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        stop.set()
        if runner is not None:
            runner.stop()  # closes every connection and finishes the recording
        stop_processes(clients, timeout=5.0)
        shutil.rmtree(folder, ignore_errors=True)


def run_case(case: Case, timing: Timing) -> dict:
    """Run one case once in a fresh process; return its result or ``{"error": ...}``."""
    return run_in_process(_case_main, (case, timing), timing.warmup_s + timing.window_s + CASE_SLACK_S)


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
    import ray.rllib.algorithms.ppo  # noqa: F401 - once here, so every forked case process starts with RLlib loaded

    per_step = image_bytes_per_step()
    print(f"bench_record: env steps/s one runner's sample() (+ get_metrics()) returns from {args.clients} client "
          f"processes, recording off and on; median of {rounds} round(s) of {timing.window_s:g} s after "
          f"{timing.warmup_s:g} s warm-up; {os.cpu_count()} CPUs; recording to {tempfile.gettempdir()}")
    print(f"  cartpole: EnvClient, CartPole-v1, local inference, off-policy batches")
    print(f"  images: {IMAGE_STEPS_PER_MESSAGE} steps of random uint8 {'x'.join(map(str, IMAGE))} observations "
          f"a message, {per_step * IMAGE_STEPS_PER_MESSAGE / MB:.2f} MB")

    workloads = [args.only] if args.only else list(WORKLOADS)
    cases = [Case(w, m, args.clients) for w in workloads for m in MODES]
    rates: dict[str, list[float]] = {c.key: [] for c in cases}
    per_cpu: dict[str, list[float]] = {c.key: [] for c in cases}
    problems: dict[str, str] = {}
    for round_no in range(rounds):
        order = cases if round_no % 2 == 0 else [c for w in workloads for c in reversed(cases) if c.workload == w]
        for case in order:
            res = run_case(case, timing)
            if "error" in res:
                problems[case.key] = res["error"]
                rates[case.key].append(float("nan"))
                per_cpu[case.key].append(float("nan"))
                continue
            if res.get("dropped"):
                problems[case.key] = f"{res['dropped']} steps were not recorded"
            rates[case.key].append(res["steps"] / res["seconds"])
            per_cpu[case.key].append(res["steps"] / res["cpu"] if res.get("cpu") else float("nan"))

    rows = []
    for c in cases:
        rate = median(rates[c.key])
        mbps = rate * per_step / MB if c.workload == "images" else float("nan")
        rows.append([f"{c.workload}, recording {c.mode}", c.clients, rate, median(per_cpu[c.key]), mbps])
    print_table(["case", "clients", "env steps/s", "steps/CPU-s", "MB/s"], rows)
    print("  (steps/CPU-s: per CPU second of the runner's process, its recorder thread included, clients excluded)")
    for key, problem in problems.items():
        print(f"  ERROR in {key}: {problem}")
    print("ratios recording on/off (median of per-round ratios):")
    for workload in workloads:
        for mode in MODES[1:]:
            on, off = f"{workload}-{mode}", f"{workload}-off"
            print(f"  ratio {workload} {mode}/off: {median_ratio(rates[on], rates[off]):5.2f}x steps/s, "
                  f"{median_ratio(per_cpu[on], per_cpu[off]):5.2f}x steps per runner CPU-s")
    print(f"total {now() - started:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
