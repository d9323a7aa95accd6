"""Take-overs (the ``takeover`` extension, PROTOCOL.md 10.8): steps a person or a script acted on.

Marked on the wire (a chunk's ``rlinks_takeover`` output, the ``ACT`` column
``takeover``), counted and removed by the runner, trained on off-policy,
cut out of on-policy updates with the share still exact, and reported as a
take-over rate per episode. With ``takeover_terminates`` (off-policy) each
episode is cut where the teacher takes over, the policy's part terminated
there. The last tests are the dummy simulator's scripted teacher, whose
take-over rate falls as PPO, DQN and discrete SAC learn (SAC only with
``takeover_terminates``); PPO's and DQN's runs are ``long`` tests (``make
test-long``), discrete SAC's runs in ``make test``.
"""

from __future__ import annotations

import contextlib
import csv
import math
import threading
import time
from typing import Callable, Iterator

import gymnasium as gym
import numpy as np
import pytest

from harness import CARTPOLE, DUMMY_CLIENT, train_through_cli
from test_served_runner import local_runner  # noqa: F401 - the fixture: a runner in this process, stopped after
from rlinks_rllib.client import EnvClient, RLinkClient
from rlinks_rllib.client.network.connection import DEFAULT_EXTENSIONS
from rlinks_rllib.client.errors import NotAgreed
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.protocol.episodes import TAKEOVER, EpisodeError
from rlinks_rllib.protocol.errors import InvalidMessage, UnsupportedMessage
from rlinks_rllib.protocol.served import act_message, read_act
from rlinks_rllib.server.ingest.episodes import EpisodeIngest
from rlinks_rllib.server.errors import IngestError
from rlinks_rllib.server.metrics import (RUNNER_METRICS_KEY, TAKEOVER_EPISODES, TAKEOVER_RATE, TAKEOVER_STEPS,
                                        EpisodeTotals)
from rlinks_rllib.server.delivery.scheduler import Release, Scheduler
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


# -- takeover_terminates: the policy's episode ends where the teacher takes over ------------------------


def _segmenting() -> EpisodeIngest:
    settings = RLinkSettings(takeover_terminates=True)
    return EpisodeIngest(CARTPOLE.observation_space, CARTPOLE.action_space, settings, on_policy=False)


def _parts(episodes) -> list[tuple]:
    """Each episode as (segment number, t_started, t, is_terminated)."""
    return [(int(e.id_.partition("/")[2] or 0), e.t_started, e.t, e.is_terminated) for e in episodes]


def _first_obs(episode) -> int:
    return int(np.asarray(episode.get_observations())[0, 0])


def test_an_onset_mid_chunk_ends_the_policys_part_terminated_and_the_rest_goes_on_as_a_new_episode():
    ingest = _segmenting()
    (chunk,) = _chunks({3, 4, 7})  # the teacher takes over at 3 and 7, hands back at 5 and 8; 9 ends it
    episodes, steps = ingest([chunk], ("client", 1))
    assert steps == 10 and _parts(episodes) == [(0, 0, 3, True), (1, 3, 7, True), (2, 7, 10, True)]
    assert {e.id_.partition("/")[0] for e in episodes} == {chunk["id_"]}
    # The policy's part ends at the state the teacher took over in; the next starts there, env rewards kept.
    assert [int(np.asarray(e.get_observations())[-1, 0]) for e in episodes[:2]] == [3, 7]
    assert [_first_obs(e) for e in episodes] == [0, 3, 7]
    assert all(list(e.get_rewards()) == [1.0] * len(e) for e in episodes)
    assert all(TAKEOVER not in e.extra_model_outputs for e in episodes)
    (tally,) = ingest.last_takeovers.tallies  # the metrics see the episode as played
    assert (tally.steps, tally.takeover_steps, tally.done, tally.episode_id) == (10, 3, True, chunk["id_"])
    assert ingest.segments.held == 0


def test_an_onset_at_a_chunk_boundary_terminates_the_held_chunk_before_it():
    ingest = _segmenting()
    first, second = _chunks({5, 6}, cut_at=5)  # the policy's step 4 ends the first chunk, the teacher's 5 begins
    episodes, steps = ingest([first], ("client", 1))
    assert (episodes, steps, ingest.segments.held) == ([], 0, 1)  # held: is step 4 the last before a take-over?
    assert ingest.last_takeovers.tallies[0].steps == 5  # counted when it came
    episodes, steps = ingest([second], ("client", 2))
    assert steps == 10 and _parts(episodes) == [(0, 0, 5, True), (1, 5, 10, True)]
    assert _first_obs(episodes[1]) == 5 and ingest.segments.held == 0


def test_control_handed_back_then_a_second_onset_continues_the_segment_then_cuts_again():
    ingest = _segmenting()
    first, second = _chunks({2, 3, 8}, cut_at=6)
    episodes, _ = ingest([first], ("client", 1))
    assert _parts(episodes) == [(0, 0, 2, True)]  # steps 2-5 (taken over, handed back at 4) are held
    episodes, _ = ingest([second], ("client", 1))
    # Step 6 is the policy's: the held part goes on as it is, and its segment continues to the onset at 8.
    assert _parts(episodes) == [(1, 2, 6, False), (1, 6, 8, True), (2, 8, 10, True)]


def test_an_episode_that_ends_while_its_part_is_held_hands_it_on_first_and_is_forgotten():
    ingest = _segmenting()
    first, second = _chunks(set(), cut_at=4)
    ingest([first], ("a", 1))
    episodes, steps = ingest([second], ("a", 1))
    assert steps == 10 and _parts(episodes) == [(0, 0, 4, False), (0, 4, 10, True)]
    assert ingest.segments.held == 0 and not ingest.segments._open


def test_a_held_part_is_handed_on_as_it_is_when_its_owner_goes_or_the_bound_passes():
    ingest = _segmenting()
    one, _ = _chunks({5}, cut_at=5)
    two, later = _chunks({5}, cut_at=5)
    ingest([one], ("a", 1))
    ingest([two], ("b", 3))
    assert ingest.release_held(expired_only=True) == []  # not yet past the bound
    [(tag, episodes, steps, takeovers)] = ingest.release_held(owner="b")
    assert tag == ("b", 3) and steps == 5 and _parts(episodes) == [(0, 0, 5, False)]
    assert takeovers.tallies == ()  # counted when the chunk came
    # Its next chunk starts with the teacher's step, too late to terminate the part: the segment goes on.
    episodes, _ = ingest([later], ("b", 3))
    assert _parts(episodes) == [(0, 5, 10, True)]
    ingest.segments.hold_s = 0.0
    [(tag, episodes, steps, _)] = ingest.release_held(expired_only=True)
    assert tag == ("a", 1) and steps == 5 and ingest.release_held() == []


def test_the_hold_bound_counts_from_when_the_part_was_held():
    from rlinks_rllib.server.takeover.segments import TakeoverSegments

    segments = TakeoverSegments(hold_s=2.0)
    chunk, _ = _chunks(set(), cut_at=3)
    assert segments.segment([(chunk, None)], now=10.0) == []  # no step taken over: no marker
    assert segments.expire(11.9) == [] and segments.held == 1
    [(part, tag)] = segments.expire(12.0)
    assert (part["t_started"], part["t"], part["is_terminated"], tag) == (0, 3, False, None)
    assert segments.expire(100.0) == [] and segments.held == 0


@pytest.mark.parametrize("seed", range(5))
def test_every_step_is_handed_on_once_in_segments_that_each_continue_their_episode(seed):
    """Random take-overs, chunk cuts and expiring holds: every step once, each segment one chain that ends
    terminated, a new segment only where the teacher took over."""
    rng = np.random.default_rng(seed)
    ingest = _segmenting()
    handed, onsets = [], {}
    for _ in range(4):
        steps = int(rng.integers(5, 40))
        marker = rng.random(steps) < 0.3
        builder = EpisodeBuilder()
        builder.reset(np.zeros(4, np.float32))
        chunks = []
        for t in range(steps):
            builder.step(0, 1.0, np.full(4, t + 1, np.float32), t == steps - 1, False, EXTRA, takeover=marker[t])
            if rng.random() < 0.2:
                chunks += builder.take_chunks()
        chunks += builder.take_chunks()
        onsets[chunks[0]["id_"]] = {t + 1 for t in np.flatnonzero(~marker[:-1] & marker[1:]).tolist()}
        for chunk in chunks:
            handed += ingest([chunk], ("c", 0))[0]
            if rng.random() < 0.2:
                ingest.segments.hold_s = 0.0
                handed += [e for _, episodes, _, _ in ingest.release_held(expired_only=True) for e in episodes]
                ingest.segments.hold_s = 2.0
    assert ingest.segments.held == 0
    by_episode: dict[str, list] = {}
    for episode in handed:
        by_episode.setdefault(episode.id_.partition("/")[0], []).append(episode)
    assert by_episode.keys() == onsets.keys()
    for episode_id, parts in by_episode.items():
        covered = sorted(t for e in parts for t in range(e.t_started, e.t))
        assert covered == list(range(covered[-1] + 1))  # every step once, none twice
        starts = set()
        for segment in {e.id_ for e in parts}:
            chain = [e for e in parts if e.id_ == segment]
            assert all(a.t == b.t_started for a, b in zip(chain, chain[1:]))  # each part continues the last
            assert all(not e.is_terminated for e in chain[:-1]) and chain[-1].is_terminated
            for a, b in zip(chain, chain[1:]):
                np.testing.assert_array_equal(a.get_observations(-1), b.get_observations(0))
            starts.add(chain[0].t_started)
        assert starts - {0} <= onsets[episode_id]


def test_takeover_terminates_does_nothing_on_policy_and_says_so(caplog):
    settings = RLinkSettings(takeover_terminates=True)
    ingest = EpisodeIngest(CARTPOLE.observation_space, CARTPOLE.action_space, settings, on_policy=True)
    assert ingest.segments is None and "does nothing for an on-policy learner" in caplog.text


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


@pytest.mark.timeout(120)
@pytest.mark.parametrize("inference", ["local", "served"])
def test_with_takeover_terminates_the_runner_ends_the_policys_part_where_the_teacher_takes_over(local_runner,
                                                                                                inference):
    """The setting on a real runner, for chunks a client sent and for episodes the runner recorded itself:
    every step once, the policy's parts terminated where the teacher takes over, the metrics per episode played."""
    from ray.rllib.utils.metrics import EPISODE_LEN_MEAN

    runner = local_runner(train_batch=200, off_policy=True, takeover_terminates=True)
    with _simulating(runner, inference):
        episodes = []
        deadline = time.monotonic() + 30
        while sum(len(e) for e in episodes) < 150 and time.monotonic() < deadline:
            episodes += runner.sample()
        metrics = runner.get_metrics()
    acted = [int(o[1]) for e in episodes for o in np.asarray(e.get_observations())[:-1]]
    assert len(acted) == len(set(acted)) >= 150  # no step handed twice
    # The simulator takes over at the observations numbered 1 mod 4: a policy part ends terminated there.
    ends = [int(e.get_observations(-1)[1]) % 4 for e in episodes if e.is_terminated]
    assert ends.count(1) >= 10, ends
    assert any("/" in e.id_ for e in episodes)
    assert metrics[EPISODE_LEN_MEAN] == 25  # episodes as played, not their segments
    assert 0.3 < metrics[RUNNER_METRICS_KEY][TAKEOVER_RATE] < 0.7


def _open_episode() -> Callable[..., list[dict]]:
    """``steps(n, end=False)``: the next ``n`` policy steps of one CartPole-shaped episode, as chunks."""
    builder = EpisodeBuilder()
    builder.reset(np.zeros(4, np.float32))
    played = [0]

    def steps(n: int, end: bool = False) -> list[dict]:
        for i in range(n):
            played[0] += 1
            builder.step(0, 1.0, np.full(4, played[0], np.float32), end and i == n - 1, False, EXTRA)
        return builder.take_chunks()

    return steps


def _sample_until(runner, done: Callable[[], bool], what: str) -> list:
    episodes = []
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, what
        episodes += runner.sample()
    return episodes


@pytest.mark.timeout(60)
def test_a_part_held_back_reaches_rllib_once_when_its_client_leaves(local_runner):
    """The last chunk of an open episode ends with the policy's step: the runner holds it (is a take-over
    next?); the client leaves instead (its message not confirmed), and the part goes on as it is."""
    runner = local_runner(train_batch=200, off_policy=True, takeover_terminates=True)
    runner.server._ingest.segments.hold_s = 600.0  # noqa: SLF001 - only the client's leaving hands it on
    host, port = runner.address
    client = RLinkClient(f"{host}:{port}", timeout=30.0)
    client.send_episodes(_open_episode()(10))
    client.close()  # without waiting for the ACK, which the held part keeps back
    episodes: list = []
    deadline = time.monotonic() + 30
    while sum(len(e) for e in episodes) < 10 and time.monotonic() < deadline:
        episodes += runner.sample()
    assert [(e.t_started, e.t, e.is_done) for e in episodes] == [(0, 10, False)]


@pytest.mark.timeout(60)
def test_a_message_is_confirmed_only_once_the_part_held_back_from_it_reaches_rllib(local_runner):
    """A message whose last part the runner holds back is not confirmed when the rest is handed to RLlib.

    Confirmed then, the client forgot it while the held part lived only in
    the runner: a runner that died within the hold (2 s) lost it. The ACK
    now goes out with the part, here with the next message's batch.
    """
    runner = local_runner(train_batch=200, off_policy=True, takeover_terminates=True)
    segments = runner.server._ingest.segments  # noqa: SLF001
    segments.hold_s = 600.0  # only the episode's next chunk hands the part on
    stats = runner.server.stats
    host, port = runner.address
    steps = _open_episode()
    with RLinkClient(f"{host}:{port}", timeout=30.0) as client:
        client.send_episodes(steps(10))
        episodes = _sample_until(runner, lambda: stats.batches_in == 1 and len(runner.server.inbox) == 0,
                                 "the message never reached sample()")
        client.get_state()  # a round trip: the loop has acted on what sample() confirmed
        assert segments.held == 1 and stats.batches_acked == 0, "confirmed while its part is held back"
        client.send_episodes(steps(5, end=True))
        episodes += _sample_until(runner, lambda: stats.batches_acked >= 2, "the two messages were never confirmed")
        client.flush()
        client.get_state()
    assert stats.batches_acked == 2  # each once
    assert [(e.t_started, e.t, e.is_done) for e in episodes if len(e)] == [(0, 10, False), (10, 15, True)]


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
@pytest.mark.long
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
def test_under_dqn_the_teachers_steps_are_trained_on_and_its_rate_reported_every_iteration(tmp_path):
    """The same teacher under an off-policy learner, which trains on the steps the teacher took too.

    This test used to assert that the take-over rate falls over 10
    iterations (the mean of the last five under 0.7 x the first five): it
    failed more often than not, and it could only pass by luck. DQN under
    the shipped config does not lower the rate reliably: 0.27 -> 0.39 over
    24 iterations in one run here (returns 362 -> 130, 88-91% of the steps
    dropped), and paced with ``takeover_terminates`` 0.24 -> 0.10 by
    iteration 6, then back to 0.51 at iteration 12 as DQN's return fell from
    485 to 120. The falling rate is held under discrete SAC (the next test),
    where it falls every run. Here, what does not depend on DQN's luck: every
    iteration trains on steps with take-overs among them and reports their
    rate, which lies strictly between 0 and 1 (the teacher catches only
    failures), and the clients run DQN's Q-network themselves.
    """
    run = train_through_cli(
        tmp_path,
        ["--config", "configs/dqn_cartpole.yaml", "--stop-iters", "6", "--stop-reward", "1000"],
        ["-n", "2", "--script", str(DUMMY_CLIENT), "--", "--teacher", "--off-policy", "--max-steps", "10000000"],
    )
    with open(run.output / "progress.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    rates = [float(row[TAKEOVER_COLUMN]) for row in rows]
    print(f"\nthe teacher's take-over rate per episode under DQN, iteration by iteration: {rates}")
    assert len(rates) == 6 and all(0.0 < rate < 1.0 for rate in rates), rates
    assert all(float(row["env_steps_iter"]) > 0 for row in rows), rows
    assert "| take-over " in run.learner_log
    assert run.client_out.count("takeover_rate=") == 2, run.client_out
    assert "running QPolicy here, off-policy" in run.client_out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_teachers_take_over_rate_falls_as_discrete_sac_learns_from_a_local_and_a_served_simulator(tmp_path):
    """SAC with Discrete actions (configs/sac_cartpole.yaml) and the CartPole teacher, one simulator running
    the categorical policy in numpy, the other served by the runner (its teacher's actions go as
    ``served_taken`` rows): the take-over rate falls as SAC learns.

    Only with ``takeover_terminates`` (the config sets it): each take-over
    ends the policy's episode, terminated, at the state the teacher took over
    in. In the runs this was written with the rate went from 0.28-0.32 in the
    first iteration to 0-0.10 in the fourth and fifth (returns 400-500);
    without the setting it rose (0.32 to 0.47 by the fifth), since with the
    teacher catching the pole the return hardly depends on the policy
    (docs/EXAMPLES.md).
    """
    iters = 5
    client = ["-n", "1", "--script", str(DUMMY_CLIENT), "--", "--teacher", "--max-steps", "10000000"]
    run = train_through_cli(
        tmp_path,
        ["--config", "configs/sac_cartpole.yaml", "--stop-iters", str(iters), "--stop-reward", "1000"],
        [*client, "--off-policy"],
        more_clients=[[*client, "--served-actions"]],
    )
    with open(run.output / "progress.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    rates = [float(row[TAKEOVER_COLUMN]) for row in rows]
    print(f"\nthe teacher's take-over rate per episode under discrete SAC, iteration by iteration: {rates}")
    assert len(rates) == iters and all(math.isfinite(rate) for rate in rates), rates
    first, last = rates[0], sum(rates[-2:]) / 2
    assert first > 0.1 and last < 0.5 * first, rates
    assert "| take-over " in run.learner_log
    assert "running NumpyPolicy here, off-policy" in run.client_out, run.client_out
    assert "the runner computes the actions" in run.client_out, run.client_out
    assert run.client_out.count("summary:") == 2, run.client_out
