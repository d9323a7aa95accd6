"""Does ``--gpu-num 1`` really learn on the GPU? The demo's PPO with one GPU learner, beside the CPU.

Builds the demo's config (``configs/ppo_cartpole.yaml``) twice, with
``gpu_num=1`` and with ``gpu_num=0``, starts the demo's dummy clients
against its runners, trains ``--iters`` iterations each, and prints, for
the GPU learner: the device of the module's parameters, the CUDA memory
the learner process allocated (peak), the time per learner update
next to the CPU learner's (the ratio CPU / GPU; the first iteration, the
warm-up, apart), and the mean episode return each side reached. Usage::

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


def _facts_of_the_learner(algo) -> dict:
    """:func:`_learner_facts` run where the one learner lives (a Ray actor for the GPU, else here).

    Raises the learner's error if the call failed there.
    """
    import ray

    if __name__ != "__main__":  # imported (a test): Ray's workers can't import this file by name
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    (call,) = algo.learner_group.foreach_learner(_learner_facts).result_or_errors
    if not call.ok:
        raise call.get()
    return call.get()


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
        LearnerOptions(config="", port=0, gpu_num=gpu_num), spec))
    _init_ray(config)
    algo = config.build_algo()
    clients = ClientProcesses(bundled.dummy_client(),
                              [f"{h}:{p}" for _, h, p in runner_addresses(algo)] * 2, print_fn=lambda _: None)
    # RLlib's own learner_update_timer is a moving average (coefficient 0.01) that barely
    # leaves its first value, the warm-up (CUDA context, first kernels): time each call here.
    updates: list[float] = []
    update = algo.learner_group.update

    def timed_update(*args, **kwargs):
        started = time.perf_counter()
        try:
            return update(*args, **kwargs)
        finally:
            updates.append(time.perf_counter() - started)

    algo.learner_group.update = timed_update
    try:
        seconds, returns, trained = [], [], []
        for _ in range(iters):
            started = time.perf_counter()
            result = algo.train()
            seconds.append(time.perf_counter() - started)
            returns.append(float(result.get("env_runners", {}).get("episode_return_mean", float("nan"))))
            # Rows through the network (minibatches x epochs): the runners' batch varies with the backlog.
            trained.append(float(result.get("learners", {}).get("__all_modules__", {}).get(
                "num_module_steps_trained", float("nan"))))
        return {**_facts_of_the_learner(algo), "first_iteration_s": seconds[0], "first_update_s": updates[0],
                "iteration_s": _mean_after_first(seconds), "update_s": _mean_after_first(updates),
                "update_s_per_1k_rows": 1000 * sum(updates[1:] or updates) / sum(trained[1:] or trained),
                "rows_per_update": _mean_after_first(trained),
                "returns": returns}
    finally:
        clients.stop()
        algo.stop()
        ray.shutdown()


def _mean_after_first(values: list[float]) -> float:
    """The mean without the first value (the warm-up), or the first alone if there is no other."""
    rest = values[1:] or values
    return sum(rest) / len(rest)


def _rounded(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.1f}" for v in values) + "]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=5, help="training iterations on each side")
    args = parser.parse_args(argv)
    if cuda_devices() == 0:
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); "
              "run it on a machine with a GPU and the CUDA build of torch", file=sys.stderr)
        return EXIT_NO_GPU
    gpu = run(1, args.iters)
    print(f"GPU learner: parameters on {gpu['device']} ({gpu['cuda_device']}), "
          f"peak CUDA memory {gpu['cuda_peak_mib']:.1f} MiB", flush=True)
    cpu = run(0, args.iters)
    print(f"time per learner update (iterations 2..{args.iters}): GPU {gpu['update_s'] * 1000:.1f} ms, "
          f"CPU {cpu['update_s'] * 1000:.1f} ms (CPU/GPU {cpu['update_s'] / gpu['update_s']:.2f}x); "
          f"per iteration: GPU {gpu['iteration_s']:.2f} s, CPU {cpu['iteration_s']:.2f} s")
    print(f"per 1000 rows trained (minibatch rows x epochs; GPU {gpu['rows_per_update']:.0f}, "
          f"CPU {cpu['rows_per_update']:.0f} rows per update): GPU {gpu['update_s_per_1k_rows'] * 1000:.1f} ms, "
          f"CPU {cpu['update_s_per_1k_rows'] * 1000:.1f} ms "
          f"(CPU/GPU {cpu['update_s_per_1k_rows'] / gpu['update_s_per_1k_rows']:.2f}x)")
    print(f"first iteration (warm-up): update GPU {gpu['first_update_s'] * 1000:.1f} ms, "
          f"CPU {cpu['first_update_s'] * 1000:.1f} ms; iteration GPU {gpu['first_iteration_s']:.2f} s, "
          f"CPU {cpu['first_iteration_s']:.2f} s")
    print(f"mean episode return per iteration: GPU {_rounded(gpu['returns'])}, CPU {_rounded(cpu['returns'])}")
    if not gpu["device"].startswith("cuda"):
        print("gpu_check: the GPU learner's parameters are not on a CUDA device", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
