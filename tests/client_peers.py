"""Scripted learners and runners the C++ and JS clients' tests both drive: real sockets on 127.0.0.1.

:class:`ScriptedRunner` and :class:`FakeLearner` speak RLlink with
CartPole's config and weights (:data:`PARAMS`, RLlib's default PPO module,
small) and train a fake update every :data:`UPDATE_STEPS` steps;
:class:`ServedPeer` answers served ``ACT``\\ s with a fixed rule on rlinks'
own ``Connection``; :func:`directory_of` puts a directory in front of a
learner. Each client's test file builds its client and holds it to these.
"""

from __future__ import annotations

import math
import re
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

import numpy as np

from peers import CLOSE, HANDLED, RLinkTestServer
from rlinks_rllib.protocol.config import PACED_IN_FLIGHT_KEY, build_config
from rlinks_rllib.protocol.connection import (
    ActReceived,
    ConfigRequested,
    Connection,
    ConnectionClosed,
    ErrorReceived,
    HandshakeDone,
    Role,
    StateRequested,
)
from rlinks_rllib.protocol.episodes import check_episode_state
from rlinks_rllib.protocol.errors import ProtocolError
from rlinks_rllib.protocol.framing import encode_body_once, encode_message
from rlinks_rllib.protocol.served import ActRows
from rlinks_rllib.protocol.weights import build_state
from rlinks_rllib.server.network.directory import Directory, Endpoint
from rlinks_rllib.server.network.listener import RLinkServer
from rlinks_rllib.server.settings import RLinkSettings

SECRET = "correct horse battery staple, twice over"

#: Env steps per update of the test servers (their rollout_fragment_length).
UPDATE_STEPS = 64

_rng = np.random.default_rng(0)
#: RLlib's default PPO module for CartPole, small: a 4 -> 8 tanh encoder and a 8 -> 2 pi head.
PARAMS = {
    "encoder.actor_encoder.net.mlp.0.weight": _rng.standard_normal((8, 4)).astype(np.float32),
    "encoder.actor_encoder.net.mlp.0.bias": np.zeros(8, np.float32),
    "pi.net.mlp.0.weight": _rng.standard_normal((2, 8)).astype(np.float32),
    "pi.net.mlp.0.bias": np.zeros(2, np.float32),
    "pi.log_std_clip_param_const": np.array([20.0], np.float32),
}
CONFIG = build_config(
    algorithm="PPO",
    observation_space={"kind": "box", "shape": [4], "dtype": "<f4",
                       "low": np.full(4, -np.inf, np.float32), "high": np.full(4, np.inf, np.float32)},
    action_space={"kind": "discrete", "n": 2, "start": 0},
    rollout_fragment_length=UPDATE_STEPS,
    on_policy=True,
    model_config={"fcnet_hiddens": [8], "fcnet_activation": "tanh"},
)




def summary_of(output: str) -> dict[str, float]:
    """The numbers of the client's last ``summary:`` line."""
    lines = [line for line in output.splitlines() if line.startswith("summary: ")]
    assert lines, f"no summary line in:\n{output}"
    return {key: float(value) for key, value in re.findall(r"(\w+)=(\S+)", lines[-1])}


def check_chunk(state: dict) -> dict:
    """rlinks' server check of one chunk, with CartPole's spaces and PPO's extra outputs."""
    return check_episode_state(state, obs_shape=(4,), obs_dtype=np.float32, num_actions=2,
                               required_extra=("action_logp", "action_dist_inputs"))




class ScriptedRunner(RLinkTestServer):
    """The scripted peer of ``tests/peers.py`` with CartPole's config and weights the C++ policy runs."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("config", CONFIG)
        kwargs.setdefault("want_steps", UPDATE_STEPS)
        super().__init__(**kwargs)

    def set_state(self, agreed: frozenset[str]) -> dict:
        message = {"type": "SET_STATE", "state": build_state(PARAMS, self.weights_seq_no)}
        if "want_steps" in agreed:
            message["want_steps"] = self.want_steps
        return message

    def batch_messages(self) -> list[tuple[int, dict]]:
        return [(conn, m) for conn, m in self.messages if m["type"] in ("EPISODES", "EPISODES_AND_GET_STATE")]


class PacedRunner(ScriptedRunner):
    """An off-policy runner that paces its clients (``off_policy_backlog: pace``), for counting batches in flight.

    Its ``SET_CONFIG`` says off-policy and names ``paced_in_flight`` (``None``:
    names none, as an unpaced runner). It holds each batch's ``ACK`` back for
    ``hold_s`` (a timer sends it), as a paced runner confirms a batch only at
    its next ``sample()``, and records in :attr:`in_flight`, as each batch
    arrives, how many of the client's batches are sent and unconfirmed, that
    one included. The hold only gives a client room to run ahead; what a test
    asserts is the count. One client connection at a time.
    """

    def __init__(self, *, paced_in_flight: Optional[int] = 1, hold_s: float = 0.05, **kwargs) -> None:
        named = {} if paced_in_flight is None else {PACED_IN_FLIGHT_KEY: paced_in_flight}
        kwargs.setdefault("config", {**CONFIG, "on_policy": False, **named})
        super().__init__(**kwargs)
        self.hold_s = hold_s
        #: Per batch received: the client's batches sent and not yet confirmed, with it.
        self.in_flight: list[int] = []
        self._unconfirmed = 0
        self._send = threading.Lock()  # the handler's replies and the timers' ACKs share the socket
        self._timers: list[threading.Timer] = []

    def reply(self, conn, message: dict, agreed: frozenset[str]) -> None:
        if message["type"] == "EPISODES" and "ack" in agreed and "seq" in message:
            with self._send:
                self._unconfirmed += 1
                self.in_flight.append(self._unconfirmed)
            timer = threading.Timer(self.hold_s, self._confirm, (conn, message["seq"]))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()
            return
        with self._send:
            super().reply(conn, message, agreed)

    def _confirm(self, conn, seq: int) -> None:
        with self._send:
            self._unconfirmed -= 1
            try:
                conn.send({"type": "ACK", "seq": seq})
            except OSError as exc:  # the client went without waiting for it: the test sees it in errors
                self.errors.append(exc)

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
            timer.join(self.timeout)
        super().stop()


def check_the_paced_window(run_cartpole: Callable[[str, int], subprocess.CompletedProcess]) -> None:
    """``paced_in_flight`` (PROTOCOL.md 9) held to a client, as the Python client's test in test_offpolicy_flow.py.

    ``run_cartpole(address, steps)`` runs the client's CartPole example there. Against a :class:`PacedRunner`
    that names 1, never more than one batch is sent and unconfirmed (each waits for the last one's ACK, so it
    is sampled with the weights of then); one that names none lets the client run ahead while an ACK is held
    back. Counted, never timed: the batches sent and unconfirmed as each arrives at the runner.
    """
    for named in (1, None):
        with PacedRunner(paced_in_flight=named) as runner:
            result = run_cartpole(runner.address, 10 * UPDATE_STEPS)
        assert result.returncode == 0, result.stderr
        assert runner.errors == [] and "off-policy batches" in result.stderr
        summary = summary_of(result.stdout)
        assert summary["steps_acked"] == summary["steps_sent"] == 10 * UPDATE_STEPS
        assert len(runner.in_flight) == 10, runner.in_flight
        if named:
            assert max(runner.in_flight) == 1, runner.in_flight
        else:
            assert max(runner.in_flight) > 1, runner.in_flight  # the window was what held it back


class FakeLearner:
    """rlinks' own runner server, without Ray; a thread plays RLlib's part.

    Like ``RLinkEnvRunner.sample()`` it takes batches from the inbox and
    confirms them (which sends the ACKs), and every ``UPDATE_STEPS`` env
    steps it publishes new weights, which releases the parked on-policy clients.
    """

    def __init__(self, **settings) -> None:
        self.chunks: list[dict] = []
        self.batches: list[list[dict]] = []  # the chunks of each batch, as they came
        self.updates = 1
        self.server = RLinkServer(
            RLinkSettings(port=0, **settings), port=0, ingest=self._ingest,
            config_message=lambda _with_graph: {"type": "SET_CONFIG", "config": CONFIG},
            update_steps=UPDATE_STEPS, on_policy=True,
        )
        self.server.replace_weights(PARAMS, self.updates)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play_rllib, daemon=True)

    @property
    def port(self) -> int:
        return self.server.address[1]

    def _ingest(self, wire: list) -> tuple[list, int]:
        chunks = [check_chunk(state) for state in wire]
        self.chunks.extend(chunks)
        self.batches.append(chunks)
        return chunks, sum(c["t"] - c["t_started"] for c in chunks)

    def _play_rllib(self) -> None:
        steps = 0
        while not self._stop.is_set():
            batches = self.server.inbox.take(UPDATE_STEPS, 0.1)
            self.server.confirm(batches)
            steps += sum(b.steps for b in batches)
            if steps >= UPDATE_STEPS:
                steps = 0
                self.updates += 1
                self.server.publish_weights(PARAMS, self.updates)

    def __enter__(self) -> "FakeLearner":
        self.server.start()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self.server.stop()


class ServedPeer:
    """A runner that serves actions: rlinks' ``Connection`` (server role) on a real socket, on a thread.

    It answers every ``ACT`` with :func:`lean_rule` for the rows that want an
    action and records the rows. It takes one connection at a time.

    Args:
        hold_s: how long to hold back each of the first ``hold_acts`` answers
            while reading whatever else the client sends meanwhile: anything
            at all breaks the one-ACT-outstanding rule, which the
            ``Connection`` reports (kept in :attr:`violations`).
        answer: ``hook(act_index, envs, actions) -> (envs, actions)``: what to
            send instead (a misbehaving runner).
        drop: ``hook(conn_index, act_index, rows) -> bool``: close the
            connection instead of answering.
        extensions: what it agrees to.

    Attributes:
        acts: ``(conn_index, rows)`` for every ``ACT``, rows as
            ``protocol.served.ActRows``.
        violations: the protocol errors the client committed, as raised by the ``Connection``.
        errors: anything else that went wrong on the peer's thread.
    """

    def __init__(self, *, hold_s: float = 0.0, hold_acts: int = 0, answer=None, drop=None,
                 timeout: float = 10.0, extensions: tuple[str, ...] = ("served_actions", "want_steps", "ack")) -> None:
        self.hold_s, self.hold_acts, self.answer, self.drop, self.timeout = hold_s, hold_acts, answer, drop, timeout
        self.extensions = extensions
        self.acts: list[tuple[int, ActRows]] = []
        self.violations: list[ProtocolError] = []
        self.errors: list[BaseException] = []
        self.errors_received: list[tuple[str, str]] = []
        self.agreed: list[frozenset[str]] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> "ServedPeer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 2)
        self._listener.close()
        assert not self._thread.is_alive(), "the served-actions peer did not stop"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            index = self.connections
            self.connections += 1
            try:
                with sock:
                    self._handle(sock, index)
            except ProtocolError as exc:
                self.violations.append(exc)
            except (ConnectionResetError, BrokenPipeError):
                pass
            except BaseException as exc:  # recorded for the test to assert on
                self.errors.append(exc)

    def _handle(self, sock: socket.socket, index: int) -> None:
        conn = Connection(Role.SERVER, extensions=list(self.extensions), agent="served-peer/0")
        sock.settimeout(self.timeout)
        while not self._stop.is_set():
            data = sock.recv(1 << 16)
            if data:
                conn.receive_data(data)
            else:
                conn.receive_eof()
            while (event := conn.next_event()) is not None:
                if isinstance(event, ConnectionClosed):
                    return
                if isinstance(event, ErrorReceived):
                    self.errors_received.append((event.code, event.message))
                    return
                if isinstance(event, HandshakeDone):
                    self.agreed.append(event.extensions)
                elif isinstance(event, ConfigRequested):
                    conn.send_config(encode_message({"type": "SET_CONFIG", "config": CONFIG}))
                elif isinstance(event, StateRequested):
                    conn.send_state(encode_body_once(build_state(PARAMS, 1)), want_steps=UPDATE_STEPS)
                elif isinstance(event, ActReceived):
                    act = len(self.acts)
                    self.acts.append((index, event.rows))
                    if self.drop is not None and self.drop(index, act, event.rows):
                        return
                    if act < self.hold_acts:
                        self._read_meanwhile(sock, conn)
                    envs = [e for e, wants in zip(event.rows.env, event.rows.wants_action) if wants]
                    obs = np.asarray(event.rows.obs)[event.rows.wants_action]
                    actions = np.array([lean_rule(o) for o in obs], np.int64)
                    if self.answer is not None:
                        envs, actions = self.answer(act, envs, actions)
                    conn.send_actions(envs, actions, 7)
                else:
                    raise AssertionError(f"served peer: unexpected event {event}")
                sock.sendall(b"".join(conn.data_to_send()))
            if not data:
                return

    def _read_meanwhile(self, sock: socket.socket, conn: Connection) -> None:
        """Hold the answer back and take in all the client sends meanwhile: it must send nothing."""
        time.sleep(self.hold_s)
        sock.setblocking(False)
        try:
            while True:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                conn.receive_data(chunk)
        except BlockingIOError:
            pass
        finally:
            sock.settimeout(self.timeout)
        assert conn.next_event() is None  # raises UnsupportedMessage if anything came before the ACTIONS


def lean_rule(obs) -> int:
    """Push the cart the way the pole is falling: mean return ~200 on CartPole (random: ~22)."""
    return int(obs[3] > 0)


def cartpole_step(obs, action: int) -> np.ndarray:
    """gymnasium's CartPole-v1 step from observation ``obs``, as ``examples/cartpole.cpp`` computes it."""
    x, x_dot, theta, theta_dot = (float(v) for v in obs)
    force = 10.0 if action == 1 else -10.0
    cos, sin = math.cos(theta), math.sin(theta)
    temp = (force + 0.05 * theta_dot * theta_dot * sin) / 1.1
    theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1))
    x_acc = temp - 0.05 * theta_acc * cos / 1.1
    return np.array([x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc])


def rows_of(acts: list[tuple[int, ActRows]], conn: Optional[int] = None) -> list[tuple[int, int, dict]]:
    """Every row received, as ``(act_index, env, fields)``, in order (of connection ``conn`` only, if given)."""
    out = []
    for act, (index, rows) in enumerate(acts):
        if conn is not None and index != conn:
            continue
        for i, env in enumerate(rows.env):
            out.append((act, env, {"obs": np.asarray(rows.obs[i]), "reward": float(rows.reward[i]),
                                   "start": bool(rows.start[i]), "terminated": bool(rows.terminated[i]),
                                   "truncated": bool(rows.truncated[i])}))
    return out


@contextmanager
def directory_of(learner: FakeLearner, **settings) -> Iterator[Directory]:
    """A directory on loopback built as the learner builds its own (from runner ``settings``), listing ``learner``."""
    directory = Directory.from_settings(RLinkSettings(port=0, **settings)).start()
    try:
        directory.update([Endpoint(1, "127.0.0.1", learner.port)])
        yield directory
    finally:
        directory.stop()


def weights_before_ack(server, conn, message):
    """A ScriptedRunner answer: each batch's weights first, then its ACK.

    The runner acknowledges a batch when RLlib takes it, which can be after
    the weights it answered with (steps beyond an update's share wait for
    the next sample()): the last ACK then arrives after the last SET_STATE.
    """
    if message["type"] == "EPISODES_AND_GET_STATE":
        server.weights_seq_no += 1
        conn.send(server.set_state(frozenset({"want_steps"})))
        conn.send({"type": "ACK", "seq": message["seq"]})
        return HANDLED
    return None


# ScriptedRunner answers (on_message hooks) that every client's tests drive the same way.


def drop_before_acking_seq_2(server, conn, message):
    """Close the first connection on batch 2, unconfirmed: a reliable client must send seq 2 again."""
    return CLOSE if message.get("seq") == 2 and conn.index == 0 else None


def ack_seq_2_then_drop(server, conn, message):
    """Confirm batch 2 on the first connection, then close before its weights: it must never be sent again."""
    if message.get("seq") == 2 and conn.index == 0:
        conn.send({"type": "ACK", "seq": 2})
        return CLOSE
    return None


def shutting_down_for_good(server, conn, message):
    """``ERROR shutting_down`` at batch 2, and to every later connection: the learner's end."""
    if conn.index > 0 or message.get("seq") == 2:
        conn.send({"type": "ERROR", "code": "shutting_down", "message": "the learner is stopping"})
        return CLOSE
    return None


def refuse_batches_as_bad_episode(server, conn, message):
    """``ERROR bad_episode`` for an on-policy batch."""
    if message["type"] == "EPISODES_AND_GET_STATE":
        conn.send({"type": "ERROR", "code": "bad_episode", "message": "rewards: NaN"})
        return CLOSE
    return None


def pong_instead_of_weights(server, conn, message):
    """A reply out of turn: ``PONG`` for a ``GET_STATE``."""
    if message["type"] == "GET_STATE":
        conn.send({"type": "PONG"})
        return HANDLED
    return None
