"""SAC on Pendulum from external simulators beside RLlib's own in-process SAC, and the replay ratio (issue #21).

Three runs, all from the same YAML: one after the other, each alone on the
machine, or with ``--side-by-side`` all three at once (a machine with cores
to spare for each: about 1 for in-process, 3 for each of ours):

1. **rllib**: RLlib's in-process SAC (``SingleAgentEnvRunner`` stepping
   Pendulum-v1 itself), the config built by
   :func:`~rlinks_rllib.training.config_file.build_algorithm_config` with
   the env and runner swapped back and no rlinks callbacks; torch on one
   thread, as ``rlinks learner`` gives its local learner;
2. **ours local**: ``rlinks learner --config ...`` with two simulators
   (:class:`~rlinks_rllib.client.EnvClient`, off-policy, running the policy
   in numpy);
3. **ours served**: the same with the runner computing the actions.

Ours run paced (``--backlog pace``, the default): a simulator steps only
when the runner has room for its steps, as RLlib's in-process runner steps
only inside ``sample()``. Simulators beside the learner on a small machine
that step flat out (``drop``) take its CPU; ``--backlog config`` keeps what
the YAML says.

Each prints env steps and seconds to the target return (the first
iteration whose mean return reaches it; for ours from ``progress.csv``,
whose clock starts before the first ``train()`` as the in-process one
does), and the ratios to the in-process run. A run that misses the target
within ``--budget-s`` prints its best return and "not reached".

Then the replay ratio: the small config trained in-process with our runner
(so RLlib's result is at hand) for ``--ratio-s`` seconds with two simulators
as fast as they go, and again with each sleeping ``--slow-ms`` per step;
each prints RLlib's trained / sampled steps
(``num_module_steps_trained_lifetime`` / ``num_env_steps_sampled_lifetime``)
beside the config's ``training_intensity``.

``--quick``: the small config, a short budget, no target (the smoke test).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SMALL = REPO / "benchmarks" / "sac_pendulum_small.yaml"
ENV = "Pendulum-v1"
SIMULATORS = 2
#: Simulator i steps with seed SEED + i; the in-process run's env runner gets SEED.
SEED = 0
#: A line a child prints per iteration (JSON after it), and once at the end of a ratio run.
ROW, RATIO = "ROW ", "RATIO "
#: Seconds to start Ray and build the algorithm or learner, beyond the training budget.
STARTUP_S = 180


# --------------------------------------------------------------------------
# Children: a simulator, the in-process run, a replay-ratio run


def simulator(address: str, served: bool, seed: int, sleep_s: float) -> int:
    """One Pendulum stepped through an off-policy EnvClient until SIGTERM or the learner's end."""
    import gymnasium as gym

    from rlinks_rllib.client import EnvClient
    from rlinks_rllib.client import ClientClosed

    env = gym.make(ENV)
    client = EnvClient(address, inference="served" if served else "auto", on_policy=False, seed=seed,
                       action_space=env.action_space, timeout=60.0)
    signal.signal(signal.SIGTERM, lambda *_: client.stop())
    try:
        with client:
            obs, _ = env.reset(seed=seed)
            while not client.stopped:
                obs, reward, terminated, truncated, _ = env.step(client.act(obs))
                if sleep_s:
                    time.sleep(sleep_s)
                client.report(reward, obs, terminated, truncated)
                if terminated or truncated:
                    obs, _ = env.reset()
    except (ClientClosed, ConnectionError) as exc:  # the learner went away or we were stopped: the end
        print(f"simulator {seed}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


def _torch_one_thread() -> None:
    import torch

    torch.set_num_threads(1)  # as `rlinks learner` gives its local learner (training/learner.py)


def _counts(result: dict) -> tuple[int, int, float]:
    """(env steps sampled, module steps trained, mean return) so far, from an ``algo.train()`` result."""
    runners = result.get("env_runners", {})
    sampled = runners.get("num_env_steps_sampled_lifetime", result.get("num_env_steps_sampled_lifetime", 0))
    learner = result.get("learners", {}).get("default_policy", {})
    trained = learner.get("num_module_steps_trained_lifetime", 0)
    return int(sampled or 0), int(trained or 0), float(runners.get("episode_return_mean", math.nan))


def inprocess(config: str, target: float, budget_s: float) -> int:
    """RLlib's own SAC on the same YAML; one ROW line per iteration."""
    _torch_one_thread()
    import ray
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from rlinks_rllib.training.config_file import build_algorithm_config, load_spec

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cfg = build_algorithm_config(load_spec(config))
    cfg.env_config = {}
    cfg.environment(ENV).env_runners(env_runner_cls=SingleAgentEnvRunner).callbacks([]).debugging(seed=SEED)
    algo = cfg.build_algo()
    started = time.monotonic()
    try:
        while time.monotonic() - started < budget_s:
            sampled, trained, ret = _counts(algo.train())
            print(ROW + json.dumps({"env_steps": sampled, "trained": trained, "return": ret,
                                    "time_s": time.monotonic() - started}), flush=True)
            if ret >= target:
                break
    finally:
        algo.stop()
        ray.shutdown()
    return 0


def ratio_runs(config: str, sleeps_s: list[float], seconds: float) -> int:
    """Our runner in-process, ``seconds`` of training with two simulators per sleep; a RATIO line each.

    One Ray for all (a fresh algorithm and simulators each time). The ratio is taken from the first
    iteration after learning started to the last, so the warm-up steps (sampled, never trained on)
    don't dilute it; the lifetime ratio is printed beside it.
    """
    _torch_one_thread()
    import ray

    from rlinks_rllib.training.config_file import build_algorithm_config, load_spec

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for sleep_s in sleeps_s:
            algo = build_algorithm_config(load_spec(config)).build_algo()
            address = "127.0.0.1:%d" % algo.env_runner.address[1]
            sims = [_start_simulator(address, False, SEED + i, sleep_s) for i in range(SIMULATORS)]
            first = last = None
            started = time.monotonic()
            try:
                while time.monotonic() - started < seconds:
                    last = _counts(algo.train())
                    if first is None and last[1] > 0:
                        first = last
            finally:
                _stop_all(sims)
                algo.stop()
            first = first or last
            print(RATIO + json.dumps({"sleep_s": sleep_s, "sampled": last[0], "trained": last[1],
                                      "window_sampled": last[0] - first[0], "window_trained": last[1] - first[1],
                                      "seconds": time.monotonic() - started}), flush=True)
    finally:
        ray.shutdown()
    return 0


# --------------------------------------------------------------------------
# The parent: processes, reading their rows


def _start_simulator(address: str, served: bool, seed: int, sleep_s: float) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--simulator", address, "--seed", str(seed), "--sleep-s", str(sleep_s)]
    return subprocess.Popen(cmd + ["--served"] * served, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = 30.0) -> None:
    """Signal ``proc``, wait ``grace_s``, then SIGKILL its process group (it was started in its own session)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        _stop(proc, grace_s=10.0)


def _child(args: list[str], timeout_s: float) -> list[str]:
    """Run this script as a child with ``args``; its stdout lines (stderr to ours only if it fails)."""
    proc = subprocess.Popen([sys.executable, __file__, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    if proc.returncode != 0:
        print(f"  child {args[:2]} exited {proc.returncode}:\n{err[-3000:]}", file=sys.stderr)
    return out.splitlines()


def _rows(lines: list[str]) -> list[dict]:
    return [json.loads(line[len(ROW):]) for line in lines if line.startswith(ROW)]


def run_rllib(config: str, target: float, budget_s: float) -> list[dict]:
    return _rows(_child(["--child-inprocess", config, "--target", str(target), "--budget-s", str(budget_s)],
                        budget_s + STARTUP_S))


def run_ours(config: str, served: bool, target: float, budget_s: float, out: Path) -> list[dict]:
    """``rlinks learner`` and two simulators until the learner stops or ``budget_s`` of training passes."""
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "learner.log", "w")
    learner = subprocess.Popen([sys.executable, "-m", "rlinks_rllib", "learner", "--config", config, "--port", "0",
                                "--output", str(out / "run"), "--stop-reward", str(target),
                                "--stop-iters", "1000000"],
                               cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    sims: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + STARTUP_S
        endpoints = out / "run" / "endpoints.json"
        while not endpoints.exists() and learner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if not endpoints.exists():
            print(f"  the learner never listened; see {out / 'learner.log'}", file=sys.stderr)
            return []
        runner = json.loads(endpoints.read_text())[0]
        address = f"{runner['host']}:{runner['port']}"
        sims = [_start_simulator(address, served, SEED + i, 0.0) for i in range(SIMULATORS)]
        deadline = time.monotonic() + budget_s  # the learner's clock started before the simulators
        while learner.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        _stop(learner, signal.SIGINT, grace_s=60.0)  # Ctrl-C: it stops RLlib and Ray itself
        _stop_all(sims)
        log.close()
    progress = out / "run" / "progress.csv"
    if not progress.exists():
        return []
    with open(progress, newline="") as table:
        return [{"env_steps": int(r["env_steps"]), "return": float(r["episode_return_mean"] or "nan"),
                 "time_s": float(r["time_s"])} for r in csv.DictReader(table)
                if float(r["time_s"]) <= budget_s]


def to_target(rows: list[dict], target: float) -> tuple[int | None, float | None, float]:
    """(env steps, seconds) at the first row at or above ``target`` (None, None if none), and the best return."""
    best = max((r["return"] for r in rows if not math.isnan(r["return"])), default=math.nan)
    for r in rows:
        if r["return"] >= target:
            return r["env_steps"], r["time_s"], best
    return None, None, best


def resolve(config: str) -> str:
    """A YAML path for ``config``: a file, or a bundled config's name."""
    if Path(config).is_file():
        return str(Path(config).resolve())
    from rlinks_rllib.bundled import bundled_config

    return str(bundled_config(config))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="sac_pendulum", help="YAML file or bundled config name")
    parser.add_argument("--target", type=float, help="mean return to reach (default: the config's stop reward)")
    parser.add_argument("--budget-s", type=float, default=900.0, help="training seconds per run")
    parser.add_argument("--ratio-s", type=float, default=90.0, help="training seconds per replay-ratio run (0: none)")
    parser.add_argument("--slow-ms", type=float, nargs="+", default=[20.0, 100.0],
                        help="sleeps per step of the slowed simulators (one replay-ratio run each)")
    parser.add_argument("--skip-target", action="store_true", help="only the replay ratio")
    parser.add_argument("--quick", action="store_true", help="small config, short budgets, no target (smoke test)")
    parser.add_argument("--backlog", choices=("pace", "drop", "config"), default="pace",
                        help="ours' off_policy_backlog (default pace: simulators step as fast as SAC takes steps)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="the three target runs at once (a machine with cores for each), not one after the other")
    # children
    parser.add_argument("--simulator", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--served", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=SEED, help=argparse.SUPPRESS)
    parser.add_argument("--sleep-s", default="0", help=argparse.SUPPRESS)
    parser.add_argument("--child-inprocess", metavar="YAML", help=argparse.SUPPRESS)
    parser.add_argument("--child-ratio", metavar="YAML", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.simulator:
        return simulator(args.simulator, args.served, args.seed, float(args.sleep_s))
    if args.child_inprocess:
        return inprocess(args.child_inprocess, args.target, args.budget_s)
    if args.child_ratio:
        return ratio_runs(args.child_ratio, [float(v) for v in args.sleep_s.split(",")], args.budget_s)

    if args.quick:
        args.config, args.budget_s, args.ratio_s, args.slow_ms = str(SMALL), 3.0, 4.0, [20.0]
    config = resolve(args.config)
    spec = yaml.safe_load(Path(config).read_text())
    target = math.inf if args.quick else (args.target if args.target is not None else spec["stop"]["reward"])
    print(f"SAC on {ENV}: {config} | target {target} | budget {args.budget_s:.0f} s per run | "
          f"{SIMULATORS} simulators for ours | load {os.getloadavg()[0]:.1f}")

    with tempfile.TemporaryDirectory(prefix="bench_sac_") as tmp:
        if not args.skip_target:
            ours_config = with_backlog(config, args.backlog, Path(tmp))
            print(f"ours: off_policy_backlog {args.backlog}; "
                  f"{'side by side' if args.side_by_side else 'one after the other'}", flush=True)
            jobs = {"rllib in-process": lambda: run_rllib(config, target, args.budget_s)}
            for name, served in (("ours local", False), ("ours served", True)):
                jobs[name] = (lambda name=name, served=served: run_ours(
                    ours_config, served, target, args.budget_s, Path(tmp) / name.replace(" ", "_")))
            print_targets(run_jobs(jobs, args.side_by_side), target)
        if args.ratio_s > 0:
            print_ratios(args.ratio_s, [ms / 1000.0 for ms in args.slow_ms])
    return 0


def with_backlog(config: str, backlog: str, folder: Path) -> str:
    """``config`` with ``rlinks.off_policy_backlog`` set to ``backlog`` (a copy in ``folder``); as is for "config"."""
    if backlog == "config":
        return config
    spec = yaml.safe_load(Path(config).read_text())
    spec.setdefault("rlinks", {})["off_policy_backlog"] = backlog
    path = folder / f"ours_{backlog}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def run_jobs(jobs: dict[str, Callable[[], list[dict]]], side_by_side: bool) -> dict[str, list[dict]]:
    """Each job's rows, by name; one after the other, or all at once on threads (each waits on its processes)."""
    def timed(name: str) -> list[dict]:
        started = time.monotonic()
        rows = jobs[name]()
        print(f"  {name}: {time.monotonic() - started:.0f} s with startup and stop", flush=True)
        return rows

    if not side_by_side:
        return {name: timed(name) for name in jobs}
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(timed, name) for name in jobs}
        return {name: future.result() for name, future in futures.items()}


def print_targets(runs: dict[str, list[dict]], target: float) -> None:
    print(f"\nto a mean return of {target}:")
    found = {name: to_target(rows, target) for name, rows in runs.items()}
    base_steps, base_s, _ = found["rllib in-process"]
    for name, (steps, seconds, best) in found.items():
        rows = runs[name]
        last = rows[-1] if rows else {"env_steps": 0, "time_s": 0.0}
        if steps is None:
            print(f"  {name:18s} not reached: best return {best:.1f} in {last['env_steps']:,} env steps, "
                  f"{last['time_s']:.0f} s ({len(rows)} iterations)")
        else:
            print(f"  {name:18s} {steps:7,d} env steps {seconds:7.0f} s  (best return {best:.1f})")
    for name, (steps, seconds, _) in found.items():
        if name == "rllib in-process":
            continue
        if steps is None or base_steps is None:
            print(f"ratio {name}/in-process env steps: n/a (not reached by both)")
            print(f"ratio {name}/in-process seconds: n/a (not reached by both)")
        else:
            print(f"ratio {name}/in-process env steps: {steps / base_steps:.2f}")
            print(f"ratio {name}/in-process seconds: {seconds / base_s:.2f}")


def print_ratios(seconds: float, slows_s: list[float]) -> None:
    spec = yaml.safe_load(SMALL.read_text())
    asked = spec["training"]["training_intensity"]
    print(f"\nreplay ratio (trained / sampled env steps), {SMALL.name}, training_intensity {asked}, "
          f"{seconds:.0f} s each, {SIMULATORS} simulators:")
    sleeps = [0.0, *slows_s]
    started = time.monotonic()
    lines = _child(["--child-ratio", str(SMALL), "--sleep-s", ",".join(map(str, sleeps)), "--budget-s", str(seconds)],
                   len(sleeps) * (seconds + 60) + STARTUP_S)
    print(f"  ({time.monotonic() - started:.0f} s with startup)")
    found = {r["sleep_s"]: r for r in (json.loads(line[len(RATIO):]) for line in lines if line.startswith(RATIO))}
    for sleep_s in sleeps:
        label = f"slowed {sleep_s * 1000:.0f} ms/step" if sleep_s else "fast"
        r = found.get(sleep_s)
        if r is None:
            print(f"  {label}: no result")
            continue
        lifetime = r["trained"] / r["sampled"] if r["sampled"] else math.nan
        # Too short a run for two iterations after learning started (--quick): the lifetime ratio.
        window = r["window_trained"] / r["window_sampled"] if r["window_sampled"] else lifetime
        print(f"  {label:18s} sampled {r['sampled']:6,d} ({r['sampled'] / r['seconds']:5.1f}/s) "
              f"trained {r['trained']:9,d} | ratio after warm-up {window:6.1f}, lifetime {lifetime:6.1f}")
        print(f"ratio measured/asked replay ratio, {label}: {window / asked:.2f}")

if __name__ == "__main__":
    sys.exit(main())
