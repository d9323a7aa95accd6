"""RLinkClient.act (served_actions): scripted peers for the rules and errors, a real RLinkEnvRunner for the rest."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from peers import ABORT, HANDLED, RLinkTestServer
from rlinks_rllib.client import NotAgreed, ProtocolViolation, RLinkClient, ServerTimeout
from rlinks_rllib.client.network.connection import DEFAULT_EXTENSIONS

FAST = dict(timeout=5.0, connect_timeout=2.0, backoff_initial=0.01, backoff_cap=0.05)
SERVED = ("want_steps", "ack", "served_actions")


def answer_acts(actions_for=lambda message: [1] * len(message["env"]), seq_no: int = 7, extra=None):
    """An ``on_message`` hook that answers each ``ACT`` with one action per row that wants one."""

    def hook(server, conn, message):
        if message["type"] != "ACT":
            return None
        if extra is not None:
            action = extra(server, conn, message)
            if action is not None:
                return action
        wants = ~(np.asarray(message["terminated"]) | np.asarray(message["truncated"]))
        env = [e for e, w in zip(message["env"], wants) if w]
        conn.send({"type": "ACTIONS", "env": env, "actions": np.asarray(actions_for(message), np.int64)[:len(env)],
                   "weights_seq_no": seq_no})
        return HANDLED

    return hook


@pytest.fixture
def serve():
    servers = []

    def start(**kwargs) -> RLinkTestServer:
        servers.append(RLinkTestServer(**kwargs).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def acts(server: RLinkTestServer) -> list[dict]:
    return [m for _, m in server.messages if m["type"] == "ACT"]


def obs(k: int, value: float = 0.0) -> np.ndarray:
    return np.full((k, 4), value, np.float32)


def test_served_actions_is_offered_by_default():
    assert "served_actions" in DEFAULT_EXTENSIONS


def test_act_sends_the_columns_and_returns_the_actions(serve):
    server = serve(extensions=SERVED, on_message=answer_acts(lambda m: [0, 1, 1]))
    with RLinkClient(server.address, **FAST) as client:
        first = client.act([0, 1, 2], obs(3), [0.0] * 3, [True] * 3, [False] * 3, [False] * 3)
        # Env 1 ends and starts again in the same call; env 2 ends for good.
        second = client.act([0, 1, 1, 2], obs(4, 1.0), [1.0, 1.0, 0.0, 1.0], [False, False, True, False],
                            [False, True, False, False], [False, False, False, True])
        assert client.stats.acts == 2 and client.stats.episodes_interrupted == 0
    assert first.env == [0, 1, 2] and first.actions.tolist() == [0, 1, 1] and first.weights_seq_no == 7
    assert first.interrupted == [] and len(first) == 3
    assert second.env == [0, 1] and second.actions.tolist() == [0, 1]
    sent = acts(server)[1]
    assert sent["env"] == [0, 1, 1, 2] and sent["start"].tolist() == [False, False, True, False]
    assert sent["terminated"].tolist() == [False, True, False, False] and sent["obs"].shape == (4, 4)
    assert sent["reward"].dtype == np.float32


def test_a_server_that_does_not_agree_raises_not_agreed_and_the_connection_stays(serve):
    server = serve(extensions=("want_steps", "ack"))
    with RLinkClient(server.address, **FAST) as client:
        with pytest.raises(NotAgreed, match="did not agree to served_actions") as info:
            client.act([0], obs(1), [0.0], [True], [False], [False])
        assert info.value.extension == "served_actions"
        assert client.connected and client.get_state().seq_no == 1
    assert acts(server) == []


def test_plain_rllib_server_does_not_serve_actions(serve):
    server = serve(plain=True)
    with RLinkClient(server.address, **FAST) as client:
        with pytest.raises(NotAgreed, match="RLlib's own server"):
            client.act([0], obs(1), [0.0], [True], [False], [False])


def test_act_needs_served_actions_in_the_offer_and_well_formed_rows(serve):
    server = serve(extensions=SERVED, on_message=answer_acts())
    with RLinkClient(server.address, extensions=("ack",), **FAST) as client:
        with pytest.raises(ValueError, match="needs the served_actions extension"):
            client.act([0], obs(1), [0.0], [True], [False], [False])
    with RLinkClient(server.address, **FAST) as client:
        with pytest.raises(ValueError, match="no open episode"):
            client.act([0], obs(1), [0.0], [False], [False], [False])
        with pytest.raises(ValueError, match="both starts and ends"):
            client.act([0], obs(1), [0.0], [True], [True], [False])
        with pytest.raises(ValueError, match="NaN"):
            client.act([0], obs(1), [float("nan")], [True], [False], [False])
        with pytest.raises(ValueError, match="one entry per row"):
            client.act([0, 1], obs(2), [0.0], [True, True], [False, False], [False, False])
        client.act([0], obs(1), [0.0], [True], [False], [False])
        client.act([0], obs(1), [1.0], [False], [True], [False])  # ends env 0's episode
        with pytest.raises(ValueError, match="no open episode"):
            client.act([0], obs(1), [1.0], [False], [False], [False])
    assert len(acts(server)) == 2


def test_actions_for_the_wrong_envs_are_a_protocol_violation(serve):
    def wrong(server, conn, message):
        conn.send({"type": "ACTIONS", "env": [1, 0], "actions": np.zeros(2, np.int64), "weights_seq_no": 1})
        return HANDLED

    server = serve(extensions=SERVED, on_message=answer_acts(extra=wrong))
    with RLinkClient(server.address, **FAST) as client:
        with pytest.raises(ProtocolViolation, match="ACTIONS"):
            client.act([0, 1], obs(2), [0.0, 0.0], [True, True], [False, False], [False, False])
        assert not client.connected


def test_an_act_never_answered_times_out_within_timeout(serve):
    server = serve(extensions=SERVED, on_message=answer_acts(extra=lambda s, c, m: HANDLED))
    with RLinkClient(server.address, **{**FAST, "timeout": 0.5}) as client:
        started = time.monotonic()
        with pytest.raises(ServerTimeout, match="ACTIONS.*training step"):
            client.act([0], obs(1), [0.0], [True], [False], [False])
        assert time.monotonic() - started < 3.0


def test_after_a_reconnect_every_open_episode_starts_again(serve, caplog):
    """The runner closed the episodes when the connection dropped: continuing rows go as start rows."""
    state = {"acts": 0}

    def drop_second(server, conn, message):
        state["acts"] += 1
        return ABORT if state["acts"] == 2 else None

    server = serve(extensions=SERVED, on_message=answer_acts(extra=drop_second))
    caplog.set_level(logging.WARNING)
    with RLinkClient(server.address, reliable=True, **FAST) as client:
        client.act([0, 1, 2], obs(3), [0.0] * 3, [True] * 3, [False] * 3, [False] * 3)
        # Env 0 continues, env 1 ends, env 2 ends and restarts: the connection drops on this ACT.
        reply = client.act([0, 1, 2, 2], obs(4, 2.0), [1.0] * 4, [False, False, False, True],
                           [False, True, False, False], [False, False, True, False])
        assert client.stats.reconnects == 1 and client.stats.episodes_interrupted == 3
        later = client.act([0], obs(1, 3.0), [1.0], [False], [False], [False])  # env 0's new episode is open
    assert reply.interrupted == [0, 1, 2] and reply.env == [0, 2] and later.interrupted == []
    first, dropped, resent, last = acts(server)
    assert dropped["env"] == [0, 1, 2, 2]
    # Env 0's row starts a new episode, env 1's ending row is left out, env 2's ending row too (its start stays).
    assert resent["env"] == [0, 2] and resent["start"].tolist() == [True, True]
    assert resent["obs"].tolist() == [[2.0] * 4] * 2
    assert last["start"].tolist() == [False]
    assert "reconnecting" in caplog.text


def test_a_later_call_after_a_drop_restarts_the_episodes_too(serve):
    """Without reliable mode the dropped call raises; the next act() sends start rows."""
    state = {"acts": 0}

    def drop_second(server, conn, message):
        state["acts"] += 1
        return ABORT if state["acts"] == 2 else None

    server = serve(extensions=SERVED, on_message=answer_acts(extra=drop_second))
    with RLinkClient(server.address, **FAST) as client:
        client.act([0], obs(1), [0.0], [True], [False], [False])
        with pytest.raises(ConnectionError):
            client.act([0], obs(1), [1.0], [False], [False], [False])
        reply = client.act([0], obs(1), [1.0], [False], [False], [False])
    assert reply.interrupted == [0] and acts(server)[-1]["start"].tolist() == [True]


# -- a real RLinkEnvRunner in this process ------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_act_against_a_real_runner_records_the_episodes(ray_local):
    from ray.rllib.algorithms.ppo import PPOConfig

    from harness import CARTPOLE
    from rlinks_rllib import RLinkEnvRunner

    config = (
        PPOConfig()
        .environment(observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
                     env_config={"port": 0})
        .env_runners(num_env_runners=0, sample_timeout_s=4.0)
        .training(train_batch_size_per_learner=200)
    )
    runner = RLinkEnvRunner(config=config, worker_index=0)
    try:
        host, port = runner.address
        with RLinkClient(f"{host}:{port}", timeout=30.0) as client:
            assert "served_actions" in client.server_extensions
            rng = np.random.default_rng(0)
            envs = [0, 1]
            reply = client.act(envs, rng.uniform(-0.05, 0.05, (2, 4)).astype(np.float32), [0.0, 0.0],
                               [True, True], [False, False], [False, False])
            served = 0
            for step in range(60):
                assert reply.env == envs and reply.actions.shape == (2,) and set(reply.actions.tolist()) <= {0, 1}
                done = step % 20 == 19
                if done:  # both episodes end; both start again in the same ACT
                    reply = client.act(envs + envs, rng.uniform(-0.05, 0.05, (4, 4)).astype(np.float32),
                                       [1.0] * 4, [False, False, True, True], [True, True, False, False],
                                       [False] * 4)
                else:
                    reply = client.act(envs, rng.uniform(-0.05, 0.05, (2, 4)).astype(np.float32), [1.0, 1.0],
                                       [False, False], [False, False], [False, False])
                served += 2
            assert reply.weights_seq_no >= 0 and client.stats.acts == 61
            episodes = runner.sample()  # wants 200, gets the 120 served steps at its timeout
        assert sum(len(e) for e in episodes) == served
        assert sum(e.is_terminated for e in episodes) == 6
        stats = runner.get_transport_stats()
        assert stats["served_steps"] == served and stats["errors_total"] == 0
    finally:
        runner.stop()


def test_act_rows_sends_what_act_sends(serve):
    """EnvClient's served mode sends ActRows it built (act_rows): the same ACT as act() with those columns."""
    from rlinks_rllib.protocol.served import act_message, read_act

    server = serve(extensions=SERVED, on_message=answer_acts(lambda m: [0, 1]))
    columns = ([3, 4], obs(2, 0.5), [0.0, 0.0], [True, True], [False, False], [False, False])
    with RLinkClient(server.address, **FAST) as client:
        by_act = client.act(*columns)
        by_rows = client.act_rows(read_act(act_message([3, 4], obs(2, 0.5), [1.0, 2.0], [False, False],
                                                       [False, False], [False, False])))
    assert by_act.env == by_rows.env == [3, 4] and by_rows.actions.tolist() == [0, 1]
    first, second = acts(server)
    assert first.keys() == second.keys() and second["reward"].tolist() == [1.0, 2.0]
    assert second["start"].tolist() == [False, False] and second["obs"].tolist() == first["obs"].tolist()


def test_env_client_served_refuses_a_nan_reward_and_names_an_env_whose_observation_changed(serve):
    from rlinks_rllib.client import EnvClient

    server = serve(extensions=SERVED, on_message=answer_acts())
    with EnvClient(server.address, num_envs=3, inference="served", **FAST) as client:
        client.act(obs(3))
        with pytest.raises(ValueError, match="env 1: the reward must be a finite number"):
            client.report([1.0, float("nan"), 1.0], obs(3, 1.0))
        client.report([2.0, 3.0], obs(2, 1.0), env=[1, 2])  # env 0's outcome was taken before env 1's refusal
        changed = obs(3, 1.0)
        changed[2, 0] = 9.0
        with pytest.raises(ValueError, match=r"env 2: act\(\) must take the observation last given"):
            client.act(changed)
        assert client.act(obs(3, 1.0)).tolist() == [1, 1, 1]
    sent = acts(server)
    assert len(sent) == 2 and sent[1]["env"] == [0, 1, 2] and sent[1]["reward"].tolist() == [1.0, 2.0, 3.0]
    assert sent[1]["start"].tolist() == [False, False, False]
