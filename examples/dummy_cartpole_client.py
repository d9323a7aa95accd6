"""A simulator that trains with RLlib over RLlink: the template to copy.

Your simulator (a game engine, a robot sim, a legacy program) owns its loop.
This script shows the four things it has to do, with a CartPole written
below (gymnasium's CartPole-v1, step for step) standing in for the simulator:

1. connect to an RLinkEnvRunner (or to RLlib's own external-env server);
2. run the policy locally, from the weights the server sends (numpy only);
3. record each step into episode chunks;
4. send the chunks and take the new weights that come back.

Run a learner first (``rlinks learner --config configs/ppo_cartpole.yaml``),
then one or more copies of this::

    python examples/dummy_cartpole_client.py --address 127.0.0.1:5556

With ``--served-actions [--envs N]`` the learner runs the policy instead
(``served_actions``, PROTOCOL.md 10.5): N simulators are stepped together,
one ``act`` per tick sending their observations and getting their actions;
no weights, no policy, no episode recording here (:func:`run_served`). It
exits 3 when the learner does not serve actions (RLlib's own server).

No Ray is needed here: numpy and msgpack only (``pip install rlinks-rllib``).
``--env`` runs another gymnasium env instead, if gymnasium is installed.
"""

from __future__ import annotations

import argparse
import collections
import logging
import math
import signal
import sys
import threading
import time

import numpy as np

from rlinks_rllib.client import ClientClosed, ConnectionLost, NotAgreed, PickledConfigRefused, RLinkClient, ServerError
from rlinks_rllib.client.episode_builder import EpisodeBuilder
from rlinks_rllib.client.policy import DiscreteSpace, NumpyPolicy, as_action_space
from rlinks_rllib.protocol.errors import ErrorCode

log = logging.getLogger("dummy_cartpole_client")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default=None, help="learner runner to connect to, HOST:PORT (default 127.0.0.1:5556)")
    parser.add_argument("--port", type=int, default=None, help="shorthand for --address 127.0.0.1:PORT")
    parser.add_argument("--max-steps", type=int, default=100_000, help="stop after this many env steps")
    parser.add_argument("--off-policy", action="store_true", help="send EPISODES without waiting for new weights (APPO, IMPALA)")
    parser.add_argument("--reliable", action="store_true", help="reconnect after a dropped connection and resend unconfirmed data")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for any one reply")
    parser.add_argument("--retry-attempts", type=int, default=20, help="connection attempts before giving up")
    parser.add_argument("--fragment-steps", type=int, default=500, help="steps per batch when the server doesn't say (plain RLlib)")
    parser.add_argument("--activation", default="tanh", help="hidden activation when the server doesn't say (plain RLlib)")
    parser.add_argument("--secret-file", default=None, help="shared secret for an authenticating learner (or set RLINKS_SECRET)")
    parser.add_argument("--ca-file", default=None, help="CA certificate to check a tls:// learner with")
    parser.add_argument("--cert-file", default=None, help="client certificate, for a learner that wants one")
    parser.add_argument("--key-file", default=None, help="key of --cert-file")
    parser.add_argument("--env", default="CartPole-v1", help="the simulator: CartPole-v1 (built in) or any gymnasium env id")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--report-every", type=float, default=0.0, metavar="S",
                        help="print a 'progress:' line (steps sent and confirmed, runner, weights) every S seconds")
    parser.add_argument("--served-actions", action="store_true", help="let the learner compute the actions (no local policy)")
    parser.add_argument("--envs", type=int, default=1, help="simulators stepped together with --served-actions")
    args = parser.parse_args(argv)
    if args.envs < 1:
        parser.error("--envs must be at least 1")
    if args.address is None:
        args.address = f"127.0.0.1:{args.port or 5556}"
    return args


class CartPole:
    """The simulator: gymnasium's CartPole-v1 dynamics, written out (Euler steps of 20 ms).

    Replace this class with your own program. It is here so that the
    template needs nothing but numpy: a pole on a cart, pushed left (action
    0) or right (1); reward 1 per step; the episode ends (terminated) when
    the pole leans past 12 degrees or the cart leaves +-2.4, and is cut
    (truncated) after 500 steps.
    """

    action_space = DiscreteSpace(2)
    _GRAVITY, _CART_MASS, _POLE_MASS, _HALF_LENGTH, _FORCE, _TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    _THETA_LIMIT, _X_LIMIT, _MAX_STEPS = 12 * 2 * math.pi / 360, 2.4, 500

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        self._state = (0.0, 0.0, 0.0, 0.0)
        self._steps = 0

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._state = tuple(float(v) for v in self._rng.uniform(-0.05, 0.05, 4))
        self._steps = 0
        return np.array(self._state, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        x, x_dot, theta, theta_dot = self._state
        total_mass = self._CART_MASS + self._POLE_MASS
        pole_moment = self._POLE_MASS * self._HALF_LENGTH
        force = self._FORCE if int(action) == 1 else -self._FORCE
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + pole_moment * theta_dot**2 * sin) / total_mass
        theta_acc = (self._GRAVITY * sin - cos * temp) / (
            self._HALF_LENGTH * (4.0 / 3.0 - self._POLE_MASS * cos**2 / total_mass)
        )
        x_acc = temp - pole_moment * theta_acc * cos / total_mass
        x, x_dot = x + self._TAU * x_dot, x_dot + self._TAU * x_acc
        theta, theta_dot = theta + self._TAU * theta_dot, theta_dot + self._TAU * theta_acc
        self._state = (x, x_dot, theta, theta_dot)
        self._steps += 1
        terminated = abs(x) > self._X_LIMIT or abs(theta) > self._THETA_LIMIT
        truncated = not terminated and self._steps >= self._MAX_STEPS
        return np.array(self._state, np.float32), 1.0, terminated, truncated, {}

    def close(self) -> None:
        pass


def make_env(name: str, seed: int | None):
    """The simulator to run: our CartPole, or any gymnasium env by id (needs gymnasium)."""
    if name == "CartPole-v1":
        return CartPole(seed)
    import gymnasium as gym  # only for --env other than CartPole-v1

    return gym.make(name)


def stop_on_sigterm(client: RLinkClient) -> list[bool]:
    """SIGTERM ends the loop (the list it returns is no longer empty), even while a call waits.

    A call may wait long: for the next weights, or (reliable) reconnecting
    to a learner that is gone. SIGTERM closes the client, which ends that
    call with ``ClientClosed`` or ``ConnectionLost``; from a thread, as
    ``close()`` is the client's one call for another thread, and the
    handler itself interrupts the client's own code.
    """
    stopping: list[bool] = []

    def on_sigterm(*_) -> None:
        stopping.append(True)
        threading.Thread(target=client.close, name="close-on-sigterm", daemon=True).start()

    signal.signal(signal.SIGTERM, on_sigterm)
    return stopping


def run(args: argparse.Namespace) -> dict:
    """Run the simulator loop until ``--max-steps``, SIGTERM or the learner's end; return a summary."""
    env = make_env(args.env, args.seed)
    rng = np.random.default_rng(args.seed)
    steps, episodes = 0, 0
    returns: collections.deque[float] = collections.deque(maxlen=20)

    client = RLinkClient(args.address, timeout=args.timeout, retry_attempts=args.retry_attempts,
                         reliable=args.reliable, secret_file=args.secret_file, ca_file=args.ca_file,
                         cert_file=args.cert_file, key_file=args.key_file)
    stopping = stop_on_sigterm(client)
    progress: Progress | None = None
    try:
        client.connect()
        # What the runner expects from us. Our server describes it in plain
        # msgpack; RLlib's own server only offers a pickle, which we refuse,
        # so then we fall back to the command line.
        try:
            config = client.get_config()
            fragment = config["rollout_fragment_length"]
            activation = config["model_config"].get("fcnet_activation", args.activation)
            on_policy = config["on_policy"] and not args.off_policy
            action_space = as_action_space(config["action_space"])
        except PickledConfigRefused:
            fragment, activation, on_policy = args.fragment_steps, args.activation, not args.off_policy
            action_space = as_action_space(env.action_space)

        # The first weights, and how many steps the runner wants from us.
        update = client.get_state()
        policy = NumpyPolicy(update.params, action_space, fcnet_activation=activation, rng=rng)
        want = fragment if update.want_steps is None else update.want_steps
        log.info("connected to %s (%s); sending %s batches", args.address,
                 client.server_agent or "plain RLlink", "on-policy" if on_policy else "off-policy")

        builder = EpisodeBuilder()
        obs, _ = env.reset(seed=args.seed)
        builder.reset(obs)
        episode_return = 0.0
        if args.report_every:
            progress = Progress(client, args.report_every)
            progress.weights_seq_no = update.seq_no

        while steps < args.max_steps and not stopping:
            # want == 0: the runner has all it needs for this update. Ask
            # again with nothing; the answer comes with the next weights.
            if want > 0:
                out = policy.compute_action(obs)
                obs, reward, terminated, truncated, _ = env.step(out.action_for_env)
                builder.step(out.action, reward, obs, terminated, truncated,
                             extra={"action_logp": out.action_logp, "action_dist_inputs": out.action_dist_inputs})
                steps += 1
                episode_return += float(reward)
                if terminated or truncated:
                    returns.append(episode_return)
                    episodes, episode_return = episodes + 1, 0.0
                    obs, _ = env.reset()
                    builder.reset(obs)
                if builder.num_steps < want:
                    continue

            chunks = builder.take_chunks()
            if on_policy:
                # Send, then wait for the weights our next steps must use.
                update = client.send_episodes_and_get_state(chunks)
                policy.set_params(update.params)
                want = fragment if update.want_steps is None else update.want_steps
            else:
                # Off-policy: keep going; pick up fresh weights now and then.
                client.send_episodes(chunks)
                update = client.get_state()
                policy.set_params(update.params)
            if progress is not None:
                progress.weights_seq_no = update.seq_no
        if not stopping:
            # The runner confirms a batch when RLlib takes it, which can be after
            # the weights it answered with: wait (up to --timeout) for those ACKs
            # rather than close with batches the runner has and we never heard of.
            client.flush()
    except ServerError as exc:
        if exc.code != ErrorCode.SHUTTING_DOWN:
            raise
        log.info("the learner stopped; done")  # the normal end of a training run
    except (ClientClosed, ConnectionLost):
        if not stopping:
            raise
        log.info("stopped by SIGTERM while waiting for the learner")
    finally:
        stats = client.stats
        if progress is not None:
            progress.stop()
        client.close()
        env.close()
    return summary(steps, episodes, returns, stats)


class Progress(threading.Thread):
    """A ``progress:`` line every ``every`` seconds: what was sent and confirmed so far, where, with which weights.

    A thread of its own, so the count goes on while the client waits (for
    weights, or for a learner that is being restarted): confirmations can
    come after the last weights of a run. It only reads ``client.stats``
    and ``client.address``, which any thread may read.
    """

    def __init__(self, client: RLinkClient, every: float) -> None:
        super().__init__(daemon=True, name="progress")
        self.client, self.every = client, every
        self.weights_seq_no = 0
        self._stopped = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._stopped.wait(self.every):
            stats, address = self.client.stats, self.client.address
            print(f"progress: steps_sent={stats.steps_sent} steps_acked={stats.steps_acked} "
                  f"reconnects={stats.reconnects} runner={address.host}:{address.port} "
                  f"weights={self.weights_seq_no} time={time.time():.3f}", flush=True)

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=self.every + 1)


def summary(steps: int, episodes: int, returns: collections.deque, stats) -> dict:
    """What the last line prints (``rlinks client`` collects it from every copy)."""
    return {
        "steps": steps,
        "episodes": episodes,
        "mean_return_last_20": float(np.mean(returns)) if returns else float("nan"),
        "reconnects": stats.reconnects,
        "batches_resent": stats.batches_resent,
        "steps_sent": stats.steps_sent,
        "steps_acked": stats.steps_acked,
    }


class ActRows:
    """The rows of the next ``act``, one call's worth: collected while stepping, then taken."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.env: list[int] = []
        self.obs: list[np.ndarray] = []
        self.reward: list[float] = []
        self.start: list[bool] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []

    def add(self, env: int, obs: np.ndarray, reward: float = 0.0, *, start: bool = False,
            terminated: bool = False, truncated: bool = False) -> None:
        self.env.append(env)
        self.obs.append(obs)
        self.reward.append(float(reward))
        self.start.append(start)
        self.terminated.append(bool(terminated))
        self.truncated.append(bool(truncated))

    def take(self) -> tuple:
        """The columns for ``RLinkClient.act``; empty again afterwards."""
        columns = (self.env, np.stack(self.obs), self.reward, self.start, self.terminated, self.truncated)
        self.clear()
        return columns

    def take_as_last(self) -> tuple | None:
        """The columns for a last ``act`` that ends every open episode (truncated) where it stands.

        Without it the runner would wait ``served_report_timeout_s`` and then
        drop each env's last step. Start rows go (their episode has no step).
        """
        last = ActRows()
        for env, obs, reward, start, terminated, truncated in zip(
                self.env, self.obs, self.reward, self.start, self.terminated, self.truncated):
            if not start:
                last.add(env, obs, reward, terminated=terminated, truncated=not terminated)
        self.clear()
        return last.take() if last.env else None


def run_served(args: argparse.Namespace) -> dict:
    """The loop with served actions: the learner runs the policy and records the episodes.

    Each tick sends one row per env that wants an action (its observation and
    the reward of its last action) and steps every env with the action that
    comes back. An episode that ends sends its final observation in an ending
    row, and the env's next episode begins with a start row in the same call.

    Raises:
        NotAgreed: the learner does not serve actions (``main`` exits 3).
        ServerError: the learner refused us (but ``shutting_down``: the end of training).
    """
    envs = [make_env(args.env, None if args.seed is None else args.seed + i) for i in range(args.envs)]
    steps, episodes = 0, 0
    returns: collections.deque[float] = collections.deque(maxlen=20)
    episode_return = [0.0] * len(envs)

    # timeout: on-policy, an act() may wait for the learner's training step.
    client = RLinkClient(args.address, timeout=args.timeout, retry_attempts=args.retry_attempts,
                         reliable=args.reliable, secret_file=args.secret_file, ca_file=args.ca_file,
                         cert_file=args.cert_file, key_file=args.key_file)
    stopping = stop_on_sigterm(client)
    rows = ActRows()
    try:
        client.connect()
        for i, env in enumerate(envs):
            obs, _ = env.reset(seed=None if args.seed is None else args.seed + i)
            rows.add(i, obs, start=True)
        log.info("connected to %s (%s); the learner computes the actions for %d env(s)", args.address,
                 client.server_agent or "plain RLlink", len(envs))

        while steps < args.max_steps and not stopping:
            reply = client.act(*rows.take())
            if reply.interrupted:
                # The connection dropped and the learner closed those episodes;
                # act() started new ones where the envs stand. Nothing to do here.
                log.info("envs %s: episodes cut by a reconnect, continued as new ones", reply.interrupted)
            for env_id, action in zip(reply.env, reply.actions):
                obs, reward, terminated, truncated, _ = envs[env_id].step(action)
                steps += 1
                episode_return[env_id] += float(reward)
                rows.add(env_id, obs, reward, terminated=terminated, truncated=truncated)
                if terminated or truncated:
                    returns.append(episode_return[env_id])
                    episodes, episode_return[env_id] = episodes + 1, 0.0
                    obs, _ = envs[env_id].reset()
                    rows.add(env_id, obs, start=True)
        last = rows.take_as_last()
        if last is not None:
            client.act(*last)
    except ServerError as exc:
        if exc.code != ErrorCode.SHUTTING_DOWN:
            raise
        log.info("the learner stopped; done")  # the normal end of a training run
    except (ClientClosed, ConnectionLost):
        if not stopping:
            raise
        log.info("stopped by SIGTERM while waiting for the learner")
    finally:
        stats = client.stats
        client.close()
        for env in envs:
            env.close()
    return summary(steps, episodes, returns, stats)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = parse_args(argv)
    if args.served_actions:
        try:
            summary = run_served(args)
        except NotAgreed as exc:
            print(f"the learner does not serve actions: {exc}", file=sys.stderr)
            return 3
    else:
        summary = run(args)
    print("summary: " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
