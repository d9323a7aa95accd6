"""EnvClient and PolicyClient: what a simulator's loop calls, against scripted runners (the rules) and a real one."""

from __future__ import annotations

import numpy as np
import pytest

from peers import ABORT, HANDLED, TEST_CONFIG, RLinkTestServer
from rlinks_rllib.client import EnvClient, NotAgreed, PolicyClient
from rlinks_rllib.client.policies.sampling import log_prob
from rlinks_rllib.protocol.episodes import ACTIONS, OBSERVATIONS, REWARDS
from rlinks_rllib.protocol.weights import build_state
from test_client_served import answer_acts

FAST = dict(timeout=5.0, connect_timeout=2.0, backoff_initial=0.01, backoff_cap=0.05)
SHARE = 16  # the scripted runner's want_steps

_rng = np.random.default_rng(0)
#: RLlib's default MLP for a 4-vector and 2 actions, one hidden layer of 8.
PARAMS = {
    "encoder.encoder.net.mlp.0.weight": _rng.normal(size=(8, 4)).astype(np.float32),
    "encoder.encoder.net.mlp.0.bias": np.zeros(8, np.float32),
    "pi.net.mlp.0.weight": _rng.normal(size=(2, 8)).astype(np.float32),
    "pi.net.mlp.0.bias": np.zeros(2, np.float32),
}


def our_weights(server: RLinkTestServer, conn, message: dict):
    """Answer GET_STATE and on-policy batches with PARAMS (a numbered version each time)."""
    kind = message["type"]
    if kind not in ("GET_STATE", "EPISODES_AND_GET_STATE"):
        return None
    if kind == "EPISODES_AND_GET_STATE":
        conn.send({"type": "ACK", "seq": message["seq"]})
        server.weights_seq_no += 1
    conn.send({"type": "SET_STATE", "state": build_state(PARAMS, server.weights_seq_no), "want_steps": SHARE})
    return HANDLED


@pytest.fixture
def runner():
    servers = []

    def start(**kwargs) -> RLinkTestServer:
        kwargs.setdefault("on_message", our_weights)
        kwargs.setdefault("extensions", ("want_steps", "ack", "served_actions"))
        servers.append(RLinkTestServer(**kwargs).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def batches(server: RLinkTestServer, kind: str = "EPISODES_AND_GET_STATE") -> list[dict]:
    return [m for _, m in server.messages if m["type"] == kind]


def walk(client: EnvClient, steps: int, *, end_every: int = 5, obs_of=lambda t: np.full(4, t / 100, np.float32)):
    """A scripted one-env loop: episodes of ``end_every`` steps, observation t/100 at step t."""
    obs = obs_of(0)
    for t in range(1, steps + 1):
        client.act(obs)
        obs = obs_of(t)
        done = t % end_every == 0
        client.report(1.0, obs, terminated=done)
        if done:
            obs = obs_of(t)


def test_one_env_sends_each_share_as_it_completes_and_acts_with_the_weights_it_got(runner):
    server = runner()
    with EnvClient(server.address, **FAST) as client:
        walk(client, 2 * SHARE + 3)
        assert client.mode == "local" and client.on_policy
        assert client.stats.weights_seq_no == 3 and client.stats.episodes == 7
    sent = batches(server)
    assert [m["timesteps"] for m in sent] == [SHARE, SHARE]  # the 3 steps of an unfinished share stay unsent
    first = sent[0]["episodes"]
    assert [len(e[ACTIONS]["data"]) for e in first] == [5, 5, 5, 1]  # three episodes ended, the fourth cut
    np.testing.assert_allclose(first[0][OBSERVATIONS]["data"][:, 0], np.arange(6) / 100, rtol=1e-6)
    assert first[0][REWARDS]["data"].tolist() == [1.0] * 5


def test_n_envs_one_act_per_tick_and_some_envs_on_their_own(runner):
    server = runner()
    with EnvClient(server.address, num_envs=3, **FAST) as client:
        obs = np.zeros((3, 4), np.float32)
        actions = client.act(obs)
        assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1}
        client.report([1.0, 2.0, 3.0], obs + 1, [False, True, False], False)
        obs = obs + 1
        # Env 1 ended: its next act starts a new episode; env 2 steps alone.
        client.act(obs[[0, 1]], env=[0, 1])
        client.report([1.0, 1.0], obs[[0, 1]] + 1, False, False, env=[0, 1])
        assert client.stats.episodes == 1 and client.stats.mean_return == 2.0
        client.act(obs[[2]], env=[2])
        with pytest.raises(ValueError, match="env ids must be in 0..2"):
            client.act(obs[[0]], env=[3])


def test_a_loop_that_breaks_the_order_is_told_what_to_fix(runner):
    server = runner()
    with EnvClient(server.address, **FAST) as client:
        with pytest.raises(ValueError, match="no action to report on: call act"):
            client.report(1.0, np.zeros(4, np.float32))
        client.act(np.zeros(4, np.float32))
        with pytest.raises(ValueError, match="call report"):
            client.act(np.zeros(4, np.float32))
        client.report(1.0, np.ones(4, np.float32))
        with pytest.raises(ValueError, match="observation last given to report"):
            client.act(np.zeros(4, np.float32))


def test_log_action_records_the_simulators_action_with_the_policys_log_probability(runner):
    from rlinks_rllib.client import NumpyPolicy

    server = runner()
    obs = np.array([0.5, -0.2, 0.1, 0.3], np.float32)
    with EnvClient(server.address, **FAST) as client:
        for t in range(SHARE):
            client.log_action(obs, t % 2)
            client.report(0.0, obs)
    [episode] = batches(server)[0]["episodes"]
    logits = NumpyPolicy(PARAMS, TEST_CONFIG["action_space"]).action_dist_inputs(obs[None])
    assert episode[ACTIONS]["data"].tolist() == [t % 2 for t in range(SHARE)]
    logp = episode["extra_model_outputs"]["action_logp"]["data"]
    np.testing.assert_allclose(logp[:2], log_prob(NumpyPolicy(PARAMS, TEST_CONFIG["action_space"]).action_space,
                                                   np.repeat(logits, 2, 0), np.array([0, 1])), rtol=1e-5)


def test_an_episode_not_trained_on_is_played_and_never_sent(runner):
    server = runner()
    with EnvClient(server.address, **FAST) as client:
        client.start_episode(np.zeros(4, np.float32), train=False)
        walk(client, SHARE, end_every=SHARE)  # played with the policy, never recorded
        walk(client, SHARE)
    [sent] = batches(server)
    assert sent["timesteps"] == SHARE and len(sent["episodes"]) == SHARE // 5 + 1


def test_off_policy_batches_go_from_the_sender_thread(runner):
    server = runner()
    with EnvClient(server.address, on_policy=False, weights_every_s=0.0, **FAST) as client:
        walk(client, 3 * 64 + 10)  # the config's rollout_fragment_length is 64
    assert [m["timesteps"] for m in batches(server, "EPISODES")] == [64, 64, 64, 10]  # the rest goes at close
    assert not batches(server)


def test_a_dropped_connection_is_reopened_and_the_share_resent(runner):
    dropped = []

    def drop_once(server, conn, message):
        if message["type"] == "EPISODES_AND_GET_STATE" and not dropped:
            dropped.append(True)
            return ABORT
        return our_weights(server, conn, message)

    server = runner(on_message=drop_once)
    with EnvClient(server.address, reliable=True, **FAST) as client:
        walk(client, 2 * SHARE)
        assert client.stats.delivery.reconnects == 1
        assert client.stats.delivery.steps_acked == 2 * SHARE
    assert server.seqs() == [1, 1, 2]


def test_served_rows_end_and_start_episodes_in_one_act_and_close_ends_the_rest(runner):
    server = runner(on_message=answer_acts())
    with EnvClient(server.address, num_envs=2, inference="served", **FAST) as client:
        obs = np.zeros((2, 4), np.float32)
        assert client.act(obs).tolist() == [1, 1] and client.mode == "served"
        client.report([1.0, 2.0], obs + 1, [True, False], False)
        client.act(obs + 1)  # env 0: an ending row, then a start row; env 1 goes on
        client.report([3.0, 4.0], obs + 2, False, False)
        with pytest.raises(NotAgreed, match="did not agree to served_taken"):
            client.log_action(obs + 2, [0, 0])
    first, second, last = [m for _, m in server.messages if m["type"] == "ACT"]
    assert first["start"].tolist() == [True, True]
    assert second["env"] == [0, 0, 1] and second["start"].tolist() == [False, True, False]
    assert second["terminated"].tolist() == [True, False, False] and second["reward"].tolist() == [1.0, 0.0, 2.0]
    assert last["env"] == [0, 1] and last["truncated"].tolist() == [True, True]
    assert last["reward"].tolist() == [3.0, 4.0]


def test_served_log_action_and_untrained_episodes_go_as_served_taken_columns(runner):
    server = runner(on_message=answer_acts(), extensions=("want_steps", "ack", "served_actions", "served_taken"))
    with EnvClient(server.address, num_envs=2, inference="served", **FAST) as client:
        obs = np.zeros((2, 4), np.float32)
        client.start_episode(obs[1:], env=[1], train=False)
        client.act(obs)
        client.report([1.0, 1.0], obs + 1, [True, False], False)
        client.log_action(obs + 1, [0, 1])  # env 0: an ending row first, then the taken rows
    first, second = [m for _, m in server.messages if m["type"] == "ACT"][:2]
    assert "taken_mask" not in first and first["train"].tolist() == [True, False]
    assert second["env"] == [0, 0, 1] and second["taken_mask"].tolist() == [False, True, True]
    assert np.asarray(second["taken"])[1:].tolist() == [0, 1] and second["train"].tolist() == [True, True, False]


def test_the_learners_end_ends_the_with_block_quietly(runner):
    def shut_down(server, conn, message):
        if message["type"] == "EPISODES_AND_GET_STATE":
            conn.send({"type": "ERROR", "code": "shutting_down", "message": "training is over"})
            return ABORT
        return our_weights(server, conn, message)

    server = runner(on_message=shut_down)
    with EnvClient(server.address, reliable=False, **FAST) as client:
        walk(client, 10 * SHARE)
    assert not client.running and client.stats.steps == SHARE


def test_policy_client_keeps_the_old_calls_and_their_meaning(runner):
    server = runner()
    client = PolicyClient(f"http://{server.address}", inference_mode="local", **FAST)
    assert client.address == server.address
    eval_id = client.start_episode(training_enabled=False)
    episode_id = client.start_episode(episode_id="e1")
    obs = np.zeros(4, np.float32)
    client.get_action(eval_id, obs)
    for t in range(SHARE):
        if t % 4 == 0:
            client.log_action(episode_id, obs, 1)
        else:
            client.get_action(episode_id, obs)
        client.log_returns(episode_id, 0.5)
        client.log_returns(episode_id, 0.25)  # rewards between two actions add up
    client.end_episode(episode_id, obs)
    client.end_episode(eval_id, obs)
    batch = [client.start_episode(), client.start_episode()]
    actions = client.get_action(batch, {eid: obs for eid in batch})  # one forward pass for both
    assert set(actions) == set(batch) and all(a in (0, 1) for a in actions.values())
    for eid in batch:
        client.end_episode(eid, obs)
    with pytest.raises(ValueError, match="no running episode 'e1'"):
        client.get_action("e1", obs)
    client.close()
    [episode] = batches(server)[0]["episodes"][:1]  # the training_enabled=False episode never went
    assert episode[REWARDS]["data"].tolist() == [0.75] * SHARE and episode["is_terminated"]
    assert episode[ACTIONS]["data"][::4].tolist() == [1] * (SHARE // 4)


def test_the_loop_in_docs_simulator_md_runs_as_printed_until_the_learner_ends(runner):
    import re
    import sys

    from harness import ROOT

    sys.path.insert(0, str(ROOT / "examples"))
    from dummy_cartpole_client import CartPole

    shares = []

    def two_shares(server, conn, message):
        if message["type"] == "EPISODES_AND_GET_STATE":
            shares.append(message["timesteps"])
            if len(shares) == 2:
                conn.send({"type": "ERROR", "code": "shutting_down", "message": "the learner is done"})
                return ABORT
        return our_weights(server, conn, message)

    server = runner(on_message=two_shares)
    loop = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "SIMULATOR.md").read_text(), re.S).group(1)
    exec(loop.replace('"127.0.0.1:5555"', f"{server.address!r}, reliable=False"), {"env": CartPole(0)})
    assert shares == [SHARE, SHARE]
