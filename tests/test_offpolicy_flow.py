"""Off-policy flow: one fragment per sample() on average, a bounded backlog, and chunks the replay buffer can take.

The pure parts (the step credit, episode aliases, the inbox's drop) are
checked alone; the replay buffer against RLlib's own episode buffers, built
for real; the runner with a real client that sends faster than RLlib takes.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers import EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer

from rlinks_rllib.server.network.inbox import Batch, Inbox
from rlinks_rllib.server.delivery.offpolicy import EpisodeAliases, StepCredit, backlog_steps
from rlinks_rllib.training.replay import ReplaySafe, adopt, replay_safe

# --- the step credit ------------------------------------------------------------------


def test_the_credit_hands_over_one_fragment_per_call_on_average():
    credit = StepCredit(5, max_debt=20)
    assert credit.wanted() == 5
    credit.handed(12)  # whole batches went past the fragment
    assert credit.wanted() == 0  # the surplus covers the next call
    credit.handed(0)
    assert credit.wanted() == 3
    credit.handed(3)
    assert credit.balance == 0
    handed = [12, 0, 3, 5, 9, 0, 1]
    for steps in handed:
        credit.handed(steps)
    assert credit.balance == sum(handed) - 5 * len(handed)


def test_a_short_call_lets_later_ones_take_more_but_the_debt_is_bounded():
    credit = StepCredit(5, max_debt=12)
    credit.handed(1)
    assert credit.wanted() == 9
    for _ in range(10):  # no simulator for a long time
        credit.handed(0)
    assert credit.balance == -12 and credit.wanted() == 17


def test_the_default_backlog_is_a_few_fragments_and_a_setting_wins():
    assert backlog_steps(0, 5) == 64
    assert backlog_steps(0, 100) == 400
    assert backlog_steps(30, 100) == 30


# --- episode aliases -----------------------------------------------------------------


def _episode(id_: str, t0: int, n: int, *, done: bool = False) -> SingleAgentEpisode:
    """``n`` steps of episode ``id_`` from ``t0``; observation ``t`` is ``[t]``, so seams can be checked."""
    return SingleAgentEpisode(
        id_=id_, observations=[np.array([float(t)], np.float32) for t in range(t0, t0 + n + 1)],
        actions=list(range(n)), rewards=[1.0] * n, t_started=t0, terminated=done, len_lookback_buffer=0)


def test_after_a_dropped_chunk_its_episode_goes_on_under_a_new_id():
    aliases = EpisodeAliases()
    aliases.dropped([_episode("a", 5, 5), _episode("b", 0, 5, done=True)])
    later = [_episode("a", 10, 5), _episode("c", 0, 5)]
    assert aliases.rename(later) == 1
    assert [e.id_ for e in later] == ["a~1", "c"]
    after = _episode("a", 15, 5)
    aliases.rename([after])
    assert after.id_ == "a~1"  # the chunks after it follow the new id
    aliases.dropped([_episode("a", 20, 5)])
    last = _episode("a", 25, 5, done=True)
    aliases.rename([last])
    assert last.id_ == "a~2" and len(aliases) == 0  # a second gap, a second id; an ended episode is forgotten


def test_aliases_are_bounded():
    aliases = EpisodeAliases(max_episodes=3)
    aliases.dropped([_episode(str(i), 0, 2) for i in range(10)])
    assert len(aliases) == 3


# --- the inbox's drop ----------------------------------------------------------------


def _batch(steps: int, name: str) -> Batch:
    return Batch(episodes=[name], steps=steps, nbytes=10 * steps, weights_seq_no=0, client=name)


def test_the_inbox_drops_its_oldest_batches_down_to_the_backlog_and_keeps_the_newest():
    drained = []
    inbox = Inbox(max_steps=20, max_bytes=10**9, on_drained=lambda: drained.append(True))
    for i, steps in enumerate([5, 5, 5, 5, 5]):
        inbox.put(_batch(steps, f"b{i}"))
    assert inbox.full()
    dropped = inbox.drop_oldest(12)
    assert [b.client for b in dropped] == ["b0", "b1", "b2"]
    assert inbox.steps == 10 and inbox.nbytes == 100 and drained == [True]
    inbox.put(_batch(50, "big"))
    assert [b.client for b in inbox.drop_oldest(12)] == ["b3", "b4"]
    assert inbox.steps == 50  # the newest batch stays, however large
    assert inbox.drop_oldest(12) == []


# --- the replay buffer fits chunks in --------------------------------------------------


@pytest.fixture(params=[EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer])
def buffer(request):
    built = request.param(capacity=1000)
    assert adopt(built) and isinstance(built, ReplaySafe) and not adopt(built)
    return built


def _stored(buffer) -> list[tuple[str, int, int]]:
    return [(e.id_, e.t_started, e.t) for e in buffer.episodes]


def test_a_chunk_repeated_by_a_reconnect_is_stored_once(buffer):
    buffer.add([_episode("a", 0, 5), _episode("a", 5, 5)])
    buffer.add([_episode("a", 5, 5)])  # the same batch again: its ACK was lost
    assert _stored(buffer) == [("a", 0, 10)] and buffer.get_num_timesteps() == 10
    assert buffer.fitted["chunks_duplicate"] == 1 and buffer.fitted["steps_duplicate"] == 5


def test_a_chunk_that_overlaps_keeps_only_its_new_steps(buffer):
    buffer.add(_episode("a", 0, 10))
    buffer.add(_episode("a", 8, 5))
    assert _stored(buffer) == [("a", 0, 13)] and buffer.get_num_timesteps() == 13
    assert buffer.fitted["chunks_trimmed"] == 1 and buffer.fitted["steps_duplicate"] == 2


def test_chunks_that_arrive_out_of_order_are_kept_whole_under_two_ids(buffer):
    buffer.add(_episode("a", 0, 5))
    buffer.add(_episode("a", 10, 5))  # from the runner the simulator moved to, before the other's
    buffer.add(_episode("a", 15, 5))  # continues the part above
    buffer.add(_episode("a", 5, 5))  # the late one continues the start
    assert _stored(buffer) == [("a", 0, 10), ("a~1", 10, 20)]
    assert buffer.get_num_timesteps() == 20 and buffer.fitted["chunks_renamed"] == 1
    assert len(buffer.sample(num_items=8, **({"n_step": 1} if type(buffer).__mro__[2] is EpisodeReplayBuffer
                                             else {}))) > 0


def test_a_chunk_whose_observation_does_not_meet_the_last_starts_a_new_part(buffer):
    buffer.add(_episode("a", 0, 5))
    other = _episode("a", 5, 5)
    other.observations[0] = np.array([99.0], np.float32)
    buffer.add(other)
    assert _stored(buffer) == [("a", 0, 5), ("a~1", 5, 10)]


def test_a_chunk_after_its_episode_ended_is_a_duplicate(buffer):
    buffer.add(_episode("a", 0, 5, done=True))
    buffer.add(_episode("a", 3, 2, done=True))
    assert _stored(buffer) == [("a", 0, 5)] and buffer.fitted["chunks_duplicate"] == 1


def test_a_chunk_of_an_evicted_episode_is_stored_as_a_new_part():
    buffer = PrioritizedEpisodeReplayBuffer(capacity=12)
    adopt(buffer)
    buffer.add(_episode("a", 0, 8))
    buffer.add(_episode("b", 0, 8))  # evicts "a"
    buffer.add(_episode("a", 8, 4))
    assert [e.id_ for e in buffer.episodes][-1].startswith("a")
    assert buffer.get_num_timesteps() <= 12


def test_only_single_agent_episode_buffers_are_made_safe():
    from ray.rllib.utils.replay_buffers import MultiAgentEpisodeReplayBuffer

    with pytest.raises(TypeError):
        replay_safe(MultiAgentEpisodeReplayBuffer)
    assert not adopt(MultiAgentEpisodeReplayBuffer(capacity=10)) and not adopt(None)


def test_the_learner_config_adds_the_callback():
    from rlinks_rllib.bundled import bundled_config
    from rlinks_rllib.training.config_file import build_algorithm_config, load_spec
    from rlinks_rllib.training.replay import RLinkReplaySafe

    config = build_algorithm_config(load_spec(bundled_config("sac_pendulum")))
    callbacks = config.callbacks_class
    assert RLinkReplaySafe in (callbacks if isinstance(callbacks, (list, tuple)) else [callbacks])


# --- the runner, with a client that sends faster than RLlib takes ---------------------------


def _dqn_runner(epsilon=None, **env_config):
    from ray.rllib.algorithms.dqn import DQNConfig

    from harness import CARTPOLE
    from rlinks_rllib import RLinkEnvRunner

    config = DQNConfig().environment(
        observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
        env_config={"port": 0, **env_config},
    ).env_runners(num_env_runners=0, rollout_fragment_length=5, sample_timeout_s=2.0)
    if epsilon is not None:
        config.training(epsilon=epsilon)
    return RLinkEnvRunner(config=config, worker_index=0)


@pytest.mark.timeout(120)
def test_a_local_dqn_client_explores_along_the_schedule_at_rllibs_step_count(ray_local):
    """The ``timestep`` extension: new weights bring RLlib's step count, and QPolicy's epsilon follows it."""
    from ray.rllib.core import COMPONENT_RL_MODULE
    from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

    from rlinks_rllib.client import EnvClient

    runner = _dqn_runner(epsilon=[[0, 1.0], [100, 0.1]])
    try:
        errors, thread = _send_batches("127.0.0.1:%d" % runner.address[1], batches=4, steps=10)
        _sample_until(runner, thread, 40)
        assert not errors, errors
        with EnvClient("127.0.0.1:%d" % runner.address[1], on_policy=False) as env:
            env.act(np.zeros(4, np.float32))
            assert env.policy.epsilon == 1.0  # no new weights yet: the schedule's start
            runner.set_state({COMPONENT_RL_MODULE: runner.module.get_state(), WEIGHTS_SEQ_NO: 1})
            env.refresh_weights()
            steps = runner.num_env_steps_sampled_lifetime
            assert steps >= 30 and env.policy.epsilon == pytest.approx(1.0 - 0.9 * min(steps, 100) / 100)
    finally:
        runner.stop()


def _send_batches(address: str, batches: int, steps: int) -> tuple[list, object]:
    """A thread that sends ``batches`` off-policy batches of ``steps`` steps, built beforehand, then waits for ACKs.

    Built beforehand, the batches go out as fast as the ACK window lets them.
    """
    import threading

    from rlinks_rllib.client import RLinkClient
    from rlinks_rllib.protocol.episode_builder import EpisodeBuilder

    rng = np.random.default_rng(0)
    builder = EpisodeBuilder()
    messages = []
    for _ in range(batches):
        for _ in range(steps):
            if builder.episode_id is None:
                builder.reset(rng.normal(size=4).astype(np.float32))
            builder.step(int(rng.integers(2)), 1.0, rng.normal(size=4).astype(np.float32),
                         bool(rng.random() < 1 / 30), False,
                         extra={"action_logp": np.float32(-0.69), "action_dist_inputs": np.zeros(2, np.float32)})
        messages.append(builder.take_chunks())
    errors: list = []

    def run() -> None:
        try:
            with RLinkClient(address, timeout=30.0) as client:
                for chunks in messages:
                    client.send_episodes(chunks)
                client.flush()  # every batch confirmed: handed to RLlib or dropped, never left waiting
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return errors, thread


def _sample_until(runner, thread, sent: int) -> list[int]:
    """Call sample() until the client is done and every step it sent is handed over or dropped; steps per call."""
    handed: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        handed.append(sum(len(e) for e in runner.sample()))
        stats = runner.get_transport_stats()
        if not thread.is_alive() and sum(handed) + stats["dropped_backlog_steps"] + stats["inbox_steps"] >= sent:
            break
    return handed


@pytest.mark.timeout(120)
def test_a_fast_client_is_never_held_up_and_rllib_gets_one_fragment_per_call_of_the_freshest(ray_local):
    runner = _dqn_runner(off_policy_backlog_steps=20)
    try:
        errors, thread = _send_batches("127.0.0.1:%d" % runner.address[1], batches=60, steps=10)
        handed = _sample_until(runner, thread, 600)
        assert not errors, errors  # every batch confirmed, handed over or dropped
        stats = runner.get_transport_stats()
        assert stats["dropped_backlog_steps"] > 0 and stats["inbox_steps"] <= 20
        assert sum(handed) + stats["dropped_backlog_steps"] + stats["inbox_steps"] == 600
        # One fragment (5) per call on average: a whole batch of 10, then a call that hands over nothing.
        assert all(steps <= 10 for steps in handed) and abs(sum(handed) - 5 * len(handed)) <= 10
        assert all(a + b <= 10 for a, b in zip(handed, handed[1:]))
    finally:
        runner.stop()


@pytest.mark.timeout(120)
def test_paced_the_client_waits_for_the_learner_and_nothing_is_dropped(ray_local):
    runner = _dqn_runner(off_policy_backlog="pace", off_policy_backlog_steps=20)
    try:
        errors, thread = _send_batches("127.0.0.1:%d" % runner.address[1], batches=30, steps=10)
        time.sleep(1.0)
        assert thread.is_alive(), "the client could send everything without the learner taking any"
        # Reading pauses once the backlog (20) is held: the batch that filled it is the last to land.
        assert runner.get_transport_stats()["inbox_steps"] < 20 + 10
        handed = _sample_until(runner, thread, 300)
        thread.join(10)
        assert not errors, errors
        stats = runner.get_transport_stats()
        assert stats["dropped_backlog_steps"] == 0 and sum(handed) + stats["inbox_steps"] == 300
        assert all(steps <= 10 for steps in handed)
    finally:
        runner.stop()


@pytest.mark.timeout(120)
def test_paced_every_client_gets_its_turn(ray_local):
    """A client with more to send than the learner takes does not keep another out of a paced runner."""
    runner = _dqn_runner(off_policy_backlog="pace", off_policy_backlog_steps=20)
    address = "127.0.0.1:%d" % runner.address[1]
    try:
        greedy_errors, greedy = _send_batches(address, batches=300, steps=10)
        time.sleep(0.5)  # the greedy client has filled the backlog before the other connects
        errors, thread = _send_batches(address, batches=5, steps=10)
        # Taken in turns, the second client's 5 batches are all in long before the first's 300 (3,000 steps):
        # kept out, they would follow them (3,050).
        handed = _sample_until(runner, thread, 0)
        assert not errors and not greedy_errors, (errors, greedy_errors)
        assert not thread.is_alive() and sum(handed) <= 2000, sum(handed)
    finally:
        deadline = time.monotonic() + 60
        while greedy.is_alive() and time.monotonic() < deadline:
            runner.sample()
        runner.stop()


def test_the_live_line_and_the_table_say_what_share_was_dropped():
    from rlinks_rllib.training.report import DROPPED_COLUMN, DROPPED_SHARE_COLUMN, format_row, row_from_result

    def result(iteration: int, handed: int, dropped: int) -> dict:
        rlinks = {"dropped_backlog_steps": dropped} if dropped else {}
        return {"training_iteration": iteration,
                "env_runners": {"num_env_steps_sampled_lifetime": handed, "rlinks": rlinks}}

    plain = row_from_result(result(1, 100, 0), time_s=1.0, clients=1, previous=None)
    assert DROPPED_COLUMN not in plain and "dropped" not in format_row(plain)
    first = row_from_result(result(1, 100, 300), time_s=1.0, clients=1, previous=None)
    second = row_from_result(result(2, 200, 1200), time_s=2.0, clients=1, previous=first)
    assert (first[DROPPED_SHARE_COLUMN], second[DROPPED_SHARE_COLUMN]) == (0.75, 0.9)
    assert second[DROPPED_COLUMN] == 1200 and format_row(second).endswith("| dropped 90%")


def test_a_learner_that_drops_most_of_what_arrives_says_why_and_what_to_set():
    from rlinks_rllib.training.report import DROPPED_SHARE_COLUMN, drop_advice

    assert drop_advice({}) is None and drop_advice({DROPPED_SHARE_COLUMN: 0.5}) is None
    advice = drop_advice({DROPPED_SHARE_COLUMN: 0.96})
    assert "96%" in advice and "off_policy_backlog: pace" in advice and "docs/CONFIG.md" in advice


@pytest.mark.timeout(180)
def test_paced_a_local_client_keeps_one_batch_in_flight_so_its_steps_are_a_few_updates_old(ray_local):
    """``paced_in_flight``: a paced runner's local clients sample with weights a few updates old.

    The test plays RLlib: a ``sample()``, then new weights, 80 times. The
    client (EnvClient, local inference, off-policy) steps CartPole flat out
    beside it. Paced, it used to keep up to ``max_unacked`` (16) batches
    sent and unconfirmed plus 4 queued, all sampled with the weights of
    then: a lag of some 20 updates. Counted, not timed: the batches it
    has unconfirmed before each ``sample()`` and the lag of every batch
    the runner hands over.
    """
    import threading

    import gymnasium as gym
    from ray.rllib.core import COMPONENT_RL_MODULE
    from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

    from rlinks_rllib.client import EnvClient

    runner = _dqn_runner(off_policy_backlog="pace")
    address = "127.0.0.1:%d" % runner.address[1]
    stop, errors, clients = threading.Event(), [], []

    def play() -> None:
        try:
            env = gym.make("CartPole-v1")
            with EnvClient(address, on_policy=False, timeout=60.0) as client:
                clients.append(client)
                obs, _ = env.reset(seed=0)
                while not stop.is_set():
                    obs, reward, terminated, truncated, _ = env.step(client.act(obs))
                    client.report(reward, obs, terminated, truncated)
                    if terminated or truncated:
                        obs, _ = env.reset()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    player = threading.Thread(target=play, daemon=True)
    player.start()
    try:
        deadline = time.monotonic() + 60
        while runner.get_transport_stats().get("steps_in", 0) == 0:
            assert not errors and time.monotonic() < deadline, errors or "no step came"
            time.sleep(0.05)
        unconfirmed, handed = [], 0
        for version in range(1, 81):
            unconfirmed.append(clients[0].stats.delivery.unacked)
            handed += sum(len(e) for e in runner.sample())
            runner.set_state({COMPONENT_RL_MODULE: runner.module.get_state(), WEIGHTS_SEQ_NO: version})
        lag = runner.get_metrics()["rlinks"]["policy_lag_max"].peek()
        print(f"\npaced: {handed} steps handed over in 80 updates; unconfirmed before a sample() at most "
              f"{max(unconfirmed)}; policy lag at most {lag} updates")
        assert not errors, errors
        assert handed >= 5 * 40, handed  # the client kept up: most calls got their fragment
        assert max(unconfirmed) <= 1, unconfirmed
        assert lag <= 4, lag
    finally:
        stop.set()
        deadline = time.monotonic() + 30
        while player.is_alive() and time.monotonic() < deadline:
            runner.sample()  # the client's last batch is confirmed, so it closes
        runner.stop()
        player.join(10)


@pytest.mark.parametrize("settings, window", [({}, None), ({"off_policy_backlog": "pace"}, 1),
                                               ({"off_policy_backlog": "pace", "takeover_terminates": True}, None)])
def test_a_paced_runner_names_its_window_but_not_where_it_holds_parts_back(ray_local, settings, window):
    """Under ``takeover_terminates`` a message is confirmed with the next one (takeover_held.py): a window of
    one made the client wait out the 2 s hold for every batch (a paced DQN teacher run: no iteration in 90 s)."""
    from rlinks_rllib.client.inference.background_sender import paced_in_flight
    from rlinks_rllib.protocol.config import read_config

    runner = _dqn_runner(**settings)
    try:
        assert paced_in_flight(read_config(runner._config_message())) == window  # noqa: SLF001
        # With a window no sample() waits for more than a fragment: the steps a client holds back can't come
        # (a debt of short calls made SAC's sample() wait out 45 s for them: 32 env steps in 75 s).
        assert (runner._credit.max_debt == 0) == (window is not None)  # noqa: SLF001
    finally:
        runner.stop()
