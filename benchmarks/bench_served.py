"""Served actions: ours against Godot RL Agents' Python server, round trips, and batching.

Competitors, all in the same run:

1. **Godot RL Agents** (the ``godot-rl`` package, in a venv of its own under
   ``benchmarks/out/godot-venv``: its pins clash with ours; made on first use)
   against our runner, driving the same game process
   (``benchmarks/served_game.py``: N CartPole agents stepped together, one
   connection, N = 1, 16, 64). Godot RL's side runs as its Stable Baselines
   3 example does (``benchmarks/godot_server.py``); ours is an
   ``RLinkEnvRunner`` serving the game's ``EnvClient`` (64x64 tanh MLP both).
   *Learning paused*: Godot RL's inference loop twice, once with SB3's
   ``model.predict`` (torch: as its SB3 example runs) and once with a numpy
   MLP on its ``GodotEnv`` holding our runner's very weights (what a game
   developer's own small policy costs there: the transport, not SB3), and
   our runner with a train batch no client fills (no ``ACT`` waits for an
   update, so no tick that waited for PPO is counted on either side). *Learning running*
   (``--learning``): SB3's PPO ``learn`` against our runner under RLlib's PPO,
   both updating every 1,024 steps (minibatches of 64, 10 epochs), so the
   game also waits for each side's updates. Actions/s and the game's round
   trip (observations out, actions in) p50; rounds alternate (ABBA) and the
   ratio is the median of per-round ratios.
2. **Latency** (one client, one env): ``RLinkClient.act`` against
   ``NumpyPolicy.compute_action`` on the same weights in the client's own
   process (what a local-inference client pays per action). p50 and p99.
3. **Batching**: actions/s served to 1, 16 and 64 clients at once (each one
   env, one ``ACT`` in flight; threads in a few client processes), by a
   runner with batching on (the defaults) and one with
   ``served_batch_size=1``.

The paused runners are on-policy PPO with a train batch no client fills, so
no ``ACT`` is parked for a training step (that would time the learner, not the
serving). With ``--quick`` and no Godot RL venv yet, section 1 says it is
skipped (making the venv takes minutes). Usage::

    python benchmarks/bench_served.py [--quick] [--rounds N] [--window S] [--learning] [--godot-only]
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, median, median_ratio, now, kill_group, print_table, stop_processes  # noqa: E402

#: The competitor, pinned; torch comes from our own constraints (the CPU wheel).
GODOT_RL = "godot-rl==0.8.2"
GODOT_VENV = REPO / "benchmarks" / "out" / "godot-venv"
BENCH = REPO / "benchmarks"

#: Every wait on a client process gives up after this long.
WAIT_S = 120.0
#: Threads per client process at most (one RLinkClient each).
THREADS_PER_PROCESS = 16
#: A client's episode is truncated after this many actions (keeps the runner's episodes short).
EPISODE_STEPS = 200
#: Env steps per PPO update when learning runs, both sides.
LEARNING_BATCH = 1024


# --------------------------------------------------------------------------
# The runner (this process)

import gymnasium as gym  # noqa: E402

CARTPOLE_OBS = gym.make("CartPole-v1").observation_space
CARTPOLE_ACT = gym.make("CartPole-v1").action_space


def make_runner(**settings):
    """An in-process RLinkEnvRunner: PPO, 64x64 tanh MLP, CartPole spaces; ``settings`` go to rlinks."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib import RLinkEnvRunner

    config = (
        PPOConfig()
        .environment(observation_space=CARTPOLE_OBS, action_space=CARTPOLE_ACT,
                     env_config={"port": 0, "served_report_timeout_s": 600.0, **settings})
        .env_runners(num_env_runners=0, sample_timeout_s=4.0)
        # A train batch no client fills: no ACT waits for a training step.
        .training(train_batch_size_per_learner=50_000_000, minibatch_size=128)
        .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
    )
    return RLinkEnvRunner(config=config, worker_index=0)


# --------------------------------------------------------------------------
# Godot RL Agents against ours, the same game process


def godot_python(setup: bool) -> Optional[Path]:
    """The Python of Godot RL's venv; made (``setup``) if missing, else ``None``.

    Raises:
        subprocess.CalledProcessError: pip could not install it.
    """
    python = GODOT_VENV / "bin" / "python"
    if python.exists() or not setup:
        return python if python.exists() else None
    torch_pin = next(line.strip() for line in (REPO / "constraints.txt").read_text().splitlines()
                     if line.startswith("torch=="))
    print(f"making Godot RL's venv ({GODOT_RL}, {torch_pin}) in {GODOT_VENV.relative_to(REPO)}: a few minutes, once",
          flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(GODOT_VENV)], check=True, timeout=120)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", GODOT_RL, torch_pin], check=True, timeout=1800)
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def play(how: list[str], n: int, warmup: float, window: float) -> dict:
    """Run the game process with ``how`` (``--godot PORT`` or ``--rlinks ADDRESS``); its result line."""
    done = subprocess.run([sys.executable, str(BENCH / "served_game.py"), *how, "--agents", str(n),
                           "--warmup", str(warmup), "--seconds", str(window)],
                          capture_output=True, text=True, timeout=WAIT_S, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"the game process failed ({' '.join(how)}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def export_weights(address: str) -> Path:
    """The runner's policy as plain layers for Godot RL's numpy loop (``godot_server.py --mode numpy``).

    The same weights our runner computes with, asked for as any client asks
    (``GET_STATE``), read by the client's own reader of RLlib's default MLP;
    saved as ``w0, b0, w1, b1, ...`` (``x @ w + b``, tanh between layers).

    Raises:
        ValueError: the module is not a plain MLP (a layer norm, another activation).
    """
    from rlinks_rllib.client import RLinkClient
    from rlinks_rllib.client.policies.mlp import read_network
    from rlinks_rllib.client.policies.numpy_policy import DiscreteSpace

    with RLinkClient(address, timeout=30.0, extensions=("ack",)) as client:
        params = client.get_state().params
    net = read_network(params, DiscreteSpace(2), "tanh", "relu")
    layers = [*net.encoder, *net.pi]
    if any(layer.norm is not None or layer.bias is None for layer in layers) or net.log_std_clip is not None:
        raise ValueError("the numpy peer runs plain Linear+tanh layers; this module has more")
    path = GODOT_VENV.parent / "served_policy.npz"
    np.savez(path, **{f"{kind}{i}": array for i, layer in enumerate(layers)
                      for kind, array in (("w", layer.weight_t), ("b", layer.bias))})
    return path


def godot_round(python: Path, n: int, mode: str, warmup: float, window: float,
                weights: Optional[Path] = None) -> dict:
    """One window of the game against Godot RL's server (started for it, ended by its ``close``)."""
    port = free_port()
    log_path = GODOT_VENV.parent / "godot_server.log"
    log = log_path.open("w")
    extra = ["--weights", str(weights)] if weights is not None else []
    server = subprocess.Popen([str(python), str(BENCH / "godot_server.py"), "--port", str(port), "--mode", mode,
                               "--seconds", str(warmup + window + 1.0), "--batch", str(LEARNING_BATCH), *extra],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        result = play(["--godot", str(port)], n, warmup, window)
    finally:
        try:
            server.wait(timeout=20)  # it ends itself after sending close
        except subprocess.TimeoutExpired:
            kill_group(server.pid)
            server.wait(timeout=20)
        log.close()
    lines = [line for line in log_path.read_text().splitlines() if line.startswith('{"cpu_us_per_tick"')]
    result["server_cpu_us_per_tick"] = json.loads(lines[-1])["cpu_us_per_tick"] if lines else float("nan")
    return result


def thread_cpu_s(native_id: int) -> float:
    """CPU seconds (user and system) a thread of this process has used, from /proc; NaN where there is none."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ours_round(runner, n: int, warmup: float, window: float) -> dict:
    """One window of the game against our runner; with its loop thread's CPU per ``ACT`` over the whole game."""
    server = runner.server
    acts, cpu = server.stats.served_acts, thread_cpu_s(server._thread.native_id)
    host, port = runner.address
    result = play(["--rlinks", f"{host}:{port}"], n, warmup, window)
    acts = server.stats.served_acts - acts
    result["server_cpu_us_per_tick"] = (thread_cpu_s(server._thread.native_id) - cpu) * 1e6 / max(acts, 1)
    return result


class LearningRunner:
    """RLlib's PPO with an RLinkEnvRunner as its own runner, training in a thread while clients play."""

    def __init__(self) -> None:
        import ray
        from ray.rllib.algorithms.ppo import PPOConfig

        from rlinks_rllib import RLinkEnvRunner

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        config = (
            PPOConfig()
            .environment(observation_space=CARTPOLE_OBS, action_space=CARTPOLE_ACT,
                         env_config={"port": 0, "served_report_timeout_s": 600.0})
            .env_runners(env_runner_cls=RLinkEnvRunner, num_env_runners=0, sample_timeout_s=4.0)
            .training(train_batch_size_per_learner=LEARNING_BATCH, minibatch_size=64, num_epochs=10)
            .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
        )
        self.algo = config.build_algo()
        host, port = self.algo.env_runner.address
        self.address = f"{host}:{port}"
        self.updates = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._train, daemon=True)
        self._thread.start()

    def _train(self) -> None:
        while not self._stop.is_set():
            self.algo.train()
            self.updates += 1

    def close(self) -> None:
        import ray

        self._stop.set()
        self._thread.join(timeout=60)
        self.algo.stop()
        ray.shutdown()


def versus_godot(python: Path, runner, mode: str, counts: tuple[int, ...], rounds: int, warmup: float,
                 window: float, weights: Optional[Path] = None) -> None:
    """Print Godot RL's and our actions/s, round trips and CPU per tick at each N, and the ratios.

    ``runner``: our RLinkEnvRunner (in this process). With ``weights``
    (learning paused), Godot RL runs twice per round: its SB3 loop (``mode``)
    and the numpy MLP on those weights; the order of the sides turns round
    every round, so a machine that gets busier favours none.
    """
    peers = [("SB3", mode, None)] + ([("numpy", "numpy", weights)] if weights is not None else [])
    sides = [*peers, ("ours", None, None)]
    names = [name for name, _, _ in peers]
    rows, cpu_rows = [], []
    for n in counts:
        got: dict[str, dict[str, list[float]]] = {name: collections.defaultdict(list) for name, _, _ in sides}
        for r in range(rounds):
            for name, how, path in (sides if r % 2 == 0 else sides[::-1]):
                if how is None:
                    result = ours_round(runner, n, warmup, window)
                else:
                    result = godot_round(python, n, how, warmup, window, path)
                result["rate"] = result["actions"] / result["seconds"]
                for key in ("rate", "p50_ms", "cpu_us_per_tick", "server_cpu_us_per_tick"):
                    got[name][key].append(result.get(key, float("nan")))
        rows.append([n, *[median(got[name]["rate"]) for name, _, _ in sides],
                     *[median_ratio(got["ours"]["rate"], got[name]["rate"]) for name in names],
                     *[median(got[name]["p50_ms"]) for name, _, _ in sides]])
        cpu_rows.append([n, *[median(got[name][key]) for name, _, _ in sides
                              for key in ("cpu_us_per_tick", "server_cpu_us_per_tick")]])
    print_table(["agents per tick", *[f"Godot RL ({name}) actions/s" for name in names], "ours actions/s",
                 *[f"ours / Godot RL ({name})" for name in names],
                 *[f"Godot RL ({name}) p50 ms" for name in names], "ours p50 ms"], rows)
    print("  CPU per tick (us, medians): the game process, and the server side (Godot RL's Python process; "
          "our runner's loop thread)")
    print_table(["agents per tick", *[f"{who} {name}" for name, _, _ in sides for who in ("game", "server")]],
                cpu_rows)
    learning = "paused" if mode == "paused" else "running"
    for row in rows:
        n, ratios, p50 = row[0], row[2 + len(names):2 + 2 * len(names)], row[2 + 2 * len(names):]
        for name, ratio, their_p50 in zip(names, ratios, p50):
            print(f"  ratio ours/Godot RL ({name}) actions/s, learning {learning}, {n} agent(s): {ratio:.2f}x  "
                  f"(round trip p50 {p50[-1]:.3f} ms vs {their_p50:.3f} ms)")


# --------------------------------------------------------------------------
# Latency: one client, act() against NumpyPolicy on the same weights


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in microseconds."""
    values = np.asarray(samples) * 1e6
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def latency(address: str, count: int) -> dict[str, tuple[float, float]]:
    """Round trips of ``act`` and times of ``NumpyPolicy.compute_action``, interleaved in blocks."""
    from rlinks_rllib.client import RLinkClient
    from rlinks_rllib.client.policies.numpy_policy import DiscreteSpace, NumpyPolicy

    rng = np.random.default_rng(0)
    served: list[float] = []
    local: list[float] = []
    # The weights, asked for without want_steps: with it the runner would promise this client
    # the whole update, and park every ACT (the update's steps all promised to someone).
    with RLinkClient(address, timeout=30.0, extensions=("ack",)) as weights:
        params = weights.get_state().params
    policy = NumpyPolicy(params, DiscreteSpace(2), fcnet_activation="tanh", rng=rng)
    with RLinkClient(address, timeout=30.0) as client:
        obs = rng.uniform(-0.05, 0.05, (1, 4)).astype(np.float32)
        client.act([0], obs, [0.0], [True], [False], [False])
        block = max(count // 10, 1)
        for start in range(0, count, block):
            for i in range(start, min(start + block, count)):
                obs = rng.uniform(-0.05, 0.05, (1, 4)).astype(np.float32)
                t = now()
                client.act([0], obs, [1.0], [False], [False], [False])
                served.append(now() - t)
            for i in range(start, min(start + block, count)):
                single = rng.uniform(-0.05, 0.05, 4).astype(np.float32)
                t = now()
                policy.compute_action(single)
                local.append(now() - t)
        client.act([0], obs, [1.0], [False], [False], [True])  # ends the episode
    return {"served act()": percentiles(served), "local NumpyPolicy": percentiles(local)}


# --------------------------------------------------------------------------
# Throughput: client processes, each with threads of one RLinkClient (one env, one ACT in flight)


def _client_thread(addresses: list[str], index: int, commands: "queue.Queue", results: list, errors: list) -> None:
    from rlinks_rllib.client import RLinkClient

    rng = np.random.default_rng(index)
    clients = [RLinkClient(address, timeout=60.0) for address in addresses]
    steps = [0] * len(clients)
    try:
        for client in clients:
            client.act([0], rng.uniform(-0.05, 0.05, (1, 4)).astype(np.float32), [0.0], [True], [False], [False])
        while True:
            command = commands.get(timeout=WAIT_S)
            if command is None:
                break
            which, go, stop = command
            client, done = clients[which], 0
            while time.time() < go:
                time.sleep(0.0005)
            while time.time() < stop:
                obs = rng.uniform(-0.05, 0.05, (1, 4)).astype(np.float32)
                steps[which] += 1
                if steps[which] % EPISODE_STEPS == 0:  # truncate and start again, in one ACT
                    client.act([0, 0], np.concatenate([obs, obs]), [1.0, 0.0], [False, True], [False, False],
                               [True, False])
                else:
                    client.act([0], obs, [1.0], [False], [False], [False])
                done += 1
            results.append(done)
    except BaseException as exc:  # reported to the parent, which fails the benchmark
        errors.append(f"client {index}: {type(exc).__name__}: {exc}")
        results.append(-1)
    finally:
        for client in clients:
            client.close()


def client_process(addresses: list[str], first: int, threads: int, inbox, outbox) -> None:
    """``threads`` clients; for each command (runner index, go, stop) report the actions done in [go, stop)."""
    queues = [queue.Queue() for _ in range(threads)]
    results: list[int] = []
    errors: list[str] = []
    workers = [threading.Thread(target=_client_thread, args=(addresses, first + i, queues[i], results, errors),
                                daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    outbox.put(("ready", None))
    while True:
        command = inbox.get(timeout=WAIT_S * 2)
        if command is None:
            break
        results.clear()
        for q in queues:
            q.put(command)
        deadline = time.monotonic() + WAIT_S
        while len(results) < threads and time.monotonic() < deadline and not errors:
            time.sleep(0.01)
        if errors or len(results) < threads:
            outbox.put(("error", errors[:3] or [f"only {len(results)}/{threads} clients reported in {WAIT_S:g} s"]))
            break
        outbox.put(("done", sum(results)))
    for q in queues:
        q.put(None)
    for worker in workers:
        worker.join(timeout=10)


class Clients:
    """``n`` clients connected to every runner in ``addresses``, spread over client processes."""

    def __init__(self, addresses: list[str], n: int) -> None:
        ctx = mp.get_context("spawn")  # this process holds Ray and torch: don't fork it
        self.outbox = ctx.Queue()
        self.inboxes = []
        self.procs = []
        for first in range(0, n, THREADS_PER_PROCESS):
            inbox = ctx.Queue()
            threads = min(THREADS_PER_PROCESS, n - first)
            proc = ctx.Process(target=client_process, args=(addresses, first, threads, inbox, self.outbox),
                               daemon=True)
            proc.start()
            self.inboxes.append(inbox)
            self.procs.append(proc)
        for _ in self.procs:
            self._expect("ready")

    def _expect(self, kind: str):
        got, value = self.outbox.get(timeout=WAIT_S)
        if got != kind:
            raise RuntimeError(f"client process: {value}")
        return value

    def rate(self, which: int, window: float) -> float:
        """Actions/s all clients got from runner ``which`` during one window of ``window`` seconds."""
        go = time.time() + 0.2
        for inbox in self.inboxes:
            inbox.put((which, go, go + window))
        total = sum(self._expect("done") for _ in self.procs)
        return total / window

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        stop_processes(self.procs, timeout=20)


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (smoke test): 1 round, short windows")
    parser.add_argument("--rounds", type=int, default=None, help="ABBA rounds per client count (default 2; quick 1)")
    parser.add_argument("--window", type=float, default=None, help="seconds per measured window (default 4; quick 1)")
    parser.add_argument("--acts", type=int, default=None, help="round trips for the latency (default 5000; quick 500)")
    parser.add_argument("--learning", action="store_true", help="also against Godot RL with learning running")
    parser.add_argument("--godot-only", action="store_true", help="only the rounds against Godot RL, learning paused")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    window = args.window or (1.0 if args.quick else 4.0)
    warmup = 1.0 if args.quick else 2.0
    acts = args.acts or (500 if args.quick else 5000)
    counts = (1, 16, 64)

    batched = make_runner()
    unbatched = make_runner(served_batch_size=1)
    try:
        addresses = [f"{host}:{port}" for host, port in (batched.address, unbatched.address)]
        print(f"served actions: PPO 64x64 tanh MLP, CartPole, runners in-process; {rounds} round(s), "
              f"{window:g} s windows after {warmup:g} s of warm-up, {acts} round trips")

        python = godot_python(setup=not args.quick)
        if python is None:
            print(f"\nGodot RL Agents: skipped ({GODOT_VENV.relative_to(REPO)} is not there yet; a run without "
                  "--quick makes it)")
        else:
            weights = export_weights(addresses[0])
            print(f"\nGodot RL Agents ({GODOT_RL}: its SB3 example's loop, and its GodotEnv with our runner's MLP in "
                  "numpy) vs ours, one game process with N CartPole agents, learning paused")
            versus_godot(python, batched, "paused", counts, rounds, warmup, window, weights)
        if args.godot_only:
            return 0

        print("\nround trip of one action, one client (microseconds)")
        lat = latency(addresses[0], acts)
        print_table(["", "p50 us", "p99 us"], [[name, p50, p99] for name, (p50, p99) in lat.items()])
        print(f"  ratio served/local p50: {lat['served act()'][0] / lat['local NumpyPolicy'][0]:.1f}x  "
              f"p99: {lat['served act()'][1] / lat['local NumpyPolicy'][1]:.1f}x")

        print("\nactions/s served (each client: one env, one ACT in flight)")
        rows = []
        for n in counts:
            clients = Clients(addresses, n)
            try:
                on, off = [], []
                for r in range(rounds):
                    order = (0, 1) if r % 2 == 0 else (1, 0)
                    for which in order:
                        (on if which == 0 else off).append(clients.rate(which, window))
            finally:
                clients.close()
            rows.append([f"{n} client(s)", median(on), median(off), median_ratio(on, off)])
        print_table(["", "batched", "unbatched (served_batch_size=1)", "batched/unbatched"], rows)
        for n, _, _, ratio in rows:
            print(f"  ratio batched/unbatched, {n}: {ratio:.2f}x")
        stats = batched.get_transport_stats()
        if stats.get("inference_batches"):
            print(f"  batched runner: {stats['inference_rows'] / stats['inference_batches']:.1f} rows per forward pass "
                  f"on average, {stats['inference_rows'] / max(stats['inference_s'], 1e-9):,.0f} rows/s in the forward pass")
    finally:
        batched.stop()
        unbatched.stop()

    if args.learning and python is not None:
        learning = LearningRunner()
        try:
            print(f"\nGodot RL Agents vs ours, learning running (PPO, an update every {LEARNING_BATCH} steps, "
                  "minibatches of 64, 10 epochs)")
            versus_godot(python, learning.algo.env_runner, "learning", counts, rounds, warmup, window)
            print(f"  ours: {learning.updates} PPO updates during the rounds")
        finally:
            learning.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
