"""The learner's table: one row per iteration from RLlib's result dict."""

from __future__ import annotations

import csv
import json
import math
import threading

import numpy as np

from rlinks_rllib.training.files import write_json_whole
from rlinks_rllib.training.report import COLUMNS, format_return, format_row, row_from_result, write_csv


def test_counts_come_from_numpy_values_and_a_runnerless_iteration_counts_zero():
    result = {"training_iteration": 3, "env_runners": {
        "num_env_steps_sampled_lifetime": np.int64(6000), "num_env_steps_sampled": np.int64(2000),
        "episode_return_mean": np.float64(41.5), "rlinks": {"weights_seq_no": np.int64(2), "policy_lag_max": 0.0}}}
    row = row_from_result(result, time_s=3.0, clients=4, previous=None)
    assert set(row) == set(COLUMNS)
    assert (row["env_steps"], row["env_steps_iter"], row["weights_seq_no"]) == (6000, 2000, 2)
    # An iteration in which no runner answered (one cut off, one restarting): NaN metrics, not a crash.
    nan = float("nan")
    empty = {"training_iteration": 4, "env_runners": {"num_env_steps_sampled_lifetime": 6000,
                                                      "num_env_steps_sampled": nan,
                                                      "rlinks": {"weights_seq_no": nan, "policy_lag_max": nan}}}
    row = row_from_result(empty, time_s=5.0, clients=0, previous=row)
    assert (row["env_steps_iter"], row["weights_seq_no"], row["policy_lag_max"]) == (0, 0, 0.0)
    assert math.isnan(row["episode_return_mean"])
    assert "| return  no end |" in format_row(row), format_row(row)


def test_the_live_line_has_enough_digits_for_the_runs_scale():
    """Rewards in 0..1 with --stop-reward 0.8: no '0.8' before the stop fires, nor a rounded 'done' value."""
    row = dict.fromkeys(COLUMNS, 0)
    row.update(iteration=7, episode_return_mean=0.786)
    assert "| return   0.786 |" in format_row(row, 0.8), format_row(row, 0.8)
    assert format_return(0.7999, 0.8) == "0.7999"  # just below: never reads as the target
    assert format_return(0.79999999, 0.8) == "0.79999999"
    assert format_return(0.8123, 0.8) == "0.812"  # done: mean return 0.812, not 0.8
    assert format_return(0.849, 0.85) == "0.849" and format_return(0.85, 0.85) == "0.850"  # the target's decimals
    # CartPole's scale keeps its one decimal, unless a value just below 450 would read as 450.0.
    assert format_return(447.26, 450) == "447.3" and format_return(449.96, 450) == "449.96"
    assert format_return(-401.23, -400) == "-401.2"
    # Without a target, the value's own magnitude: three significant digits at least, one decimal at least.
    assert [format_return(v) for v in (23.7, 0.0123, 0.0, 1234.5)] == ["23.7", "0.0123", "0.0", "1234.5"]
    # Each policy's return of a multi-agent run gets the same digits.
    row["return_seeker"] = 0.5049
    assert "| seeker 0.505" in format_row(row, 0.8)


def test_a_reader_polling_the_learners_files_never_sees_half_of_one(tmp_path):
    """progress.csv and endpoints.json are rewritten while scripts and tests poll them (seen in CI: an empty read)."""
    table, endpoints = tmp_path / "progress.csv", tmp_path / "endpoints.json"
    row = dict.fromkeys(COLUMNS, 1)
    write_csv([row], table)
    write_json_whole(endpoints, [])
    done = threading.Event()

    def rewrite():
        try:
            for n in range(1, 600):
                write_csv([row] * (n % 50 + 1), table)
                write_json_whole(endpoints, [{"worker_index": i, "host": "10.0.0.1", "port": 5556}
                                             for i in range(n % 7)])
        finally:
            done.set()  # a writer that failed ends the reading loop too

    writer = threading.Thread(target=rewrite, daemon=True)
    writer.start()
    reads = 0
    while not done.is_set():
        with open(table, newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows and all(r["env_steps_iter"] == "1" for r in rows), rows[-1:]
        json.loads(endpoints.read_text())
        reads += 1
    writer.join(30)
    assert reads > 10 and not list(tmp_path.glob(".*partial"))
