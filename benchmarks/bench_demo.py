"""Time to a mean return of 450: our demo next to RLlib's external-env example and its in-process PPO.

All sides train PPO on CartPole with the settings of ``configs/ppo_cartpole.yaml``
(lr, batch, minibatch, epochs, gamma, vf_loss_coeff, 64x64 tanh model,
2 EnvRunners, CPU learner); only the transport and the clients differ:

* ours: ``python -m rlinks_rllib demo`` as it ships, run from this tree
  (its package, dummy client and config, whichever checkout the venv's
  install points at; see :data:`TREE_ENV`): our ``RLinkEnvRunner``,
  4 dummy CartPole clients that run the policy in numpy, spread over the
  runners by the directory. Its ``progress.csv`` gives each iteration's
  time since training began, which is what is measured.
* RLlib's: what ``examples/envs/env_connecting_to_rllib_w_tcp_client.py``
  sets up (``EnvRunnerServerForExternalInference``), built here with the same
  settings, and RLlib's ``_dummy_external_client`` (torch inference, one step
  at a time), one per runner (its server accepts only one), each in its own
  process, started once ``build_algo()`` has returned, as ours are.
* RLlib's in-process PPO (``rllib-local``): the same settings, its own
  ``SingleAgentEnvRunner`` stepping CartPole itself, no transport at all.

RLlib's server hands ``sample()`` whatever its one client sent, and that
client sends ``rollout_fragment_length`` steps and then waits for new
weights; if that were less than the runner's share of the train batch, PPO
would ask for a second ``sample()`` that never returns. So the RLlib side
checks that the fragment equals ``train_batch / num_env_runners``.

Measured: wall time from the start of training (after the build, clients
just started) to the end of the first iteration whose
``env_runners/episode_return_mean`` reaches the target, with the iterations
and env steps it took; bounded by ``--max-iters`` and ``--max-train-s``
per run. Each run is its own process group with its own ``ray.init``,
killed whole at the end (RLlib's listener thread can't be stopped cleanly);
each side in turn, ``--repeats`` times, and each ratio is the median of the
per-round ratios.

Where each iteration's time went (issue #14: seconds per iteration within
1.2x of the learner's own update): every side records, per iteration, its
wall time and RLlib's own timers of the phases of PPO's ``training_step``
(sampling, learner update, weight sync; see
:mod:`rlinks_rllib.training.timings`, our demo writes them to its
``progress.csv``). The mean over the iterations after the first (which
also carries connecting and warm-up) is printed per side with the ratio of
s/iteration to the learner's update time. Usage::

    python benchmarks/bench_demo.py [--repeats N] [--sides ours,rllib,rllib-local] [--quick]

Ours runs with ``--port 0`` (free ports for its directory and runners);
RLlib's on a free base port found here (its runner i binds
``localhost:port+i``). Logs of every run go to ``--logs``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import LOOPBACK, REPO, kill_group, median, median_ratio, print_table  # noqa: E402

from rlinks_rllib.training.timings import PHASES, TIME_COLUMNS  # noqa: E402

DEMO_CONFIG = REPO / "configs" / "ppo_cartpole.yaml"
TARGET = 450.0
MAX_ITERS = 80
MAX_TRAIN_S = 360.0
#: Build, ray.init and shutdown on top of the training bound, before a run is killed.
STARTUP_GRACE_S = 150.0
RESULT_TAG = "RESULT "
#: The demo's environment: this tree's package first, for the demo, its
#: clients (scripts outside the package) and Ray's workers alike.
TREE_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
PIDS_TAG = "RUNNER PIDS "


@dataclass
class Run:
    """One side's run: what it reached and when."""

    side: str
    round: int
    reached: bool
    time_s: float  # to the target, or to the last iteration if it wasn't reached
    iterations: int
    env_steps: int
    last_return: float
    note: str = ""
    #: Per iteration up to the counted one: wall seconds and RLlib's phases (see :func:`pace`).
    times: list[dict] = field(default_factory=list)
    #: CPU seconds per iteration by role (ours only; see :class:`CpuByIteration`).
    cpu: dict = field(default_factory=dict)


# --------------------------------------------------------------------------
# Ports and process groups


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the servers do: a connection of an earlier run in TIME_WAIT doesn't count as in use.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_base_port(span: int, attempts: int = 50) -> int:
    """A port ``p`` with ``p .. p+span`` all free on 127.0.0.1.

    Raises:
        RuntimeError: none found in ``attempts`` tries.
    """
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            base = sock.getsockname()[1]
        if base + span <= 65535 and all(_port_free(base + i) for i in range(span + 1)):
            return base
    raise RuntimeError(f"no {span + 1} consecutive free ports found on {LOOPBACK}")


def run_group(cmd: list[str], log: Path, timeout: float,
              on_poll: Callable[[int], None] | None = None) -> tuple[int | None, str]:
    """Run ``cmd`` in a new session; return (exit code or None on timeout, its output).

    ``on_poll(session id)`` is called every :data:`POLL_S` while it runs.
    Whatever happens, the whole group (Ray's processes and clients included)
    is SIGKILLed before returning.
    """
    deadline = time.monotonic() + timeout
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env=TREE_ENV)
        code: int | None = None
        try:
            while code is None and time.monotonic() < deadline:
                if on_poll is not None:
                    on_poll(proc.pid)
                time.sleep(POLL_S)
                code = proc.poll()
        finally:
            kill_group(proc.pid)
            proc.wait(timeout=10)
    return code, log.read_text(errors="replace")


# --------------------------------------------------------------------------
# Where the CPU went (ours): every process of the demo's session, by role

POLL_S = 0.1
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPU_ROLES = ("learner", "clients", "runners", "ray")


def session_cpu(sid: int) -> dict[str, float]:
    """CPU seconds used so far by each process of session ``sid``, summed by role.

    The session leader is the learner; its client processes are named by
    their ``--address``; Ray's actors of our runner class are the runners;
    the rest (raylet, GCS, agents) is Ray.
    """
    used = dict.fromkeys(CPU_ROLES, 0.0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[3]) != sid:
            continue
        pid = int(entry)
        role = ("learner" if pid == sid else "runners" if b"RLinkEnvRunner" in cmdline
                else "clients" if b"--address" in cmdline else "ray")
        used[role] += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime
    return used


def machine_busy_s() -> float:
    """CPU seconds all cores of this machine spent busy (not idle or waiting on I/O) since boot."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _CLOCK_TICKS


class CpuByIteration:
    """Marks the demo session's CPU each time its ``progress.csv`` gains a row.

    The CPU of iterations ``a+1 .. b`` is the difference of the marks taken
    when rows ``a`` and ``b`` appeared (each up to :data:`POLL_S` late).
    """

    def __init__(self, csv_path: Path) -> None:
        self.csv_path = csv_path
        self.marks: dict[int, tuple[float, dict[str, float], float]] = {}

    def __call__(self, sid: int) -> None:
        try:
            rows = max(0, len(self.csv_path.read_text().splitlines()) - 1)
        except OSError:
            return  # no iteration yet
        if rows and rows not in self.marks:
            self.marks[rows] = (time.monotonic(), session_cpu(sid), machine_busy_s())

    def per_iteration(self, first: int, last: int) -> dict[str, float]:
        """Mean CPU seconds per iteration of ``first+1 .. last`` by role, ``wall_s`` and ``machine_s``."""
        marked = [k for k in self.marks if first <= k <= last]
        if len(marked) < 2:
            return {}
        a, b = self.marks[min(marked)], self.marks[max(marked)]
        n = max(marked) - min(marked)
        cpu = {role: (b[1][role] - a[1][role]) / n for role in CPU_ROLES}
        return {**cpu, "wall_s": (b[0] - a[0]) / n, "machine_s": (b[2] - a[2]) / n}


# --------------------------------------------------------------------------
# Ours


def run_ours(round_: int, logs: Path, target: float, max_iters: int, max_train_s: float) -> Run:
    """``python -m rlinks_rllib demo``, its time read from its ``progress.csv``."""
    output = logs / f"ours-{round_}"
    csv_path = output / "progress.csv"
    csv_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "rlinks_rllib", "demo", "--port", "0", "--output", str(output),
           "--stop-iters", str(max_iters)]
    cpu = CpuByIteration(csv_path)
    code, text = run_group(cmd, logs / f"ours-{round_}.log", max_train_s + STARTUP_GRACE_S, on_poll=cpu)
    rows = []
    if csv_path.exists():
        with open(csv_path, newline="") as f:
            rows = [{k: float(v) if v else math.nan for k, v in r.items() if k in ROW_KEYS}
                    for r in csv.DictReader(f)]
    note = "" if code in (0, 2) else ("killed at the time bound" if code is None else f"exit {code}")
    if not rows:
        tail = " / ".join(text.strip().splitlines()[-3:])
        return Run("ours", round_, False, math.nan, 0, 0, math.nan, note or f"no progress.csv: {tail}")
    run = _first_at_target("ours", round_, rows, target, max_train_s, note)
    run.cpu = cpu.per_iteration(1, run.iterations)
    return run


#: What every side reports per iteration: the columns of our ``progress.csv`` these use.
ROW_KEYS = ("iteration", "time_s", "env_steps", "episode_return_mean", *TIME_COLUMNS)


def _first_at_target(side: str, round_: int, rows: list[dict], target: float, max_train_s: float,
                     note: str) -> Run:
    """The run from its per-iteration rows (:data:`ROW_KEYS`): the first at ``target`` counts."""
    hit = next((i for i, r in enumerate(rows) if r["episode_return_mean"] >= target and r["time_s"] <= max_train_s),
               None)
    counted = rows[:len(rows) if hit is None else hit + 1]
    times = [{"wall_s": r["time_s"] - (counted[i - 1]["time_s"] if i else 0.0),
              **{k: r.get(k, math.nan) for k in TIME_COLUMNS}} for i, r in enumerate(counted)]
    row = counted[-1]
    return Run(side, round_, hit is not None, row["time_s"], int(row["iteration"]), int(row["env_steps"]),
               row["episode_return_mean"], note or ("" if hit is not None else "target not reached"), times)


# --------------------------------------------------------------------------
# RLlib's sides (each runs in its own process: --rllib-child)

#: RLlib's sides: how ``--rllib-child`` builds each, and the runner class its actors run.
EXTERNAL, IN_PROCESS = "rllib", "rllib-local"
RUNNER_CLASS = {EXTERNAL: "EnvRunnerServerForExternalInference", IN_PROCESS: "SingleAgentEnvRunner"}


def _rllib_config(port: int | None):
    """PPO with the settings of ``configs/ppo_cartpole.yaml``.

    With a ``port``: RLlib's external-inference server, listening from there;
    without: RLlib's own ``SingleAgentEnvRunner`` stepping CartPole in process.
    """
    import gymnasium as gym
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.external.env_runner_server_for_external_inference import (
        EnvRunnerServerForExternalInference,
    )
    from ray.tune.registry import get_trainable_cls

    from rlinks_rllib.training.config_file import load_spec

    spec = load_spec(DEMO_CONFIG)
    config = get_trainable_cls(spec.algorithm).get_default_config()
    if port is None:
        config.environment(spec.spaces["from_env"]).env_runners(**spec.env_runners)
    else:
        env = gym.make(spec.spaces["from_env"])
        config.environment(observation_space=env.observation_space, action_space=env.action_space,
                           env_config={"port": port})
        config.env_runners(env_runner_cls=EnvRunnerServerForExternalInference, **spec.env_runners)
        env.close()
    return (config.training(**spec.training)
            .learners(**spec.learners)
            .rl_module(model_config=DefaultModelConfig(**spec.model)))


def rllib_child(port: int, target: float, max_iters: int, max_train_s: float) -> int:
    """Build, start one RLlib dummy client per runner (``port`` > 0; 0: in process), train.

    Prints ``RESULT {json}`` at the end: one row of :data:`ROW_KEYS` per iteration.
    """
    import ray

    from rlinks_rllib.training.timings import IterationTimes

    config = _rllib_config(port or None)
    runners = int(config.num_env_runners)
    share = config.total_train_batch_size // runners
    fragments = {config.get_rollout_fragment_length(worker_index=i) for i in range(runners + 1)}
    if port and (fragments != {share} or share * runners != config.total_train_batch_size):
        raise SystemExit(f"rollout_fragment_length {sorted(fragments)} != per-runner share {share} of "
                         f"{config.total_train_batch_size}: RLlib's server would deadlock")
    # As our learner does: a fresh local Ray with a logical CPU for every actor.
    ray.init(address="local", include_dashboard=False, num_cpus=max(os.cpu_count() or 1, runners + 2))
    algo = config.build_algo()
    # The runners' processes are no children of ours; name them so the parent can make sure they end.
    pids = algo.env_runner_group.foreach_env_runner(lambda runner: os.getpid(), local_env_runner=False)
    print(PIDS_TAG + json.dumps(pids), flush=True)
    client_code = ("from ray.rllib.examples.envs.classes.utils.dummy_external_client import "
                   "_dummy_external_client as run; import sys; run(int(sys.argv[1]))")
    # Same process group as this one, so the parent's kill ends them too.
    clients = [subprocess.Popen([sys.executable, "-c", client_code, str(port + i)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for i in range(1, runners + 1)] if port else []
    rows: list[dict] = []
    times = IterationTimes()
    started = time.monotonic()
    for _ in range(max_iters):
        result = algo.train()
        elapsed = time.monotonic() - started
        stats = result.get("env_runners", {})
        row = {"iteration": int(result["training_iteration"]), "time_s": round(elapsed, 3),
               "env_steps": int(stats.get("num_env_steps_sampled_lifetime", 0) or 0),
               "episode_return_mean": float(stats.get("episode_return_mean", math.nan)), **times.update(result)}
        rows.append(row)
        print(f"iter {row['iteration']:4d} | env steps {row['env_steps']:9,d} | "
              f"return {row['episode_return_mean']:7.1f} | {elapsed:7.1f} s | "
              + " | ".join(f"{k} {row[k]:.3f}" for k in TIME_COLUMNS), flush=True)
        if row["episode_return_mean"] >= target or elapsed > max_train_s:
            break
    print(RESULT_TAG + json.dumps(rows), flush=True)
    for client in clients:
        client.kill()
    # No algo.stop(): the external runners' listener threads block in
    # accept()/recv and never end; the parent kills this whole process group instead.
    return 0


def run_rllib(round_: int, logs: Path, target: float, max_iters: int, max_train_s: float,
              side: str = EXTERNAL) -> Run:
    port = free_base_port(span=2) if side == EXTERNAL else 0
    cmd = [sys.executable, str(Path(__file__).resolve()), "--rllib-child", str(port), "--target", str(target),
           "--max-iters", str(max_iters), "--max-train-s", str(max_train_s)]
    code, text = _run_until_result(cmd, logs / f"{side}-{round_}.log", max_train_s + STARTUP_GRACE_S)
    for line in text.splitlines():
        if line.startswith(PIDS_TAG):
            end_runner_processes(json.loads(line[len(PIDS_TAG):]), RUNNER_CLASS[side])
    lines = [line for line in text.splitlines() if line.startswith(RESULT_TAG)]
    note = "" if code == 0 else ("killed at the time bound" if code is None else f"exit {code}")
    if not lines or not json.loads(lines[-1][len(RESULT_TAG):]):
        tail = " / ".join(text.strip().splitlines()[-3:])
        return Run(side, round_, False, math.nan, 0, 0, math.nan, note or f"no result: {tail}")
    return _first_at_target(side, round_, json.loads(lines[-1][len(RESULT_TAG):]), target, max_train_s, note)


def run_rllib_local(round_: int, logs: Path, target: float, max_iters: int, max_train_s: float) -> Run:
    """RLlib's own PPO, CartPole stepped by its ``SingleAgentEnvRunner``s: no transport at all."""
    return run_rllib(round_, logs, target, max_iters, max_train_s, side=IN_PROCESS)


def end_runner_processes(pids: list[int], runner_class: str, grace_s: float = 15.0) -> None:
    """Wait for RLlib's runner actors to end with their Ray; SIGKILL those still there after ``grace_s``.

    Only a process whose command line still names ``runner_class`` is
    killed, so a reused pid is left alone.
    """
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _is_runner(pid, runner_class)]
        time.sleep(0.5)
    for pid in alive:
        if _is_runner(pid, runner_class):
            os.kill(pid, signal.SIGKILL)


def _is_runner(pid: int, runner_class: str) -> bool:
    try:
        return runner_class.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False  # gone


def _run_until_result(cmd: list[str], log: Path, timeout: float) -> tuple[int | None, str]:
    """Like :func:`run_group`, but the group is killed as soon as the result line is out."""
    deadline = time.monotonic() + timeout
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        code: int | None = None
        try:
            while time.monotonic() < deadline:
                code = proc.poll()
                if code is not None or RESULT_TAG in log.read_text(errors="replace"):
                    code = 0 if code is None else code
                    break
                time.sleep(0.5)
        finally:
            kill_group(proc.pid)
            proc.wait(timeout=10)
    return code, log.read_text(errors="replace")


# --------------------------------------------------------------------------


SIDES = {"ours": run_ours, EXTERNAL: run_rllib, IN_PROCESS: run_rllib_local}
#: ``--quick`` leaves RLlib's in-process PPO out (it has no transport to compare) to stay short.
QUICK_SIDES = ("ours", EXTERNAL)


def pace(run: Run) -> dict[str, float]:
    """Mean seconds per iteration of ``run``, wall and per phase, over its iterations after the first.

    The first iteration also carries what happens once (clients connecting,
    first forward passes), so it counts only when it is all there is.
    ``in_train_s`` is the rest of RLlib's ``train()`` (its runner-state
    sync, result compilation); ``outside_s`` is the wall time outside
    ``train()`` (for ours: the learner's per-iteration bookkeeping, one round
    trip to every runner among it). ``per_learn`` is wall / learner update,
    the #14 aim.
    """
    times = run.times[1:] or run.times
    if not times:
        return {}
    sums = {k: math.fsum(t[k] for t in times) for k in ("wall_s", "iter_s", *PHASES)}
    mean = {k: v / len(times) for k, v in sums.items()}
    mean["in_train_s"] = mean["iter_s"] - math.fsum(mean[k] for k in PHASES)
    mean["outside_s"] = mean["wall_s"] - mean["iter_s"]
    mean["per_learn"] = sums["wall_s"] / sums["learn_s"] if sums["learn_s"] else math.nan
    return mean


def print_pace(runs: list[Run], sides: list[str]) -> None:
    """Where each side's iterations went, and the ratio to the learner's update (aim <= 1.2)."""
    paces = {side: [pace(r) for r in runs if r.side == side and r.times] for side in sides}
    columns = ("wall_s", "learn_s", "sample_s", "sync_s", "in_train_s", "outside_s", "per_learn")
    print("\n  per iteration (mean over iterations after the first, median over rounds):")
    print_table(["side", "s/iteration", "learner update (s)", "sample (s)", "weight sync (s)", "rest of train() (s)",
                 "outside train() (s)", "s/iteration / update"],
                [[side, *(median(p[k] for p in paces[side]) for k in columns)] for side in sides])
    cpus = [(r.cpu, pace(r)) for r in runs if r.side == "ours" and r.cpu]
    if cpus:
        cores = os.cpu_count() or 1
        cpu = {k: median(c[k] for c, _ in cpus) for k in (*CPU_ROLES, "wall_s", "machine_s")}
        demo = math.fsum(cpu[role] for role in CPU_ROLES)
        floor = median(math.fsum(c[role] for role in CPU_ROLES) / cores / p["learn_s"] for c, p in cpus)
        print(f"\n  ours, CPU seconds per iteration (the same iterations, from /proc): "
              + ", ".join(f"{role} {cpu[role]:.2f}" for role in CPU_ROLES)
              + f"; {demo:.2f} in all = {demo / cpu['wall_s']:.2f} of {cores} cores busy with the demo "
              f"({cpu['machine_s'] / cpu['wall_s']:.2f} with everything else on the machine)")
        print(f"  ours, CPU floor: all of the demo's CPU spread over {cores} cores, "
              f"s/iteration / learner update >= {floor:.2f}")
    print()
    for side in sides:
        ratio = median(p["per_learn"] for p in paces[side])
        shown = "-" if ratio != ratio else f"{ratio:.2f}"
        print(f"  ratio {side} s/iteration / learner update time: {shown} (aim <= 1.2)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="rounds of (ours, RLlib's); ratio is the median")
    parser.add_argument("--target", type=float, default=TARGET, help="mean episode return to reach")
    parser.add_argument("--max-iters", type=int, default=MAX_ITERS, help="iteration cap per run")
    parser.add_argument("--max-train-s", type=float, default=MAX_TRAIN_S, help="training-time cap per run (s)")
    parser.add_argument("--logs", type=Path, default=REPO / "benchmarks" / "out" / "demo", help="run logs")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 2 iterations per side, target not expected to be reached")
    parser.add_argument("--sides", default=None,
                        help=f"comma-separated, of {','.join(SIDES)} (default all; --quick: {','.join(QUICK_SIDES)})")
    parser.add_argument("--rllib-child", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.max_iters, args.repeats = 2, 1
    sides = args.sides.split(",") if args.sides else list(QUICK_SIDES if args.quick else SIDES)
    if not set(sides) <= set(SIDES) or "ours" not in sides:
        parser.error(f"--sides: 'ours' and any of {', '.join(SIDES)}")
    if args.rllib_child is not None:
        return rllib_child(args.rllib_child, args.target, args.max_iters, args.max_train_s)

    args.logs.mkdir(parents=True, exist_ok=True)
    print(f"PPO CartPole to mean return {args.target:g}: ours (demo, 4 numpy clients) vs RLlib's "
          f"external-inference server (1 dummy client per runner) vs RLlib's in-process PPO; "
          f"sides {','.join(sides)}; 2 EnvRunners each; "
          f"cap {args.max_iters} iterations / {args.max_train_s:g} s; logs in {args.logs}", flush=True)
    runs: list[Run] = []
    for round_ in range(1, args.repeats + 1):
        for side in sides:
            run = SIDES[side](round_, args.logs, args.target, args.max_iters, args.max_train_s)
            runs.append(run)
            what = f"{run.time_s:.1f} s" if run.reached else f"not reached ({run.note})"
            print(f"round {round_} {side:11s}: {what}, {run.iterations} iterations, {run.env_steps:,} env steps, "
                  f"last return {run.last_return:.1f}", flush=True)

    print()
    print_table(
        ["run", "round", f"time to {args.target:g} (s)", "iterations", "env steps", "return", "note"],
        [[r.side, r.round, r.time_s if r.reached else math.nan, r.iterations, r.env_steps, r.last_return, r.note]
         for r in runs],
    )
    reached = {side: [r.time_s if r.reached else math.nan for r in runs if r.side == side] for side in sides}
    print("\n  median time " + ", ".join(f"{side} {median(reached[side]):.1f} s" for side in sides))
    for side in sides[1:]:
        ratio = median_ratio(reached["ours"], reached[side])
        shown = "-" if ratio != ratio else f"{ratio:.2f}"
        aim = " (aim <= 0.7)" if side == EXTERNAL else ""
        print(f"  ratio ours/{side} time to {args.target:g}: {shown}{aim}")
    # Per-iteration pace, comparable even when a run missed the target (as --quick does).
    print("  s per iteration: " + ", ".join(
        f"{side} {median(r.time_s / r.iterations for r in runs if r.side == side and r.iterations):.2f}"
        for side in sides))
    print_pace(runs, sides)
    failed = [r for r in runs if not r.iterations]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
