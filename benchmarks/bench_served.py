"""Served actions: what a round trip costs, and how many actions/s one runner serves, batched or not.

Competitors, all in the same run:

1. **Latency** (one client, one env): ``RLinkClient.act`` on an in-process
   ``RLinkEnvRunner`` (PPO, 64x64 tanh MLP, CartPole spaces) against
   ``NumpyPolicy.compute_action`` on the same weights in the client's own
   process (what a local-inference client pays per action). p50 and p99.
2. **Throughput**: actions/s served to 1, 16 and 64 clients at once (each
   one env, one ``ACT`` in flight; threads in a few client processes), by a
   runner with batching on (the defaults) and one with ``served_batch_size=1``
   (every ``ACT`` its own forward pass). Rounds alternate between the two
   (ABBA) and the ratio is the median of per-round ratios.
3. **Anchor**: RLlib's old-stack ``PolicyServerInput`` served about 2.7k
   actions/s one at a time and 37.9k at batch 64 for a 64x64 MLP, figures
   *quoted from RLlib's commit message* (another machine; not measured here).
   They are printed beside our numbers, with their ratio to our unbatched
   case measured in this run.

The runners are on-policy PPO with a train batch no client fills, so no
``ACT`` is parked for a training step (that would time the learner, not the
serving). Usage::

    python benchmarks/bench_served.py [--quick] [--rounds N] [--window S]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median, median_ratio, now, print_table, stop_processes  # noqa: E402

#: Figures quoted from RLlib's commit message for its old-stack policy server (64x64 MLP); not measured here.
RLLIB_QUOTED_ONE_AT_A_TIME = 2_700.0
RLLIB_QUOTED_BATCH_64 = 37_900.0

#: Every wait on a client process gives up after this long.
WAIT_S = 120.0
#: Threads per client process at most (one RLinkClient each).
THREADS_PER_PROCESS = 16
#: A client's episode is truncated after this many actions (keeps the runner's episodes short).
EPISODE_STEPS = 200


# --------------------------------------------------------------------------
# The runner (this process)


def make_runner(**settings):
    """An in-process RLinkEnvRunner: PPO, 64x64 tanh MLP, CartPole spaces; ``settings`` go to rlinks."""
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib import RLinkEnvRunner

    env = gym.make("CartPole-v1")
    config = (
        PPOConfig()
        .environment(observation_space=env.observation_space, action_space=env.action_space,
                     env_config={"port": 0, "served_report_timeout_s": 600.0, **settings})
        .env_runners(num_env_runners=0, sample_timeout_s=4.0)
        # A train batch no client fills: no ACT waits for a training step.
        .training(train_batch_size_per_learner=50_000_000, minibatch_size=128)
        .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
    )
    return RLinkEnvRunner(config=config, worker_index=0)


# --------------------------------------------------------------------------
# Latency: one client, act() against NumpyPolicy on the same weights


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in microseconds."""
    values = np.asarray(samples) * 1e6
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def latency(address: str, count: int) -> dict[str, tuple[float, float]]:
    """Round trips of ``act`` and times of ``NumpyPolicy.compute_action``, interleaved in blocks."""
    from rlinks_rllib.client import RLinkClient
    from rlinks_rllib.client.policy import DiscreteSpace, NumpyPolicy

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
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    window = args.window or (1.0 if args.quick else 4.0)
    acts = args.acts or (500 if args.quick else 5000)
    counts = (1, 16, 64)

    batched = make_runner()
    unbatched = make_runner(served_batch_size=1)
    try:
        addresses = [f"{host}:{port}" for host, port in (batched.address, unbatched.address)]
        print(f"served actions: PPO 64x64 tanh MLP, CartPole spaces, runners in-process; {rounds} round(s), "
              f"{window:g} s windows, {acts} round trips")

        print("\nround trip of one action, one client (microseconds)")
        lat = latency(addresses[0], acts)
        print_table(["", "p50 us", "p99 us"], [[name, p50, p99] for name, (p50, p99) in lat.items()])
        print(f"  ratio served/local p50: {lat['served act()'][0] / lat['local NumpyPolicy'][0]:.1f}x  "
              f"p99: {lat['served act()'][1] / lat['local NumpyPolicy'][1]:.1f}x")

        print("\nactions/s served (each client: one env, one ACT in flight)")
        rows, rates = [], {}
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
            rates[n] = (median(on), median(off))
            rows.append([f"{n} client(s)", median(on), median(off), median_ratio(on, off)])
        print_table(["", "batched", "unbatched (served_batch_size=1)", "batched/unbatched"], rows)
        for n, _, _, ratio in rows:
            print(f"  ratio batched/unbatched, {n}: {ratio:.2f}x")

        stats = batched.get_transport_stats()
        if stats.get("inference_batches"):
            print(f"  batched runner: {stats['inference_rows'] / stats['inference_batches']:.1f} rows per forward pass "
                  f"on average, {stats['inference_rows'] / max(stats['inference_s'], 1e-9):,.0f} rows/s in the forward pass")

        print("\nanchor: RLlib's old-stack policy server, 64x64 MLP -- figures QUOTED from RLlib's commit message,"
              " NOT measured here (another machine)")
        ours_one = rates[1][1]
        ours_64_off, ours_64_on = rates[64][1], rates[64][0]
        print_table(["", "actions/s"], [
            ["RLlib policy server, one at a time (quoted)", RLLIB_QUOTED_ONE_AT_A_TIME],
            ["RLlib policy server, batch 64 (quoted)", RLLIB_QUOTED_BATCH_64],
            ["ours, 1 client, unbatched (measured)", ours_one],
            ["ours, 64 clients, unbatched (measured)", ours_64_off],
            ["ours, 64 clients, batched (measured)", ours_64_on],
        ])
        print(f"  ratio RLlib-quoted batch64/one-at-a-time: {RLLIB_QUOTED_BATCH_64 / RLLIB_QUOTED_ONE_AT_A_TIME:.1f}x; "
              f"ours measured batched-64/unbatched-64: {ours_64_on / ours_64_off:.1f}x")
        print(f"  ratio RLlib-quoted one-at-a-time / ours unbatched (1 client): "
              f"{RLLIB_QUOTED_ONE_AT_A_TIME / ours_one:.2f}x")
        print(f"  ratio RLlib-quoted batch 64 / ours unbatched (1 client): {RLLIB_QUOTED_BATCH_64 / ours_one:.2f}x")
        print(f"  ratio ours batched (64 clients) / RLlib-quoted batch 64: {ours_64_on / RLLIB_QUOTED_BATCH_64:.2f}x")
    finally:
        batched.stop()
        unbatched.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
