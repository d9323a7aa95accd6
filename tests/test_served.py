"""Served actions without sockets or Ray: the recorder, the observation check, the inference batcher."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.protocol.episodes import ACTION_DIST_INPUTS, ACTION_LOGP, check_episode_state
from rlinks_rllib.protocol.errors import ErrorCode
from rlinks_rllib.protocol.served import act_message, read_act
from rlinks_rllib.server.errors import IngestError
from rlinks_rllib.server.served.batcher import InferenceBatcher, InferenceResult
from rlinks_rllib.server.served.episodes import ObservationCheck, ServedRecorder

CHECK = ObservationCheck((4,), np.float32)


def act(env, obs, reward=None, start=None, terminated=None, truncated=None):
    k = len(env)
    zeros = [False] * k
    message = act_message(env, np.asarray(obs, np.float32), reward if reward is not None else [0.0] * k,
                          start if start is not None else zeros, terminated if terminated is not None else zeros,
                          truncated if truncated is not None else zeros)
    return read_act(message)


def record(recorder, client, rows, now=0.0):
    return recorder.record(client, rows, CHECK(rows), now)


def answer(recorder, client, version=0, now=0.0, actions=None):
    waiting = recorder.waiting(client)
    assert waiting is not None
    n = len(waiting[0])
    actions = np.arange(n, dtype=np.int64) % 2 if actions is None else actions
    extra = {ACTION_LOGP: np.full(n, -0.5, np.float32), ACTION_DIST_INPUTS: np.zeros((n, 2), np.float32)}
    return recorder.set_actions(client, actions, extra, version, now)


def recorder(**kwargs) -> ServedRecorder[str]:
    return ServedRecorder(**{"max_envs": 16, "report_timeout_s": 10.0, **kwargs})


def test_a_served_episode_is_the_one_a_local_client_records():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 4)).astype(np.float32)
    r = recorder()
    local = EpisodeBuilder()
    local.reset(obs[0])
    rec = record(r, "c", act([7], obs[:1], start=[True]))
    assert rec.want_env == [7] and rec.steps == {}
    for t in range(1, 4):
        envs = answer(r, "c", actions=np.array([t % 2]))
        assert envs == [7]
        end = t == 3
        rec = record(r, "c", act([7], obs[t:t + 1], reward=[float(t)], terminated=[end]))
        assert rec.steps == {0: 1} and rec.want_env == ([] if end else [7])
        local.step(t % 2, float(t), obs[t], end, False,
                   {ACTION_LOGP: np.float32(-0.5), ACTION_DIST_INPUTS: np.zeros(2, np.float32)})
    cut = r.take_chunks()
    (served,), (mine,) = cut.chunks, local.take_chunks()
    assert cut.steps == 3 and r.num_steps == 0 and r.open_episodes == 0
    for key in ("observations", "actions", "rewards"):
        np.testing.assert_array_equal(served[key]["data"], mine[key]["data"])
    for key in (ACTION_LOGP, ACTION_DIST_INPUTS):
        np.testing.assert_array_equal(served["extra_model_outputs"][key]["data"],
                                      mine["extra_model_outputs"][key]["data"])
    assert served["is_terminated"] and not served["is_truncated"] and served["t"] == 3
    check_episode_state(served, obs_shape=(4,), obs_dtype=np.float32, num_actions=2,
                        required_extra=(ACTION_LOGP, ACTION_DIST_INPUTS))


def test_rows_apply_in_order_an_ending_row_then_a_start_row_for_the_same_env():
    r = recorder()
    record(r, "c", act([1, 2], np.zeros((2, 4)), start=[True, True]))
    answer(r, "c")
    rec = record(r, "c", act([1, 1, 2], np.ones((3, 4)), reward=[1, 0, 1], start=[False, True, False],
                             terminated=[True, False, False]))
    assert rec.steps == {0: 2} and rec.want_env == [1, 2]
    assert r.open_episodes == 2 and r.outstanding == 0
    chunks = r.take_chunks().chunks
    assert [(c["is_terminated"], c["t"]) for c in chunks] == [(True, 1), (False, 1)]


def test_a_row_for_an_env_without_an_open_episode_refuses_the_whole_act():
    r = recorder()
    record(r, "c", act([1], np.zeros((1, 4)), start=[True]))
    answer(r, "c")
    with pytest.raises(IngestError, match=r"row 1 \(env 5\).*none open") as info:
        record(r, "c", act([1, 5], np.ones((2, 4)), reward=[1, 1]))
    assert info.value.code is ErrorCode.BAD_EPISODE
    # Nothing of that ACT was recorded: env 1 still waits for its report.
    assert r.num_steps == 0 and r.outstanding == 1 and r.waiting("c") is None
    assert record(r, "c", act([1], np.ones((1, 4)), reward=[1])).steps == {0: 1}


def test_a_row_after_one_that_waits_for_an_action_is_refused():
    r = recorder()
    with pytest.raises(IngestError, match="row 1 is for env 3, whose row 0 already waits") as info:
        record(r, "c", act([3, 3], np.zeros((2, 4)), start=[True, False]))
    assert info.value.code is ErrorCode.BAD_EPISODE and r.open_episodes == 0


def test_a_start_row_for_an_open_episode_closes_it_as_truncated():
    r = recorder()
    record(r, "c", act([0], np.zeros((1, 4)), start=[True]))
    answer(r, "c")
    record(r, "c", act([0], np.ones((1, 4)), reward=[1]))
    answer(r, "c")
    record(r, "c", act([0], np.full((1, 4), 2.0), start=[True]))  # the client reset env 0
    assert r.outstanding == 0 and r.open_episodes == 1
    (old,) = r.take_chunks().chunks
    assert old["is_truncated"] and not old["is_terminated"] and old["t"] == 1


def test_envs_beyond_max_envs_and_too_many_rows_are_limit_exceeded():
    r = recorder(max_envs=2)
    record(r, "a", act([0], np.zeros((1, 4)), start=[True]))
    with pytest.raises(IngestError, match="opens 2 more envs") as info:
        record(r, "b", act([0, 1], np.zeros((2, 4)), start=[True, True]))
    assert info.value.code is ErrorCode.LIMIT_EXCEEDED
    with pytest.raises(IngestError, match="5 rows") as info:
        record(r, "b", act(list(range(5)), np.zeros((5, 4)), start=[True] * 5))
    assert info.value.code is ErrorCode.LIMIT_EXCEEDED
    assert r.open_episodes == 1
    # An env that ends makes room for another in the same ACT.
    answer(r, "a")
    record(r, "a", act([0, 9], np.zeros((2, 4)), start=[False, True], terminated=[True, False]))
    record(r, "b", act([0], np.zeros((1, 4)), start=[True]))
    assert r.open_episodes == 2


def test_steps_are_counted_by_the_weights_they_were_acted_with_and_cut_with_the_oldest():
    r = recorder()
    record(r, "c", act([0, 1], np.zeros((2, 4)), start=[True, True]))
    answer(r, "c", version=3)
    assert record(r, "c", act([0, 1], np.zeros((2, 4)), reward=[1, 1])).steps == {3: 2}
    answer(r, "c", version=4)
    assert record(r, "c", act([0], np.zeros((1, 4)), reward=[1])).steps == {4: 1}
    cut = r.take_chunks()
    assert cut.steps == 3 and cut.weights_seq_no == 3
    # Open episodes are cut and go on: same id, t_started where the chunk stopped.
    answer(r, "c", version=4)
    record(r, "c", act([0, 1], np.zeros((2, 4)), reward=[1, 1], terminated=[True, True]))
    later = r.take_chunks()
    assert later.weights_seq_no == 4
    first = {c["id_"]: c for c in cut.chunks}
    for chunk in later.chunks:
        assert chunk["t_started"] == first[chunk["id_"]]["t"]


def test_a_client_that_leaves_has_its_episodes_closed_as_truncated():
    r = recorder()
    record(r, "a", act([0, 1], np.zeros((2, 4)), start=[True, True]))
    answer(r, "a")
    record(r, "a", act([0, 1], np.zeros((2, 4)), reward=[1, 1]))
    answer(r, "a")
    record(r, "b", act([0], np.zeros((1, 4)), start=[True]))
    assert r.outstanding == 2
    assert r.drop_client("a") == 2
    assert r.outstanding == 0 and r.open_episodes == 1 and r.drop_client("a") == 0
    chunks = r.take_chunks().chunks
    assert len(chunks) == 2 and all(c["is_truncated"] and c["t"] == 1 for c in chunks)
    assert answer(r, "b") == [0]  # b is untouched


def test_deadlines_close_unreported_envs_and_name_silent_clients():
    r = recorder(report_timeout_s=5.0)
    record(r, "quiet", act([0, 1], np.zeros((2, 4)), start=[True, True]), now=0.0)
    answer(r, "quiet", now=0.0)
    record(r, "quiet", act([0, 1], np.zeros((2, 4)), reward=[1, 1]), now=1.0)
    answer(r, "quiet", now=1.0)
    record(r, "busy", act([0, 1], np.zeros((2, 4)), start=[True, True]), now=0.0)
    answer(r, "busy", now=0.0)
    record(r, "parked", act([0], np.zeros((1, 4)), start=[True]), now=0.0)  # never answered
    for t in range(1, 8):  # busy reports env 0 every second, never env 1
        record(r, "busy", act([0], np.zeros((1, 4)), reward=[1]), now=float(t))
        answer(r, "busy", now=float(t))
    assert r.expire(5.9) == []
    silent = r.expire(6.5)
    assert silent == ["quiet"]  # parked waits for us, not we for it
    assert r.expired_envs == 3  # quiet's two, busy's env 1
    assert r.outstanding == 1 and r.open_episodes == 2
    # quiet's envs took a step each and end truncated; busy's env 1 took none and is dropped;
    # busy's env 0 goes on (cut here).
    (*quiet, busy) = sorted(r.take_chunks().chunks, key=lambda c: c["t"])
    assert [(c["t"], c["is_truncated"]) for c in quiet] == [(1, True), (1, True)]
    assert busy["t"] == 7 and not busy["is_truncated"]
    # A pause in reading starts the clocks over.
    r.restart_clocks(100.0)
    assert r.expire(104.0) == [] and r.expired_envs == 3


def test_the_observation_check_names_what_is_wrong():
    rows = act([4, 5], np.zeros((2, 4)))
    assert CHECK(rows).dtype == np.float32
    cases = [
        (read_act(act_message([4, 5], np.zeros((2, 3), np.float32), [0, 0], [0, 0], [0, 0], [0, 0])),
         "shape \\(2, 3\\)"),
        (read_act(act_message([4, 5], np.zeros((2, 4), np.complex64), [0, 0], [0, 0], [0, 0], [0, 0])),
         "complex64; observations must be numbers"),
        (read_act(act_message([4, 5], [["a"] * 4, ["b"] * 4], [0, 0], [0, 0], [0, 0], [0, 0])),
         "observations must be numbers"),
        (read_act(act_message([4, 5], [[0.0] * 4, [0.0] * 3], [0, 0], [0, 0], [0, 0], [0, 0])),
         "does not stack|shape"),
        (read_act(act_message([4, 5], np.array([[0, 0, 0, 0], [0, np.nan, 0, 0]]), [0, 0], [0, 0], [0, 0],
                              [0, 0])), r"row 1 \(env 5\) holds a NaN"),
    ]
    for rows, match in cases:
        with pytest.raises(IngestError, match=match) as info:
            CHECK(rows)
        assert info.value.code is ErrorCode.BAD_EPISODE
    # float64 observations cast to the space's float32; floats don't become ints.
    assert CHECK(read_act(act_message([4], np.zeros((1, 4)), [0], [0], [0], [0]))).dtype == np.float32
    with pytest.raises(IngestError, match="float64, which cannot become int64"):
        ObservationCheck((4,), np.int64)(read_act(act_message([4], np.zeros((1, 4)), [0], [0], [0], [0])))


# -- the batcher -----------------------------------------------------------------


class FakeForward:
    """Action = the row's first observation value as an int; records batch sizes and threads."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.batches: list[int] = []
        self.threads: set[str] = set()
        self.version = 0
        self.delay_s, self.fail = delay_s, fail

    def __call__(self, obs: np.ndarray) -> InferenceResult:
        self.threads.add(threading.current_thread().name)
        self.batches.append(len(obs))
        time.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("model exploded")
        actions = obs[:, 0].astype(np.int64)
        n = len(obs)
        return InferenceResult(actions, actions, np.zeros(n, np.float32), np.zeros((n, 2), np.float32), self.version)


def run_batcher(forward, submissions, *, max_rows=256, max_wait_s=0.005, until=None, after=None, inline=False):
    """Submit ``(key, obs, min_seq_no)`` on a fresh loop; return the results and errors by key."""
    loop = asyncio.new_event_loop()
    results: dict = {}
    errors: dict = {}
    batcher = InferenceBatcher(loop, forward, max_rows=max_rows, max_wait_s=max_wait_s,
                               on_result=lambda key, result: results.__setitem__(key, result),
                               on_error=lambda keys, exc: errors.update({k: exc for k in keys}), inline=inline)

    async def main():
        for key, obs, min_seq_no in submissions:
            batcher.submit(key, obs, min_seq_no=min_seq_no)
        if after is not None:
            after(batcher)
        deadline = loop.time() + 5
        done = until or (lambda b: len(results) + len(errors) == len(submissions))
        while loop.time() < deadline and not done(batcher):
            await asyncio.sleep(0.001)

    try:
        loop.run_until_complete(main())
    finally:
        batcher.close()
        loop.close()
    return results, errors, batcher


def obs_rows(first: int, n: int) -> np.ndarray:
    obs = np.zeros((n, 4), np.float32)
    obs[:, 0] = np.arange(first, first + n)
    return obs


INLINE = pytest.mark.parametrize("inline", [False, True], ids=["thread", "inline"])


@INLINE
def test_requests_that_arrive_together_share_one_forward_pass_and_are_split_back(inline):
    forward = FakeForward()
    results, errors, batcher = run_batcher(forward, [(k, obs_rows(10 * k, 8), 0) for k in range(4)], inline=inline)
    assert not errors and forward.batches == [32]
    for k in range(4):
        np.testing.assert_array_equal(results[k].actions_for_env, np.arange(10 * k, 10 * k + 8))
    # Inline, the forward pass runs on the loop's own thread: no thread to wake and no hop back.
    assert forward.threads == ({threading.current_thread().name} if inline else {"rlinks-inference_0"})
    assert batcher.rows_waiting == 0
    assert not any(t.name.startswith("rlinks-inference") for t in threading.enumerate())  # closed: joined


@INLINE
def test_a_batch_stops_at_max_rows_and_a_big_request_goes_alone(inline):
    forward = FakeForward()
    results, errors, _ = run_batcher(forward, [("a", obs_rows(0, 3), 0), ("b", obs_rows(0, 3), 0),
                                               ("c", obs_rows(0, 9), 0), ("d", obs_rows(0, 1), 0)], max_rows=6,
                                     inline=inline)
    assert not errors and len(results) == 4
    assert forward.batches == [6, 9, 1]


@INLINE
def test_a_request_parked_for_new_weights_is_computed_again_if_the_module_is_behind(inline):
    class Behind(FakeForward):
        """The first batch still runs on weights 1; the new ones (2) are loaded after it."""

        def __call__(self, obs):
            result = super().__call__(obs)
            self.version = 2
            return result

    forward = Behind()
    forward.version = 1
    results, errors, batcher = run_batcher(forward, [("a", obs_rows(0, 2), 2)], inline=inline)
    assert not errors and results["a"].weights_seq_no == 2
    assert forward.batches == [2, 2] and batcher.recomputed == 1


@INLINE
def test_a_failed_forward_pass_reports_every_request_of_the_batch(inline):
    results, errors, _ = run_batcher(FakeForward(fail=True), [("a", obs_rows(0, 1), 0), ("b", obs_rows(0, 1), 0)],
                                     inline=inline)
    assert not results and set(errors) == {"a", "b"} and "exploded" in str(errors["a"])


def test_a_request_cancelled_while_its_batch_is_computed_is_dropped():
    forward = FakeForward(delay_s=0.05)
    results, errors, _ = run_batcher(forward, [("a", obs_rows(0, 1), 0), ("b", obs_rows(0, 1), 0)], max_wait_s=0.0,
                                     after=lambda b: (b.cancel("a"), b.cancel("b")),
                                     until=lambda b: b.rows_waiting == 0)
    assert not results and not errors and forward.batches == [1]


def test_one_key_may_not_have_two_requests_waiting():
    loop = asyncio.new_event_loop()
    batcher = InferenceBatcher(loop, FakeForward(), max_rows=8, max_wait_s=10.0, on_result=lambda *a: None,
                               on_error=lambda *a: None)
    try:
        batcher.submit("a", obs_rows(0, 1))
        with pytest.raises(RuntimeError, match="second inference request"):
            batcher.submit("a", obs_rows(0, 1))
        assert batcher.rows_waiting == 1
        batcher.cancel("a")
        assert batcher.rows_waiting == 0
    finally:
        batcher.close()
        loop.close()


def test_a_client_waiting_for_us_holds_no_outstanding_steps_and_its_clocks_stand_still():
    r = recorder(report_timeout_s=5.0)
    record(r, "c", act([0, 1], np.zeros((2, 4)), start=[True, True]), now=0.0)
    answer(r, "c", now=0.0)
    assert r.outstanding == 2
    # It reports env 0 only (env 1 is still simulating) and then waits, e.g. parked until new weights:
    record(r, "c", act([0], np.zeros((1, 4)), reward=[1]), now=1.0)
    assert r.outstanding == 0 and r.all_waiting  # env 1 can't be reported before the answer
    assert r.expire(100.0) == [] and r.expired_envs == 0
    answer(r, "c", now=101.0)  # after 100 s of waiting: env 1 has been unreported for 1 s of its own
    assert r.outstanding == 2 and not r.all_waiting
    assert r.expire(104.9) == [] and r.expired_envs == 0
    assert r.expire(105.5) == [] and r.expired_envs == 1  # env 1: 1 s + 4.5 s
    assert r.expire(106.5) == ["c"] and r.expired_envs == 2


def test_the_running_totals_match_a_walk_over_every_client():
    """``outstanding`` and ``all_waiting`` are kept as clients change; a random walk checks them against a recount."""
    rng = np.random.default_rng(7)
    rec = recorder(max_envs=64, report_timeout_s=5.0)
    started: dict[str, set[int]] = {}
    now = 0.0

    def recount() -> tuple[int, bool]:
        infos = rec._clients.values()
        outstanding = sum(i.pending for i in infos if i.waiting is None)
        return outstanding, all(i.waiting is not None for i in infos if i.envs)

    for _ in range(400):
        now += float(rng.uniform(0, 2))
        client = f"c{rng.integers(4)}"
        choice = rng.integers(4)
        if choice == 0 and rec.waiting(client) is not None:
            answer(rec, client, now=now)
        elif choice == 1:
            rec.drop_client(client)
            started.pop(client, None)
        elif choice == 2:
            for gone in rec.expire(now):
                rec.drop_client(gone)
                started.pop(gone, None)
        elif rec.waiting(client) is None:
            known = started.setdefault(client, set()) & set(rec._clients[client].envs if client in rec._clients else ())
            envs = sorted({int(e) for e in rng.integers(0, 6, 3)})
            start = [e not in known for e in envs]
            ending = [not s and bool(rng.random() < 0.2) for s in start]
            record(rec, client, act(envs, rng.normal(size=(len(envs), 4)), start=start, terminated=ending), now)
            started[client] = (known | set(envs)) - {e for e, end in zip(envs, ending) if end}
        assert (rec.outstanding, rec.all_waiting) == recount()


def _chunk_digest(chunk: dict) -> tuple:
    """What RLlib trains on in a chunk (not its random id or clock times), comparable across recorders."""
    extra = chunk["extra_model_outputs"] or {}
    return (chunk["observations"]["data"].tobytes(), chunk["actions"]["data"].tolist(),
            chunk["rewards"]["data"].tolist(), chunk["rewards"]["data"].dtype.str,
            tuple((name, np.asarray(value["data"]).tobytes()) for name, value in sorted(extra.items())),
            chunk["is_terminated"], chunk["is_truncated"], chunk["t_started"], chunk["t"])


def test_envs_reporting_at_different_times_give_the_chunks_of_a_local_builder_per_env():
    """The recorder keeps an ACT's steps as columns; the chunks are still those of one EpisodeBuilder per env.

    Envs report in different ACTs (steps of one cut come from several answers),
    episodes end and start again in one ACT, a reset cuts an open episode,
    and ``max_chunk_steps`` cuts long ones, with cuts taken at random times.
    """
    rng = np.random.default_rng(3)
    r = recorder(max_chunk_steps=3)
    local = {env: EpisodeBuilder(max_chunk_steps=3) for env in range(5)}
    pending: dict[int, tuple] = {}  # env -> (action, extra) sent and not reported yet
    served, mine = [], []
    for _ in range(300):
        envs = sorted(env for env in local if env not in pending or rng.random() < 0.7)
        if not envs:
            continue
        rows = {"env": [], "obs": [], "reward": [], "start": [], "terminated": [], "truncated": []}

        def row(env, obs, reward=0.0, start=False, terminated=False, truncated=False):
            for key, value in zip(rows, (env, obs, reward, start, terminated, truncated)):
                rows[key].append(value)

        for env in envs:
            obs = rng.normal(size=4).astype(np.float32)
            if env not in pending or rng.random() < 0.05:  # a new episode, or the client reset a running one
                row(env, obs, start=True)
                local[env].reset(obs)
                continue
            action, extra = pending.pop(env)
            reward = float(rng.normal())
            ending = rng.random() < 0.15
            truncated = ending and rng.random() < 0.3
            row(env, obs, reward, terminated=ending and not truncated, truncated=truncated)
            local[env].step(action, reward, obs, ending and not truncated, truncated, extra)
            if ending:
                start = rng.normal(size=4).astype(np.float32)
                row(env, start, start=True)
                local[env].reset(start)
        message = act(rows["env"], np.stack(rows["obs"]), rows["reward"], rows["start"], rows["terminated"],
                      rows["truncated"])
        record(r, "c", message)
        waiting, _ = r.waiting("c")
        actions = rng.integers(0, 2, len(waiting))
        logp = rng.normal(size=len(waiting)).astype(np.float32)
        dist = rng.normal(size=(len(waiting), 2)).astype(np.float32)
        assert r.set_actions("c", actions, {ACTION_LOGP: logp, ACTION_DIST_INPUTS: dist}, 0, 0.0) == waiting
        for j, env in enumerate(waiting):
            pending[env] = (actions[j], {ACTION_LOGP: logp[j], ACTION_DIST_INPUTS: dist[j]})
        if rng.random() < 0.1:
            served += r.take_chunks().chunks
            mine += [chunk for builder in local.values() for chunk in builder.take_chunks()]
    served += r.take_chunks().chunks
    mine += [chunk for builder in local.values() for chunk in builder.take_chunks()]
    for chunk in served:
        check_episode_state(chunk, obs_shape=(4,), obs_dtype=np.float32, num_actions=2,
                            required_extra=(ACTION_LOGP, ACTION_DIST_INPUTS))
    assert len(served) > 200 and any(c["t_started"] for c in served) and any(c["is_truncated"] for c in served)
    assert sorted(map(_chunk_digest, served)) == sorted(map(_chunk_digest, mine))
