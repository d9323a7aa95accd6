"""Take-overs (the ``takeover`` extension, PROTOCOL.md 10.8): steps a person or a script acted on.

Marked on the wire (a chunk's ``rlinks_takeover`` output, the ``ACT`` column
``takeover``), counted and removed by the runner, trained on off-policy,
cut out of on-policy updates with the share still exact, and reported as a
take-over rate per episode. The last tests are the dummy simulator's scripted
teacher, whose take-over rate falls as PPO and DQN learn (under discrete SAC
it does not: the last test holds only the path).
"""

from __future__ import annotations

import contextlib
import csv
import math
import threading
import time
from typing import Iterator

import gymnasium as gym
import numpy as np
import pytest

from harness import CARTPOLE, DUMMY_CLIENT, train_through_cli
from test_served_runner import local_runner  # noqa: F401 - the fixture: a runner in this process, stopped after
from rlinks_rllib.client import EnvClient
from rlinks_rllib.client.connection import DEFAULT_EXTENSIONS
from rlinks_rllib.client.errors import NotAgreed
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.protocol.episodes import TAKEOVER, EpisodeError
from rlinks_rllib.protocol.errors import InvalidMessage, UnsupportedMessage
from rlinks_rllib.protocol.served import act_message, read_act
from rlinks_rllib.server.episodes import EpisodeIngest
from rlinks_rllib.server.errors import IngestError
from rlinks_rllib.server.metrics import (RUNNER_METRICS_KEY, TAKEOVER_EPISODES, TAKEOVER_RATE, TAKEOVER_STEPS,
                                        EpisodeTotals)
from rlinks_rllib.server.scheduler import Release, Scheduler
from rlinks_rllib.server.settings import RLinkSettings
from rlinks_rllib.training.report import TAKEOVER_COLUMN, format_row, row_from_result

EXTRA = {"action_logp": np.float32(-0.7), "action_dist_inputs": np.zeros(2, np.float32)}


def _chunks(taken: set[int], steps: int = 10, *, cut_at: int | None = None) -> list[dict]:
    """One CartPole-shaped episode whose observation ``t`` holds ``t``; steps in ``taken`` taken over."""
    builder = EpisodeBuilder()
    builder.reset(np.zeros(4, np.float32))
    chunks = []
    for t in range(steps):
        builder.step(t % 2, 1.0, np.full(4, t + 1, np.float32), t == steps - 1, False, EXTRA, takeover=t in taken)
        if t + 1 == cut_at:
            chunks += builder.take_chunks()
    return chunks + builder.take_chunks()


def _ingest(on_policy: bool) -> EpisodeIngest:
    return EpisodeIngest(CARTPOLE.observation_space, CARTPOLE.action_space, RLinkSettings(), on_policy=on_policy)


# -- the marker on the wire ---------------------------------------------------------------


def test_a_chunk_carries_the_marker_only_when_a_step_of_it_was_taken_over():
    first, second = _chunks({1, 2}, cut_at=5)
    np.testing.assert_array_equal(first["extra_model_outputs"][TAKEOVER]["data"], [0, 1, 1, 0, 0])
    assert TAKEOVER not in second["extra_model_outputs"]  # the bytes of a run without take-overs don't change
    assert set(second["extra_model_outputs"]) == set(EXTRA)


def test_off_policy_the_chunk_goes_on_whole_without_the_marker_and_is_tallied():
    ingest = _ingest(on_policy=False)
    [episode], steps = ingest(_chunks({0, 3, 4, 9}))
    assert steps == len(episode) == 10 and TAKEOVER not in episode.extra_model_outputs
    (tally,) = ingest.last_takeovers.tallies
    assert (tally.steps, tally.takeover_steps, tally.episode_return, tally.done) == (10, 4, 10.0, True)
    assert ingest.last_takeovers.withheld == 0
    ingest(_chunks(set()))
    assert ingest.last_takeovers is None


def test_on_policy_the_taken_over_steps_are_cut_out_and_the_parts_continue_the_episode():
    ingest = _ingest(on_policy=True)
    episodes, steps = ingest(_chunks({0, 3, 4, 9}))
    # Steps 1-2 and 5-8 are left; the parts of zero steps (before 0, between 3 and 4, after 9) are dropped.
    assert steps == 6 and [(e.t_started, e.t) for e in episodes] == [(1, 3), (5, 9)]
    assert ingest.last_takeovers.withheld == 4
    for episode in episodes:
        # Its first observation is the one its first step acted on (observation t holds t).
        np.testing.assert_array_equal(np.asarray(episode.get_observations())[:, 0],
                                      np.arange(episode.t_started, episode.t + 1))
        assert len(episode.get_extra_model_outputs("action_logp")) == len(episode)
        assert TAKEOVER not in episode.extra_model_outputs
        assert not episode.is_done  # the ending was a take-over: PPO bootstraps the last part
    assert ingest.last_takeovers.tallies[0].done  # the metrics still see the episode end
    first, last = ingest(_chunks({2}, steps=4))[0]
    assert (first.t_started, first.t, first.is_done) == (0, 2, False)
    assert (last.t_started, last.t, last.is_terminated) == (3, 4, True)  # only the last part ends the episode


def test_each_part_keeps_its_buffers_lookback_from_the_steps_before_it():
    """A recurrent module's chunk that continues its episode carries the last state_out before it as lookback;
    a part cut out of it starts from the state_out of the step before the part."""
    from rlinks_rllib.protocol.episodes import STATE_OUT

    builder = EpisodeBuilder()
    builder.reset(np.zeros(4, np.float32))
    for t in range(8):
        extra = {**EXTRA, STATE_OUT: {"h": np.full(3, t, np.float32)}}
        builder.step(0, 1.0, np.full(4, t + 1, np.float32), False, False, extra, takeover=t in (5, 6))
        if t == 3:
            builder.take_chunks()  # the next chunk continues the episode: state_out 3 is its lookback
    (chunk,) = builder.take_chunks()
    ingest = EpisodeIngest(CARTPOLE.observation_space, CARTPOLE.action_space, RLinkSettings(), on_policy=True)
    before, after = ingest([chunk])[0]
    assert [(e.t_started, e.t) for e in (before, after)] == [(4, 5), (7, 8)]
    for episode, previous in ((before, 3), (after, 6)):
        buffer = episode.extra_model_outputs[STATE_OUT]
        assert buffer.lookback == 1 and buffer.data["h"][0, 0] == previous


def test_a_marker_that_is_not_one_bool_per_step_is_refused():
    chunk = _chunks({1})[0]
    chunk["extra_model_outputs"][TAKEOVER]["data"] = np.full(10, 2, np.int64)
    with pytest.raises(IngestError, match=TAKEOVER):
        _ingest(on_policy=True)([chunk])
    chunk["extra_model_outputs"][TAKEOVER]["data"] = np.full(10, 0.5, np.float32)
    with pytest.raises(IngestError, match=TAKEOVER):
        _ingest(on_policy=False)([chunk])
    assert issubclass(EpisodeError, InvalidMessage)


def test_the_act_column_needs_the_extension_and_a_taken_action():
    columns = ([0, 1], np.zeros((2, 4), np.float32), [0.0, 0.0], [True, True], [False, False], [False, False])
    message = act_message(*columns, taken_mask=[True, False], taken=[1, 0], takeover=[True, False])
    rows = read_act(message)
    assert rows.takeover.tolist() == [True, False]
    with pytest.raises(UnsupportedMessage, match="takeover"):
        read_act(message, takeover_agreed=False)
    with pytest.raises(InvalidMessage, match="without a taken action"):
        read_act(act_message(*columns, taken_mask=[True, False], taken=[1, 0], takeover=[True, True]))
    none = act_message(*columns, taken_mask=[True, False], taken=[1, 0], takeover=[False, False])
    assert read_act(none).takeover is None


# -- the share, the metrics, the live line ---------------------------------------------------


def test_taken_over_steps_keep_the_promise_and_the_client_is_asked_for_as_many_more():
    s: Scheduler[str] = Scheduler(100, on_policy=True)
    for c in "ab":
        s.client_ready(c, f"id-{c}", tells_steps=True)
    assert s.state_requested("a") == 50 and s.state_requested("b") == 50
    s.delivered("a", 40, 0, withheld=10)  # a sent its 50; 10 were taken over
    assert s.on_policy_batch("a") == [Release("a", 10)]
    s.delivered("b", 50, 0)
    assert s.on_policy_batch("b") == [] and not s.budget.complete  # b is parked: the 10 are a's
    s.delivered("a", 10, 0)
    assert s.on_policy_batch("a") == [] and s.budget.received == 100 and s.budget.complete


def test_episode_metrics_count_the_episode_as_played_and_its_take_over_rate():
    ingest, totals = _ingest(on_policy=True), EpisodeTotals()
    ingest(_chunks({0, 3, 4, 9}, cut_at=5))
    finished = [t for tally in ingest.last_takeovers.tallies if (t := totals.add_tally(tally)) is not None]
    assert [(length, ret) for length, ret, _ in finished] == [(10, 10.0)]
    assert totals.takeover_rates == [0.4]


def test_the_live_line_and_the_table_show_the_rate_only_for_runs_with_take_overs():
    result = {"training_iteration": 3, "env_runners": {"num_env_steps_sampled_lifetime": 900,
                                                       "episode_return_mean": 40.0, RUNNER_METRICS_KEY: {}}}
    plain = row_from_result(result, time_s=2.0, clients=1, previous=None)
    assert TAKEOVER_COLUMN not in plain and "take-over" not in format_row(plain)
    result["env_runners"][RUNNER_METRICS_KEY][TAKEOVER_RATE] = 0.25
    row = row_from_result(result, time_s=2.0, clients=1, previous=None)
    assert row[TAKEOVER_COLUMN] == 0.25 and format_row(row).endswith("| take-over 25.0%")


# -- a real runner -----------------------------------------------------------------------------


class Counting:
    """CartPole-shaped episodes of 25 steps; observation[1] numbers every observation (so a step is known)."""

    def __init__(self) -> None:
        self.n = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        self.n += 1
        return np.array([0.0, self.n, 0.0, 0.0], np.float32)

    def reset(self) -> np.ndarray:
        self.t = 0
        return self._obs()

    def step(self) -> tuple:
        self.t += 1
        return self._obs(), 1.0, self.t >= 25, False


@contextlib.contextmanager
def _simulating(runner, inference: str = "local") -> Iterator[tuple[EnvClient, set[int]]]:
    """A simulator in a thread, connected to ``runner``: every observation numbered 1 or 2 mod 4 is taken over
    (action 0) and its number put in the set yielded. Stopped at the end; it must not have failed."""
    host, port = runner.address
    client = EnvClient(f"{host}:{port}", inference=inference, timeout=30.0)
    taken: set[int] = set()
    stop, failures = threading.Event(), []

    def run() -> None:
        env = Counting()
        try:
            with client:
                obs = env.reset()
                while not stop.is_set():
                    n = int(obs[1])
                    if n % 4 in (1, 2):
                        client.take_over(obs, 0)
                        taken.add(n)
                    else:
                        client.act(obs)
                    obs, reward, terminated, truncated = env.step()
                    client.report(reward, obs, terminated, truncated)
                    if terminated:
                        obs = env.reset()
        except Exception as exc:  # noqa: BLE001 - asserted below
            failures.append(exc)

    threading.Thread(target=run, name="takeover-sim", daemon=True).start()
    try:
        # A runner nobody is connected to answers sample() at once: wait for the simulator first.
        deadline = time.monotonic() + 30
        while runner.get_transport_stats()["clients_connected"] < 1:
            assert time.monotonic() < deadline and not failures, failures or "the simulator never connected"
            time.sleep(0.05)
        yield client, taken
        assert not failures, failures
    finally:
        stop.set()
        client.stop()


def _rlinks(runner) -> dict:
    return runner.get_metrics().get(RUNNER_METRICS_KEY, {})


def _acted_on(episodes) -> set[int]:
    """The numbers of the observations the episodes' steps acted on."""
    return {int(o[1]) for e in episodes for o in np.asarray(e.get_observations())[:-1]}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("inference", ["local", "served"])
def test_an_on_policy_update_holds_exactly_its_share_and_no_taken_over_step(local_runner, inference):
    runner = local_runner(train_batch=200)
    with _simulating(runner, inference) as (client, taken):
        episodes = runner.sample()
        assert sum(len(e) for e in episodes) == 200  # exactly the update, taken-over steps not among them
        assert _acted_on(episodes) and not _acted_on(episodes) & taken
        assert all(TAKEOVER not in e.extra_model_outputs for e in episodes)
        metrics = _rlinks(runner)
        assert metrics[TAKEOVER_STEPS] > 0 and metrics[TAKEOVER_EPISODES] > 0 and 0.3 < metrics[TAKEOVER_RATE] < 0.7
        assert client.stats.takeover_steps > 0 and 0.3 < client.stats.takeover_rate < 0.7


@pytest.mark.timeout(120)
def test_off_policy_taken_over_steps_are_trained_on(local_runner):
    runner = local_runner(train_batch=200, off_policy=True)
    with _simulating(runner) as (_, taken):
        episodes = []
        deadline = time.monotonic() + 30
        while sum(len(e) for e in episodes) < 100 and time.monotonic() < deadline:
            episodes += runner.sample()
        assert _acted_on(episodes) & taken  # handed to APPO like any other step
        assert all(TAKEOVER not in e.extra_model_outputs for e in episodes)
        assert _rlinks(runner)[TAKEOVER_STEPS] > 0


@pytest.mark.timeout(60)
def test_a_peer_that_did_not_agree_refuses_take_over_saying_so(local_runner):
    runner = local_runner(train_batch=200, off_policy=True)
    host, port = runner.address
    offer = [e for e in (*DEFAULT_EXTENSIONS, "policy_graph") if e != "takeover"]
    with EnvClient(f"{host}:{port}", inference="local", extensions=offer) as client:
        with pytest.raises(NotAgreed, match="did not agree to takeover"):
            client.take_over(np.zeros(4, np.float32), 0)


# -- the dummy simulator's teacher -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_teachers_take_over_rate_falls_as_ppo_learns_on_served_actions(tmp_path):
    """`rlinks client -n 2 -- --teacher --served-actions --envs 4`: a scripted controller takes over when
    the pole is about to fall, in 8 CartPoles whose other actions the runner computes.

    PPO never trains on its steps (they are cut out of every update), yet the
    policy it trains needs the teacher less and less: the take-over rate per
    episode in progress.csv falls (29% to 5% in 8 iterations with local
    clients in the run this was written with). Served, the teacher's actions
    go as ``served_taken`` rows of the same ``ACT``. The same with SAC on
    Pendulum is a documented run (docs/EXAMPLES.md).
    """
    run = train_through_cli(
        tmp_path,
        ["--config", "configs/ppo_cartpole.yaml", "--num-env-runners", "1", "--stop-iters", "8",
         "--stop-reward", "1000"],
        ["-n", "2", "--script", str(DUMMY_CLIENT), "--", "--teacher", "--served-actions", "--envs", "4",
         "--max-steps", "10000000"],
    )
    with open(run.output / "progress.csv", newline="") as table:
        rates = [float(row[TAKEOVER_COLUMN]) for row in csv.DictReader(table)]
    assert len(rates) == 8 and all(math.isfinite(rate) for rate in rates), rates
    first, last = rates[0], sum(rates[-3:]) / 3
    print(f"\nthe teacher's take-over rate per episode, iteration by iteration: {rates}")
    assert first > 0.1 and last < 0.6 * first, rates
    assert "| take-over " in run.learner_log
    assert run.client_out.count("takeover_rate=") == 2, run.client_out
    assert "the runner computes the actions" in run.client_out, run.client_out


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(600)
def test_the_teachers_take_over_rate_falls_as_dqn_trains_on_its_steps(tmp_path):
    """The same teacher under an off-policy learner, which trains on the steps the teacher took too.

    DQN's clients run its Q-network here and explore along its epsilon
    schedule; the teacher catches the pole whatever the policy did, and the
    take-over rate falls as the Q-network learns to keep the pole up itself
    (0.29 to 0.08-0.14 over iterations 6 to 10 in the runs this was written
    with, noisily: one run's iteration 8 was back at 0.24). SAC with the
    Pendulum teacher is a documented run (docs/EXAMPLES.md).
    """
    run = train_through_cli(
        tmp_path,
        ["--config", "configs/dqn_cartpole.yaml", "--stop-iters", "10", "--stop-reward", "1000"],
        ["-n", "2", "--script", str(DUMMY_CLIENT), "--", "--teacher", "--off-policy", "--max-steps", "10000000"],
    )
    with open(run.output / "progress.csv", newline="") as table:
        rates = [float(row[TAKEOVER_COLUMN]) for row in csv.DictReader(table)]
    print(f"\nthe teacher's take-over rate per episode under DQN, iteration by iteration: {rates}")
    assert len(rates) == 10 and all(math.isfinite(rate) for rate in rates), rates
    first, last = sum(rates[:5]) / 5, sum(rates[-5:]) / 5
    assert first > 0.1 and last < 0.7 * first, rates
    assert "running QPolicy here, off-policy" in run.client_out


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(600)
def test_the_teacher_under_discrete_sac_from_a_local_and_a_served_simulator(tmp_path):
    """SAC with Discrete actions (configs/sac_cartpole.yaml) and the CartPole teacher, one simulator running
    the categorical policy in numpy, the other served by the runner (its teacher's actions go as
    ``served_taken`` rows): SAC trains with both and the take-over rate is counted every iteration.

    It does not fall: in the runs this was written with it rose from 29% to
    about 50% while the return went to 500, since with the teacher catching
    the pole the return hardly depends on the policy (docs/EXAMPLES.md).
    So this holds the path, not learning to need the teacher less.
    """
    client = ["-n", "1", "--script", str(DUMMY_CLIENT), "--", "--teacher", "--max-steps", "10000000"]
    run = train_through_cli(
        tmp_path,
        ["--config", "configs/sac_cartpole.yaml", "--stop-iters", "2", "--stop-reward", "1000"],
        [*client, "--off-policy"],
        more_clients=[[*client, "--served-actions"]],
    )
    with open(run.output / "progress.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    rates = [float(row[TAKEOVER_COLUMN]) for row in rows]
    print(f"\nthe teacher's take-over rate per episode under discrete SAC, iteration by iteration: {rates}")
    assert len(rates) == 2 and all(math.isfinite(rate) and rate > 0 for rate in rates), rates
    assert "| take-over " in run.learner_log
    assert "running NumpyPolicy here, off-policy" in run.client_out, run.client_out
    assert "the runner computes the actions" in run.client_out, run.client_out
    assert run.client_out.count("summary:") == 2, run.client_out
