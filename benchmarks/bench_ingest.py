"""Ingest speed: env steps per second that one EnvRunner's ``sample()`` hands over.

Our ``RLinkEnvRunner`` and RLlib's ``EnvRunnerServerForExternalInference`` are
built in-process (no Algorithm, no Ray cluster) from the same ``PPOConfig``;
``sample()`` and ``get_metrics()`` are called in a loop, as an Algorithm's
training step does, and the env steps returned per second are counted.

Senders are separate processes that build nothing: each gets one pre-built
frame, does the PING/PONG handshake and then writes that frame over and over
(so the server is measured, not the client's env). The frames are
``EPISODES`` messages (off-policy: no reply, no waiting for weights) to
measure raw ingest; on-policy flow adds a SET_STATE round trip per batch on
top of this.

Cases:

a. RLlib's server, 1 client (it accepts only one), CartPole episodes as
   RLlib's dummy client formats them (``SingleAgentEpisode.get_state()``,
   one small array per step, packed by msgpack-numpy);
b. ours, the very same bytes, 1/4/16/64 clients;
c. ours, the same steps in our client's format (one stacked array per column
   per chunk, ``build_episode_state``), 1/4/16/64 clients;
d. ours, 4 clients sending uint8 480x640x3 image observations in our format;
e. a raw loopback TCP socket moving the same image frames (one sender
   process, a receiver doing ``recv_into`` a buffer): the MB/s ceiling;
   again with 4 senders, as in (d), for reference;
f. (a), (b) and (c) with 1 client again, but with 100-step episodes instead
   of CartPole's ~22 under a random policy (one 100-step chunk per message):
   how much of the cost is per episode rather than per step;
g. the cost of TLS and of confirmations: (c) with 4 clients and (d) again,
   once over TLS (certificates from ``tests/test_auth_tls.py``, made per run)
   and once with the ``ack`` extension: each sender offers ``ack`` with its
   own ``client_id``, numbers its frames with an increasing ``seq`` (patched
   into the pre-built frame, 10 bytes more than the plain one) and reads and
   drops the ACKs without waiting for them. Compared with the plain cases.

Each CartPole message holds 100 steps (issue #14's setting); our runner's ``sample()`` waits for
4,000 (its ``rollout_fragment_length``; PPO's default batch with one runner),
RLlib's returns whatever has arrived.

Every run of a case is a fresh process (its runner, its senders, then
nothing left); the cases run round-robin, ``--rounds`` times, and each
ratio is the median of its per-round ratios, so drift of the machine
cancels. Usage::

    python benchmarks/bench_ingest.py [--quick] [--rounds N] [--window S]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import select
import selectors
import socket
import ssl
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    IMAGE_SHAPE,
    LOOPBACK,
    MB,
    SOCKET_TIMEOUT_S,
    Payload,
    cartpole_payloads,
    image_payload,
    make_test_certificates,
    median,
    median_ratio,
    now,
    print_table,
    read_frame,
    rllib_frame,
    run_in_process,
    set_seq,
    stop_processes,
)
from rlinks_rllib.protocol import Extension, encode_message, make_offer  # noqa: E402
from rlinks_rllib.protocol.extensions import RLINKS_KEY  # noqa: E402

CARTPOLE_STEPS_PER_MESSAGE = 100
IMAGE_STEPS_PER_MESSAGE = 16
CLIENT_COUNTS = (1, 4, 16, 64)
IMAGE_CLIENTS = 4
#: Clients of the TLS and ACK cases (compared with the plain case of as many clients).
TRANSPORT_CLIENTS = 4
#: Steps one sample() call of our runner waits for (its rollout_fragment_length):
#: PPO's default train_batch_size with one runner, so one sample() per iteration.
CARTPOLE_FRAGMENT = 4000
IMAGE_FRAGMENT = 64
#: RLlib's sample_timeout_s; our runner waits at most 0.75 of it per sample().
SAMPLE_TIMEOUT_S = 4.0
#: Extra seconds a case process gets beyond warmup + window before it is killed.
CASE_SLACK_S = 60.0
#: Reads one ACK-draining pass may make before the sender writes again.
DRAIN_MAX_READS = 64
DRAIN_CHUNK = 1 << 16


@dataclass(frozen=True)
class Case:
    key: str
    server: str  # "rllib", "ours" or "raw"
    payload: str  # a key of payloads(): "rllib", "stacked", "rllib-long", "stacked-long", "images", "*-seq"
    clients: int
    transport: str = "plain"  # "plain", "tls" (ours only) or "ack" (ours only, a "*-seq" payload)

    @property
    def label(self) -> str:
        what = {
            "rllib": "CartPole, RLlib's format",
            "stacked": "CartPole, our client's format",
            "rllib-long": "100-step episodes, RLlib's format",
            "stacked-long": "100-step episodes, our format",
            "images": "images uint8 480x640x3, our format",
            "dict-images": "Dict of a uint8 480x640x3 image and 6 floats, our format",
        }[self.payload.removesuffix("-seq")]
        who = {"rllib": "RLlib server", "ours": "ours", "raw": "raw socket"}[self.server]
        how = {"plain": "", "tls": ", TLS", "ack": ", ACK"}[self.transport]
        return f"{who}: {what}{how}"


@dataclass(frozen=True)
class Timing:
    warmup_s: float
    window_s: float


def cases() -> list[Case]:
    # The TLS and ACK cases run right after their plain case, so drift between them stays small.
    out = [Case("rllib", "rllib", "rllib", 1)]
    out += [Case(f"ours-same-{n}", "ours", "rllib", n) for n in CLIENT_COUNTS]
    for n in CLIENT_COUNTS:
        out.append(Case(f"ours-stacked-{n}", "ours", "stacked", n))
        if n == TRANSPORT_CLIENTS:
            out.append(Case(f"ours-stacked-{n}-tls", "ours", "stacked", n, "tls"))
            out.append(Case(f"ours-stacked-{n}-ack", "ours", "stacked-seq", n, "ack"))
    out.append(Case("ours-images", "ours", "images", IMAGE_CLIENTS))
    out.append(Case("ours-dict-images", "ours", "dict-images", IMAGE_CLIENTS))
    out.append(Case("ours-images-tls", "ours", "images", IMAGE_CLIENTS, "tls"))
    out.append(Case("ours-images-ack", "ours", "images-seq", IMAGE_CLIENTS, "ack"))
    out.append(Case("raw-images", "raw", "images", 1))
    out.append(Case("raw-images-4", "raw", "images", IMAGE_CLIENTS))
    out.append(Case("rllib-long", "rllib", "rllib-long", 1))
    out.append(Case("ours-same-long", "ours", "rllib-long", 1))
    out.append(Case("ours-stacked-long", "ours", "stacked-long", 1))
    return out


def payloads() -> dict[str, Payload]:
    rllib_format, our_format = cartpole_payloads(CARTPOLE_STEPS_PER_MESSAGE)
    _, numbered = cartpole_payloads(CARTPOLE_STEPS_PER_MESSAGE, seq=True)
    rllib_long, our_long = cartpole_payloads(CARTPOLE_STEPS_PER_MESSAGE, episode_steps=CARTPOLE_STEPS_PER_MESSAGE)
    return {"rllib": rllib_format, "stacked": our_format, "stacked-seq": numbered, "rllib-long": rllib_long,
            "stacked-long": our_long, "images": image_payload(IMAGE_STEPS_PER_MESSAGE),
            "images-seq": image_payload(IMAGE_STEPS_PER_MESSAGE, seq=True),
            "dict-images": image_payload(IMAGE_STEPS_PER_MESSAGE, nested=True)}


# --------------------------------------------------------------------------
# Senders (separate processes, forked before the case starts any thread)

_PING = rllib_frame({"type": "PING"})


@dataclass(frozen=True)
class Sender:
    """What one sender process sends, and how.

    ``ping``: the handshake's first frame (``None``: no handshake, raw socket);
    ``ca_file``: speak TLS, trusting this CA; ``seq_offset``: number each
    frame there (:func:`set_seq`) and drain the ACKs that come back.
    """

    frame: bytes
    ping: bytes | None
    ca_file: str = ""
    seq_offset: int | None = None


def _ack_ping(client_id: str) -> bytes:
    return encode_message({"type": "PING", RLINKS_KEY: make_offer([Extension.ACK], client_id=client_id)})


def _drain(sock: socket.socket) -> None:
    """Read and drop what the runner sent (ACKs) without waiting for more.

    Raises:
        ConnectionError: the runner closed the connection.
    """
    for _ in range(DRAIN_MAX_READS):
        buffered = sock.pending() if isinstance(sock, ssl.SSLSocket) else 0
        if not buffered and not select.select([sock], [], [], 0)[0]:
            return
        if not sock.recv(DRAIN_CHUNK):
            raise ConnectionError("the runner closed the connection")


def _sender(plan: Sender, port, go, stop) -> None:
    """Connect, PING (unless raw), then write the frame until told to stop or cut off."""
    if not go.wait(SOCKET_TIMEOUT_S):
        return
    sock = None
    try:
        for _ in range(50):
            try:
                sock = socket.create_connection((LOOPBACK, port.value), timeout=SOCKET_TIMEOUT_S)
                break
            except ConnectionRefusedError:
                time.sleep(0.05)  # RLlib's listener may not be listening yet
        if sock is None:
            return
        if plan.ca_file:
            sock = ssl.create_default_context(cafile=plan.ca_file).wrap_socket(sock, server_hostname="localhost")
        if plan.ping is not None:
            sock.sendall(plan.ping)
            read_frame(sock)
        if plan.seq_offset is None:
            while not stop.is_set():
                sock.sendall(plan.frame)
            return
        frame, seq = bytearray(plan.frame), 0
        while not stop.is_set():
            seq += 1
            set_seq(frame, plan.seq_offset, seq)
            sock.sendall(frame)
            _drain(sock)
    except (OSError, ConnectionError):
        pass  # the server closed the connection: the case is over
    finally:
        if sock is not None:
            sock.close()


# --------------------------------------------------------------------------
# One run of one case, in its own process


def _ppo_config(payload_kind: str, settings: dict):
    import gymnasium as gym
    import numpy as np
    from ray.rllib.algorithms.ppo import PPOConfig

    spec = None
    if payload_kind.startswith(("images", "dict-images")):
        obs = gym.spaces.Box(0, 255, IMAGE_SHAPE, np.uint8)
        fragment = IMAGE_FRAGMENT
        # RLlib has no default CNN for 480x640; the runner only holds weights, so keep it tiny.
        model = {"conv_filters": [[4, [8, 8], 8], [8, [4, 4], 4]]}
        if payload_kind.startswith("dict-images"):
            from ray.rllib.core.rl_module.rl_module import RLModuleSpec

            from rlinks_rllib.training.multi_input import MultiInputPPOCatalog

            obs = gym.spaces.Dict({"camera": obs, "joints": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)})
            spec = RLModuleSpec(catalog_class=MultiInputPPOCatalog)
    else:
        obs = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        fragment = CARTPOLE_FRAGMENT
        model = {}
    return (
        PPOConfig()
        .environment(observation_space=obs, action_space=gym.spaces.Discrete(2),
                     # Ingest only: no policy graph export at start.
                     env_config={"port": 0, "policy_graph": "off", **settings})
        .env_runners(num_env_runners=0, rollout_fragment_length=fragment, sample_timeout_s=SAMPLE_TIMEOUT_S)
        .rl_module(model_config=model, **({"rl_module_spec": spec} if spec else {}))
    )


def _rllib_port(runner, deadline: float) -> int:
    # RLlib's listener thread binds "localhost":0 on its own; wait until it has.
    while now() < deadline:
        sock = runner.server_socket
        if sock is not None:
            try:
                port = sock.getsockname()[1]
            except OSError:
                port = 0
            if port:
                return port
        time.sleep(0.01)
    raise TimeoutError("RLlib's server did not bind a port")


def _sample_loop(runner, timing: Timing) -> tuple[int, float, float]:
    """Warm up, then count env steps ``sample()`` returns during one window.

    Returns (steps, wall seconds, CPU seconds of this process, all threads).
    Timing starts and ends as a ``sample()`` returns, so no partial call is
    counted. RLlib's ``sample()`` has no timeout; the parent bounds the case.
    """
    end = now() + timing.warmup_s
    while now() < end:
        runner.sample()
        runner.get_metrics()
    steps, start, cpu = 0, now(), time.process_time()
    while now() - start < timing.window_s:
        steps += sum(len(e) for e in runner.sample())
        runner.get_metrics()
    return steps, now() - start, time.process_time() - cpu


def _raw_loop(listener: socket.socket, senders: int, frame_len: int, timing: Timing) -> tuple[int, float]:
    """Receive from ``senders`` connections into one frame-sized buffer; count bytes during one window."""
    conns = []
    try:
        for _ in range(senders):
            conn, _ = listener.accept()
            conn.setblocking(False)
            conns.append(conn)
        buf = memoryview(bytearray(frame_len))
        with selectors.DefaultSelector() as selector:
            for conn in conns:
                selector.register(conn, selectors.EVENT_READ)
            received, start, measuring = 0, now(), False
            end = start + timing.warmup_s
            while True:
                t = now()
                if t >= end:
                    if measuring:
                        return received, t - start
                    received, start, measuring = 0, t, True
                    end = t + timing.window_s
                events = selector.select(SOCKET_TIMEOUT_S)
                if not events:
                    raise TimeoutError("no bytes from the senders")
                for key, _ in events:
                    n = key.fileobj.recv_into(buf)
                    if not n:
                        raise ConnectionError("a sender closed")
                    received += n
    finally:
        for conn in conns:
            conn.close()


def _quiet() -> None:
    """Silence RLlib's chatter in a case process (prints, deprecation warnings); errors go by pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    logging.getLogger("ray").setLevel(logging.ERROR)


def _sender_plans(case: Case, payload: Payload, certs: dict[str, str] | None) -> list[Sender]:
    if case.server == "raw":
        return [Sender(payload.frame, None)] * case.clients
    if case.transport == "tls":
        return [Sender(payload.frame, _PING, ca_file=certs["ca"])] * case.clients
    if case.transport == "ack":
        return [Sender(payload.frame, _ack_ping(f"bench-{i}"), seq_offset=payload.seq_offset)
                for i in range(case.clients)]
    return [Sender(payload.frame, _PING)] * case.clients


def _case_main(case: Case, payload: Payload, timing: Timing, certs: dict[str, str] | None, result) -> None:
    os.setpgid(0, 0)  # our senders join this group, so the parent can end them all at once
    _quiet()
    ctx = mp.get_context("fork")
    port = ctx.Value("i", 0, lock=False)  # set once the server listens, before `go`
    go, stop = ctx.Event(), ctx.Event()
    senders = [ctx.Process(target=_sender, args=(plan, port, go, stop), daemon=True)
               for plan in _sender_plans(case, payload, certs)]
    for proc in senders:
        proc.start()
    runner = listener = None
    try:
        if case.server == "raw":
            listener = socket.create_server((LOOPBACK, 0))
            listener.settimeout(SOCKET_TIMEOUT_S)
            port.value = listener.getsockname()[1]
            go.set()
            nbytes, seconds = _raw_loop(listener, case.clients, len(payload.frame), timing)
            result.send({"steps": nbytes / payload.bytes_per_step, "seconds": seconds, "bytes": nbytes})
            return
        tls = {"tls_cert_file": certs["server"], "tls_key_file": certs["server_key"]} if case.transport == "tls" else {}
        config = _ppo_config(case.payload, tls)
        if case.server == "ours":
            from rlinks_rllib.server.env_runner import RLinkEnvRunner

            runner = RLinkEnvRunner(config=config, worker_index=0)
            port.value = runner.address[1]
        else:
            from ray.rllib.env.external.env_runner_server_for_external_inference import (
                EnvRunnerServerForExternalInference,
            )

            runner = EnvRunnerServerForExternalInference(config=config, worker_index=0)
            port.value = _rllib_port(runner, now() + SOCKET_TIMEOUT_S)
        go.set()
        steps, seconds, cpu = _sample_loop(runner, timing)
        stats = runner.get_transport_stats() if case.server == "ours" else {}
        result.send({"steps": steps, "seconds": seconds, "cpu": cpu, "bytes": steps * payload.bytes_per_step,
                     "refused": stats.get("errors_total", 0), "acked": stats.get("batches_acked", 0),
                     "duplicates": stats.get("duplicates", 0)})
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which prints it
        result.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        stop.set()
        go.set()  # senders still waiting for a port see stop and leave
        if runner is not None:
            # Our runner logs each client it drops on the way out; that is expected here.
            logging.getLogger("rlinks_rllib").setLevel(logging.ERROR)
            runner.stop()  # closes every connection: blocked senders fail and exit
        if listener is not None:
            listener.close()
        stop_processes(senders, timeout=5.0)
        # RLlib's listener thread, once its client is gone, sleeps 5 s and
        # listens again (it has no way to stop); ending this process ends it.


def run_case(case: Case, payload: Payload, timing: Timing, certs: dict[str, str] | None = None) -> dict:
    """Run one case once in a fresh process; return its result or ``{"error": ...}``.

    ``certs``: :func:`make_test_certificates`' files, needed by TLS cases.
    """
    return run_in_process(_case_main, (case, payload, timing, certs), timing.warmup_s + timing.window_s + CASE_SLACK_S)


# --------------------------------------------------------------------------
# Report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round (smoke test)")
    parser.add_argument("--rounds", type=int, default=None, help="round-robin rounds over all cases (median taken)")
    parser.add_argument("--window", type=float, default=None, help="seconds measured per case per round")
    parser.add_argument("--only", default=None, help="comma-separated case keys to run (default: all)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    timing = Timing(warmup_s=0.3 if args.quick else 0.6, window_s=args.window or (0.6 if args.quick else 1.5))

    started = now()
    loads = payloads()
    selected = cases()
    if args.only:
        keys = set(args.only.split(","))
        selected = [c for c in selected if c.key in keys]
    with tempfile.TemporaryDirectory(prefix="bench-ingest-certs-") as tmp:
        certs = make_test_certificates(Path(tmp)) if any(c.transport == "tls" for c in selected) else None
        return _run(selected, loads, timing, rounds, certs, started)


def _run(selected: list[Case], loads: dict[str, Payload], timing: Timing, rounds: int,
         certs: dict[str, str] | None, started: float) -> int:
    print(f"bench_ingest: env steps/s returned by one runner's sample() (+ get_metrics()) while sender "
          f"processes blast EPISODES frames; median of {rounds} round(s) of {timing.window_s:g} s after "
          f"{timing.warmup_s:g} s warm-up; {os.cpu_count()} CPUs")
    for p in loads.values():
        print(f"  payload: {p.name}: {p.steps} steps, {p.episodes} episode chunk(s), "
              f"frame {len(p.frame) / MB:.3f} MB ({p.bytes_per_step:,.0f} B/step)")

    rates: dict[str, list[float]] = {c.key: [] for c in selected}
    per_cpu: dict[str, list[float]] = {c.key: [] for c in selected}
    mbps: dict[str, list[float]] = {c.key: [] for c in selected}
    problems: dict[str, str] = {}
    for _ in range(rounds):
        for case in selected:
            res = run_case(case, loads[case.payload], timing, certs)
            if "error" in res:
                problems[case.key] = res["error"]
                for series in (rates, per_cpu, mbps):
                    series[case.key].append(float("nan"))
                continue
            if res.get("refused"):
                problems[case.key] = f"the runner refused {res['refused']} message(s)"
            if case.transport == "ack" and (not res.get("acked") or res.get("duplicates")):
                problems[case.key] = f"{res.get('acked')} batch(es) confirmed, {res.get('duplicates')} duplicate(s)"
            rates[case.key].append(res["steps"] / res["seconds"])
            per_cpu[case.key].append(res["steps"] / res["cpu"] if res.get("cpu") else float("nan"))
            mbps[case.key].append(res["bytes"] / res["seconds"] / MB)

    nan = float("nan")
    rows = [[c.label, c.clients, nan if c.server == "raw" else median(rates[c.key]),
             nan if c.server == "raw" else median(per_cpu[c.key]), median(mbps[c.key])] for c in selected]
    print_table(["case", "clients", "env steps/s", "steps/CPU-s", "MB/s"], rows)
    print("  (steps/CPU-s: steps per CPU second of the runner's process, senders excluded;"
          " steadier than steps/s on a busy machine)")
    for key, problem in problems.items():
        print(f"  ERROR in {key}: {problem}")

    # (text, ours, theirs, series, target, also compare per CPU second)
    lines = [(f"ratio ours/rllib, same bytes, {n} client(s) vs RLlib's 1", f"ours-same-{n}", "rllib",
              rates, ">= 3x", True) for n in CLIENT_COUNTS]
    lines += [(f"ratio ours-stacked/rllib, {n} client(s) vs RLlib's 1", f"ours-stacked-{n}", "rllib",
               rates, ">= 10x", True) for n in CLIENT_COUNTS]
    lines.append((f"ratio images ours/raw socket (MB/s), {IMAGE_CLIENTS} clients vs 1 sender", "ours-images",
                  "raw-images", mbps, ">= 0.6x", False))
    lines.append((f"ratio images ours/raw socket (MB/s), {IMAGE_CLIENTS} clients vs {IMAGE_CLIENTS} senders",
                  "ours-images", "raw-images-4", mbps, "info", False))
    lines.append((f"ratio Dict images ours/raw socket (MB/s), {IMAGE_CLIENTS} clients vs {IMAGE_CLIENTS} senders",
                  "ours-dict-images", "raw-images-4", mbps, ">= 0.5x", False))
    lines.append((f"ratio Dict images/plain images, ours (MB/s), {IMAGE_CLIENTS} clients", "ours-dict-images",
                  "ours-images", mbps, "info", False))
    lines.append(("ratio ours/rllib, same bytes, 100-step episodes", "ours-same-long", "rllib-long",
                  rates, ">= 3x", True))
    lines.append(("ratio ours-stacked/rllib, 100-step episodes", "ours-stacked-long", "rllib-long",
                  rates, ">= 10x", True))
    n = TRANSPORT_CLIENTS
    lines.append((f"ratio TLS/plain, CartPole our format, {n} clients", f"ours-stacked-{n}-tls", f"ours-stacked-{n}",
                  rates, ">= 0.7x", True))
    lines.append((f"ratio ACK/plain, CartPole our format, {n} clients", f"ours-stacked-{n}-ack", f"ours-stacked-{n}",
                  rates, ">= 0.95x", True))
    lines.append((f"ratio TLS/plain, images, {IMAGE_CLIENTS} clients", "ours-images-tls", "ours-images",
                  rates, ">= 0.7x", True))
    lines.append((f"ratio ACK/plain, images, {IMAGE_CLIENTS} clients", "ours-images-ack", "ours-images",
                  rates, ">= 0.95x", True))
    lines = [line for line in lines if line[1] in rates and line[2] in rates]
    if lines:
        print("ratios (> 1: ours is faster; median of per-round ratios; [target]; per CPU second):")
        width = max(len(line[0]) for line in lines)
        for text, ours, theirs, series, target, cpu in lines:
            extra = f"  per CPU-s {median_ratio(per_cpu[ours], per_cpu[theirs]):6.2f}x" if cpu else ""
            print(f"  {text + ':':<{width + 1}} {median_ratio(series[ours], series[theirs]):6.2f}x  "
                  f"{'[' + target + ']':<9}{extra}")
    print("  (TLS/ACK ratios: steps/s; same steps per frame, so MB/s gives the same ratio)")
    print(f"total {now() - started:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
