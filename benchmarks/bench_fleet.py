"""A fleet on one runner: many plain-RLlink simulators, each sending a small chunk now and then.

One ``RLinkEnvRunner`` is built in-process (as in ``bench_ingest.py``) with
``max_clients`` above the fleet. Sender processes open the connections (a
share each), do the plain ``PING``/``PONG`` handshake, then each connection
writes one 20-step CartPole chunk in RLlib's per-step form every ``--period``
seconds (``EPISODES``: no reply), the connections spread evenly over the
period. Meanwhile ``sample()`` (``rollout_fragment_length`` of
``--fragment`` steps) and ``get_metrics()`` are called in a loop, as an
Algorithm does.

Printed beside their anchors in the same run:

* steps handed over: steps ``sample()`` returned / steps the senders wrote
  in full (after the senders stop, ``sample()`` drains the rest) [>= 99%];
* runner memory per connection: the runner process's RSS once every
  connection is open and handshaken, minus its RSS before the first one,
  over the number of connections [< 64 KB]; and again at the end;
* ``sample()`` wall time p50/p99 [p99 < 100 ms];
* the loop thread's CPU share while the fleet sends, and before that while
  every connection is open and silent (what timers and deadlines cost).

The soft limit on open files is raised to the hard limit when the fleet
needs it (runner: one descriptor per connection; each sender process: its
share); if the hard limit is too low the fleet is made smaller and the
reason printed. Usage::

    python benchmarks/bench_fleet.py [--quick] [--clients N] [--period S] [--seconds S]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    LOOPBACK,
    SOCKET_TIMEOUT_S,
    cartpole_payloads,
    now,
    read_frame,
    rllib_frame,
    stop_processes,
)

CHUNK_STEPS = 20
SENDER_PROCESSES = 4
#: Descriptors a process needs beyond its connections (Ray, logging, pipes).
SPARE_FDS = 512
_PING = rllib_frame({"type": "PING"})


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _raise_fd_limit(wanted: int) -> int:
    """Raise the soft limit on open files towards ``wanted``; return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def _sender(index: int, count: int, frame: bytes, port: int, period: float, ready, go, stop, sent) -> None:
    """Open ``count`` connections, handshake, then write ``frame`` on each once per ``period``."""
    _raise_fd_limit(count + SPARE_FDS)
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection((LOOPBACK, port), timeout=SOCKET_TIMEOUT_S)
            sock.sendall(_PING)
            socks.append(sock)
        for sock in socks:
            read_frame(sock)  # PONG
        ready.release()
        if not go.wait(120):
            return
        start, frames = time.monotonic(), 0
        offset = index / SENDER_PROCESSES / max(1, count)
        while not stop.is_set():
            for i, sock in enumerate(socks):
                due = start + (i / max(1, count) + offset) * period
                wait = due - time.monotonic()
                if wait > 0 and stop.wait(wait):
                    break
                sock.sendall(frame)
                frames += 1
            else:
                start += period
                continue
            break
        sent.value = frames
    except OSError as exc:
        print(f"sender {index}: {type(exc).__name__}: {exc}", file=sys.stderr)
        ready.release()
    finally:
        for sock in socks:
            sock.close()


def run(clients: int, period: float, seconds: float, fragment: int, idle_s: float = 4.0) -> int:
    import gymnasium as gym
    import numpy as np
    from ray.rllib.algorithms.ppo import PPOConfig

    from rlinks_rllib.server.env_runner import RLinkEnvRunner

    soft = _raise_fd_limit(clients + SPARE_FDS)
    if soft < clients + SPARE_FDS:
        print(f"  open-file limit {soft} (hard limit reached): the fleet is cut to {soft - SPARE_FDS} connections")
        clients = soft - SPARE_FDS
    payload, _ = cartpole_payloads(CHUNK_STEPS, episode_steps=CHUNK_STEPS)
    frame = payload.frame
    config = (
        PPOConfig()
        .environment(observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                     action_space=gym.spaces.Discrete(2),
                     env_config={"port": 0, "max_clients": clients + 16, "idle_timeout_s": 10 * period + 60})
        .env_runners(num_env_runners=0, rollout_fragment_length=fragment, sample_timeout_s=4.0)
    )
    runner = RLinkEnvRunner(config=config, worker_index=0)
    port = runner.address[1]
    ctx = mp.get_context("fork")
    ready = ctx.Semaphore(0)
    go, stop = ctx.Event(), ctx.Event()
    shares = [clients // SENDER_PROCESSES + (i < clients % SENDER_PROCESSES) for i in range(SENDER_PROCESSES)]
    sent = [ctx.Value("q", 0, lock=False) for _ in shares]
    rss0 = _rss_bytes()
    started = now()
    procs = [ctx.Process(target=_sender, args=(i, n, frame, port, period, ready, go, stop, sent[i]), daemon=True)
             for i, n in enumerate(shares)]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=300):
                print("  ERROR: the senders did not connect within 300 s")
                return 1
        connected = runner.get_transport_stats()["clients_connected"]
        time.sleep(0.5)
        rss1 = _rss_bytes()
        connect_s = now() - started
        print(f"  {connected:,} connections open and handshaken in {connect_s:.1f} s")
        loop_thread = runner.server._thread  # noqa: SLF001 - its CPU time is what is measured
        # Connected and silent: what the loop spends on a fleet that sends nothing (timers, deadlines).
        idle0 = _thread_cpu(loop_thread)
        time.sleep(idle_s)
        idle_cpu = _thread_cpu(loop_thread) - idle0
        cpu0 = _thread_cpu(loop_thread)
        go.set()
        durations: list[float] = []
        steps = 0
        end = now() + seconds
        while now() < end:
            t = now()
            steps += sum(len(e) for e in runner.sample())
            durations.append(now() - t)
            runner.get_metrics()
        loop_cpu = _thread_cpu(loop_thread) - cpu0
        window = seconds
        stop.set()
        stop_processes(procs, timeout=30.0)
        drain_end = now() + 3.0
        while now() < drain_end:
            got = sum(len(e) for e in runner.sample())
            steps += got
            if not got and runner.server.inbox.steps == 0:
                break
        written = sum(v.value for v in sent) * CHUNK_STEPS
        rss2 = _rss_bytes()
        stats = runner.get_transport_stats()
    finally:
        stop.set()
        go.set()
        stop_processes(procs, timeout=10.0)
        runner.stop()
    durations.sort()
    p50 = durations[len(durations) // 2] * 1000 if durations else float("nan")
    p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))] * 1000 if durations else float("nan")
    share = steps / written if written else float("nan")
    per_conn = (rss1 - rss0) / max(1, connected)
    per_conn_end = (rss2 - rss0) / max(1, connected)
    print(f"  steps written {written:,}, handed over by sample() {steps:,}; errors {stats.get('errors_total', 0)}")
    print(f"  runner RSS: {rss0 / 2**20:,.0f} MiB before, {rss1 / 2**20:,.0f} MiB connected, "
          f"{rss2 / 2**20:,.0f} MiB at the end")
    print(f"  sample() calls {len(durations)}, p50 {p50:.1f} ms, p99 {p99:.1f} ms (fragment {fragment} steps)")
    print(f"  loop thread CPU while sending: {100 * loop_cpu / window:.0f}% of one core; "
          f"while connected and silent ({idle_s:g} s): {100 * idle_cpu / idle_s:.2f}%")
    print("results [aim]:")
    print(f"  steps handed over: {100 * share:.2f}%  [>= 99%]")
    print(f"  runner memory per connection: {per_conn / 1024:.1f} KB connected, {per_conn_end / 1024:.1f} KB at the end"
          "  [< 64 KB]")
    print(f"  sample() p99: {p99:.1f} ms  [< 100 ms]")
    return 0 if written else 1


def _thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds of ``thread`` so far (Linux: its clock via pthread_getcpuclockid)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):
        return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small fleet for a short while (smoke test)")
    parser.add_argument("--clients", type=int, default=None, help="connections (default 10,000)")
    parser.add_argument("--period", type=float, default=5.0, help="seconds between two chunks of one connection")
    parser.add_argument("--seconds", type=float, default=None, help="seconds the fleet sends while measured")
    parser.add_argument("--fragment", type=int, default=1000, help="steps one sample() waits for")
    args = parser.parse_args(argv)
    clients = args.clients or (200 if args.quick else 10_000)
    seconds = args.seconds or (3.0 if args.quick else 20.0)
    period = 1.0 if args.quick and args.period == 5.0 else args.period
    print(f"bench_fleet: {clients:,} plain-RLlink connections, one {CHUNK_STEPS}-step chunk (RLlib's per-step form) "
          f"each per {period:g} s, {seconds:g} s measured; {os.cpu_count()} CPUs")
    return run(clients, period, seconds, args.fragment, idle_s=1.0 if args.quick else 4.0)


if __name__ == "__main__":
    sys.exit(main())
