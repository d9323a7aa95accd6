"""Does ``--gpu-num 1`` really learn on the GPU? The demo's PPO with one GPU learner, beside the CPU.

Builds the demo's config (``configs/ppo_cartpole.yaml``) twice, with
``gpu_num=1`` and with ``gpu_num=0``, starts the demo's dummy clients
against its runners, trains ``--iters`` iterations each, and prints, for
the GPU learner: the device of the module's parameters, the CUDA memory
the learner process allocated (peak), and the time per learner update
next to the CPU learner's (the ratio CPU / GPU). Usage::

    python benchmarks/gpu_check.py [--iters 5]

Without a CUDA device it says so and exits 2 before starting anything.
"""

from __future__ import annotations

import argparse
import sys
import time

EXIT_NO_GPU = 2


def cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _learner_facts(learner) -> dict:
    """Inside the learner process: where the module's parameters live, CUDA memory used."""
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    param = next(learner.module[DEFAULT_MODULE_ID].parameters())
    cuda = torch.cuda.is_available()
    return {"device": str(param.device),
            "cuda_peak_mib": torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else 0.0,
            "cuda_device": torch.cuda.get_device_name(0) if cuda else ""}


def run(gpu_num: int, iters: int) -> dict:
    """Train ``iters`` iterations of the demo's PPO with ``gpu_num`` GPU learners; facts and timings."""
    import ray

    from rlinks_rllib import bundled
    from rlinks_rllib.server.env_runner import runner_addresses
    from rlinks_rllib.training.clients import ClientProcesses
    from rlinks_rllib.training.config_file import build_algorithm_config, load_spec
    from rlinks_rllib.training.learner import LearnerOptions, _init_ray, _overrides

    spec = load_spec(bundled.bundled_config("ppo_cartpole"))
    config = build_algorithm_config(spec, overrides=_overrides(
        LearnerOptions(config="", port=0, gpu_num=gpu_num)))
    _init_ray(config)
    algo = config.build_algo()
    clients = ClientProcesses(bundled.dummy_client(),
                              [f"{h}:{p}" for _, h, p in runner_addresses(algo)] * 2, print_fn=lambda _: None)
    try:
        seconds, updates = [], []
        for _ in range(iters):
            started = time.perf_counter()
            result = algo.train()
            seconds.append(time.perf_counter() - started)
            timer = result.get("timers", {}).get("learner_update_timer") or \
                result.get("learners", {}).get("__all_modules__", {}).get("learner_update_timer")
            if timer:
                updates.append(float(timer))
        if gpu_num:
            facts = algo.learner_group.foreach_learner(_learner_facts)
            facts = facts.result_or_errors[0].get() if hasattr(facts, "result_or_errors") else facts[0]
        else:
            facts = _learner_facts(algo.learner_group._learner)
        return {**facts, "iteration_s": sum(seconds) / len(seconds),
                "update_s": sum(updates) / len(updates) if updates else float("nan")}
    finally:
        clients.stop()
        algo.stop()
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=5, help="training iterations on each side")
    args = parser.parse_args(argv)
    if cuda_devices() == 0:
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); "
              "run it on a machine with a GPU and the CUDA build of torch", file=sys.stderr)
        return EXIT_NO_GPU
    gpu = run(1, args.iters)
    cpu = run(0, args.iters)
    print(f"GPU learner: parameters on {gpu['device']} ({gpu['cuda_device']}), "
          f"peak CUDA memory {gpu['cuda_peak_mib']:.1f} MiB")
    print(f"time per learner update: GPU {gpu['update_s'] * 1000:.1f} ms, CPU {cpu['update_s'] * 1000:.1f} ms "
          f"(CPU/GPU {cpu['update_s'] / gpu['update_s']:.2f}x); per iteration: GPU {gpu['iteration_s']:.2f} s, "
          f"CPU {cpu['iteration_s']:.2f} s")
    if not gpu["device"].startswith("cuda"):
        print("gpu_check: the GPU learner's parameters are not on a CUDA device", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
