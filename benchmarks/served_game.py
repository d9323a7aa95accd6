"""The game process of ``bench_served.py``: N CartPole agents stepped together, actions asked for each tick.

One game, two ways to get its actions, so both servers drive the very same
simulator:

- ``--godot PORT``: the game side of Godot RL Agents' protocol, as its
  plugin's ``sync.gd`` speaks it (each message a 4-byte little-endian length
  and a JSON string; ``handshake``, ``env_info``, ``reset``, ``action``,
  ``close``): the game connects to Godot RL's Python server (``GodotEnv``),
  sends every agent's observation, reward and done after each tick and waits
  for the next actions. Agents reset themselves when done, as Godot RL's do.
- ``--rlinks ADDRESS``: our ``EnvClient`` with served actions, ``num_envs=N``.

Either way the game times each tick's round trip (observations out, actions
in) and, after ``--seconds``, prints one JSON line: ``{"actions", "seconds",
"p50_ms", "p99_ms", "cpu_us_per_tick"}`` (the last: this process's CPU time
per tick of the window, its Python and its system calls, where the round trip
is also the other side's); the actions counted are those of the measured window
(``--warmup`` seconds after its first action). Uses numpy and, for ``--rlinks``, the client
library only (no Ray).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

import numpy as np

#: CartPole-v1's constants (gymnasium's ``CartPoleEnv``).
GRAVITY, MASS_CART, MASS_POLE, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
THETA_LIMIT, X_LIMIT, MAX_STEPS = 12 * 2 * np.pi / 360, 2.4, 500
#: Godot RL's server sends a ``close`` when done; this bounds every wait on it.
WAIT_S = 60.0


class CartPoles:
    """``n`` CartPole-v1s stepped together (gymnasium's dynamics, vectorised); done agents reset at once."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, (n, 4))
        self.steps = np.zeros(n, dtype=np.int64)

    def obs(self) -> np.ndarray:
        return self.state.astype(np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every agent; returns (next obs, reward, terminated, truncated); ended agents start again."""
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(np.asarray(action) == 1, FORCE, -FORCE)
        cos, sin = np.cos(theta), np.sin(theta)
        total = MASS_CART + MASS_POLE
        temp = (force + MASS_POLE * HALF_LENGTH * theta_dot**2 * sin) / total
        theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos**2 / total))
        x_acc = temp - MASS_POLE * HALF_LENGTH * theta_acc * cos / total
        self.state = np.stack([x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot,
                               theta_dot + TAU * theta_acc], axis=1)
        self.steps += 1
        terminated = (np.abs(self.state[:, 0]) > X_LIMIT) | (np.abs(self.state[:, 2]) > THETA_LIMIT)
        truncated = ~terminated & (self.steps >= MAX_STEPS)
        next_obs = self.obs()
        ended = terminated | truncated
        if ended.any():
            self.state[ended] = self.rng.uniform(-0.05, 0.05, (int(ended.sum()), 4))
            self.steps[ended] = 0
        return next_obs, np.ones(len(self.state), dtype=np.float32), terminated, truncated


class Timer:
    """Round trips of the measured window: ``seconds`` long, from ``warmup`` after :meth:`begin`."""

    def __init__(self, warmup: float, seconds: float) -> None:
        self.warmup, self.seconds = warmup, seconds
        self.start = self.stop = float("inf")
        self.rtts: list[float] = []
        self.actions = 0
        #: process_time() at the window's first and last tick.
        self.cpu: list[float] = []

    def begin(self) -> None:
        """The game is connected: the warm-up starts now."""
        self.start = time.perf_counter() + self.warmup
        self.stop = self.start + self.seconds

    def record(self, began: float, ended: float, actions: int) -> None:
        if self.start <= began < self.stop:
            self.rtts.append(ended - began)
            self.actions += actions
            cpu = time.process_time()
            self.cpu[1:] = [cpu]
            if len(self.cpu) == 1:
                self.cpu.insert(0, cpu)

    @property
    def over(self) -> bool:
        return time.perf_counter() >= self.stop

    def result(self, seconds: float) -> dict:
        rtts = np.asarray(self.rtts) * 1e3
        return {"actions": self.actions, "seconds": seconds,
                "p50_ms": float(np.percentile(rtts, 50)), "p99_ms": float(np.percentile(rtts, 99)),
                "cpu_us_per_tick": (self.cpu[-1] - self.cpu[0]) * 1e6 / max(len(self.rtts) - 1, 1)}


# --------------------------------------------------------------------------
# Godot RL Agents' game side


def _send(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(struct.pack("<I", len(data)) + data)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("Godot RL's server closed the connection")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> dict:
    (length,) = struct.unpack("<I", _recv_exactly(sock, 4))
    return json.loads(_recv_exactly(sock, length))


def _connect(port: int) -> socket.socket:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as sync.gd does
        return sock


def play_godot(port: int, n: int, timer: Timer) -> None:
    """Serve Godot RL's ``GodotEnv`` as its plugin would, until it sends ``close``."""
    game = CartPoles(n)
    sock = _connect(port)
    try:
        assert _recv(sock)["type"] == "handshake"
        assert _recv(sock)["type"] == "env_info"
        _send(sock, {"type": "env_info", "n_agents": n,
                     "observation_space": {"obs": {"size": [4], "space": "box"}},
                     "action_space": {"move": {"size": 2, "action_type": "discrete"}}})
        sent = time.perf_counter()
        while True:
            message = _recv(sock)
            got = time.perf_counter()
            if message["type"] == "close":
                return
            if message["type"] == "reset":
                game = CartPoles(n)
                reply = {"type": "reset", "obs": [{"obs": row} for row in game.obs().tolist()], "info": [{}] * n}
            elif message["type"] == "action":
                if timer.start == float("inf"):
                    timer.begin()  # the first action: whatever the server set up before it is not timed
                timer.record(sent, got, n)
                action = np.array([a["move"] for a in message["action"]])
                _, reward, terminated, truncated = game.step(action)
                # Godot RL's agents reset themselves: the observation sent is the new episode's.
                reply = {"type": "step", "obs": [{"obs": row} for row in game.obs().tolist()],
                         "reward": reward.tolist(), "done": (terminated | truncated).tolist(), "info": [{}] * n}
            else:
                raise ValueError(f"unexpected message from Godot RL's server: {message['type']!r}")
            sent = time.perf_counter()
            _send(sock, reply)
    finally:
        sock.close()


# --------------------------------------------------------------------------
# Ours: EnvClient, served actions


def play_rlinks(address: str, n: int, timer: Timer) -> None:
    """Play with actions served by the runner at ``address`` until the window is over."""
    from rlinks_rllib.client import EnvClient

    game = CartPoles(n)
    with EnvClient(address, num_envs=n, inference="served", timeout=WAIT_S) as client:
        obs = game.obs()
        action = client.act(obs)  # the first action: connecting and setting up are not timed
        timer.begin()
        obs, reward, terminated, truncated = game.step(action)
        client.report(reward, obs, terminated, truncated)
        obs = game.obs()
        while not timer.over:
            sent = time.perf_counter()
            action = client.act(obs)
            timer.record(sent, time.perf_counter(), n)
            next_obs, reward, terminated, truncated = game.step(action)
            client.report(reward, next_obs, terminated, truncated)
            obs = game.obs()
        client.end_episode(list(range(n)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--godot", type=int, metavar="PORT", help="Godot RL's server listens on this port")
    where.add_argument("--rlinks", metavar="ADDRESS", help="our runner's address")
    parser.add_argument("--agents", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args(argv)
    timer = Timer(args.warmup, args.seconds)
    if args.godot is not None:
        play_godot(args.godot, args.agents, timer)
    else:
        play_rlinks(args.rlinks, args.agents, timer)
    print(json.dumps(timer.result(args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
