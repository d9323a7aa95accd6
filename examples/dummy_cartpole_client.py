"""A simulator that trains with RLlib over RLlink: the template to copy. No Ray here, numpy and msgpack only.

Your simulator owns its loop: it calls ``client.act(obs)`` for an action and ``client.report(...)`` with what
happened; EnvClient runs the policy (or asks the learner: ``--served-actions``), records and sends the episodes
and takes the new weights. ``CartPole`` (gymnasium's CartPole-v1 step for step) stands in for your program;
``--envs N`` steps N together; with ``--teacher`` a scripted controller takes over when the pole nears a fall.

    rlinks learner --config ppo_cartpole                   # then, in another shell:
    python examples/dummy_cartpole_client.py --address 127.0.0.1:5555
"""

import argparse
import logging
import math
import signal
import sys
import threading

import numpy as np

from rlinks_rllib.client import DiscreteSpace, EnvClient, NotAgreed


class CartPole:
    """The simulator: a pole on a cart, pushed left (0) or right (1); reward 1 a step; 500 steps at most."""

    action_space = DiscreteSpace(2)

    def __init__(self, seed: int | None = None) -> None:
        self.rng, self.state, self.steps = np.random.default_rng(seed), (0.0, 0.0, 0.0, 0.0), 0

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict]:
        self.rng = self.rng if seed is None else np.random.default_rng(seed)
        self.state, self.steps = tuple(float(v) for v in self.rng.uniform(-0.05, 0.05, 4)), 0
        return np.array(self.state, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        x, x_dot, theta, theta_dot = self.state  # Euler steps of 20 ms, as gymnasium's CartPole-v1
        force, cos, sin = (10.0 if int(action) == 1 else -10.0), math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos**2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = (x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc)
        self.steps += 1
        terminated = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360
        return np.array(self.state, np.float32), 1.0, terminated, not terminated and self.steps >= 500, {}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", default="127.0.0.1:5555", help="the learner's directory or a runner, HOST:PORT")
    p.add_argument("--max-steps", type=int, default=100_000, help="stop after this many env steps")
    p.add_argument("--envs", type=int, default=1, help="simulators stepped together")
    p.add_argument("--served-actions", action="store_true", help="the learner computes the actions")
    p.add_argument("--off-policy", action="store_true", help="send batches without waiting for new weights")
    p.add_argument("--reliable", action="store_true", help="reconnect and resend what was not confirmed after a drop")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for any one reply")
    p.add_argument("--retry-attempts", type=int, default=20, help="connection attempts before giving up")
    p.add_argument("--fragment-steps", type=int, default=500, help="steps per batch for RLlib's own server")
    p.add_argument("--secret-file", help="shared secret of an authenticating learner (or set RLINKS_SECRET)")
    p.add_argument("--ca-file", help="CA certificate to check a tls:// learner with")
    p.add_argument("--cert-file", help="client certificate, for a learner that asks for one")
    p.add_argument("--key-file", help="key of --cert-file")
    p.add_argument("--env", default="CartPole-v1", help="CartPole-v1 (built in) or any gymnasium env id")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--report-every", type=float, default=0.0, metavar="S", help="a 'progress:' line every S seconds")
    p.add_argument("--teacher", action="store_true", help="a scripted controller takes over when about to fail")
    p.add_argument("--pause-after-steps", type=int, default=0, metavar="N",
                   help="stay connected but silent for --pause-s seconds once N steps are taken (a paused game)")
    p.add_argument("--pause-s", type=float, default=0.0, metavar="S", help="how long --pause-after-steps pauses")
    return p.parse_args(argv)


def teacher(obs: np.ndarray):
    """A scripted controller's action when about to fail, else None: CartPole's pole leans (or falls) past
    0.1 rad: push the cart under it; Pendulum (cos, sin, speed) nears the top too fast: brake (PD torque)."""
    if len(obs) == 4:
        return int(obs[2] + 0.1 * obs[3] > 0) if abs(obs[2] + 0.1 * obs[3]) > 0.1 else None
    torque = np.clip(-10.0 * math.atan2(obs[1], obs[0]) - obs[2], -2.0, 2.0)
    return [float(torque)] if obs[0] > 0.8 and abs(obs[2]) > 2.0 else None


def make_env(name: str, seed: int | None):
    if name == "CartPole-v1":
        return CartPole(seed)
    import gymnasium as gym  # only for another --env
    return gym.make(name)


def run(args: argparse.Namespace) -> dict:
    """Step the simulators until ``--max-steps``, SIGTERM or the learner's end; return a summary."""
    envs = [make_env(args.env, None if args.seed is None else args.seed + i) for i in range(args.envs)]
    client = EnvClient(args.address, num_envs=args.envs, inference="served" if args.served_actions else "auto",
                       on_policy=False if args.off_policy else None, seed=args.seed, reliable=args.reliable,
                       timeout=args.timeout, retry_attempts=args.retry_attempts, secret_file=args.secret_file,
                       ca_file=args.ca_file, cert_file=args.cert_file, key_file=args.key_file,
                       action_space=envs[0].action_space, rollout_fragment_length=args.fragment_steps)
    done, stopping = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: (stopping.set(), client.stop()))
    if args.report_every:
        threading.Thread(target=print_progress, args=(client, args.report_every, done), daemon=True).start()
    steps, pause_at = 0, args.pause_after_steps if args.pause_s > 0 else 0
    with client:
        obs = [env.reset(seed=None if args.seed is None else args.seed + i)[0] for i, env in enumerate(envs)]
        while steps < args.max_steps:
            if pause_at and steps >= pause_at:
                logging.info("pausing for %.0f s after %d steps (connected, sending nothing)", args.pause_s, steps)
                stopping.wait(args.pause_s)
                pause_at = 0
            actions = act(client, obs, teacher if args.teacher else None)
            obs, reward, terminated, truncated, _ = map(list, zip(*(env.step(a) for env, a in zip(envs, actions))))
            client.report(reward, obs, terminated, truncated)
            steps += len(envs)
            for i, env in enumerate(envs):
                if terminated[i] or truncated[i]:  # that episode ended: the env's next act starts the next one
                    obs[i] = env.reset()[0]
    if client.stopped:
        logging.info("stopped by SIGTERM while waiting for the learner")
    done.set()
    stats, sent = client.stats, client.stats.delivery
    return {"steps": stats.steps, "episodes": stats.episodes, "mean_return": stats.mean_return,
            "reconnects": sent.reconnects, "batches_resent": sent.batches_resent, "steps_sent": sent.steps_sent,
            "steps_acked": sent.steps_acked, "takeover_rate": stats.takeover_rate}


def act(client: EnvClient, obs: list, teacher) -> list:
    """The policy's actions, but the teacher's where it takes over (those steps go as take-overs)."""
    own = {i: a for i, o in enumerate(obs) if teacher and (a := teacher(o)) is not None}
    if own:
        client.take_over([obs[i] for i in own], list(own.values()), env=list(own))
    policy = [i for i in range(len(obs)) if i not in own]
    own.update(zip(policy, client.act([obs[i] for i in policy], env=policy)) if policy else ())
    return [own[i] for i in range(len(obs))]


def print_progress(client: EnvClient, every: float, done: threading.Event) -> None:
    """A ``progress:`` line every ``every`` seconds, from a thread: ACKs also come while the loop waits."""
    while not done.wait(every):
        stats, sent, runner = client.stats, client.stats.delivery, client.address
        print(f"progress: steps_sent={sent.steps_sent} steps_acked={sent.steps_acked} reconnects={sent.reconnects} "
              f"runner={runner.host}:{runner.port} weights={stats.weights_seq_no}", flush=True)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        summary = run(parse_args(argv))
    except NotAgreed as exc:
        print(f"the learner does not serve actions: {exc}", file=sys.stderr)
        return 3
    print("summary: " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
